"""Normalisations: NORM, RMS_NORM, L2_NORM, GROUP_NORM (f32, any strides).

ggml accumulates the sums in double (``ggml_float``) and does the rest in float: ``mean = sum/n`` and
``scale = 1/sqrtf(var + eps)`` are float32 values. GROUP_NORM puts ``ceil(C / G)`` channels (dim 2) in each group
(the last group may be smaller or empty) and normalises over dims 0, 1 and the group's channels.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_cpu.ops._base import KERNELS, Thunk, f32, store
from ggml_cpu.ops._compiled import (
    flat,
    kernel,
    params,
    rows_of,
    split_rows,
)

__all__: list[str] = []

_F32 = np.float32


def _f32_rows(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type == GGMLType.F32 and node.type == GGMLType.F32


def _mean_f32(total: np.ndarray, n: int) -> np.ndarray:
    """A double sum divided by n in double, rounded to float (C's ``const float mean = sum/n``)."""
    return (total / n).astype(np.float32)


@KERNELS.kernel(GGMLOp.RMS_NORM, supports=_f32_rows)
def _bind_rms_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    eps = _F32(node.op_param_f32(0))
    fast = bind_rms_norm(node)
    if fast is not None:
        return fast

    def run() -> None:
        x = f32(a)
        # float products x*x, summed in double; scale = 1/sqrtf(mean + eps)
        mean = _mean_f32(np.square(x).sum(axis=-1, dtype=np.float64, keepdims=True), x.shape[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            store(node, x * (_F32(1.0) / np.sqrt(mean + eps)))

    return run


@KERNELS.kernel(GGMLOp.NORM, supports=_f32_rows)
def _bind_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    eps = _F32(node.op_param_f32(0))

    def run() -> None:
        x = f32(a)
        n = x.shape[-1]
        mean = _mean_f32(x.sum(axis=-1, dtype=np.float64, keepdims=True), n)
        y = x - mean
        var = _mean_f32(np.square(y).sum(axis=-1, dtype=np.float64, keepdims=True), n)
        with np.errstate(divide="ignore", invalid="ignore"):
            store(node, y * (_F32(1.0) / np.sqrt(var + eps)))

    return run


@KERNELS.kernel(GGMLOp.L2_NORM, supports=_f32_rows)
def _bind_l2_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    eps = _F32(node.op_param_f32(0))

    def run() -> None:
        x = f32(a)
        total = np.square(x).sum(axis=-1, dtype=np.float64, keepdims=True)  # float products, double sum
        norm = np.sqrt(total.astype(np.float32))  # sqrtf((float) sum)
        with np.errstate(divide="ignore", invalid="ignore"):
            store(node, x * (_F32(1.0) / np.fmax(norm, eps)))  # 1/fmaxf(sqrtf(sum), eps)

    return run


@KERNELS.kernel(GGMLOp.GROUP_NORM, supports=_f32_rows)
def _bind_group_norm(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    n_groups = node.op_param_i32(0)
    eps = _F32(node.op_param_f32(1))
    n_channels = a.ne[2]
    per_group = (n_channels + n_groups - 1) // n_groups

    def run() -> None:
        x = f32(a)  # (ne3, channels, ne1, ne0)
        out = np.empty(x.shape, np.float32)
        for start in range(0, n_channels, per_group):
            block = x[:, start : start + per_group]
            count = block.shape[1] * block.shape[2] * block.shape[3]
            mean = _mean_f32(block.sum(axis=(1, 2, 3), dtype=np.float64, keepdims=True), count)
            y = block - mean
            var = _mean_f32(np.square(y).sum(axis=(1, 2, 3), dtype=np.float64, keepdims=True), count)
            with np.errstate(divide="ignore", invalid="ignore"):
                out[:, start : start + per_group] = y * (_F32(1.0) / np.sqrt(var + eps))
        store(node, out)

    return run


# ------------------------------------------------------------------------------------- the compiled path


def bind_rms_norm(node: Tensor, mul: Tensor | None = None) -> Thunk | None:
    """RMS_NORM of f32 rows; with ``mul`` (the MUL node right after it, ``mul.src[0] is node``) also the product
    with its other operand (repeated as ggml broadcasts), written to both outputs in one pass."""
    a = node.src[0]
    fn = kernel("RMS_NORM_SPEC", module="_norm_kernels")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    eps = float(node.op_param_f32(0))
    bias: tuple[int, ...] = (0,) * 10
    b_arr, m_arr = out[0], out[0]
    if mul is not None:
        b = mul.src[1]
        fb, fm = (flat(b), flat(mul)) if b is not None else (None, None)
        if b is None or fb is None or fm is None or b.type != GGMLType.F32 or mul.type != GGMLType.F32:
            return None
        if b.ne[0] != a.ne[0] or tuple(mul.ne) != tuple(node.ne):
            return None
        b_arr, m_arr = fb[0], fm[0]
        bias = (b.ne[0], b.ne[1], b.ne[2], b.ne[3], *fb[1][1:], *fm[1][1:])
    p = params(*a.ne, *x[1][1:], *out[1][1:], 1 if mul is not None else 0, *bias)
    xv, ov = x[0], out[0]

    def serial() -> None:
        fn(xv, ov, b_arr, m_arr, p, eps)

    split = split_rows("RMS_NORM", (xv, ov, b_arr, m_arr), p, (eps,), rows_of(p), a.nelements, serial)
    return serial if split is serial else lambda: split()  # a closure: profilers label it
