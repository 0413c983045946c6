"""``cfg.prepare_model(model)``: the model set up as the bursts trained it (channels_last,
activation checkpointing, torch.compile), what it changed, and the lines ``workbench show`` and
the saved file print for it."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from torch import nn

from workbench.config.saved import load_config, save_config
from workbench.core.knobs import Knobs


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
                                     for _ in range(2)])  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        for block in self.blocks:
            x = block(x)
        return x.mean((1, 2, 3))

    def checkpoint_blocks(self) -> list[nn.Module]:
        return list(self.blocks)


def _cfg(tmp_path, **knobs):
    return load_config(save_config(Knobs(**knobs), tmp_path / "tuned.yaml"))


def test_prepare_model_applies_the_layout_and_checkpointing_and_says_so(tmp_path, capsys):
    cfg = _cfg(tmp_path, channels_last=True, activation_checkpointing=True, grad_accum=4)
    model = cfg.prepare_model(_Net())
    assert model.conv.weight.is_contiguous(memory_format=torch.channels_last)
    printed = capsys.readouterr().out
    assert "cfg.prepare_model() changed:" in printed
    assert "channels_last (NHWC)" in printed and "2 blocks recomputed in backward" in printed
    assert "your loop: gradient accumulation" in printed and "4 batches" in printed
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    model(x).sum().backward()  # the checkpointed blocks still train
    assert x.grad is not None


def test_prepare_model_compiles_and_leaves_a_model_without_convolutions(tmp_path, capsys):
    cfg = _cfg(tmp_path, channels_last=True, compile="default")
    mlp = nn.Linear(4, 2)
    model = cfg.prepare_model(mlp)
    assert isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    printed = capsys.readouterr().out
    assert (
        "not changed: no convolution" in printed and "torch.compile: off -> mode=default" in printed
    )
    plain = _cfg(tmp_path)
    assert plain.prepare_model(mlp, quiet=True) is mlp and capsys.readouterr().out == ""
    assert plain.model_changes() == []


def test_show_and_the_saved_file_print_the_model_setup(tmp_path):
    path = save_config(Knobs(channels_last=True, compile="reduce-overhead", grad_accum=2),
                       tmp_path / "tuned.yaml")  # fmt: skip
    text = path.read_text()
    assert "model = cfg.prepare_model(model)  # channels_last, compile=reduce-overhead" in text
    assert "step the optimizer every 2 batches (grad_accum)" in text
    shown = subprocess.run([sys.executable, "-m", "workbench", "show", str(path)],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "model = cfg.prepare_model(model)" in shown
    assert "torch.compile: off -> mode=reduce-overhead" in shown
    assert "gradient accumulation: 1 batch a step -> 2 batches" in shown
    doc = json.loads(subprocess.run([sys.executable, "-m", "workbench", "show", str(path),
                                     "--json"], capture_output=True, text=True,
                                    check=True).stdout)  # fmt: skip
    assert [c["name"] for c in doc["model"]] == ["model memory format", "torch.compile",
                                                 "gradient accumulation"]  # fmt: skip
