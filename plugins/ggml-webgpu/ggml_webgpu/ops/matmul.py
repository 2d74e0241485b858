"""MUL_MAT and MUL_MAT_ID (``matmul.wgsl``), weights dequantized in-shader.

Activations are packed to f32 rows rounded the way ggml's CPU rounds them for the weight type's dot product
(``pack_b``). Up to 15 activation rows a matrix-vector kernel multiplies them with the weights decoded 32 at a time;
from 16 rows the weights are unpacked to f32 per row window and a 64x64-tiled SGEMM multiplies them.
"""

from __future__ import annotations

from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_webgpu.ops._dispatch import (
    KERNELS,
    Dispatch,
    Launcher,
    Limits,
    Slot,
    fits,
    groups_1d,
    raw_slot,
    row_windows,
    slot,
    src,
)

T = GGMLType

__all__ = ["ACTIVATION_ROUNDING", "SGEMM_MIN_COLUMNS"]


# ------------------------------------------------------------------------------------------------ MUL_MAT


_R_NONE, _R_F16, _R_Q8_0, _R_Q8_K, _R_BF16 = 0, 1, 2, 3, 4
#: pack_b rounding per weight type: ggml's vec_dot_type (f16, bf16, Q8_0/Q8_1 blocks of 32, Q8_K blocks of 256)
ACTIVATION_ROUNDING: Final[dict[GGMLType, int]] = {
    T.F32: _R_NONE,
    T.F16: _R_F16,
    T.BF16: _R_BF16,
    T.Q4_0: _R_Q8_0,
    T.Q4_1: _R_Q8_0,
    T.Q5_0: _R_Q8_0,
    T.Q5_1: _R_Q8_0,
    T.Q8_0: _R_Q8_0,
    T.Q2_K: _R_Q8_K,
    T.Q3_K: _R_Q8_K,
    T.Q4_K: _R_Q8_K,
    T.Q5_K: _R_Q8_K,
    T.Q6_K: _R_Q8_K,
    T.IQ4_NL: _R_Q8_0,
    T.MXFP4: _R_Q8_0,
    T.NVFP4: _R_Q8_0,
    T.Q1_0: _R_Q8_0,
    T.IQ4_XS: _R_Q8_K,
    T.TQ1_0: _R_Q8_K,
    T.TQ2_0: _R_Q8_K,
}
#: activation rows per mul_mat workgroup (NT in matmul.wgsl)
_NT: Final = 8
#: activation rows from which the weights are unpacked to f32 and multiplied by the tiled SGEMM
SGEMM_MIN_COLUMNS: Final = 16
#: rows x columns of an SGEMM tile (TILE in matmul.wgsl)
_TILE: Final = 64


def _mul_mat_ok(limits: Limits, node: Tensor) -> bool:
    a, b = src(node, 0), src(node, 1)
    if a.type not in ACTIVATION_ROUNDING or a.nb[0] != a.type.type_size:
        return False
    if b.type not in (T.F32, T.F16) or node.type != T.F32 or node.nb[0] != 4:
        return False
    if b.ne[2] % a.ne[2] or b.ne[3] % a.ne[3]:
        return False
    # b and its packed f32 copy, and the result, must fit a binding; the weights are split into row windows
    packed = 4 * b.nelements
    return fits(limits, b, node) and packed + limits.offset_alignment <= limits.max_binding and _a_windows_ok(limits, a)


def _a_windows_ok(limits: Limits, a: Tensor) -> bool:
    try:
        row_windows(limits, a)
    except NotImplementedError:
        return False
    return True


