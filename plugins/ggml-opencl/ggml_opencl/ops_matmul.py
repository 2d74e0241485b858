"""MUL_MAT, MUL_MAT_ID, OUT_PROD (kernels in ``matmul.cl``).

MUL_MAT: a matrix-vector kernel for few columns, packed register-blocked GEMM otherwise.

Weights of any supported type are dequantized on the device (never on the host). The activations are rounded
the way ggml's CPU rounds them before its dot products (to f16 for f16 weights, through Q8_0/Q8_1 blocks for the
legacy quants, through Q8_K blocks for the K-quants, to bf16 for bf16 weights), so results follow the CPU
reference to float rounding (measured NMSE ~1e-13 against the CPU plugin; ~1e-5 with plain f32 activations).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl._dispatch import (
    FLOAT_TYPES,
    QUANT_TYPES,
    Launcher,
    Thunk,
    chain,
    enqueue,
    enqueue_nd,
    int4,
    kernel,
    local_mem,
    long4,
    mem_of,
    roundup,
    targs,
)

__all__ = ["ACTIVATION_ROUNDING", "MV_MAX_COLUMNS", "PACK_LIMIT"]

#: columns (activation rows) up to which the matrix-vector kernel is used (MV_NMAX in matmul.cl)
MV_MAX_COLUMNS: Final = 8
#: the most bytes of packed f32 weights per launch; larger weight matrices are packed and multiplied in row chunks
PACK_LIMIT: Final = 256 * 2**20

_R_NONE, _R_F16, _R_Q8_0, _R_Q8_K, _R_BF16 = 0, 1, 2, 3, 4

#: k_pack_b rounding mode per weight type (ggml's vec_dot_type: f16, bf16, Q8_0/Q8_1, Q8_K)
ACTIVATION_ROUNDING: Final[dict[GGMLType, int]] = {
    GGMLType.F32: _R_NONE,
    GGMLType.BF16: _R_BF16,
    GGMLType.F16: _R_F16,
    GGMLType.Q4_0: _R_Q8_0,
    GGMLType.Q4_1: _R_Q8_0,
    GGMLType.Q5_0: _R_Q8_0,
    GGMLType.Q5_1: _R_Q8_0,
    GGMLType.Q8_0: _R_Q8_0,
    GGMLType.IQ4_NL: _R_Q8_0,
    GGMLType.MXFP4: _R_Q8_0,
    GGMLType.NVFP4: _R_Q8_0,
    GGMLType.Q1_0: _R_Q8_0,
    GGMLType.IQ4_XS: _R_Q8_K,
    GGMLType.TQ1_0: _R_Q8_K,
    GGMLType.TQ2_0: _R_Q8_K,
    GGMLType.Q2_K: _R_Q8_K,
    GGMLType.Q3_K: _R_Q8_K,
    GGMLType.Q4_K: _R_Q8_K,
    GGMLType.Q5_K: _R_Q8_K,
    GGMLType.Q6_K: _R_Q8_K,
}


def _mul_mat_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return (
        (a.type in FLOAT_TYPES or a.type in QUANT_TYPES)
        and b.type in (GGMLType.F32, GGMLType.F16)
        and node.type == GGMLType.F32
        and node.nb[0] == 4
        and not a.is_transposed
    )


def _elems(nb: int, what: str, node: Tensor) -> int:
    if nb % 4:
        raise NotImplementedError(f"{node.op_desc}: {what} stride {nb} is not a whole number of floats")
    return nb // 4


@kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    info = launcher.info
    K, M = a.ne[0], a.ne[1]
    N, b2, b3 = b.ne[1], b.ne[2], b.ne[3]
    r2, r3 = b2 // a.ne[2], b3 // a.ne[3]
    batches = b2 * b3
    steps: list[Thunk] = []

    # activations: read in place when they are plain f32 rows and need no rounding, else packed to f32 rows
    mode = ACTIVATION_ROUNDING[a.type]
    bmem, boff = mem_of(launcher, b)
    if b.type == GGMLType.F32 and mode == _R_NONE and boff % 4 == 0 and b.nb[0] == 4 and b.nb[1] % 4 == 0:
        ldb, sb2, sb3 = b.nb[1] // 4, b.nb[2] // 4, b.nb[3] // 4
    else:
        blk = 256 if mode == _R_Q8_K else 32
        bmem = launcher.scratch("b", b.nelements * 4)
        boff, ldb, sb2, sb3 = 0, K, N * K, N * K * b2
        args = [*targs(launcher, b), np.int32(b.type), np.int32(mode), np.int32(blk), bmem]
        steps.append(enqueue(launcher, "k_pack_b", (K + blk - 1) // blk * N * batches, args))
    dmem, doff = mem_of(launcher, node)
    out = [dmem, np.uint64(doff), np.int64(_elems(node.nb[1], "result row", node)),
           np.int64(_elems(node.nb[2], "result", node)), np.int64(_elems(node.nb[3], "result", node))]
    bargs = [bmem, np.uint64(boff), np.int64(ldb), np.int64(sb2), np.int64(sb3), np.int32(N), np.int32(b2)]

    if N <= MV_MAX_COLUMNS:
        ls = launcher.local_size("k_mul_mv", info.mv_ls)
        args = [*targs(launcher, a), np.int32(a.type), np.int32(r2), np.int32(r3), *bargs, *out, local_mem(ls * 4)]
        steps.append(enqueue_nd(launcher, "k_mul_mv", (M * ls, batches), (ls, 1), args))
        return chain(*steps)

    # weights → f32 panels, in chunks of rows small enough for the scratch buffer
    tm, tn = info.gemm_tm, info.gemm_tn
    n_mats = a.ne[2] * a.ne[3]
    limit = min(PACK_LIMIT, info.max_alloc)
    rows = max(tm, (limit // (4 * K * n_mats)) // tm * tm)
    rows = min(rows, roundup(M, tm))
    at = launcher.scratch("a", rows * K * n_mats * 4)
    ls0, ls1 = info.gemm_ls
    while ls0 * ls1 > launcher.local_size("k_gemm", ls0 * ls1):  # the kernel's limit on this device
        ls0, ls1 = max(1, ls0 // 2), max(1, ls1 // 2)
    for m_base in range(0, M, rows):
        mc = min(rows, roundup(M - m_base, tm))
        pack = [*targs(launcher, a), np.int32(a.type), np.int32(m_base), np.int32(mc), at]
        steps.append(enqueue(launcher, "k_pack_a", (K + 31) // 32 * mc * n_mats, pack))
        gs = (roundup((N + tn - 1) // tn, ls0), roundup(mc // tm, ls1), batches)
        args = [at, np.int32(K), np.int32(mc), np.int32(min(mc, M - m_base)), np.int32(a.ne[2]), np.int32(r2),
                np.int32(r3), *bargs, *out, np.int32(m_base)]
        steps.append(enqueue_nd(launcher, "k_gemm", gs, (ls0, ls1, 1), args))
    return chain(*steps)


# ------------------------------------------------------------------------------------------------ MUL_MAT_ID


def _mul_mat_id_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    return (
        a is not None
        and b is not None
        and ids is not None
        and (a.type in FLOAT_TYPES or a.type in QUANT_TYPES)
        and b.type in (GGMLType.F32, GGMLType.F16)
        and ids.type == GGMLType.I32
        and node.type == GGMLType.F32
    )


@kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(launcher: Launcher, node: Tensor) -> Thunk:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    assert a is not None and b is not None and ids is not None
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    K = a.ne[0]
    bp = launcher.scratch("b", b.nelements * 4)
    pack = [*targs(launcher, b), np.int32(b.type), np.int32(mode), np.int32(blk), bp]
    ls = launcher.local_size("k_mul_mat_id", launcher.info.mv_ls)
    groups = a.ne[1] * ids.ne[0] * ids.ne[1]
    args = [*targs(launcher, a), np.int32(a.type), *targs(launcher, ids), bp, np.int32(b.ne[1]),
            *targs(launcher, node), launcher.err_buf, np.int32(launcher.error_code(node)), local_mem(ls * 4)]
    return chain(
        enqueue(launcher, "k_pack_b", (K + blk - 1) // blk * b.nrows, pack),
        enqueue_nd(launcher, "k_mul_mat_id", (groups * ls,), (ls,), args),
    )


# ------------------------------------------------------------------------------------------------ OUT_PROD


def _out_prod_ok(info: DeviceInfo, node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    return (
        a is not None
        and b is not None
        and (a.type in FLOAT_TYPES or a.type in QUANT_TYPES)
        and b.type in (GGMLType.F32, GGMLType.F16)
        and node.type == GGMLType.F32
    )


@kernel(GGMLOp.OUT_PROD, supports=_out_prod_ok)
def _bind_out_prod(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    steps: list[Thunk] = []
    if a.type.is_quantized:  # dequantize a into contiguous f32 first
        tmp = launcher.scratch("a", a.nelements * 4)
        nb = (4, 4 * a.ne[0], 4 * a.ne[0] * a.ne[1], 4 * a.ne[0] * a.ne[1] * a.ne[2])
        a_args = [tmp, np.uint64(0), int4(a.ne), long4(nb), np.int32(GGMLType.F32)]
        unpack = [*targs(launcher, a), np.int32(a.type), *a_args]  # k_cpy_from_q(a, a_t, dst, dst_t)
        steps.append(enqueue(launcher, "k_cpy_from_q", a.nelements // 32, unpack))
    else:
        a_args = [*targs(launcher, a), np.int32(a.type)]
    args = [*a_args, *targs(launcher, b), np.int32(b.type), *targs(launcher, node)]
    steps.append(enqueue(launcher, "k_out_prod", node.nelements, args))
    return chain(*steps)
