"""Normalisation kernels: RMS_NORM and NORM over rows (ggml accumulates the sums in double)."""

from __future__ import annotations

import numpy as np
from ggml_core import GGMLOp, GGMLType, Tensor

from ggml_cpu.kernels._base import Thunk, f32, kernel, store

__all__: list[str] = []


def _f32_rows(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type == GGMLType.F32 and node.type == GGMLType.F32


@kernel(GGMLOp.RMS_NORM, supports=_f32_rows)
def _bind_rms_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    eps = np.float32(node.op_param_f32(0))

    def run() -> None:
        x = f32(a)
        # sum of float products accumulated in double, mean in float, scale = 1/sqrtf(mean + eps)
        mean = (np.square(x).sum(axis=-1, dtype=np.float64, keepdims=True) / x.shape[-1]).astype(np.float32)
        scale = np.float32(1.0) / np.sqrt(mean + eps)
        store(node, x * scale)

    return run


@kernel(GGMLOp.NORM, supports=_f32_rows)
def _bind_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    eps = np.float32(node.op_param_f32(0))

    def run() -> None:
        x = f32(a)
        n = x.shape[-1]
        mean = (x.sum(axis=-1, dtype=np.float64, keepdims=True) / n).astype(np.float32)
        y = x - mean
        var = (np.square(y).sum(axis=-1, dtype=np.float64, keepdims=True) / n).astype(np.float32)
        store(node, y * (np.float32(1.0) / np.sqrt(var + eps)))

    return run
