"""Attention building blocks: SOFT_MAX (ext), ROPE (ext, YaRN), FLASH_ATTN_EXT, DIAG_MASK_INF/ZERO."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import broadcasts, check, finish, new_result, same_or_dup
from ggml_core.ops._enum import GGMLOp, Prec

__all__ = [
    "ROPE_TYPE_IMROPE",
    "ROPE_TYPE_MROPE",
    "ROPE_TYPE_NEOX",
    "ROPE_TYPE_NORMAL",
    "ROPE_TYPE_VISION",
    "RopeConstants",
    "alibi_params",
    "diag_mask_inf",
    "diag_mask_zero",
    "flash_attn_ext",
    "flash_attn_ext_add_sinks",
    "flash_attn_ext_set_prec",
    "rope",
    "rope_constants",
    "rope_ext",
    "rope_multi",
    "rope_set_offset",
    "rope_yarn_corr_dims",
    "soft_max",
    "soft_max_add_sinks",
    "soft_max_ext",
]

ROPE_TYPE_NORMAL = 0
ROPE_TYPE_NEOX = 2
ROPE_TYPE_MROPE = 8
ROPE_TYPE_VISION = 24
ROPE_TYPE_IMROPE = 40

_FLOATS = (GGMLType.F32, GGMLType.F16)


# ---------------------------------------------------------------------------------------------- soft_max


def soft_max(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_soft_max``: softmax over each row."""
    return soft_max_ext(a, None, 1.0, 0.0, inplace)


def soft_max_ext(a: Tensor, mask: Tensor | None, scale: float, max_bias: float = 0.0, inplace: bool = False) -> Tensor:
    """``ggml_soft_max_ext``: softmax(a * scale + mask [* ALiBi slope]) over each row.

    ``mask`` (f32 or f16, contiguous) has ``ne[0] == a.ne[0]``, at least a's rows, and broadcasts over dims 2, 3.
    ``max_bias > 0`` enables ALiBi (head index = dim 2) and needs a mask.
    """
    op = "SOFT_MAX"
    check(a.is_contiguous, op, "input must be contiguous", a)
    if mask is not None:
        check(mask.type in _FLOATS, op, f"mask must be f32 or f16, got {mask.type.traits.name}", mask)
        check(mask.is_contiguous, op, "mask must be contiguous", mask)
        check(mask.ne[0] == a.ne[0], op, f"mask.ne[0]={mask.ne[0]} must equal a.ne[0]={a.ne[0]}", a, mask)
        check(mask.ne[1] >= a.ne[1], op, f"mask has {mask.ne[1]} rows, a has {a.ne[1]}", a, mask)
        check(
            broadcasts(mask, a),
            op,
            "mask must broadcast over a's dims 2 and 3",
            a,
            mask,
        )
    check(max_bias == 0.0 or mask is not None, op, "ALiBi (max_bias > 0) needs a mask", a)
    result = same_or_dup(op, a, inplace)
    result.set_op_params_f32([scale, max_bias])
    return finish(result, GGMLOp.SOFT_MAX, [a, mask])


def _add_sinks(t: Tensor, sinks: Tensor | None, op: GGMLOp, slot: int) -> Tensor:
    """Attach (or with None, detach) one f32 sink logit per head as ``t.src[slot]``."""
    if sinks is None:
        t.src[slot] = None
        return t
    check(t.op == op, op.name, f"sinks can only be added to a {op.name} result", t)
    head_of = t.src[0]
    assert head_of is not None
    check(t.src[slot] is None, op.name, f"this {op.name} already has sinks", t)
    check(sinks.type == GGMLType.F32, op.name, f"sinks must be f32, got {sinks.type.traits.name}", sinks)
    check(
        sinks.ne[0] == head_of.ne[2],
        op.name,
        f"need one sink per head: {head_of.ne[2]}, got {sinks.ne[0]}",
        head_of,
        sinks,
    )
    t.src[slot] = sinks
    return t


def soft_max_add_sinks(t: Tensor, sinks: Tensor | None) -> Tensor:
    """``ggml_soft_max_add_sinks``: one f32 sink logit per head (dim 2) joins each row's denominator (src[2])."""
    return _add_sinks(t, sinks, GGMLOp.SOFT_MAX, 2)


# ---------------------------------------------------------------------------------------------- rope


def rope(a: Tensor, pos: Tensor, n_dims: int, mode: int = ROPE_TYPE_NORMAL) -> Tensor:
    """``ggml_rope`` with ggml's defaults (freq_base 10000, no scaling)."""
    return rope_ext(a, pos, None, n_dims, mode, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0)


