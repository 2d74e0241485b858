"""Attention building blocks: SOFT_MAX (ext), ROPE (ext, YaRN), FLASH_ATTN_EXT, DIAG_MASK_INF/ZERO."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import check, finish, new_result, same_or_dup
from ggml_core.ops._enum import GGMLOp, Prec

__all__ = [
    "ROPE_TYPE_MROPE",
    "ROPE_TYPE_NEOX",
    "ROPE_TYPE_NORMAL",
    "ROPE_TYPE_VISION",
    "diag_mask_inf",
    "diag_mask_zero",
    "flash_attn_ext",
    "flash_attn_ext_add_sinks",
    "flash_attn_ext_set_prec",
    "rope",
    "rope_ext",
    "soft_max",
    "soft_max_add_sinks",
    "soft_max_ext",
]

ROPE_TYPE_NORMAL = 0
ROPE_TYPE_NEOX = 2
ROPE_TYPE_MROPE = 8
ROPE_TYPE_VISION = 24

_FLOATS = (GGMLType.F32, GGMLType.F16)


# ---------------------------------------------------------------------------------------------- soft_max


def soft_max(a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_soft_max``: softmax over each row."""
    return soft_max_ext(a, None, 1.0, 0.0, inplace)


def soft_max_ext(
    a: Tensor, mask: Tensor | None, scale: float, max_bias: float = 0.0, inplace: bool = False
) -> Tensor:
    """``ggml_soft_max_ext``: softmax(a * scale + mask [* ALiBi slope]) over each row.

    ``mask`` (f32 or f16, contiguous) has ``ne[0] == a.ne[0]``, at least a's rows, and broadcasts over dims 2, 3.
    ``max_bias > 0`` enables ALiBi (head index = dim 2) and needs a mask.
    """
    op = "SOFT_MAX"
    check(a.is_contiguous, op, "input must be contiguous", a)
    check(a.type in _FLOATS, op, f"input must be f32 or f16, got {a.type.traits.name}", a)
    if mask is not None:
        check(mask.type in _FLOATS, op, f"mask must be f32 or f16, got {mask.type.traits.name}", mask)
        check(mask.is_contiguous, op, "mask must be contiguous", mask)
        check(mask.ne[0] == a.ne[0], op, f"mask.ne[0]={mask.ne[0]} must equal a.ne[0]={a.ne[0]}", a, mask)
        check(mask.ne[1] >= a.ne[1], op, f"mask has {mask.ne[1]} rows, a has {a.ne[1]}", a, mask)
        check(
            a.ne[2] % mask.ne[2] == 0 and a.ne[3] % mask.ne[3] == 0,
            op,
            "mask must broadcast over a's dims 2 and 3",
            a,
            mask,
        )
    check(max_bias == 0.0 or mask is not None, op, "ALiBi (max_bias > 0) needs a mask", a)
    result = same_or_dup(op, a, inplace)
    result.set_op_params_f32([scale, max_bias])
    return finish(result, GGMLOp.SOFT_MAX, [a, mask])


