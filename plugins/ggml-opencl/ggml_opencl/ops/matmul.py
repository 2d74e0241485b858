"""MUL_MAT, MUL_MAT_ID, OUT_PROD (kernels in ``matmul.cl`` and, tuned per device, ``matmul_tuned.cl``).

MUL_MAT: a matrix-vector kernel for few columns (``k_mv``), packed register-blocked GEMM otherwise (``k_gemm``);
the shapes of both are tuned per device on first use (``_tuning.py``).

Weights of any supported type are dequantized on the device (never on the host). The activations are rounded
the way ggml's CPU rounds them before its dot products (to f16 for f16 weights, through Q8_0/Q8_1 blocks for the
legacy quants, through Q8_K blocks for the K-quants, to bf16 for bf16 weights), so results follow the CPU
reference to float rounding (measured NMSE ~1e-13 against the CPU plugin; ~1e-5 with plain f32 activations).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from ggml_core import ComputeError, GGMLOp, GGMLType, Tensor
from ggml_opencl._device_info import DeviceInfo
from ggml_opencl._tuning import Tuner, tuner_for
from ggml_opencl._tuning_configs import MV_MAX_COLUMNS
from ggml_opencl.ops._dispatch import (
    FLOAT_TYPES,
    KERNELS,
    QUANT_TYPES,
    Launcher,
    Thunk,
    chain,
    enqueue,
    enqueue_nd,
    int4,
    local_mem,
    long4,
    mem_of,
    roundup,
    targs,
    targs_view,
)


def cl_copy(queue: Any, host: np.ndarray, mem: Any, offset: int) -> None:
    """Blocking device-to-host read of ``host.nbytes`` bytes at ``offset``."""
    import pyopencl as cl

    cl.enqueue_copy(queue, host, mem, src_offset=offset, is_blocking=True)


def cl_write(queue: Any, mem: Any, host: np.ndarray) -> None:
    """Blocking host-to-device write at offset 0."""
    import pyopencl as cl

    cl.enqueue_copy(queue, mem, np.ascontiguousarray(host), is_blocking=True)


__all__ = ["ACTIVATION_ROUNDING", "GROUPED_MIN_ROWS", "MV_MAX_COLUMNS", "PACK_LIMIT"]

#: token-slot pairs from which MUL_MAT_ID groups the rows by expert and multiplies with the packed GEMM
GROUPED_MIN_ROWS: Final = 32
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


@KERNELS.kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(launcher: Launcher, node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    K = a.ne[0]
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
    out = [
        dmem,
        np.uint64(doff),
        np.int64(_elems(node.nb[1], "result row", node)),
        np.int64(_elems(node.nb[2], "result", node)),
        np.int64(_elems(node.nb[3], "result", node)),
    ]
    bargs = [bmem, np.uint64(boff), np.int64(ldb), np.int64(sb2), np.int64(sb3), np.int32(N), np.int32(b2)]

    if N <= MV_MAX_COLUMNS:
        steps.append(_mat_vec(launcher, a, r2, r3, bargs, out, batches, N))
        return chain(*steps)

    steps += _packed_gemm(launcher, targs(launcher, a), a.type, a.ne, r2, r3, bargs, out, batches, N)
    return chain(*steps)


def _tuner(launcher: Launcher) -> Tuner:
    return tuner_for(launcher.context, launcher.queue.device, launcher.info)


def _launch(launcher: Launcher, k: Any, gs: tuple[int, ...], ls: tuple[int, ...], args: list[Any]) -> Thunk:
    queue = launcher.queue

    def run() -> None:
        k(queue, gs, ls, *args)

    return run


def _mat_vec(
    launcher: Launcher, a: Tensor, r2: int, r3: int, bargs: list[Any], out: list[Any], batches: int, n: int
) -> Thunk:
    """k_mv (tuned rows per group, columns per pass, work-group size) over weights ``a`` in their own type."""
    tuner = _tuner(launcher)
    cfg, k = tuner.mv(a.type, n)
    ls = cfg.ls
    args = [*targs(launcher, a), np.int32(r2), np.int32(r3), *bargs, *out, local_mem(ls * 4)]
    rows = cfg.rows_per_group
    return _launch(launcher, k, ((a.ne[1] + rows - 1) // rows * ls, batches), (ls, 1), args)


def _packed_gemm(
    launcher: Launcher,
    a_args: list[Any],
    a_type: GGMLType,
    a_ne: tuple[int, int, int, int],
    r2: int,
    r3: int,
    bargs: list[Any],
    out: list[Any],
    batches: int,
    n: int,
) -> list[Thunk]:
    """k_pack_a + k_gemm launches for weights ``a_args`` (``a_ne``), in row chunks that fit the scratch buffer."""
    info = launcher.info
    K, M = a_ne[0], a_ne[1]
    tuner = _tuner(launcher)
    cfg, k_gemm = tuner.gemm(n)
    tm, tn = cfg.tm, cfg.tn
    n_mats = a_ne[2] * a_ne[3]
    limit = min(PACK_LIMIT, info.max_alloc)
    rows = max(tm, (limit // (4 * K * n_mats)) // tm * tm)
    rows = min(rows, roundup(M, tm))
    at = launcher.scratch("a", rows * K * n_mats * 4)
    ls0, ls1 = cfg.ls
    while ls0 * ls1 > tuner.max_local(k_gemm):  # the kernel's limit on this device (only the untuned default)
        ls0, ls1 = max(1, ls0 // 2), max(1, ls1 // 2)
    steps: list[Thunk] = []
    for m_base in range(0, M, rows):
        mc = min(rows, roundup(M - m_base, tm))
        pack = [*a_args, np.int32(a_type), np.int32(m_base), np.int32(mc), np.int32(tm), at]
        steps.append(enqueue(launcher, "k_pack_a", (K + 31) // 32 * mc * n_mats, pack))
        gs = (roundup((n + tn - 1) // tn, ls0), roundup(mc // tm, ls1), batches)
        args = [
            at,
            np.int32(K),
            np.int32(mc),
            np.int32(min(mc, M - m_base)),
            np.int32(a_ne[2]),
            np.int32(r2),
            np.int32(r3),
            *bargs,
            *out,
            np.int32(m_base),
        ]
        steps.append(_launch(launcher, k_gemm, gs, (ls0, ls1, 1), args))
    return steps


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


@KERNELS.kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(launcher: Launcher, node: Tensor) -> Thunk:
    a, b, ids = node.src[0], node.src[1], node.src[2]
    assert a is not None and b is not None and ids is not None
    if ids.ne[0] * ids.ne[1] >= GROUPED_MIN_ROWS:
        return _grouped_mul_mat_id(launcher, node, a, b, ids)
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    K = a.ne[0]
    bp = launcher.scratch("b", b.nelements * 4)
    pack = [*targs(launcher, b), np.int32(b.type), np.int32(mode), np.int32(blk), bp]
    ls = launcher.local_size("k_mul_mat_id", launcher.info.mv_ls)
    groups = a.ne[1] * ids.ne[0] * ids.ne[1]
    args = [
        *targs(launcher, a),
        np.int32(a.type),
        *targs(launcher, ids),
        bp,
        np.int32(b.ne[1]),
        *targs(launcher, node),
        launcher.err_buf,
        np.int32(launcher.error_code(node)),
        local_mem(ls * 4),
    ]
    return chain(
        enqueue(launcher, "k_pack_b", (K + blk - 1) // blk * b.nrows, pack),
        enqueue_nd(launcher, "k_mul_mat_id", (groups * ls,), (ls,), args),
    )


def _grouped_mul_mat_id(launcher: Launcher, node: Tensor, a: Tensor, b: Tensor, ids: Tensor) -> Thunk:
    """Many token-slot pairs: read the routing, then one packed GEMM per expert over the rows that chose it.

    Like ggml's GPU backends this waits for the queue to read ``ids`` (a host sync point per node).
    """
    K, M, n_expert = a.ne[0], a.ne[1], a.ne[2]
    n_used, n_tok, b1 = ids.ne[0], ids.ne[1], b.ne[1]
    n_rows = n_used * n_tok
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    ids_mem, ids_off = mem_of(launcher, ids)
    span = (n_tok - 1) * ids.nb[1] + (n_used - 1) * ids.nb[0] + 4
    queue, name = launcher.queue, launcher.name

    def run() -> None:
        raw = np.empty(span, np.uint8)
        cl_copy(queue, raw, ids_mem, ids_off)
        offs = np.arange(n_tok)[:, None] * ids.nb[1] + np.arange(n_used)[None, :] * ids.nb[0]  # bytes, any strides
        choice = np.ascontiguousarray(raw[offs[..., None] + np.arange(4)]).view(np.int32)[..., 0].astype(np.int64)
        if choice.size and (choice.min() < 0 or choice.max() >= n_expert):
            bad = int(choice[(choice < 0) | (choice >= n_expert)][0])
            raise ComputeError(node, name, f"expert index {bad} is outside 0..{n_expert - 1}")
        tok, slot = np.divmod(np.arange(n_rows), n_used)
        experts = choice.reshape(-1)
        order = np.argsort(experts, kind="stable")
        triples = np.stack([slot[order] % b1, tok[order], slot[order]], axis=1).astype(np.int32)
        rows_buf = launcher.scratch("rows", triples.nbytes)
        cl_write(queue, rows_buf, triples)
        bp = launcher.scratch("b", n_rows * K * 4)
        tmp = launcher.scratch("tmp", n_rows * M * 4)
        pack = [*targs(launcher, b), np.int32(b.type), np.int32(mode), np.int32(blk), rows_buf, np.int32(n_rows), bp]
        enqueue(launcher, "k_pack_b_rows", (K + blk - 1) // blk * n_rows, pack)()
        counts = np.bincount(experts, minlength=n_expert)
        start = 0
        for expert in range(n_expert):
            cnt = int(counts[expert])
            if not cnt:
                continue
            a_view = targs_view(launcher, a, (K, M, 1, 1), expert * a.nb[2])
            bargs = [bp, np.uint64(start * K * 4), np.int64(K), np.int64(0), np.int64(0), np.int32(cnt), np.int32(1)]
            out = [tmp, np.uint64(start * M * 4), np.int64(M), np.int64(0), np.int64(0)]
            for step in _packed_gemm(launcher, a_view, a.type, (K, M, 1, 1), 1, 1, bargs, out, 1, cnt):
                step()
            start += cnt
        scatter = [tmp, np.int32(M), rows_buf, np.int32(n_rows), *targs(launcher, node)]
        enqueue(launcher, "k_scatter_rows", M * n_rows, scatter)()

    return run


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


@KERNELS.kernel(GGMLOp.OUT_PROD, supports=_out_prod_ok)
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