def rope_ext(
    a: Tensor,
    pos: Tensor,
    freq_factors: Tensor | None,
    n_dims: int,
    mode: int,
    n_ctx_orig: int,
    freq_base: float,
    freq_scale: float,
    ext_factor: float,
    attn_factor: float,
    beta_fast: float,
    beta_slow: float,
    inplace: bool = False,
) -> Tensor:
    """``ggml_rope_ext``: rotary position embedding with YaRN scaling.

    a ``[head_dim, n_head, n_tokens, ...]``; pos: i32 vector with one position per token (a.ne[2]);
    the first ``n_dims`` of each head rotate (NORMAL: adjacent pairs, NEOX: halves); ``freq_factors``
    (optional f32, ``ne[0] >= n_dims / 2``) divide each pair's frequency.
    op_params: ``[0, n_dims, mode, 0, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast,
    beta_slow, sections[4], n_offs]`` (floats bit-cast), as ggml.
    """
    return _rope_impl(
        a,
        pos,
        freq_factors,
        n_dims,
        None,
        mode,
        n_ctx_orig,
        (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow),
        inplace,
    )


def rope_multi(
    a: Tensor,
    pos: Tensor,
    freq_factors: Tensor | None,
    n_dims: int,
    sections: tuple[int, int, int, int],
    mode: int,
    n_ctx_orig: int,
    freq_base: float,
    freq_scale: float,
    ext_factor: float,
    attn_factor: float,
    beta_fast: float,
    beta_slow: float,
    inplace: bool = False,
) -> Tensor:
    """``ggml_rope_multi``: multi-section RoPE (MROPE/IMROPE/VISION) with 4 positions per token."""
    return _rope_impl(
        a,
        pos,
        freq_factors,
        n_dims,
        sections,
        mode,
        n_ctx_orig,
        (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow),
        inplace,
    )


