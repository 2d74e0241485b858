"""Cases for attention ops: SOFT_MAX (mask f32/f16, scale, ALiBi max_bias, sinks, broadcast masks), ROPE
(normal/neox, partial n_dims, YaRN, freq_factors, f32/f16, strided input), FLASH_ATTN_EXT (f32/f16 K/V, mask,
softcap, ALiBi, GQA, sinks)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.testing._case import Built, Case, Check, builder
from ggml_core.testing._inputs import Init, integers, uniform
from ggml_core.testing.cases._util import leaf, strided_rows
from ggml_core.testing.reference import attention as ref

__all__ = ["cases"]

T = GGMLType


def causal_mask(lo: float = -1.0, hi: float = 1.0) -> Init:
    """Uniform values with −inf above the (bottom-aligned) diagonal: every row keeps at least one finite entry."""

    def init(rng: np.random.Generator, t: Tensor) -> np.ndarray:
        cols, rows = t.ne[0], t.ne[1]
        v = rng.uniform(lo, hi, (t.ne[3], t.ne[2], rows, cols)).astype(np.float32)
        past = cols - rows
        v[..., np.arange(cols)[None, :] > past + np.arange(rows)[:, None]] = -np.inf
        return v

    return init


# ------------------------------------------------------------------------------------------------ SOFT_MAX


def _soft_max(
    ne: Sequence[int],
    mask: GGMLType | None,
    scale: float,
    max_bias: float = 0.0,
    sinks: bool = False,
    mask_ne23: Sequence[int] = (1, 1),
    causal: bool = False,
) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        m = leaf(ctx, mask, [ne[0], ne[1], *mask_ne23], "mask") if mask is not None else None
        out = builder("soft_max_ext")(a, m, scale, max_bias)
        s = None
        if sinks:
            s = leaf(ctx, T.F32, [ne[2]], "sinks")
            out = builder("soft_max_add_sinks")(out, s)
        init = {m: causal_mask()} if (m is not None and causal) else {}
        return Built(out, [a, m, s], init)

    params = {"type": T.F32, "ne": list(ne), "mask": mask, "sinks": sinks, "scale": scale, "max_bias": max_bias}
    if mask is not None and tuple(mask_ne23) != (1, 1):
        params["mask_ne23"] = list(mask_ne23)
    if causal:
        params["causal"] = True
    return Case("SOFT_MAX", params, build, lambda a, m, s: ref.soft_max(a, m, scale, max_bias, s), Check.nmse(1e-6))


def _soft_max_cases() -> list[Case]:
    out = []
    for ne in ([16, 4, 4, 1], [37, 5, 3, 2]):
        out.append(_soft_max(ne, None, 1.0))
        out.append(_soft_max(ne, None, 0.1, sinks=True))
        for mask in (T.F32, T.F16):
            out.append(_soft_max(ne, mask, 0.1))
            out.append(_soft_max(ne, mask, 0.1, max_bias=8.0))
            out.append(_soft_max(ne, mask, 0.5, sinks=True))
        out.append(_soft_max(ne, T.F16, 1.0, causal=True))
    out.append(_soft_max([16, 4, 6, 4], T.F32, 0.1, mask_ne23=(3, 2)))
    out.append(_soft_max([16, 4, 6, 4], T.F16, 0.1, max_bias=8.0, mask_ne23=(6, 4)))
    out.append(_soft_max([1024, 2, 3, 1], T.F32, 0.1, max_bias=4.0, sinks=True))
    out.append(_soft_max([4096, 5, 2, 1], T.F16, 0.125, causal=True))
    return out


# ------------------------------------------------------------------------------------------------ ROPE


def _rope(
    t: GGMLType,
    ne: Sequence[int],
    n_dims: int,
    mode: int,
    yarn: bool = False,
    freq_factors: bool = False,
    layout: str = "cont",
) -> Case:
    n_ctx_orig = 512
    freq_base = 10000.0
    freq_scale = 0.25 if yarn else 1.0
    ext_factor = 1.0 if yarn else 0.0
    attn_factor = 1.0
    beta_fast, beta_slow = 32.0, 1.0

    def build(ctx: Context) -> Built:
        a = strided_rows(ctx, t, ne, 8) if layout == "rows" else leaf(ctx, t, ne, "a")
        pos = leaf(ctx, T.I32, [ne[2]], "pos")
        ff = leaf(ctx, T.F32, [n_dims // 2], "freq_factors") if freq_factors else None
        out = builder("rope_ext")(
            a, pos, ff, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow
        )
        init: dict[Tensor, Init] = {pos: integers(0, 2000)}
        if ff is not None:
            init[ff] = uniform(0.8, 1.2)
        return Built(out, [a, pos, ff], init)

    def reference(a: np.ndarray, pos: np.ndarray, ff: np.ndarray | None) -> np.ndarray:
        return ref.rope(
            a, pos, ff, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow
        )

    params = {
        "type": t,
        "ne": list(ne),
        "n_dims": n_dims,
        "mode": mode,
        "fs": freq_scale,
        "ef": ext_factor,
        "ff": freq_factors,
        "v": layout == "rows",
    }
    return Case("ROPE", params, build, reference)


def _rope_cases() -> list[Case]:
    out = []
    for t in (T.F32, T.F16):
        for mode in (0, 2):
            for ne in ([64, 4, 5, 1], [32, 3, 7, 2]):
                out.append(_rope(t, ne, ne[0], mode))
                out.append(_rope(t, ne, ne[0] // 2, mode))
                out.append(_rope(t, ne, ne[0], mode, yarn=True))
            out.append(_rope(t, [64, 4, 5, 1], 64, mode, freq_factors=True))
            out.append(_rope(t, [64, 4, 5, 1], 48, mode, yarn=True, layout="rows"))
    return out


# ------------------------------------------------------------------------------------------------ FLASH_ATTN_EXT


def _flash(
    d: int,
    dv: int,
    n_kv: int,
    n_q: int,
    n_head: int,
    n_head_kv: int,
    kv: GGMLType,
    mask: bool,
    max_bias: float = 0.0,
    softcap: float = 0.0,
    sinks: bool = False,
    causal: bool = False,
    batch: int = 1,
) -> Case:
    scale = 1.0 / math.sqrt(d)

    def build(ctx: Context) -> Built:
        q = leaf(ctx, T.F32, [d, n_q, n_head, batch], "q")
        k = leaf(ctx, kv, [d, n_kv, n_head_kv, batch], "k")
        v = leaf(ctx, kv, [dv, n_kv, n_head_kv, batch], "v")
        m = leaf(ctx, T.F16, [n_kv, n_q, 1, 1], "mask") if mask else None
        out = builder("flash_attn_ext")(q, k, v, m, scale, max_bias, softcap)
        s = None
        if sinks:
            s = leaf(ctx, T.F32, [n_head], "sinks")
            out = builder("flash_attn_ext_add_sinks")(out, s)
        init = {m: causal_mask()} if (m is not None and causal) else {}
        return Built(out, [q, k, v, m, s], init)

    def reference(
        q: np.ndarray, k: np.ndarray, v: np.ndarray, m: np.ndarray | None, s: np.ndarray | None
    ) -> np.ndarray:
        return ref.flash_attn_ext(q, k, v, m, scale, max_bias, softcap, s, kv == T.F16)

    params = {
        "hsk": d,
        "hsv": dv,
        "nh": n_head,
        "nr": n_head // n_head_kv,
        "kv": n_kv,
        "nb": n_q,
        "b": batch,
        "mask": mask,
        "sinks": sinks,
        "max_bias": max_bias,
        "logit_softcap": softcap,
        "type_KV": kv,
    }
    if causal:
        params["causal"] = True
    flops = 2 * n_head * n_q * n_kv * (d + dv) * batch
    return Case("FLASH_ATTN_EXT", params, build, reference, Check.nmse(5e-4), flops)


def _flash_cases() -> list[Case]:
    out = []
    for kv in (T.F32, T.F16):
        for n_q in (1, 4):
            out.append(_flash(64, 64, 96, n_q, 4, 4, kv, mask=False))
            out.append(_flash(64, 64, 96, n_q, 4, 2, kv, mask=True))
        out.append(_flash(64, 64, 96, 4, 4, 4, kv, mask=True, max_bias=8.0))
        out.append(_flash(64, 64, 96, 4, 4, 4, kv, mask=True, softcap=50.0))
        out.append(_flash(64, 64, 96, 4, 4, 4, kv, mask=True, sinks=True))
        out.append(_flash(64, 64, 96, 5, 4, 1, kv, mask=True, causal=True))
        out.append(_flash(40, 24, 33, 3, 2, 2, kv, mask=True, batch=2))
        out.append(_flash(128, 128, 512, 7, 8, 2, kv, mask=True, causal=True))
    return out


def cases() -> list[Case]:
    """Every attention case."""
    return _soft_max_cases() + _rope_cases() + _flash_cases()
