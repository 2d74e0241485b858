"""Binders of every op with a WGSL kernel: elementwise, norms, SOFT_MAX, ROPE, movement, MUL_MAT.

Each binder checks nothing its predicate has not already checked; predicates answer exactly what the kernels
compute correctly (types, layouts, sizes against the binding limit).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, UnaryOp
from ggml_core.ops import rope_yarn_corr_dims
from ggml_webgpu._dispatch import (
    FLOAT_TYPES,
    QUANT_TYPES,
    Dispatch,
    Launcher,
    Limits,
    Slot,
    extent,
    f32,
    fits,
    groups_1d,
    kernel,
    raw_slot,
    slot,
)

__all__ = ["ACTIVATION_ROUNDING", "GLU_SUPPORTED", "SGEMM_MIN_COLUMNS", "UNARY_SUPPORTED"]

T = GGMLType


def _src(node: Tensor, i: int) -> Tensor:
    s = node.src[i]
    assert s is not None, f"{node.op_desc}: operand {i} is missing"
    return s


def _elementwise(kernel_name: str, launcher: Launcher, node: Tensor, op: list[int], **slots: Tensor) -> Dispatch:
    n = node.nelements
    a, b, c = (slot(launcher, slots[k]) if k in slots else None for k in "abc")
    return Dispatch(kernel_name, groups_1d(n), (a, b, c, slot(launcher, node)), [n, *op])


# ------------------------------------------------------------------------------------------------ binary


_BINARY: Final = {GGMLOp.ADD: 0, GGMLOp.SUB: 1, GGMLOp.MUL: 2, GGMLOp.DIV: 3}


def _binary_ok(limits: Limits, node: Tensor) -> bool:
    a, b = _src(node, 0), _src(node, 1)
    return (
        a.type in FLOAT_TYPES
        and b.type in FLOAT_TYPES
        and node.type in FLOAT_TYPES
        and node.ne == a.ne
        and b.can_repeat_to(a)
        and fits(limits, a, b, node)
    )


def _flat_f32(*ts: Tensor) -> bool:
    """Every tensor is contiguous f32 (so a kernel may treat it as one flat array)."""
    return all(t.type == T.F32 and t.is_contiguous for t in ts)


def _repeats_flat(a: Tensor, b: Tensor) -> bool:
    """b's flat data repeated along a's flat data equals ggml's broadcast: b = a's leading dims, then ones."""
    d = 0
    while d < 4 and b.ne[d] == a.ne[d]:
        d += 1
    return all(n == 1 for n in b.ne[d:])


@kernel(GGMLOp.ADD, GGMLOp.SUB, GGMLOp.MUL, GGMLOp.DIV, supports=_binary_ok)
def _bind_binary(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = _src(node, 0), _src(node, 1)
    if _flat_f32(a, b, node) and _repeats_flat(a, b):
        words = [_BINARY[node.op], b.nelements]
        return [_elementwise("elementwise.binary_flat", launcher, node, words, a=a, b=b)]
    words = [_BINARY[node.op], a.type, b.type, node.type]
    return [_elementwise("elementwise.binary", launcher, node, words, a=a, b=b)]


# ------------------------------------------------------------------------------------------------ maps


#: UNARY sub-ops with a kernel (codes = ggml's enum ggml_unary_op)
UNARY_SUPPORTED: Final = frozenset(
    {
        UnaryOp.ABS,
        UnaryOp.SGN,
        UnaryOp.NEG,
        UnaryOp.STEP,
        UnaryOp.TANH,
        UnaryOp.ELU,
        UnaryOp.RELU,
        UnaryOp.SIGMOID,
        UnaryOp.GELU,
        UnaryOp.GELU_QUICK,
        UnaryOp.SILU,
        UnaryOp.HARDSWISH,
        UnaryOp.HARDSIGMOID,
        UnaryOp.EXP,
        UnaryOp.GELU_ERF,
        UnaryOp.FLOOR,
        UnaryOp.CEIL,
        UnaryOp.ROUND,
        UnaryOp.TRUNC,
    }
)
_MAPS: Final = {
    GGMLOp.SQR: 100,
    GGMLOp.SQRT: 101,
    GGMLOp.LOG: 102,
    GGMLOp.SIN: 103,
    GGMLOp.COS: 104,
    GGMLOp.SCALE: 105,
    GGMLOp.CLAMP: 106,
    GGMLOp.LEAKY_RELU: 107,
}


def _map_ok(limits: Limits, node: Tensor) -> bool:
    a = _src(node, 0)
    if a.type not in FLOAT_TYPES or node.type not in FLOAT_TYPES or a.ne != node.ne or not fits(limits, a, node):
        return False
    return node.op != GGMLOp.UNARY or UnaryOp(node.op_param_i32(0)) in UNARY_SUPPORTED


@kernel(GGMLOp.UNARY, *_MAPS, supports=_map_ok)
def _bind_map(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = _src(node, 0)
    code = node.op_param_i32(0) if node.op == GGMLOp.UNARY else _MAPS[node.op]
    p0 = p1 = 0.0
    if node.op in (GGMLOp.SCALE, GGMLOp.CLAMP):
        p0, p1 = node.op_param_f32(0), node.op_param_f32(1)
    elif node.op == GGMLOp.LEAKY_RELU:
        p0 = node.op_param_f32(0)
    if _flat_f32(a, node):
        return [_elementwise("elementwise.map_flat", launcher, node, [code, f32(p0), f32(p1)], a=a)]
    words = [code, a.type, node.type, f32(p0), f32(p1)]
    return [_elementwise("elementwise.map", launcher, node, words, a=a)]


# ------------------------------------------------------------------------------------------------ GLU


GLU_SUPPORTED: Final = frozenset(
    {GluOp.REGLU, GluOp.GEGLU, GluOp.SWIGLU, GluOp.SWIGLU_OAI, GluOp.GEGLU_ERF, GluOp.GEGLU_QUICK}
)


def _glu_ok(limits: Limits, node: Tensor) -> bool:
    a, b = _src(node, 0), node.src[1]
    return (
        GluOp(node.op_param_i32(0)) in GLU_SUPPORTED
        and a.type in (T.F32, T.F16)
        and (b is None or (b.type == a.type and b.ne == node.ne))
        and node.type == a.type
        and fits(limits, a, b, node)
    )


@kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = _src(node, 0), node.src[1]
    op = GluOp(node.op_param_i32(0))
    if b is None:  # fused: x and g are the two halves of each row of a
        half = node.ne[0] * a.nb[0]
        x_off, g_off = (half, 0) if node.op_param_i32(1) else (0, half)
        x = slot(launcher, a, ne=node.ne, extra=x_off)
        g = slot(launcher, a, ne=node.ne, extra=g_off)
    else:
        x, g = slot(launcher, a), slot(launcher, b)
    alpha, limit = (node.op_param_f32(2), node.op_param_f32(3)) if op == GluOp.SWIGLU_OAI else (0.0, 0.0)
    words = [node.nelements, int(op), node.type, f32(alpha), f32(limit)]
    return [Dispatch("elementwise.glu", groups_1d(node.nelements), (x, g, None, slot(launcher, node)), words)]


# ------------------------------------------------------------------------------------------------ norms, SOFT_MAX


_NORMS: Final = {GGMLOp.NORM: 0, GGMLOp.RMS_NORM: 1, GGMLOp.L2_NORM: 2}


def _norm_ok(limits: Limits, node: Tensor) -> bool:
    a = _src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and a.ne == node.ne and fits(limits, a, node)


@kernel(GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM, supports=_norm_ok)
def _bind_norm(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = _src(node, 0)
    words = [node.nrows, _NORMS[node.op], f32(node.op_param_f32(0))]
    return [Dispatch("rows.norm", node.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


def alibi_params(n_head: int, max_bias: float) -> tuple[float, float, int]:
    """(m0, m1, n_head_log2) of ggml's ALiBi slopes, in float32 as ggml computes them."""
    n_head_log2 = 1 << math.floor(math.log2(max(n_head, 1)))
    if max_bias <= 0.0:
        return 1.0, 1.0, n_head_log2
    m0 = np.float32(2.0) ** (np.float32(-max_bias) / np.float32(n_head_log2))
    m1 = np.float32(2.0) ** (np.float32(-max_bias / 2.0) / np.float32(n_head_log2))
    return float(m0), float(m1), n_head_log2