@KERNELS.kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = src(node, 0), src(node, 1)
    k, n, b2, b3 = a.ne[0], b.ne[1], b.ne[2], b.ne[3]
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    packed = 4 * b.nelements
    scratch = launcher.scratch("b", packed)
    sp = raw_slot(launcher.limits, scratch, 0, packed, (k, n, b2, b3), (4, 4 * k, 4 * k * n, 4 * k * n * b2))
    n_blocks = -(-k // blk) * b.nrows
    out = [
        Dispatch(
            "matmul.pack_b", groups_1d(n_blocks), (slot(launcher, b), None, None, sp), [n_blocks, b.type, mode, blk]
        )
    ]
    sd = slot(launcher, node)
    if n >= SGEMM_MIN_COLUMNS:
        return out + _tiled(launcher, a, node, sp, sd)
    n_tiles = -(-n // _NT)
    for m0, mc in row_windows(launcher.limits, a):
        sa = slot(launcher, a, ne=(k, mc, a.ne[2], a.ne[3]), extra=m0 * a.nb[1])
        groups = mc * n_tiles * b2 * b3
        words = [groups, a.type, n, k, b2, b2 // a.ne[2], b3 // a.ne[3], m0, mc, n_tiles]
        out.append(Dispatch("matmul.mul_mat", groups, (sa, sp, None, sd), words))
    return out


def _tiled(launcher: Launcher, a: Tensor, node: Tensor, sp: Slot, sd: Slot) -> list[Dispatch]:
    """pack_a + sgemm per window of weight rows whose f32 copy fits one binding."""
    k, n, b2, b3 = a.ne[0], node.ne[1], node.ne[2], node.ne[3]
    n_mats = a.ne[2] * a.ne[3]
    limits = launcher.limits
    rows = max(1, (limits.max_binding - limits.offset_alignment) // (4 * k * n_mats))
    out: list[Dispatch] = []
    for m0, mw in row_windows(limits, a):
        for r0 in range(0, mw, rows):
            mc = min(rows, mw - r0)
            nbytes = 4 * k * mc * n_mats
            packed = launcher.scratch("a", nbytes)
            pnb = (4, 4 * k, 4 * k * mc, 4 * k * mc * a.ne[2])
            pa = raw_slot(limits, packed, 0, nbytes, (k, mc, a.ne[2], a.ne[3]), pnb)
            sa = slot(launcher, a, ne=(k, mc, a.ne[2], a.ne[3]), extra=(m0 + r0) * a.nb[1])
            n_items = -(-k // 32) * mc * n_mats
            out.append(Dispatch("matmul.pack_a", groups_1d(n_items), (sa, None, None, pa), [n_items, a.type, mc]))
            tn, tm = -(-n // _TILE), -(-mc // _TILE)
            groups = tn * tm * b2 * b3
            words = [groups, n, k, b2, b2 // a.ne[2], b3 // a.ne[3], m0 + r0, mc, a.ne[2], tn, tm]
            out.append(Dispatch("matmul.sgemm", groups, (pa, sp, None, sd), words))
    return out


# ------------------------------------------------------------------------------------------------ MUL_MAT_ID


def _mul_mat_id_ok(limits: Limits, node: Tensor) -> bool:
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    return (
        a.type in ACTIVATION_ROUNDING
        and a.nb[0] == a.type.type_size
        and b.type in (T.F32, T.F16)
        and ids.type == T.I32
        and node.type == T.F32
        and fits(limits, a, b, ids, node)
        and 4 * b.nelements + limits.offset_alignment <= limits.max_binding
    )


@KERNELS.kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b, ids = src(node, 0), src(node, 1), src(node, 2)
    k, b1, n_tok = a.ne[0], b.ne[1], b.ne[2]
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    packed = 4 * b.nelements
    scratch = launcher.scratch("b", packed)
    pnb = (4, 4 * k, 4 * k * b1, 4 * k * b1 * n_tok)
    sp = raw_slot(launcher.limits, scratch, 0, packed, (k, b1, n_tok, 1), pnb)
    n_blocks = -(-k // blk) * b.nrows
    n_used = ids.ne[0]
    groups = a.ne[1] * n_used * ids.ne[1]
    words = [groups, a.type, k, b1, n_used, launcher.error_code(node)]
    pack = Dispatch(
        "matmul.pack_b", groups_1d(n_blocks), (slot(launcher, b), None, None, sp), [n_blocks, b.type, mode, blk]
    )
    slots = (slot(launcher, a), sp, slot(launcher, ids), slot(launcher, node))
    return [pack, Dispatch("matmul.mul_mat_id", groups, slots, words)]
