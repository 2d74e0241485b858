"""MUL_MAT_ID (mixture-of-experts routing) and OUT_PROD, with MUL_MAT's numerics.

MUL_MAT_ID multiplies, for every token ``t`` and slot ``e``, the expert matrix ``as[:, :, ids[e, t]]`` with the
activation column ``b[:, e % b.ne[1], t]``. Like ggml's CPU, the activations are first rounded through the expert
type's dot type, with MUL_MAT's own kernels per expert (:func:`ggml_cpu.ops.matmul.expert_product`: block
kernels on the quantized rows, never a full f32 copy); only the experts that some token picked are touched.
"""

from __future__ import annotations

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.quants import can_dequantize
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, check_index_range, f32
from ggml_cpu.ops.matmul import VEC_DOT_TYPE, expert_product

__all__: list[str] = []


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


@KERNELS.kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
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
            out[t_sel, e_sel, :] = expert_product(weights[int(expert)], wtype, rows)

    if n_tokens == 0 or n_used == 0:
        return lambda: None
    return run


# ------------------------------------------------------------------------------------------------ OUT_PROD


def _out_prod_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    a_ok = a.type in FLOAT_TYPES or (a.type.is_quantized and can_dequantize(a.type))
    return a_ok and b.type in (GGMLType.F32, GGMLType.F16) and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.OUT_PROD, supports=_out_prod_ok)
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