def _soft_max_ok(limits: Limits, node: Tensor) -> bool:
    a, m, s = _src(node, 0), node.src[1], node.src[2]
    return (
        a.type == T.F32
        and node.type == T.F32
        and (m is None or m.type in (T.F32, T.F16))
        and (s is None or s.type == T.F32)
        and fits(limits, a, m, s, node)
    )


@kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, mask, sinks = _src(node, 0), node.src[1], node.src[2]
    max_bias = node.op_param_f32(1)
    m0, m1, n_log2 = alibi_params(a.ne[2], max_bias)
    words = [
        a.nrows, f32(node.op_param_f32(0)), f32(max_bias), f32(m0), f32(m1), n_log2, int(mask is not None),
        mask.type if mask is not None else 0, int(sinks is not None),
    ]
    slots = (slot(launcher, a), slot(launcher, mask) if mask is not None else None,
             slot(launcher, sinks) if sinks is not None else None, slot(launcher, node))
    return [Dispatch("rows.soft_max", a.nrows, slots, words)]


# ------------------------------------------------------------------------------------------------ ROPE


_ROPE_MODES: Final = (0, 2, 8, 24, 40)  # NORMAL, NEOX, MROPE, VISION, IMROPE
_ROPE_MROPE, _ROPE_VISION = 8, 24


