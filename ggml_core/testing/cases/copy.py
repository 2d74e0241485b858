"""Cases for copies and row gathers/scatters: CPY (same type, float to float and to each quantized type, quantized
to f32, f32 ↔ i32; permuted source and destination, strided destination), DUP, CONT, GET_ROWS (every type), SET_ROWS
(i32/i64 indices, quantized rows)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.quants import can_quantize
from ggml_core.testing._case import Built, Case, CaseUnavailable, Check, builder
from ggml_core.testing._inputs import INT_TYPES, Init, indices, uniform, unique_indices, zero_bytes
from ggml_core.testing.cases._util import QUANTIZED, leaf, permuted
from ggml_core.testing.reference import movement as ref

__all__ = ["cases"]

T = GGMLType
_PLAIN = (T.F32, T.F16, T.BF16)


def _np_shape(ne: Sequence[int]) -> tuple[int, int, int, int]:
    n = [*ne, *[1] * (4 - len(ne))]
    return (n[3], n[2], n[1], n[0])


def _need_quantizer(t: GGMLType) -> None:
    if t.is_quantized and not can_quantize(t):
        raise CaseUnavailable(f"ggml_core.quants cannot quantize to {t.traits.name}, so there is no reference")


# ------------------------------------------------------------------------------------------------ CPY


def _cpy(
    src: GGMLType,
    dst: GGMLType,
    ne: Sequence[int],
    perm_src: Sequence[int] | None = None,
    perm_dst: Sequence[int] | None = None,
    dst_rows_apart: int = 0,
) -> Case:
    n = int(np.prod(ne))

    def build(ctx: Context) -> Built:
        a = permuted(ctx, src, ne, perm_src) if perm_src else leaf(ctx, src, ne, "src")
        if perm_dst:
            b = permuted(ctx, dst, ne, perm_dst)
        elif dst_rows_apart:
            wide = leaf(ctx, dst, [ne[0], ne[1] * dst_rows_apart, *ne[2:]], "dst")
            b = builder("view_4d")(wide, *ne, wide.nb[1] * dst_rows_apart, wide.nb[2], wide.nb[3], 0)
        else:
            b = leaf(ctx, dst, ne, "dst")
        init: dict[Tensor, Init] = {b.view_src or b: zero_bytes}  # overwritten: any type will do
        if src not in INT_TYPES and not src.is_quantized:
            init[a.view_src or a] = uniform(-150.0, 150.0)
        return Built(builder("cpy")(a, b), [a], init)

    params: dict[str, object] = {"type_src": src, "type_dst": dst, "ne": list(ne)}
    if perm_src:
        params["permute_src"] = list(perm_src)
    if perm_dst:
        params["permute_dst"] = list(perm_dst)
    if dst_rows_apart:
        params["dst_rows_apart"] = dst_rows_apart
    threshold = ref.cpy_quant_nmse(src, dst, n)
    check = Check.exact() if threshold == 0.0 else Check.nmse(threshold)

    def reference(a: np.ndarray) -> np.ndarray:
        _need_quantizer(dst)
        return ref.copy_into(a, _np_shape(ne))

    return Case("CPY", params, build, reference, check)


def _cpy_cases() -> list[Case]:
    out = []
    for t in (T.F32, T.F16, T.BF16, T.I32, T.Q4_0, T.Q8_0, T.Q4_K):
        k = t.block_size
        out.append(_cpy(t, t, [2 * k if k > 1 else 10, 2, 3, 4]))
        out.append(_cpy(t, t, [k if k > 1 else 10, 2, 3, 4], perm_src=(0, 2, 1, 3)))
        out.append(_cpy(t, t, [k if k > 1 else 10, 2, 3, 4], perm_src=(0, 3, 1, 2), perm_dst=(0, 2, 1, 3)))
    for s in _PLAIN:
        for d in (*_PLAIN, *QUANTIZED):
            if s == d:
                continue
            out.append(_cpy(s, d, [256, 3, 2, 1]))
            out.append(_cpy(s, d, [256, 2, 3, 2], perm_src=(0, 2, 1, 3)))
    for s in QUANTIZED:
        out.append(_cpy(s, T.F32, [256, 3, 2, 1]))
        out.append(_cpy(s, T.F32, [256, 2, 3, 2], perm_src=(0, 2, 1, 3)))
    for s in (T.F32, T.F16):
        for d in (T.F32, T.F16):
            out.append(_cpy(s, d, [256, 2, 3, 4], perm_src=(1, 0, 2, 3)))
    out.append(_cpy(T.F32, T.I32, [256, 2, 3, 4]))
    out.append(_cpy(T.I32, T.F32, [256, 2, 3, 4], perm_src=(1, 0, 2, 3)))
    out.append(_cpy(T.F32, T.F32, [128, 2, 3, 1], dst_rows_apart=2))
    out.append(_cpy(T.F16, T.F16, [128, 2, 3, 1], dst_rows_apart=2))
    return out


# ------------------------------------------------------------------------------------------------ DUP, CONT


def _dup_cont(op: str, t: GGMLType, ne: Sequence[int], perm: Sequence[int] | None) -> Case:
    def build(ctx: Context) -> Built:
        a = permuted(ctx, t, ne, perm) if perm else leaf(ctx, t, ne, "a")
        return Built(builder(op.lower())(a), [a])

    params: dict[str, object] = {"type": t, "ne": list(ne)}
    if perm:
        params["permute"] = list(perm)
    return Case(op, params, build, lambda a: np.asarray(a), Check.exact())


def _dup_cont_cases() -> list[Case]:
    out = []
    for t in (T.F32, T.F16, T.I32, T.I16):
        out.append(_dup_cont("DUP", t, [10, 10, 5, 1], None))
        out.append(_dup_cont("DUP", t, [10, 8, 3, 1], (0, 2, 1, 3)))
    out.append(_dup_cont("DUP", T.F32, [10, 10, 5, 1], (1, 0, 2, 3)))
    for t in (T.F32, T.F16, T.BF16, T.I32):
        for perm in ((2, 1, 0, 3), (1, 2, 0, 3), (0, 2, 1, 3)):
            out.append(_dup_cont("CONT", t, [10, 6, 4, 1], perm))
    out.append(_dup_cont("CONT", T.F32, [33, 5, 7, 2], (1, 0, 2, 3)))
    return out


# ------------------------------------------------------------------------------------------------ GET_ROWS


def _get_rows(t: GGMLType, ne0: int, n_rows: int, n_idx: int, batch: int, idx_view: bool) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, t, [ne0, n_rows, batch, 1], "a")
        if idx_view:  # indices with a row stride: every other column of a wider leaf
            wide = leaf(ctx, T.I32, [2 * n_idx, batch, 1], "rows")
            b = builder("view_2d")(wide, n_idx, batch, wide.nb[1], 0)
            init = {wide: indices(n_rows)}
        else:
            b = leaf(ctx, T.I32, [n_idx, batch, 1], "rows")
            init = {b: indices(n_rows)}
        return Built(builder("get_rows")(a, b), [a, b], init)

    params = {"type": t, "n": ne0, "m": n_rows, "r": n_idx, "b": batch, "v": idx_view}
    return Case("GET_ROWS", params, build, ref.get_rows, Check.exact() if t in INT_TYPES else Check.nmse())


def _get_rows_cases() -> list[Case]:
    out = [_get_rows(T.F32, 1, 8, 2, 1, False)]
    for t in (*_PLAIN, T.I32, *QUANTIZED):
        ne0 = max(256, t.block_size)
        out.append(_get_rows(t, ne0, 5, 4, 1, False))
        out.append(_get_rows(t, ne0, 5, 4, 3, True))
    return out


# ------------------------------------------------------------------------------------------------ SET_ROWS


def _set_rows(
    src: GGMLType, dst: GGMLType, idx: GGMLType, ne: Sequence[int], nr23: Sequence[int], r: int, view: bool
) -> Case:
    """dst [ne0, ne1, ne2*nr2, ne3*nr3]; ``r`` rows written per slice; indices [r, ne2, ne3] broadcast."""
    ne0, ne1, ne2, ne3 = ne
    full2, full3 = ne2 * nr23[0], ne3 * nr23[1]

    def build(ctx: Context) -> Built:
        a = leaf(ctx, dst, [ne0, ne1, full2, full3], "dst")
        if view:  # source rows apart: a view of a wider leaf
            wide = leaf(ctx, src, [ne0 + src.block_size * 2, r, full2, full3], "src")
            b = builder("view_4d")(wide, ne0, r, full2, full3, wide.nb[1], wide.nb[2], wide.nb[3], 0)
        else:
            b = leaf(ctx, src, [ne0, r, full2, full3], "src")
        c = leaf(ctx, idx, [r, ne2, ne3], "idx")
        return Built(builder("set_rows")(a, b, c), [a, b, c], {c: unique_indices(ne1)})

    params = {"type_src": src, "type_dst": dst, "type_idx": idx, "ne": list(ne), "nr23": list(nr23), "r": r, "v": view}
    n_written = ne0 * r * full2 * full3
    check = Check.nmse(ref.set_rows_quant_nmse(src, dst, n_written)) if dst.is_quantized else Check.nmse()

    def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        _need_quantizer(dst)
        return ref.set_rows(a, b, c, dst)

    return Case("SET_ROWS", params, build, reference, check, round_output=False)


def _set_rows_cases() -> list[Case]:
    out = [
        _set_rows(T.F32, T.F32, T.I64, [1, 8, 1, 3], [1, 1], 2, False),
        _set_rows(T.F32, T.F32, T.I32, [1, 8, 1, 3], [1, 1], 2, False),
        _set_rows(T.F16, T.F16, T.I32, [1, 8, 1, 3], [1, 1], 2, True),
    ]
    for src in (T.F32, T.F16):
        for dst in (*_PLAIN, *QUANTIZED):
            ne0 = max(256, dst.block_size)
            out.append(_set_rows(src, dst, T.I64, [ne0, 5, 1, 3], [1, 1], 1, False))
            if src == T.F32:
                out.append(_set_rows(src, dst, T.I32, [ne0, 11, 1, 2], [2, 3], 7, True))
    return out


def cases() -> list[Case]:
    """Every copy and row case."""
    return _cpy_cases() + _dup_cont_cases() + _get_rows_cases() + _set_rows_cases()
