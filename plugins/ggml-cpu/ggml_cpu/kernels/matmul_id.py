"""MUL_MAT_ID (mixture-of-experts routing) and OUT_PROD, with MUL_MAT's numerics.

MUL_MAT_ID multiplies, for every token ``t`` and slot ``e``, the expert matrix ``as[:, :, ids[e, t]]`` with the
activation column ``b[:, e % b.ne[1], t]``. Like ggml's CPU, the activations are first rounded through the expert
type's dot type (see :mod:`ggml_cpu.kernels.matmul`); only the experts that some token picked are dequantized.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.quants import can_dequantize, dequantize, quantize
from ggml_cpu.kernels._base import FLOAT_TYPES, Thunk, arr, check_index_range, f32, kernel
from ggml_cpu.kernels.matmul import VEC_DOT_TYPE, activations_as_dot_type

__all__: list[str] = []

#: weight types whose dot product adds ``min · s`` with s = f16(d·Σq) of the Q8_1 activation block
_MIN_TYPES = frozenset({GGMLType.Q4_1, GGMLType.Q5_1})


def _f16_field(raw: np.ndarray, block_bytes: int, offset: int) -> np.ndarray:
    """The f16 at byte ``offset`` of every block of byte rows ``raw`` (..., row_bytes) as float32 (..., n_blocks)."""
    blocks = raw.reshape(*raw.shape[:-1], -1, block_bytes)
    return np.ascontiguousarray(blocks[..., offset : offset + 2]).view(np.float16)[..., 0].astype(np.float32)


def _expert_product(wraw: np.ndarray, wtype: GGMLType, x: np.ndarray) -> np.ndarray:
    """Rows ``x`` (n, K) times one expert's weight rows ``wraw`` (M, row bytes or K values) → (n, M)."""
    if wtype.is_quantized:
        w = dequantize(np.ascontiguousarray(wraw), wtype)
    elif wtype == GGMLType.BF16:
        w = (wraw.astype(np.uint32) << 16).view(np.float32)
    else:
        w = wraw.astype(np.float32)
    if wtype not in _MIN_TYPES:
        return activations_as_dot_type(x, wtype) @ w.T
    # Q4_1/Q5_1 · Q8_1: Σ_b d_w d_x Σ q_w q_x + m_w s_x, where s_x = f16(d_x Σ q_x) is stored in the Q8_1 block
    xq = quantize(np.ascontiguousarray(x, dtype=np.float32), GGMLType.Q8_1)
    xd = dequantize(xq, GGMLType.Q8_1)
    s_x = _f16_field(xq, GGMLType.Q8_1.type_size, 2)  # (n, n_blocks)
    m_w = _f16_field(np.ascontiguousarray(wraw), wtype.type_size, 2)  # (M, n_blocks)
    block_sum = xd.reshape(xd.shape[0], -1, wtype.block_size).sum(axis=-1, dtype=np.float32)
    return xd @ w.T + (s_x - block_sum) @ m_w.T


def _mul_mat_id_ok(node: Tensor) -> bool:
    as_, b, ids = node.src[0], node.src[1], node.src[2]
    assert as_ is not None and b is not None and ids is not None
    return (
        as_.type in VEC_DOT_TYPE
        and (not as_.type.is_quantized or can_dequantize(as_.type))
        and b.type in (GGMLType.F32, GGMLType.F16)
        and ids.type == GGMLType.I32
        and node.type == GGMLType.F32
    )


@kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(node: Tensor) -> Thunk:
    as_, b, ids = node.src[0], node.src[1], node.src[2]
    assert as_ is not None and b is not None and ids is not None
    n_expert, ne11 = as_.ne[2], b.ne[1]
    n_used, n_tokens = ids.ne[0], ids.ne[1]
    wtype = as_.type

    def run() -> None:
        idx = arr(ids)[0, 0].astype(np.int64)  # (n_tokens, n_used)
        check_index_range(node, idx, n_expert, "expert")
        x = f32(b)[0]  # (n_tokens, ne11, K)
        slot_rows = x[:, np.arange(n_used) % ne11, :]  # (n_tokens, n_used, K)
        weights = arr(as_)[0]  # (n_expert, M, K or row bytes)
        out = arr(node)[0]  # (n_tokens, n_used, M)
        for expert in np.unique(idx):
            t_sel, e_sel = np.nonzero(idx == expert)
            rows = np.ascontiguousarray(slot_rows[t_sel, e_sel], dtype=np.float32)
            out[t_sel, e_sel, :] = _expert_product(weights[int(expert)], wtype, rows)

    if n_tokens == 0 or n_used == 0:
        return lambda: None
    return run


# ------------------------------------------------------------------------------------------------ OUT_PROD


def _out_prod_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    a_ok = a.type in FLOAT_TYPES or (a.type.is_quantized and can_dequantize(a.type))
    return a_ok and b.type in (GGMLType.F32, GGMLType.F16) and node.type == GGMLType.F32


@kernel(GGMLOp.OUT_PROD, supports=_out_prod_ok)
def _bind_out_prod(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    r2, r3 = node.ne[2] // a.ne[2], node.ne[3] // a.ne[3]

    def run() -> None:
        av = f32(a)  # (a3, a2, K, M)
        bv = f32(b)  # (b3, b2, K, N)
        # dst[i3, i2, n, m] = Σ_k a[i3 / r3, i2 / r2, k, m] · b[i3, i2, k, n]
        aa = np.repeat(np.repeat(av, r3, axis=0), r2, axis=1)
        arr(node)[...] = np.matmul(bv.swapaxes(-1, -2), aa)

    return run
