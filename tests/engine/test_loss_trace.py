"""workbench.engine.parity: a loss trace's data is the same whoever draws it."""

import random

import torch
from torch.utils.data import Dataset

from workbench.core.knobs import Knobs
from workbench.engine.parity import SEEDED, SeededSamples, trace_losses
from workbench.engine.workloads import Workload


class _Noisy(Dataset):
    """Each item draws from torch's, Python's and NumPy's global generators."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        import numpy as np

        return torch.rand(3) + random.random() + float(np.random.rand()), i % 2


def test_a_sample_draws_the_same_whatever_was_drawn_before_and_the_generators_come_back():
    data = SeededSamples(_Noisy(), seed=3)
    first = data[5][0]
    torch.manual_seed(99)
    before = torch.get_rng_state()
    data[2], data[7]
    assert torch.equal(data[5][0], first)
    assert torch.equal(torch.get_rng_state(), before)  # the caller's generator untouched
    assert not torch.equal(SeededSamples(_Noisy(), seed=4)[5][0], first)
    assert len(data) == 8 and data.dataset.__class__ is _Noisy


def test_a_trace_keeps_a_loss_a_gradient_norm_and_a_fingerprint_per_step():
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    wl = Workload(
        name="lin",
        model=lambda: torch.nn.Linear(8, 2),
        dataset=lambda: torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()),
    )
    plain = trace_losses(wl, Knobs(batch_size=8), 5, torch.device("cpu"))
    flipped = trace_losses(wl, Knobs(batch_size=8), 5, torch.device("cpu"), reverse_samples=True)
    assert len(plain.losses) == len(plain.grad_norms) == len(plain.fingerprints) == 5
    assert plain.samples_per_step == 8 and plain.data_seeding == SEEDED
    assert plain.losses[-1] < plain.losses[0]  # it trains
    assert flipped.fingerprints == plain.fingerprints  # the same samples, in another order
    assert plain.losses == trace_losses(wl, Knobs(batch_size=8), 5, torch.device("cpu")).losses
