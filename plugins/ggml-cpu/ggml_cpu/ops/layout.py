"""Layout and fill kernels: REPEAT(_BACK), CONCAT, PAD (zero, circular, reflect), ROLL, SET, ACC, DIAG, TRI, ARANGE,
FILL, TIMESTEP_EMBEDDING.

These ops move values without arithmetic (except ACC, REPEAT_BACK and the generators), so most kernels work on
the raw numpy view of any plain type; quantized rows are moved as whole rows of bytes where that is meaningful.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import TriType
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, f32, store, view_at

__all__: list[str] = []

_F32 = np.float32


def _plain(node: Tensor) -> bool:
    """Source and result of one plain (non-quantized) type."""
    a = node.src[0]
    assert a is not None
    return not a.type.is_quantized and a.type == node.type


def _axis(dim: int) -> int:
    """numpy axis of ggml dimension ``dim`` (numpy shape is (ne3, ne2, ne1, ne0))."""
    return 3 - dim


# ------------------------------------------------------------------------------------------------ REPEAT


@KERNELS.kernel(GGMLOp.REPEAT, supports=_plain)
def _bind_repeat(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    reps = tuple(node.ne[_axis(i)] // max(1, a.ne[_axis(i)]) for i in range(4))

    def run() -> None:
        arr(node)[...] = np.tile(arr(a), reps)  # dst[i] = a[i % a.ne], ggml's repeat

    return run


def _repeat_back_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in FLOAT_TYPES and node.type == a.type


@KERNELS.kernel(GGMLOp.REPEAT_BACK, supports=_repeat_back_ok)
def _bind_repeat_back(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    # a's shape split as (tiles, node.ne) per dimension; sum over the tiles
    split = [d for i in (3, 2, 1, 0) for d in (a.ne[i] // node.ne[i], node.ne[i])]

    def run() -> None:
        store(node, f32(a).reshape(split).sum(axis=(0, 2, 4, 6), dtype=np.float32))

    return run


# ------------------------------------------------------------------------------------------------ CONCAT


def _concat_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if a.type.is_quantized:
        return a.is_contiguous_rows and b.is_contiguous_rows and node.type == a.type
    return a.type == b.type == node.type


@KERNELS.kernel(GGMLOp.CONCAT, supports=_concat_ok)
def _bind_concat(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    axis = _axis(node.op_param_i32(0))
    out, va, vb = arr(node), arr(a), arr(b)
    if not (np.may_share_memory(out, va) or np.may_share_memory(out, vb)):
        # each source copied straight into its part of the output (no joined temporary): the decode step's
        # Mamba conv window (the state and a transposed column of the new token) takes two small copies
        na = va.shape[axis]
        part_a = out[(slice(None),) * axis + (slice(0, na),)]
        part_b = out[(slice(None),) * axis + (slice(na, None),)]

        def run_parts() -> None:
            np.copyto(part_a, va)
            np.copyto(part_b, vb)

        return run_parts

    def run() -> None:  # quantized: rows of bytes, joined row by row (dim 0) or stacked (other dims)
        arr(node)[...] = np.concatenate([arr(a), arr(b)], axis=axis)

    return run


# ------------------------------------------------------------------------------------------------ PAD, ROLL


def _gather_index(n_out: int, left: int, n_src: int, circular: bool) -> tuple[np.ndarray, np.ndarray]:
    """Source index per output index along one dimension, and whether it lies inside the source."""
    src = np.arange(n_out) - left
    if circular:
        return np.mod(src, max(n_src, 1)), np.ones(n_out, dtype=bool)
    inside = (src >= 0) & (src < n_src)
    return np.clip(src, 0, max(n_src - 1, 0)), inside


@KERNELS.kernel(GGMLOp.PAD, supports=_plain)
def _bind_pad(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    circular = bool(node.op_param_i32(8))
    idx, inside = [], []
    for dim in (3, 2, 1, 0):
        i, ok = _gather_index(node.ne[dim], node.op_param_i32(2 * dim), a.ne[dim], circular)
        idx.append(i)
        inside.append(ok)
    grid = np.ix_(*idx)
    mask = np.ones(tuple(len(i) for i in inside), dtype=bool)
    for axis, ok in enumerate(inside):  # np.ix_ would turn boolean vectors into indices
        mask &= ok.reshape([-1 if j == axis else 1 for j in range(4)])

    def run() -> None:
        if a.is_empty:
            arr(node)[...] = 0
            return
        arr(node)[...] = np.where(mask, arr(a)[grid], 0)

    return run


def _f32_only(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type == GGMLType.F32 and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.PAD_REFLECT_1D, supports=_f32_only)
def _bind_pad_reflect_1d(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    p0, p1 = node.op_param_i32(0), node.op_param_i32(1)

    def run() -> None:
        arr(node)[...] = np.pad(arr(a), [(0, 0), (0, 0), (0, 0), (p0, p1)], mode="reflect")

    return run


@KERNELS.kernel(GGMLOp.ROLL, supports=_plain)
def _bind_roll(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    shifts = tuple(node.op_param_i32(i) for i in (3, 2, 1, 0))

    def run() -> None:
        arr(node)[...] = np.roll(arr(a), shifts, axis=(0, 1, 2, 3))

    return run


# ------------------------------------------------------------------------------------------------ SET, ACC


def _set_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if node.op == GGMLOp.ACC:
        return a.type == b.type == node.type == GGMLType.F32
    return _plain(node) and (b.type == a.type or (b.type in FLOAT_TYPES and a.type in FLOAT_TYPES))


@KERNELS.kernel(GGMLOp.SET, GGMLOp.ACC, supports=_set_ok)
def _bind_set(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    nb1, nb2, nb3, offset = (node.op_param_i32(i) for i in range(4))
    inplace = bool(node.op_param_i32(4))
    shape = (b.ne[3], b.ne[2], b.ne[1], b.ne[0])
    strides = (nb3, nb2, nb1, node.type.type_size)
    add = node.op == GGMLOp.ACC

    def run() -> None:
        if not inplace:
            arr(node)[...] = arr(a)
        if b.is_empty:
            return
        region = view_at(node, shape, strides, offset)
        if add:
            region[...] = region + f32(b)
        elif node.type == GGMLType.BF16:  # bf16 bits; a bf16 source round-trips exactly
            region[...] = _to_bf16(f32(b))
        elif node.type in FLOAT_TYPES:
            region[...] = f32(b)
        else:
            region[...] = arr(b)

    return run


def _to_bf16(values: np.ndarray) -> np.ndarray:
    from ggml_core.quants import quantize

    v = np.ascontiguousarray(values, dtype=np.float32)
    return quantize(v, GGMLType.BF16).view(np.uint16).reshape(v.shape)


# ------------------------------------------------------------------------------------------------ generators


@KERNELS.kernel(GGMLOp.DIAG, supports=_plain)
def _bind_diag(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    n = a.ne[0]

    def run() -> None:
        out = arr(node)
        out[...] = 0
        out[:, :, np.arange(n), np.arange(n)] = arr(a)[:, :, 0, :]

    return run


_TRI_KEEP = {
    TriType.LOWER: np.less,  # column < row
    TriType.LOWER_DIAG: np.less_equal,
    TriType.UPPER: np.greater,
    TriType.UPPER_DIAG: np.greater_equal,
}


@KERNELS.kernel(GGMLOp.TRI, supports=_f32_only)
def _bind_tri(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    keep = _TRI_KEEP[TriType(node.op_param_i32(0))](np.arange(a.ne[0])[None, :], np.arange(a.ne[1])[:, None])

    def run() -> None:
        arr(node)[...] = np.where(keep, arr(a), _F32(0.0))

    return run


def _f32_out(node: Tensor) -> bool:
    return node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.ARANGE, supports=_f32_out)
def _bind_arange(node: Tensor) -> Thunk:
    start, step = _F32(node.op_param_f32(0)), _F32(node.op_param_f32(2))

    def run() -> None:
        # ggml: start + step * i in float32, which compilers fuse into one multiply-add (one rounding); the
        # float64 product of a float32 step and i < 2^24 is exact, so rounding the float64 sum once matches
        i = np.arange(node.ne[0], dtype=np.float64)
        arr(node)[0, 0, 0, :] = (np.float64(step) * i + np.float64(start)).astype(np.float32)

    return run


def _fill_ok(node: Tensor) -> bool:
    return node.type in (GGMLType.F32, GGMLType.F16)


@KERNELS.kernel(GGMLOp.FILL, supports=_fill_ok)
def _bind_fill(node: Tensor) -> Thunk:
    c = _F32(node.op_param_f32(0))

    def run() -> None:
        arr(node)[...] = c  # f16: rounded to nearest even, as GGML_FP32_TO_FP16

    return run


def _timestep_ok(node: Tensor) -> bool:
    t = node.src[0]
    assert t is not None
    return t.type == GGMLType.F32 and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.TIMESTEP_EMBEDDING, supports=_timestep_ok)
def _bind_timestep_embedding(node: Tensor) -> Thunk:
    t = node.src[0]
    assert t is not None
    dim, max_period = node.op_param_i32(0), node.op_param_i32(1)
    half = dim // 2
    # freq_j = expf(-logf(max_period) * j / half), all in float32
    freqs = np.exp(-np.log(_F32(max_period)) * np.arange(half, dtype=np.float32) / _F32(max(half, 1)))

    def run() -> None:
        args = arr(t).reshape(-1)[: t.ne[0], None] * freqs[None, :]  # (n, half)
        out = arr(node)[0, 0]  # (n, dim)
        out[:, :half] = np.cos(args)
        out[:, half : 2 * half] = np.sin(args)
        if dim % 2:
            out[:, 2 * half] = 0.0

    return run