def soft_max_add_sinks(t: Tensor, sinks: Tensor | None) -> Tensor:
    """``ggml_soft_max_add_sinks``: one f32 sink logit per head (dim 2) joins each row's denominator."""
    if sinks is None:
        t.src[2] = None
        return t
    op = "SOFT_MAX"
    check(t.op == GGMLOp.SOFT_MAX, op, "sinks can only be added to a SOFT_MAX result", t)
    a = t.src[0]
    assert a is not None
    check(t.src[2] is None, op, "this SOFT_MAX already has sinks", t)
    check(sinks.type == GGMLType.F32, op, f"sinks must be f32, got {sinks.type.traits.name}", sinks)
    check(sinks.ne[0] == a.ne[2], op, f"need one sink per head: {a.ne[2]}, got {sinks.ne[0]}", a, sinks)
    t.src[2] = sinks
    return t


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
    """
    op = "ROPE"
    check(mode & 1 == 0, op, "mode & 1 is no longer supported by ggml", a)
    check(mode in (ROPE_TYPE_NORMAL, ROPE_TYPE_NEOX), op, f"mode {mode} (m-rope/vision) is not supported", a)
    check(a.type in _FLOATS, op, f"input must be f32 or f16, got {a.type.traits.name}", a)
    check(pos.type == GGMLType.I32, op, f"positions must be i32, got {pos.type.traits.name}", pos)
    check(pos.ne[1] == 1 and pos.ne[2] == 1 and pos.ne[3] == 1, op, "positions must be a vector", pos)
    check(a.ne[2] == pos.ne[0], op, f"a has {a.ne[2]} tokens (ne[2]) but {pos.ne[0]} positions were given", a, pos)
    check(0 < n_dims <= a.ne[0] and n_dims % 2 == 0, op, f"n_dims={n_dims} must be even and in 1..{a.ne[0]}", a)
    if freq_factors is not None:
        check(freq_factors.type == GGMLType.F32, op, "freq_factors must be f32", freq_factors)
        check(freq_factors.ne[0] >= n_dims // 2, op, f"freq_factors needs >= {n_dims // 2} values", freq_factors)
    result = same_or_dup(op, a, inplace)
    result.set_op_params_i32([0, n_dims, mode, 0, n_ctx_orig])
    result.set_op_params_f32([freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow], start=5)
    return finish(result, GGMLOp.ROPE, [a, pos, freq_factors])


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

    q ``[Dk, n_batch, n_head, ne3]`` (f32); k ``[Dk, n_kv, n_head_kv, ne3]``; v ``[Dv, n_kv, n_head_kv, ne3]``
    (k and v f32 or f16, not transposed); mask ``[n_kv, >= n_batch, ...]`` f16. The result is **permuted**:
    ``[Dv, n_head, n_batch, ne3]`` (f32).
    """
    op = "FLASH_ATTN_EXT"
    check(q.type == GGMLType.F32, op, f"q must be f32, got {q.type.traits.name}", q)
    check(k.type in _FLOATS and v.type in _FLOATS, op, "k and v must be f32 or f16", k, v)
    check(k.ne[0] == q.ne[0], op, f"q and k head sizes differ: {q.ne[0]} vs {k.ne[0]}", q, k)
    check(q.ne[2] % k.ne[2] == 0, op, f"n_head={q.ne[2]} must be a multiple of n_head_kv={k.ne[2]}", q, k)
    check(q.ne[2] % v.ne[2] == 0, op, f"n_head={q.ne[2]} must be a multiple of v's heads {v.ne[2]}", q, v)
    check(q.ne[3] == k.ne[3] == v.ne[3], op, "q, k and v must agree in ne[3]", q, k, v)
    check(v.ne[1] == k.ne[1], op, f"k has {k.ne[1]} positions, v has {v.ne[1]}", k, v)
    if mask is not None:
        check(mask.type == GGMLType.F16, op, f"mask must be f16, got {mask.type.traits.name}", mask)
        check(mask.is_contiguous, op, "mask must be contiguous", mask)
        check(mask.ne[0] == k.ne[1], op, f"mask.ne[0]={mask.ne[0]} must equal n_kv={k.ne[1]}", mask, k)
        check(mask.ne[1] >= q.ne[1], op, f"mask has {mask.ne[1]} rows, q has {q.ne[1]} queries", mask, q)
        check(q.ne[2] % mask.ne[2] == 0 and q.ne[3] % mask.ne[3] == 0, op, "mask must broadcast over heads", q, mask)
    check(max_bias == 0.0 or mask is not None, op, "ALiBi (max_bias > 0) needs a mask", q)
    result = new_result(op, q, GGMLType.F32, (v.ne[0], q.ne[2], q.ne[1], q.ne[3]))
    result.set_op_params_f32([scale, max_bias, logit_softcap])
    return finish(result, GGMLOp.FLASH_ATTN_EXT, [q, k, v, mask])


def flash_attn_ext_set_prec(t: Tensor, prec: Prec) -> None:
    """``ggml_flash_attn_ext_set_prec`` (op_params[3])."""
    check(t.op == GGMLOp.FLASH_ATTN_EXT, "FLASH_ATTN_EXT", "set_prec applies to FLASH_ATTN_EXT results", t)
    t.set_op_param_i32(3, int(prec))


def flash_attn_ext_add_sinks(t: Tensor, sinks: Tensor | None) -> Tensor:
    """``ggml_flash_attn_ext_add_sinks``: one f32 sink logit per head (src[4])."""
    if sinks is None:
        t.src[4] = None
        return t
    op = "FLASH_ATTN_EXT"
    check(t.op == GGMLOp.FLASH_ATTN_EXT, op, "sinks can only be added to a FLASH_ATTN_EXT result", t)
    q = t.src[0]
    assert q is not None
    check(t.src[4] is None, op, "this FLASH_ATTN_EXT already has sinks", t)
    check(sinks.type == GGMLType.F32, op, "sinks must be f32", sinks)
    check(sinks.ne[0] == q.ne[2], op, f"need one sink per head: {q.ne[2]}, got {sinks.ne[0]}", q, sinks)
    t.src[4] = sinks
    return t


# ---------------------------------------------------------------------------------------------- masks


def diag_mask_inf(a: Tensor, n_past: int, inplace: bool = False) -> Tensor:
    """``ggml_diag_mask_inf``: -inf above the diagonal shifted by n_past (a[i, j] for i > n_past + j)."""
    result = same_or_dup("DIAG_MASK_INF", a, inplace)
    result.set_op_params_i32([n_past])
    return finish(result, GGMLOp.DIAG_MASK_INF, [a])


def diag_mask_zero(a: Tensor, n_past: int, inplace: bool = False) -> Tensor:
    """``ggml_diag_mask_zero``: 0 above the diagonal shifted by n_past."""
    result = same_or_dup("DIAG_MASK_ZERO", a, inplace)
    result.set_op_params_i32([n_past])
    return finish(result, GGMLOp.DIAG_MASK_ZERO, [a])
