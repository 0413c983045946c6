"""Documents cut from the token stream, their padded and packed rows, and the model's side:
the mask that keeps a packed row's documents apart and the positions that restart."""

import numpy as np
import pytest
import torch

from workbench.core.errors import InputError
from workbench.engine.datasets import BigramTokenWindows, TokenWindows
from workbench.engine.documents import (
    IGNORE_INDEX,
    MIN_LENGTH,
    PAD_ID,
    document_bounds,
    document_mask,
    document_positions,
    documents_dataset,
    expected_pad_share,
    file_documents,
)
from workbench.engine.workloads.gpt import GPTShape, TinyGPT, token_loss

SMALL = GPTShape(block=16, layers=2, heads=2, width=32)


def _tokens(tiny_data):
    return tiny_data / "tokens" / "stdlib.bin"


def test_documents_are_drawn_the_same_every_time_around_a_quarter_of_the_row():
    bounds = document_bounds(1_000_000, 1024)
    assert np.array_equal(bounds, document_bounds(1_000_000, 1024))
    assert not np.array_equal(bounds, document_bounds(1_000_000, 1024, seed=1))
    lengths = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == 1_000_000 and lengths.min() >= MIN_LENGTH
    assert 230 < np.median(lengths) < 280  # median a quarter of 1,024, drawn
    assert 0.05 < (lengths > 1024).mean() < 0.12  # a tail past the context
    assert 0.60 < expected_pad_share(1024) < 0.70


def test_a_padded_row_is_one_document_its_targets_the_next_token_inside_it(tiny_data):
    rows = file_documents(_tokens(tiny_data), 64, 256, "pad")
    stream = np.fromfile(_tokens(tiny_data), dtype=np.uint8).astype(np.int64)
    lengths = np.diff(rows.bounds)
    short = int(np.flatnonzero(lengths < 64)[0])
    long = int(np.flatnonzero(lengths > 65)[0])
    for k in (short, long):
        inputs, targets = rows[k]
        start, n = int(rows.bounds[k]), int(lengths[k])
        real = min(n, 64)
        assert int(inputs["lengths"]) == real
        assert inputs["tokens"][:real].tolist() == stream[start : start + real].tolist()
        assert (inputs["tokens"][real:] == PAD_ID).all()
        kept = min(n - 1, 64)  # a document's last token has no target of its own
        assert targets[:kept].tolist() == stream[start + 1 : start + 1 + kept].tolist()
        assert (targets[kept:] == IGNORE_INDEX).all()


def test_packed_rows_are_the_stream_itself_cut_at_documents(tiny_data):
    packed = file_documents(_tokens(tiny_data), 64, 256, "pack")
    windows = TokenWindows(_tokens(tiny_data), block_size=64)
    assert len(packed) == len(windows)
    for i in (0, 7, len(packed) - 1):
        inputs, targets = packed[i]
        x, y = windows[i]
        assert torch.equal(inputs["tokens"], x)  # no padding: every position a real token
        cut = targets != IGNORE_INDEX
        assert torch.equal(targets[cut], y[cut])
        crossing = (inputs["docs"][1:] != inputs["docs"][:-1]).nonzero().flatten()
        assert cut.logical_not().nonzero().flatten().tolist() == crossing.tolist()
        assert inputs["docs"][0] == 0 and inputs["docs"].dtype == torch.int32


def test_byte_pair_documents_read_the_ids_the_windows_read(tiny_data):
    packed = file_documents(_tokens(tiny_data), 32, 50257, "pack")
    windows = BigramTokenWindows(_tokens(tiny_data), block_size=32, vocab=50257)
    for i in (0, 5):
        assert torch.equal(packed[i][0]["tokens"], windows[i][0])


