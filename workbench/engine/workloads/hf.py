"""A Hugging Face causal language model as a workload, built from its config: nothing downloaded.

``hf_causal_lm(config)`` trains ``AutoModelForCausalLM.from_config(config)`` (random weights,
as any throughput measurement may) on the sample text, one window of ``seq_len`` tokens a
sample: byte tokens when the vocabulary is bytes, byte pairs otherwise
(``datasets.BigramTokenWindows``). ``hf:gpt2`` is ``transformers.GPT2Config()`` as the
library defines it (GPT-2 small: 12 layers, 768 wide, 1,024 positions, 50,257 tokens, tied
head), dropout 0.1 included, which ``gpt:124m`` leaves out as llm.c does.

The model is built with ``attn_implementation="sdpa"``: its attention then calls
``F.scaled_dot_product_attention``, so the ``attention`` knob acts on it. The model computes
the logits; the loss is the burst's next-token cross-entropy over them (the targets are
already shifted, so the model is not given ``labels``). MFU counts ``6N + 12 * layers * width *
seq_len`` FLOPs a token (``transformer_flops``), ``N`` counted on the model built on the meta
device; Hugging Face models cannot be traced there by ``FlopCounterMode``, so the formula is
what gives them an MFU at all.

``transformers`` is an optional dependency (the ``hf`` extra): imported only when such a
workload is built, and a missing one is said with the extra that installs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from workbench.core.errors import InputError
from workbench.engine.attention import SDPA_KEY
from workbench.engine.epochs import SAMPLE_SET
from workbench.engine.workloads.base import Workload
from workbench.engine.workloads.gpt import GPTShape, _adamw, _token_file, _windows, token_loss
from workbench.engine.workloads.transformer_flops import train_flops_per_sample

INSTALL = "pip install 'throughput-workbench[hf]' (or pip install transformers)"


def hf_causal_lm(
    config: Any,
    *,
    name: str | None = None,
    seq_len: int | None = None,
    data_dir: str | Path | None = None,
) -> Workload:
    """A Workload training ``AutoModelForCausalLM.from_config(config)`` on the sample text.

    ``config``: a ``transformers.PretrainedConfig`` of a causal LM (``GPT2Config(...)``,
    ``LlamaConfig(...)``, ...), never downloaded. ``seq_len``: tokens a sample (default: the
    config's ``max_position_embeddings``/``n_positions``). ``name``: the result's workload
    name (default ``hf:<model_type>``)."""
    _require_transformers(name or "hf")
    positions = _positions(config)
    seq_len = seq_len or positions
    if not 1 <= seq_len <= positions:
        why = f"from 1 to {positions:,}, the positions {type(config).__name__} has"
        raise InputError.not_allowed("seq_len", seq_len, why)
    vocab, layers = int(config.vocab_size), int(config.num_hidden_layers)
    width = int(config.hidden_size)
    shape = GPTShape(vocab=vocab, block=seq_len)  # the token windows' shape
    path = _token_file(data_dir)
    from workbench.engine import datasets as data  # PIL and numpy: only when the workload is built

    build = lambda: _model(config)  # noqa: E731
    return Workload(
        name=name or f"hf:{config.model_type}",
        model=build,
        dataset=lambda: _windows(path, shape),
        forward=_input_ids,
        loss=token_loss,
        optimizer=_adamw,
        flops_per_sample=train_flops_per_sample(build, _head, layers, width, seq_len),
        tokens_per_sample=seq_len,
        description=f"Hugging Face {type(config).__name__}: {layers} layers x {width}, "
        f"{seq_len:,} tokens, vocabulary {vocab:,} (built from its config)",
        extras={"block": seq_len, SAMPLE_SET: data.is_sample_data(path), SDPA_KEY: "sdpa"},
    )


def hf_gpt2(data_dir: str | Path | None = None) -> Workload:
    """``hf:gpt2``: ``transformers.GPT2Config()`` as the library defines it (module docstring)."""
    _require_transformers("hf:gpt2")
    from transformers import GPT2Config  # optional: the hf extra

    return hf_causal_lm(GPT2Config(), name="hf:gpt2", data_dir=data_dir)


def _require_transformers(workload: str) -> None:
    try:
        import transformers  # noqa: F401  (optional: the hf extra)
    except ImportError:
        why = f"a Hugging Face workload needs transformers, not installed here: {INSTALL}"
        raise InputError.not_allowed("workload", workload, why) from None


def _model(config: Any) -> nn.Module:
    from transformers import AutoModelForCausalLM  # optional: the hf extra

    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


def _positions(config: Any) -> int:
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    why = "a causal LM config that names its positions (max_position_embeddings or n_positions)"
    raise InputError.not_allowed("config", type(config).__name__, why)


def _input_ids(model: nn.Module, input_ids: Any) -> Any:
    """The forward hook: token ids as the model's keyword, no labels (the burst's loss)."""
    return model(input_ids=input_ids)


def _head(model: nn.Module) -> nn.Module | None:
    get = getattr(model, "get_output_embeddings", None)
    return get() if callable(get) else None


__all__ = ["INSTALL", "hf_causal_lm", "hf_gpt2"]
