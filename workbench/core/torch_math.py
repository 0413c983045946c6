"""PyTorch's own fp32 math switches, as an untouched ``import torch`` has them.

Data only (no torch import): the engine (a burst at ``precision=default`` puts back what
differs from these) and the production side (``cfg.apply()``'s dry run for ``workbench show``)
read the same table, and ``tests/core/test_torch_math.py`` compares it with a fresh
interpreter's readers, so a torch release that changes a default fails there.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TORCH_DEFAULTS"]

TORCH_DEFAULTS: dict[str, Any] = {
    "torch.get_float32_matmul_precision()": "highest",
    "cuda.matmul.allow_tf32": False,
    "cudnn.allow_tf32": True,
    "cudnn.benchmark": False,
    "generic.fp32_precision": "none",
    "cuda.matmul.fp32_precision": "none",
    "cudnn.fp32_precision": "none",
    "cudnn.conv.fp32_precision": "tf32",
    "cudnn.rnn.fp32_precision": "tf32",
    "mkldnn.fp32_precision": "none",
    "mkldnn.matmul.fp32_precision": "none",
    "mkldnn.conv.fp32_precision": "none",
    "mkldnn.rnn.fp32_precision": "none",
}
"""What every reader of :func:`precision_state` returns in an untouched ``import torch``
(torch 2.14: read in a fresh interpreter, and checked there by a test): fp32 matmuls IEEE
("highest"), cuDNN convolutions and RNNs allowed TF32. The per-backend readers exist from
torch 2.9; an older torch has only the first four."""