def _rope_ok(limits: Limits, node: Tensor) -> bool:
    a, p, f = _src(node, 0), _src(node, 1), node.src[2]
    mode, n_dims, n_offs = node.op_param_i32(2), node.op_param_i32(1), node.op_param_i32(15)
    sections = [node.op_param_i32(i) for i in range(11, 15)]
    n_pairs = a.ne[0] // 2 if mode == _ROPE_VISION else n_dims // 2
    if mode not in _ROPE_MODES or a.ne[0] % 2 or n_offs % 2 or n_offs < 0 or n_dims <= 0 or n_offs + n_dims > a.ne[0]:
        return False
    if mode & _ROPE_MROPE and (sum(sections) <= 0 or sum(sections) > a.ne[0] or min(sections) < 0):
        return False
    if mode == _ROPE_VISION and (n_dims * 2 != a.ne[0] or n_offs != 0):
        return False
    return (
        a.type in (T.F32, T.F16)
        and node.type == a.type
        and node.ne == a.ne
        and p.type == T.I32
        and (f is None or (f.type == T.F32 and f.nelements >= n_pairs))
        and fits(limits, a, p, f, node)
    )


@kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, pos, ff = _src(node, 0), _src(node, 1), node.src[2]
    n_dims, mode, n_ctx_orig, n_offs = (node.op_param_i32(i) for i in (1, 2, 4, 15))
    freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow = (node.op_param_f32(i) for i in range(5, 11))
    corr = (
        rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow) if ext_factor != 0.0 else (0.0, 0.0)
    )
    theta_scale = np.float32(freq_base) ** np.float32(-2.0 / n_dims)
    mscale = np.float32(attn_factor)
    if ext_factor != 0.0:
        mscale = mscale * (np.float32(1.0) + np.float32(0.1) * np.log(np.float32(1.0) / np.float32(freq_scale)))
    n = a.nelements // 2
    words = [
        n, mode, n_dims, n_offs, *(node.op_param_i32(i) for i in range(11, 15)), f32(theta_scale), f32(freq_scale),
        f32(ext_factor), f32(mscale), f32(corr[0]), f32(corr[1]), a.type, int(ff is not None),
    ]
    slots = (slot(launcher, a), slot(launcher, pos), slot(launcher, ff) if ff is not None else None,
             slot(launcher, node))
    return [Dispatch("rope.rope", groups_1d(n), slots, words)]


# ------------------------------------------------------------------------------------------------ CPY / CONT / DUP


