"""The devices the device-parametrised tests run on: the CPU, and CUDA where
a GPU is present (skipped elsewhere, as on CI)."""
from __future__ import annotations

import pytest
import torch

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))
DEVICES = ["cpu", CUDA]


def on(device: str, *tensors):
    """Each tensor (``None`` and non-tensors as they are) on ``device``."""
    moved = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in tensors)
    return moved[0] if len(moved) == 1 else moved


def cpu(t):
    """``t`` on the CPU, where the reference is (``None`` stays ``None``)."""
    return None if t is None else t.detach().cpu()