def test_a_production_scripts_documents_pad_and_pack():
    docs = [[1, 2, 3], torch.tensor([4, 5]), [6, 7, 8, 9, 10, 11]]
    padded = documents_dataset(docs, 4, "pad")
    assert len(padded) == 3
    inputs, targets = padded[0]
    assert inputs["tokens"].tolist() == [1, 2, 3, PAD_ID] and int(inputs["lengths"]) == 3
    assert targets.tolist() == [2, 3, IGNORE_INDEX, IGNORE_INDEX]
    assert padded[2][0]["tokens"].tolist() == [6, 7, 8, 9]  # truncated
    assert padded[2][1].tolist() == [7, 8, 9, 10]  # the last kept token's next is in the text
    packed = documents_dataset(docs, 4, "pack")
    assert len(packed) == 2  # 11 tokens: two full rows and the target after the second
    inputs, targets = packed[0]
    assert inputs["tokens"].tolist() == [1, 2, 3, 4] and inputs["docs"].tolist() == [0, 0, 0, 1]
    assert targets.tolist() == [2, 3, IGNORE_INDEX, 5]
    inputs, targets = packed[1]
    assert inputs["tokens"].tolist() == [5, 6, 7, 8] and inputs["docs"].tolist() == [0, 1, 1, 1]
    assert targets.tolist() == [IGNORE_INDEX, 7, 8, 9]


@pytest.mark.parametrize(
    ("docs", "seq_len", "packing", "named"),
    [([[1]], 4, "pad", "documents"), ([], 4, "pack", "documents"),
     ([[1, 2]], 4, "pack", "documents"), ([[1, 2]], 0, "pad", "seq_len"),
     ([[1, 2]], 4, "off", "packing")],
)  # fmt: skip
def test_documents_that_make_no_rows_are_refused_by_name(docs, seq_len, packing, named):
    with pytest.raises(InputError, match=named):
        documents_dataset(docs, seq_len, packing)


def test_positions_restart_at_each_document():
    docs = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 1, 1]])
    assert document_positions(docs).tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]]


def test_the_mask_is_causal_inside_a_document_and_closed_across():
    mask = document_mask(torch.tensor([[0, 0, 1]]))
    assert mask.shape == (1, 1, 3, 3)
    assert mask[0, 0].tolist() == [[True, False, False], [True, True, False],
                                   [False, False, True]]  # fmt: skip


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyGPT(SMALL).eval()


def test_a_tokens_output_does_not_change_when_another_document_does(model):
    tokens = torch.randint(0, 256, (1, 16))
    docs = torch.tensor([[0] * 6 + [1] * 10])
    other = tokens.clone()
    other[0, :6] = torch.randint(0, 256, (6,))  # the first document only
    with torch.no_grad():
        before, after = model(tokens, docs=docs), model(other, docs=docs)
        whole, leaked = model(tokens), model(other)  # one sequence a row: the first leaks
    assert torch.allclose(before[0, 6:], after[0, 6:], atol=1e-5)
    assert not torch.allclose(whole[0, 6:], leaked[0, 6:], atol=1e-3)


def test_a_packed_document_reads_as_if_it_began_its_own_row(model):
    # the mask and the restarted positions together: the second document's logits are the
    # ones it gets alone at the start of a row
    tokens = torch.randint(0, 256, (1, 16))
    docs = torch.tensor([[0] * 5 + [1] * 11])
    with torch.no_grad():
        packed = model(tokens, docs=docs)[0, 5:]
        alone = model(tokens[:, 5:])[0]
    assert torch.allclose(packed, alone, atol=1e-5)


def test_the_loss_ignores_padded_positions(model, tiny_data):
    rows = file_documents(_tokens(tiny_data), 16, 256, "pad")
    short = int(np.flatnonzero(np.diff(rows.bounds) < 10)[0])
    inputs, targets = rows[short]
    real = int(inputs["lengths"])
    logits = model(inputs["tokens"][None])
    noisy = logits.clone()
    noisy[0, real - 1 :] += 50 * torch.randn_like(noisy[0, real - 1 :])  # pads and the last
    kept = targets != IGNORE_INDEX
    by_hand = torch.nn.functional.cross_entropy(logits[0, kept], targets[kept])
    assert torch.allclose(token_loss(logits, targets[None]), by_hand)
    assert torch.allclose(token_loss(noisy, targets[None]), by_hand)
