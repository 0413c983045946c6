"""Tune a Hugging Face text classifier: a tokenizing dataset, dynamic padding, ``model(**batch)``.

Nothing is downloaded. The model is a small BERT built from its config (random weights), and
the tokenizer a WordPiece trained in memory on the dataset's own sentences, so this runs on a
bare box. What *is* real is the pipeline: every item is tokenized on the CPU when it is read
(in the DataLoader's workers), and a collate function pads each batch to its longest sentence
(dynamic padding), so the number of workers and the batch size matter as they do for text.

Two workloads, two shapes of item:

- ``workload``: an item is ``({"input_ids", "attention_mask"}, label)``; ``pad_batch`` pads
  them; the forward hook unpacks the dict (``model(**inputs)``) and the default loss takes
  cross-entropy of the output's ``.logits``.
- ``dict_workload``: an item is one dict with ``labels`` in it, as ``datasets.map`` gives;
  ``pad_dicts`` pads them with transformers' ``DataCollatorWithPadding``; the forward hook and
  the loss each get the whole batch.

From the repository root::

    workbench tune --workload examples.huggingface:workload --space batch_size=16,32 \\
        --space num_workers=0,2 --budget 6 --out tuned.yaml
    python examples/huggingface.py --budget 6 --out tuned.yaml

In Python::

    import workbench as wb
    from examples.huggingface import workload
    wl = workload()
    t = wb.tune(wl, space={"batch_size": [16, 32], "num_workers": [0, 2]}, budget=6)
    wb.save_config(t, "tuned.yaml", collate_fn=wl.collate_fn)  # saved as its import name
    cfg = wb.load_config("tuned.yaml")
    loader = cfg.dataloader(my_dataset)  # pads as the bursts did
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
from pathlib import Path
from typing import Any

# The tokenizer trains with threads; DataLoader workers are forked after, and the tokenizers
# library then disables its threads with a warning in every worker. Off from the start.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Dataset

import workbench as wb

PAD_ID = 0  # "[PAD]" is the tokenizer's first special token
MAX_TOKENS = 64
SENTENCES = 2048

_GOOD = ["great", "wonderful", "moving", "sharp", "funny", "beautiful", "clever", "warm"]
_BAD = ["dull", "awful", "tedious", "clumsy", "flat", "boring", "messy", "cold"]
_THINGS = ["film", "plot", "cast", "score", "ending", "script", "pacing", "camera work"]
_MORE = ["and the audience around me seemed to agree", "although the second half drags a bit",
         "which I did not expect from this director", "even on a second viewing",
         "in a year full of sequels", "despite what the trailer suggested"]  # fmt: skip


def sentences(n: int = SENTENCES, seed: int = 0) -> list[tuple[str, int]]:
    """Short reviews of varied length, labelled 1 (good) or 0 (bad)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        label = rng.randrange(2)
        words = [f"the {rng.choice(_THINGS)} was {rng.choice(_GOOD if label else _BAD)}"]
        words += rng.sample(_MORE, rng.randrange(len(_MORE)))
        out.append((", ".join(words) + ".", label))
    return out


@functools.cache
def tokenizer() -> Any:
    """A WordPiece tokenizer trained in memory on the reviews (milliseconds), wrapped as a
    transformers fast tokenizer; cached, so a dataset per burst trains it once."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    trainer = trainers.WordPieceTrainer(
        vocab_size=1000, special_tokens=specials, show_progress=False
    )
    tok.train_from_iterator([text for text, _ in sentences()], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")  # fmt: skip


class Reviews(Dataset):
    """Tokenizes each review when it is read: the CPU work a text pipeline does per item."""

    def __init__(self, as_dicts: bool = False):
        self.items = sentences()
        self.tok = tokenizer()
        self.as_dicts = as_dicts

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        text, label = self.items[i]
        enc = self.tok(text, truncation=True, max_length=MAX_TOKENS)
        if self.as_dicts:  # the shape datasets.map(tokenize) gives: labels inside
            return {**enc, "labels": label}
        ids = torch.tensor(enc["input_ids"])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, label


def pad_batch(items: list[tuple[dict[str, torch.Tensor], int]]) -> Any:
    """Dynamic padding: pad each batch to its own longest review (not to MAX_TOKENS)."""
    inputs = {
        key: pad_sequence([x[key] for x, _ in items], batch_first=True, padding_value=pad)
        for key, pad in (("input_ids", PAD_ID), ("attention_mask", 0))
    }
    return inputs, torch.tensor([label for _, label in items])


def pad_dicts(items: list[dict[str, Any]]) -> Any:
    """The same padding done by transformers' own collator (a BatchEncoding comes back)."""
    from transformers import DataCollatorWithPadding

    return DataCollatorWithPadding(tokenizer(), return_tensors="pt")(items)


def classifier() -> torch.nn.Module:
    """A small BERT for two classes, built from its config: no weights are downloaded."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=len(tokenizer()), hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=128,
                        max_position_embeddings=MAX_TOKENS, num_labels=2)  # fmt: skip
    return BertForSequenceClassification(config)


def _unpack(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> Any:
    return model(**inputs)


def _labels_loss(output: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(output.logits, batch["labels"])


def workload() -> wb.Workload:
    """Items ``(inputs, label)``, padded by ``pad_batch``; loss on ``output.logits``."""
    return wb.Workload(name="hf-bert", model=classifier, dataset=Reviews, collate_fn=pad_batch,
                       forward=_unpack, description="small BERT, tokenized reviews")  # fmt: skip


def dict_workload() -> wb.Workload:
    """Items are dicts with ``labels`` inside, padded by transformers' collator."""
    return wb.Workload(name="hf-bert-dicts", model=classifier,
                       dataset=functools.partial(Reviews, as_dicts=True), collate_fn=pad_dicts,
                       forward=_unpack, loss=_labels_loss,
                       description="small BERT, dict items")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tune a small Hugging Face model's pipeline.")
    p.add_argument("--dicts", action="store_true", help="items are dicts (dict_workload)")
    p.add_argument("--budget", type=int, default=6)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--out", default="tuned.yaml")
    args = p.parse_args(argv)
    wl = dict_workload() if args.dicts else workload()
    space = {"batch_size": [16, 32], "num_workers": [0, 2]}
    t = wb.tune(wl, space=space, budget=args.budget, seconds=args.seconds, device="cpu",
                record=False)  # fmt: skip
    print(t.summary())
    if t.best_result is None:
        return 1
    print(f"wrote {wb.save_config(t, args.out, collate_fn=wl.collate_fn)}")
    return 0


if __name__ == "__main__":
    # Run as a script, this file is __main__, whose functions production code cannot import:
    # use the module under its own name, so the saved collate_fn reads
    # "examples.huggingface:pad_batch".
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from examples.huggingface import main as module_main

    sys.exit(module_main())