def _rope_impl(
    a: Tensor,
    pos: Tensor,
    freq_factors: Tensor | None,
    n_dims: int,
    sections: tuple[int, int, int, int] | None,
    mode: int,
    n_ctx_orig: int,
    floats: tuple[float, float, float, float, float, float],
    inplace: bool,
) -> Tensor:
    op = "ROPE"
    check(mode & 1 == 0, op, f"mode {mode}: mode & 1 is no longer supported by ggml", a)
    check(pos.type == GGMLType.I32, op, f"positions must be i32, got {pos.type.traits.name}", pos)
    check(pos.ne[1] == 1 and pos.ne[2] == 1 and pos.ne[3] == 1, op, "positions must be a vector", pos)
    per_token = 4 if mode & ROPE_TYPE_MROPE else 1
    check(
        pos.ne[0] == a.ne[2] * per_token,
        op,
        f"a has {a.ne[2]} tokens (ne[2]) and needs {per_token} position(s) per token, got {pos.ne[0]} positions",
        a,
        pos,
    )
    # not checked by ggml's builder but asserted by its kernels: never let a kernel rotate past a row
    check(0 < n_dims <= a.ne[0] and n_dims % 2 == 0, op, f"n_dims={n_dims} must be even and in 2..{a.ne[0]}", a)
    if freq_factors is not None:
        check(freq_factors.type == GGMLType.F32, op, "freq_factors must be f32", freq_factors)
        check(freq_factors.ne[0] >= n_dims // 2, op, f"freq_factors needs >= {n_dims // 2} values", freq_factors)
    result = same_or_dup(op, a, inplace)
    result.set_op_params_i32([0, n_dims, mode, 0, n_ctx_orig])
    result.set_op_params_f32(list(floats), start=5)
    if mode & ROPE_TYPE_MROPE and sections is not None:
        result.op_params[11:15] = np.asarray(sections, dtype=np.int32)
    return finish(result, GGMLOp.ROPE, [a, pos, freq_factors])


def rope_set_offset(a: Tensor, n_offs: int) -> Tensor:
    """``ggml_rope_set_offset``: rotate channels ``[n_offs, n_offs + n_dims)`` instead of ``[0, n_dims)``."""
    op = "ROPE"
    check(a.op == GGMLOp.ROPE, op, "rope_set_offset applies to ROPE results", a)
    check(n_offs >= 0 and n_offs % 2 == 0, op, f"n_offs={n_offs} must be even and >= 0", a)
    check(a.op_param_i32(2) != ROPE_TYPE_VISION, op, "vision RoPE has no offset", a)
    check(
        n_offs + a.op_param_i32(1) <= a.ne[0],
        op,
        f"n_offs={n_offs} + n_dims={a.op_param_i32(1)} exceeds the row length ne[0]={a.ne[0]}",
        a,
    )
    a.set_op_param_i32(15, n_offs)
    return a


def rope_yarn_corr_dims(
    n_dims: int, n_ctx_orig: int, freq_base: float, beta_fast: float, beta_slow: float
) -> tuple[float, float]:
    """``ggml_rope_yarn_corr_dims``: the [low, high] range of rotary pairs over which YaRN ramps, in float32 steps.

    Each end is ``n_dims * log(n_ctx_orig / (beta * 2π)) / (2 log(freq_base))``, floored (low) or ceiled (high),
    then clamped with C's ``MAX(0, low)`` and ``MIN(n_dims - 1, high)``. As in C, degenerate parameters
    (``n_ctx_orig = 0``, ``beta = 0``) give NaN or infinities rather than an error: kernels use the range only when
    ``ext_factor != 0``. Shared by every backend so that they agree bit for bit.
    """
    f32 = np.float32

    def corr_dim(n_rot: float) -> np.float32:
        with np.errstate(all="ignore"):
            ratio = f32(n_ctx_orig) / (f32(n_rot) * f32(2.0) * f32(math.pi))
            return f32(f32(n_dims) * np.log(ratio) / (f32(2.0) * np.log(f32(freq_base))))

    start = float(np.floor(corr_dim(beta_fast)))
    end = float(np.ceil(corr_dim(beta_slow)))
    # C's MAX(a, b) = a > b ? a : b and MIN(a, b) = a < b ? a : b: a NaN argument passes through
    low = 0.0 if start < 0.0 else start
    high = float(n_dims - 1) if n_dims - 1 < end else end
    return low, high


class RopeConstants(NamedTuple):
    """A ROPE node's op params with the host-side constants of ggml's rope kernels, in float32 as ggml computes
    them (see :func:`rope_constants`)."""

    mode: int
    n_dims: int
    n_offs: int
    #: MROPE/IMROPE sections (op params 11-14)
    sections: tuple[int, int, int, int]
    #: ``freq_base ** (-2 / n_dims)``: the factor between the thetas of consecutive pairs
    theta_scale: float
    freq_scale: float
    ext_factor: float
    #: ``attn_factor``, times YaRN's magnitude correction ``1 + 0.1 ln(1 / freq_scale)`` when ``ext_factor != 0``
    mscale: float
    #: YaRN's ramp range (:func:`rope_yarn_corr_dims`); (0, 0) without YaRN (``ext_factor == 0``), when kernels
    #: do not read it
    corr_low: float
    corr_high: float


def rope_constants(node: Tensor) -> RopeConstants:
    """The constants every backend's ROPE kernel takes, read from a ROPE node (as ``ggml_rope_yarn`` sets them up),
    so that the backends agree bit for bit."""
    n_dims, mode, n_ctx_orig, n_offs = (node.op_param_i32(i) for i in (1, 2, 4, 15))
    freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow = (node.op_param_f32(i) for i in range(5, 11))
    f32 = np.float32
    corr = rope_yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow) if ext_factor != 0.0 else (0.0, 0.0)
    mscale = f32(attn_factor)
    if ext_factor != 0.0:
        mscale = mscale * (f32(1.0) + f32(0.1) * np.log(f32(1.0) / f32(freq_scale)))
    s0, s1, s2, s3 = (node.op_param_i32(i) for i in range(11, 15))
    return RopeConstants(
        mode=mode,
        n_dims=n_dims,
        n_offs=n_offs,
        sections=(s0, s1, s2, s3),
        theta_scale=float(f32(freq_base) ** f32(-2.0 / n_dims)),
        freq_scale=freq_scale,
        ext_factor=ext_factor,
        mscale=float(f32(mscale)),
        corr_low=corr[0],
        corr_high=corr[1],
    )


def alibi_params(n_head: int, max_bias: float) -> tuple[float, float, int]:
    """(m0, m1, n_head_log2) of ggml's ALiBi slopes, in float32 as ggml computes them: head ``h`` has slope
    ``m0 ** (h + 1)`` below ``n_head_log2`` and ``m1 ** (2 (h - n_head_log2) + 1)`` from there; (1, 1, ...) without
    ALiBi (``max_bias <= 0``). Shared by every backend's SOFT_MAX and FLASH_ATTN_EXT so that they agree bit for bit.
    """
    n_head_log2 = 1 << math.floor(math.log2(max(n_head, 1)))
    if max_bias <= 0.0:
        return 1.0, 1.0, n_head_log2
    m0 = np.float32(2.0) ** (np.float32(-max_bias) / np.float32(n_head_log2))
    m1 = np.float32(2.0) ** (np.float32(-max_bias / 2.0) / np.float32(n_head_log2))
    return float(m0), float(m1), n_head_log2


# ---------------------------------------------------------------------------------------------- flash attention


