"""Cases for ops that rearrange or create data: REPEAT CONCAT PAD ARANGE FILL SET DIAG_MASK_INF DIAG_MASK_ZERO."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.ops import TriType
from ggml_core.testing._case import Built, Case, Check, builder
from ggml_core.testing._inputs import uniform
from ggml_core.testing.cases._util import leaf, permuted
from ggml_core.testing.reference import elementwise as ew
from ggml_core.testing.reference import movement as ref

__all__ = ["cases"]

T = GGMLType


def _repeat(t: GGMLType, ne: Sequence[int], nr: Sequence[int]) -> Case:
    full = [n * r for n, r in zip(ne, nr, strict=True)]

    def build(ctx: Context) -> Built:
        a = leaf(ctx, t, ne, "a")
        shape = leaf(ctx, t, full, "shape")
        return Built(builder("repeat")(a, shape), [a])

    np_full = (full[3], full[2], full[1], full[0])
    return Case(
        "REPEAT", {"type": t, "ne": list(ne), "nr": list(nr)}, build, lambda a: ref.repeat(a, np_full), Check.exact()
    )


def _concat(t: GGMLType, ne_a: Sequence[int], ne_b1: int, dim: int, view: bool) -> Case:
    ne_b = list(ne_a)
    ne_b[dim] = ne_b1

    def build(ctx: Context) -> Built:
        a = leaf(ctx, t, ne_a, "a")
        b = permuted(ctx, t, ne_b, (0, 2, 1, 3)) if view else leaf(ctx, t, ne_b, "b")
        return Built(builder("concat")(a, b, dim), [a, b])

    params = {"type": t, "ne_a": list(ne_a), "ne_b_d": ne_b1, "dim": dim, "v": view}
    return Case("CONCAT", params, build, lambda a, b: ref.concat(a, b, dim), Check.exact())


def _pad(ne: Sequence[int], p: tuple[int, int, int, int]) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        return Built(builder("pad")(a, *p), [a])

    return Case("PAD", {"type": T.F32, "ne": list(ne), "pad": list(p)}, build, lambda a: ref.pad(a, p), Check.exact())


def _arange(start: float, stop: float, step: float) -> Case:
    def build(ctx: Context) -> Built:
        return Built(builder("arange")(ctx, start, stop, step), [])

    return Case(
        "ARANGE",
        {"type": T.F32, "start": start, "stop": stop, "step": step},
        build,
        lambda: ref.arange(start, stop, step),
    )


def _fill(ne: Sequence[int], c: float) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        return Built(builder("fill")(a, c), [a])

    return Case("FILL", {"type": T.F32, "ne": list(ne), "c": c}, build, lambda a: ref.fill(a, c), Check.exact())


def _set(t: GGMLType, ne: Sequence[int], dim: int) -> Case:
    """SET of b (a's shape with half of dimension ``dim``) into a at an offset of one along ``dim``."""
    ne_b = list(ne)
    ne_b[dim] = max(1, ne[dim] // 2)
    esize = t.type_size
    nb = [esize, esize * ne[0], esize * ne[0] * ne[1], esize * ne[0] * ne[1] * ne[2]]
    offset = nb[dim]

    def build(ctx: Context) -> Built:
        a = leaf(ctx, t, ne, "a")
        b = leaf(ctx, t, ne_b, "b")
        return Built(builder("set")(a, b, a.nb[1], a.nb[2], a.nb[3], offset), [a, b])

    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = ew.acc(a.astype(np.float64), b.astype(np.float64), nb[1], nb[2], nb[3], offset, esize, add=False)
        return out.astype(a.dtype)

    return Case("SET", {"type": t, "ne": list(ne), "dim": dim}, build, reference, Check.exact())


def _diag_mask(op: str, ne: Sequence[int], n_past: int) -> Case:
    value = float("-inf") if op == "DIAG_MASK_INF" else 0.0

    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        return Built(builder(op.lower())(a, n_past), [a])

    return Case(
        op,
        {"type": T.F32, "ne": list(ne), "n_past": n_past},
        build,
        lambda a: ref.diag_mask(a, n_past, value),
        Check.exact(),
    )


def _view(op: str, t: GGMLType, ne: Sequence[int]) -> Case:
    """NONE (a leaf read back), VIEW, RESHAPE, PERMUTE, TRANSPOSE: no kernel runs; the result is read through the
    view from the device's memory."""

    def build(ctx: Context) -> Built:
        a = leaf(ctx, t, ne, "a")
        if op == "NONE":
            return Built(a, [a])
        if op == "VIEW":  # rows 1.. of a, every other row
            out = builder("view_3d")(a, ne[0] // 2, ne[1] // 2, ne[2], 2 * a.nb[1], a.nb[2], a.nb[1] + t.type_size)
        elif op == "RESHAPE":
            out = builder("reshape_2d")(a, ne[0] * ne[1], ne[2])
        elif op == "PERMUTE":
            out = builder("permute")(a, 2, 0, 1, 3)
        else:
            out = builder("transpose")(a)
        return Built(out, [a])

    def reference(a: np.ndarray) -> np.ndarray:
        if op == "VIEW":
            return a[:, :, 1::2][:, :, : ne[1] // 2, 1 : 1 + ne[0] // 2]
        if op == "PERMUTE":  # source dims 0, 1, 2 go to result dims 2, 0, 1: out[j3, j2, j1, j0] = a[j3, j1, j0, j2]
            return a.transpose(0, 3, 1, 2)
        if op == "TRANSPOSE":
            return a.swapaxes(2, 3)
        return a

    return Case(op, {"type": t, "ne": list(ne)}, build, reference, Check.exact())


def _one(
    op: str,
    ne: Sequence[int],
    make: str,
    args: tuple[object, ...],
    reference: Callable[..., np.ndarray],
    check: Check | None = None,
    **params: object,
) -> Case:
    """A one-operand f32 op built as ``builder(make)(a, *args)``."""

    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, ne, "a")
        return Built(builder(make)(a, *args), [a])

    return Case(op, {"type": T.F32, "ne": list(ne), **params}, build, reference, check or Check.exact())


def _repeat_back(ne: Sequence[int], nr: Sequence[int]) -> Case:
    full = [n * r for n, r in zip(ne, nr, strict=True)]

    def build(ctx: Context) -> Built:
        a = leaf(ctx, T.F32, full, "a")
        shape = leaf(ctx, T.F32, ne, "shape")
        return Built(builder("repeat_back")(a, shape), [a])

    np_ne = (ne[3], ne[2], ne[1], ne[0])
    return Case(
        "REPEAT_BACK", {"type": T.F32, "ne": list(ne), "nr": list(nr)}, build, lambda a: ref.repeat_back(a, np_ne)
    )


def _timestep_embedding(n: int, dim: int, max_period: int) -> Case:
    def build(ctx: Context) -> Built:
        t = leaf(ctx, T.F32, [n], "timesteps")
        return Built(builder("timestep_embedding")(t, dim, max_period), [t], {t: uniform(0.0, 1000.0)})

    return Case(
        "TIMESTEP_EMBEDDING",
        {"type": T.F32, "n": n, "dim": dim, "max_period": max_period},
        build,
        lambda t: ref.timestep_embedding(t, dim, max_period),
    )


def _extra_cases() -> list[Case]:
    """Further layout ops that ggml-core builds: REPEAT_BACK, PAD (both sides), PAD_REFLECT_1D,
    ROLL, DIAG, TRI, TIMESTEP_EMBEDDING."""
    out = [_repeat_back([8, 6, 4, 2], nr) for nr in ([1, 1, 1, 1], [2, 1, 1, 1], [1, 2, 1, 1], [2, 2, 2, 2])]
    for p in ((1, 2, 0, 0, 0, 0, 0, 0), (0, 1, 2, 0, 1, 1, 0, 2)):
        out.append(_one("PAD", [10, 5, 4, 3], "pad_ext", p, lambda a, p=p: ref.pad_ext(a, p), lp_rp=list(p)))
    for p0, p1 in ((3, 2), (0, 4)):
        out.append(
            _one(
                "PAD_REFLECT_1D",
                [10, 3, 2, 1],
                "pad_reflect_1d",
                (p0, p1),
                lambda a, p0=p0, p1=p1: ref.pad_reflect_1d(a, p0, p1),
                p0=p0,
                p1=p1,
            )
        )
    for s in ((3, 0, 0, 0), (-2, 1, 2, -1)):
        out.append(_one("ROLL", [10, 5, 4, 3], "roll", s, lambda a, s=s: ref.roll(a, s), shifts=list(s)))
    out.append(_one("DIAG", [7, 1, 3, 2], "diag", (), ref.diag))
    for kind in TriType:
        out.append(_one("TRI", [9, 9, 2, 1], "tri", (kind,), lambda a, k=kind.name: ref.tri(a, k), kind=kind))
    out += [_timestep_embedding(5, 64, 10000), _timestep_embedding(3, 15, 100)]
    return out


def cases() -> list[Case]:
    """Every layout case."""
    out = [
        _view(op, t, [6, 4, 3, 1]) for op in ("NONE", "VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE") for t in (T.F32, T.F16)
    ]
    for ne3 in (1, 3):
        for nr in ([1, 1, 1, 1], [2, 1, 1, 1], [1, 2, 1, 1], [1, 1, 2, 1], [1, 1, 1, 2]):
            out.append(_repeat(T.F32, [10, 5, 4, ne3], nr))
    for t in (T.F16, T.BF16, T.I32, T.I16):
        out.append(_repeat(t, [10, 5, 4, 1], [2, 1, 1, 2]))
    for dim in range(4):
        for view in (False, True):
            out.append(_concat(T.F32, [11, 12, 13, 14], 7, dim, view))
        out.append(_concat(T.I32, [11, 12, 13, 14], 7, dim, False))
    out.append(_pad([10, 5, 4, 3], (1, 0, 0, 0)))
    out.append(_pad([10, 5, 4, 3], (3, 2, 1, 2)))
    out.append(_arange(0.0, 10.0, 1.0))
    out.append(_arange(-2.5, 7.0, 0.25))
    out.append(_fill([10, 5, 4, 3], 0.5))
    out.append(_fill([7, 1, 1, 1], -2.0))
    for t in (T.F32, T.I32):
        for dim in (1, 2, 3):
            out.append(_set(t, [6, 5, 4, 3], dim))
    for op in ("DIAG_MASK_INF", "DIAG_MASK_ZERO"):
        out.append(_diag_mask(op, [10, 10, 3, 2], 0))
        out.append(_diag_mask(op, [12, 5, 3, 1], 5))
    return out + _extra_cases()