def _copy_ok(limits: Limits, node: Tensor) -> bool:
    a = _src(node, 0)
    if a.nelements != node.nelements or not fits(limits, a, node):
        return False
    if a.type == node.type:
        bs = a.type.block_size
        # a block copy needs whole blocks along ne[0] on both sides
        return bs == 1 or (a.ne[0] % bs == 0 and node.ne[0] % bs == 0)
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _blocks(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """ne/nb of ``t`` counted in its type's units (blocks for quantized types)."""
    bs = t.type.block_size
    return (t.ne[0] // bs, *t.ne[1:]), t.nb


@kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = _src(node, 0)
    if a.type != node.type:
        return [_elementwise("movement.cpy", launcher, node, [a.type, node.type], a=a)]
    unit = a.type.type_size
    (ane, anb), (dne, dnb) = _blocks(a), _blocks(node)
    sa = slot(launcher, a, ne=ane, nb=anb, nbytes=a.nbytes)
    sd = slot(launcher, node, ne=dne, nb=dnb, nbytes=node.nbytes)
    wordwise = unit % 4 == 0 and all(x % 4 == 0 for x in (*anb, *dnb, sa.words[0], sd.words[0]))
    n = math.prod(ane) * unit // (4 if wordwise else 1)
    return [Dispatch("movement.cpy_raw", groups_1d(n), (sa, None, None, sd), [n, unit, int(wordwise)])]


# ------------------------------------------------------------------------------------------------ GET_ROWS / SET_ROWS


def _get_rows_ok(limits: Limits, node: Tensor) -> bool:
    a, b = _src(node, 0), _src(node, 1)
    if b.type not in (T.I32, T.I64) or not fits(limits, b, node) or a.nb[0] != a.type.type_size:
        return False
    if a.type == T.I32:
        return node.type == T.I32
    if a.type in QUANT_TYPES:
        return node.type == T.F32 and a.ne[0] % 32 == 0
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _row_windows(limits: Limits, t: Tensor) -> list[tuple[int, int]]:
    """(first row, row count) windows of ``t``'s dimension 1, each fitting one storage binding."""
    if fits(limits, t):
        return [(0, t.ne[1])]
    tail = extent(t.type, (t.ne[0], 1, t.ne[2], t.ne[3]), t.nb)
    per = (limits.max_binding - limits.offset_alignment - tail) // t.nb[1] + 1
    if per < 1:
        raise NotImplementedError(f"{t.describe()}: its rows cannot be split into windows of the storage binding")
    return [(r, min(per, t.ne[1] - r)) for r in range(0, t.ne[1], per)]


@kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = _src(node, 0), _src(node, 1)
    out: list[Dispatch] = []
    code = launcher.error_code(node)
    quant = a.type in QUANT_TYPES
    n = node.nelements // 32 if quant else node.nelements
    sb, sd = slot(launcher, b), slot(launcher, node)
    for r0, rn in _row_windows(launcher.limits, a):
        sa = slot(launcher, a, ne=(a.ne[0], rn, a.ne[2], a.ne[3]), extra=r0 * a.nb[1])
        words = [n, a.type, node.type, r0, rn, a.ne[1], code, b.type]
        out.append(Dispatch("movement.get_rows_q" if quant else "movement.get_rows", groups_1d(n), (sa, sb, None, sd),
                            words))
    return out


def _set_rows_ok(limits: Limits, node: Tensor) -> bool:
    b, c = _src(node, 0), _src(node, 1)
    return (
        b.type in (T.F32, T.F16)
        and c.type in (T.I32, T.I64)
        and node.type in FLOAT_TYPES
        and fits(limits, b, c, node)
    )


@kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    b, c = _src(node, 0), _src(node, 1)
    words = [b.nelements, b.type, node.type, c.type, launcher.error_code(node)]
    slots = (slot(launcher, b), slot(launcher, c), None, slot(launcher, node))
    return [Dispatch("movement.set_rows", groups_1d(b.nelements), slots, words)]


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
}
#: activation rows per mul_mat workgroup (NT in matmul.wgsl)
_NT: Final = 8
#: activation rows from which the weights are unpacked to f32 and multiplied by the tiled SGEMM
SGEMM_MIN_COLUMNS: Final = 16
#: rows x columns of an SGEMM tile (TILE in matmul.wgsl)
_TILE: Final = 64


def _mul_mat_ok(limits: Limits, node: Tensor) -> bool:
    a, b = _src(node, 0), _src(node, 1)
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
        _row_windows(limits, a)
    except NotImplementedError:
        return False
    return True


@kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = _src(node, 0), _src(node, 1)
    k, n, b2, b3 = a.ne[0], b.ne[1], b.ne[2], b.ne[3]
    mode = ACTIVATION_ROUNDING[a.type]
    blk = 256 if mode == _R_Q8_K else 32
    packed = 4 * b.nelements
    scratch = launcher.scratch("b", packed)
    sp = raw_slot(launcher.limits, scratch, 0, packed, (k, n, b2, b3), (4, 4 * k, 4 * k * n, 4 * k * n * b2))
    n_blocks = -(-k // blk) * b.nrows
    out = [Dispatch("matmul.pack_b", groups_1d(n_blocks), (slot(launcher, b), None, None, sp),
                    [n_blocks, b.type, mode, blk])]
    sd = slot(launcher, node)
    if n >= SGEMM_MIN_COLUMNS:
        return out + _tiled(launcher, a, node, sp, sd)
    n_tiles = -(-n // _NT)
    for m0, mc in _row_windows(launcher.limits, a):
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
    for m0, mw in _row_windows(limits, a):
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
    a, b, ids = _src(node, 0), _src(node, 1), _src(node, 2)
    return (
        a.type in ACTIVATION_ROUNDING
        and a.nb[0] == a.type.type_size
        and b.type in (T.F32, T.F16)
        and ids.type == T.I32
        and node.type == T.F32
        and fits(limits, a, b, ids, node)
        and 4 * b.nelements + limits.offset_alignment <= limits.max_binding
    )


@kernel(GGMLOp.MUL_MAT_ID, supports=_mul_mat_id_ok)
def _bind_mul_mat_id(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b, ids = _src(node, 0), _src(node, 1), _src(node, 2)
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
    pack = Dispatch("matmul.pack_b", groups_1d(n_blocks), (slot(launcher, b), None, None, sp),
                    [n_blocks, b.type, mode, blk])
    slots = (slot(launcher, a), sp, slot(launcher, ids), slot(launcher, node))
    return [pack, Dispatch("matmul.mul_mat_id", groups, slots, words)]


# ------------------------------------------------------------------------------------------------ FLASH_ATTN_EXT

#: largest V head size of the flash-attention kernel (its per-invocation accumulator, FA_DMAX in attention.wgsl)
FA_DMAX: Final = 256


def _flash_ok(limits: Limits, node: Tensor) -> bool:
    q, k, v, m, s = _src(node, 0), _src(node, 1), _src(node, 2), node.src[3], node.src[4]
    return (
        q.type == T.F32
        and k.type in (T.F32, T.F16)
        and v.type in (T.F32, T.F16)
        and (m is None or m.type == T.F16)
        and (s is None or s.type == T.F32)
        and node.type == T.F32
        and v.ne[0] <= FA_DMAX
        and fits(limits, q, k, v, m, s, node)
    )


@kernel(GGMLOp.FLASH_ATTN_EXT, supports=_flash_ok)
def _bind_flash(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    q, k, v, mask, sinks = _src(node, 0), _src(node, 1), _src(node, 2), node.src[3], node.src[4]
    scale, max_bias, softcap = (node.op_param_f32(i) for i in range(3))
    m0, m1, n_log2 = alibi_params(q.ne[2], max_bias)
    n = q.ne[1] * q.ne[2] * q.ne[3]
    words = [n, f32(scale), f32(max_bias), f32(m0), f32(m1), n_log2, f32(softcap), k.type, v.type,
             int(mask is not None), int(sinks is not None)]
    slots = (slot(launcher, q), slot(launcher, k), slot(launcher, v), slot(launcher, node),
             slot(launcher, mask) if mask is not None else None, slot(launcher, sinks) if sinks is not None else None)
    return [Dispatch("attention.flash_attn", n, slots, words)]


# ------------------------------------------------------------------------------------------------ reductions, sorting

#: longest row ARGSORT / TOP_K rank (each element counts the row: ne0^2 comparisons per row)
SORT_MAX_ROW: Final = 8192


def _sum_rows_ok(limits: Limits, node: Tensor) -> bool:
    a = _src(node, 0)
    return a.type == T.F32 and node.type == T.F32 and fits(limits, a, node)


@kernel(GGMLOp.SUM_ROWS, GGMLOp.MEAN, supports=_sum_rows_ok)
def _bind_sum_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = _src(node, 0)
    words = [a.nrows, int(node.op == GGMLOp.MEAN)]
    return [Dispatch("rows.sum_rows", a.nrows, (slot(launcher, a), None, None, slot(launcher, node)), words)]


def _sort_ok(limits: Limits, node: Tensor) -> bool:
    a = _src(node, 0)
    return a.type == T.F32 and node.type == T.I32 and a.ne[0] <= SORT_MAX_ROW and fits(limits, a, node)


@kernel(GGMLOp.ARGSORT, GGMLOp.TOP_K, supports=_sort_ok)
def _bind_sort(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = _src(node, 0)
    desc = node.op == GGMLOp.TOP_K or node.op_param_i32(0) == 1
    return [_elementwise_over(a, "rows.rank_sort", launcher, node, [int(desc)])]


def _elementwise_over(src: Tensor, kernel_name: str, launcher: Launcher, node: Tensor, op: list[int]) -> Dispatch:
    """One invocation per element of ``src`` (not of the result)."""
    n = src.nelements
    return Dispatch(kernel_name, groups_1d(n), (slot(launcher, src), None, None, slot(launcher, node)), [n, *op])