def flash_attn_ext(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    scale: float,
    max_bias: float = 0.0,
    logit_softcap: float = 0.0,
) -> Tensor:
    """``ggml_flash_attn_ext``: softmax(softcap(q·kᵀ·scale) + mask) · v in one op.

    q ``[Dk, n_batch, n_head, ne3]``; k ``[Dk, n_kv, n_head_kv, ne3]``; v ``[Dv, n_kv, n_head_kv, ne3]``;
    mask ``[n_kv, >= n_batch, ...]`` f16, broadcast over heads and dim 3. The result is f32 and **permuted**:
    ``[Dv, n_head, n_batch, ne3]``. ggml's checks (k·q must be a valid mul_mat, dims 3 agree, mask f16 and
    contiguous) plus the ones that keep a kernel inside its operands (v has k's positions and divides the heads,
    the mask covers every (query, position) pair).
    """
    op = "FLASH_ATTN_EXT"
    check(k.ne[0] == q.ne[0], op, f"q and k head sizes differ: q.ne[0]={q.ne[0]}, k.ne[0]={k.ne[0]}", q, k)
    check(
        broadcasts(k, q),
        op,
        f"k's heads (ne[2:]={list(k.ne[2:])}) must broadcast over q's (ne[2:]={list(q.ne[2:])})",
        q,
        k,
    )
    check(q.ne[3] == k.ne[3] and q.ne[3] == v.ne[3], op, "q, k and v must agree in ne[3]", q, k, v)
    check(broadcasts(v, q, (2,)), op, f"n_head={q.ne[2]} must be a multiple of v's heads ne[2]={v.ne[2]}", q, v)
    check(v.ne[1] == k.ne[1], op, f"k has {k.ne[1]} positions (ne[1]), v has {v.ne[1]}", k, v)
    if mask is not None:
        check(mask.type == GGMLType.F16, op, f"mask must be f16, got {mask.type.traits.name}", mask)
        check(mask.is_contiguous, op, "mask must be contiguous", mask)
        check(mask.ne[0] >= k.ne[1], op, f"mask.ne[0]={mask.ne[0]} must cover n_kv={k.ne[1]}", mask, k)
        check(mask.ne[1] >= q.ne[1], op, f"mask has {mask.ne[1]} rows (ne[1]), q has {q.ne[1]} queries", mask, q)
        check(
            broadcasts(mask, q),
            op,
            f"mask (ne[2:]={list(mask.ne[2:])}) must broadcast over q's heads (ne[2:]={list(q.ne[2:])})",
            q,
            mask,
        )
    check(max_bias <= 0.0 or mask is not None, op, "ALiBi (max_bias > 0) needs a mask", q)
    result = new_result(op, q, GGMLType.F32, (v.ne[0], q.ne[2], q.ne[1], q.ne[3]))
    result.set_op_params_f32([scale, max_bias, logit_softcap])
    return finish(result, GGMLOp.FLASH_ATTN_EXT, [q, k, v, mask])


def flash_attn_ext_set_prec(t: Tensor, prec: Prec) -> None:
    """``ggml_flash_attn_ext_set_prec`` (op_params[3])."""
    check(t.op == GGMLOp.FLASH_ATTN_EXT, "FLASH_ATTN_EXT", "set_prec applies to FLASH_ATTN_EXT results", t)
    t.set_op_param_i32(3, int(prec))


def flash_attn_ext_add_sinks(t: Tensor, sinks: Tensor | None) -> Tensor:
    """``ggml_flash_attn_ext_add_sinks``: one f32 sink logit per head joins each row's denominator (src[4])."""
    return _add_sinks(t, sinks, GGMLOp.FLASH_ATTN_EXT, 4)


# ---------------------------------------------------------------------------------------------- masks


def diag_mask_inf(a: Tensor, n_past: int, inplace: bool = False) -> Tensor:
    """``ggml_diag_mask_inf``: -inf above the diagonal shifted by n_past (a[i, j] for i > n_past + j)."""
    check(n_past >= 0, "DIAG_MASK_INF", f"n_past must be >= 0, got {n_past}", a)
    result = same_or_dup("DIAG_MASK_INF", a, inplace)
    result.set_op_params_i32([n_past])
    return finish(result, GGMLOp.DIAG_MASK_INF, [a])


def diag_mask_zero(a: Tensor, n_past: int, inplace: bool = False) -> Tensor:
    """``ggml_diag_mask_zero``: 0 above the diagonal shifted by n_past."""
    check(n_past >= 0, "DIAG_MASK_ZERO", f"n_past must be >= 0, got {n_past}", a)
    result = same_or_dup("DIAG_MASK_ZERO", a, inplace)
    result.set_op_params_i32([n_past])
    return finish(result, GGMLOp.DIAG_MASK_ZERO, [a])
