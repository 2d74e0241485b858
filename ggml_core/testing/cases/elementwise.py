"""Cases for elementwise ops: ADD SUB MUL DIV ADD1 ACC, SQR SQRT LOG SIN COS CLAMP SCALE LEAKY_RELU, UNARY, GLU."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.ops import GluOp, UnaryOp
from ggml_core.testing._case import Built, Case, builder
from ggml_core.testing._inputs import indices, uniform
from ggml_core.testing.cases._util import FLOATS, leaf, permuted, strided_rows
from ggml_core.testing.reference import elementwise as ref

__all__ = ["cases"]

F32, F16 = GGMLType.F32, GGMLType.F16

# ------------------------------------------------------------------------------------------------ binary


def _binary(op: str, type: GGMLType, ne: Sequence[int], nr: Sequence[int], layout: str) -> Case:
    full = [n * r for n, r in zip(ne, nr, strict=True)]

    def build(ctx: Context) -> Built:
        a = permuted(ctx, type, full, (0, 2, 1, 3)) if layout == "perm0" else leaf(ctx, type, full, "a")
        b = permuted(ctx, type, ne, (0, 2, 1, 3)) if layout == "perm1" else leaf(ctx, type, ne, "b")
        out = builder(op.lower())(a, b)
        init = {}
        if op == "DIV":  # keep the quotients tame, as test-backend-ops does
            for t in (a.view_src or a, b.view_src or b):
                init[t] = uniform(0.9, 1.1)
        return Built(out, [a, b], init)

    return Case(
        op, {"type": type, "ne": list(ne), "nr": list(nr), "layout": layout}, build, lambda a, b: ref.binary(op, a, b)
    )


_BCAST = [
    ([1, 1, 8, 1], [1, 1, 1, 1]),
    ([1, 1, 1, 1], [32, 1, 1, 1]),
    ([10, 5, 4, 3], [1, 1, 1, 1]),
    ([10, 5, 4, 3], [2, 1, 1, 1]),
    ([10, 5, 4, 3], [1, 2, 1, 1]),
    ([10, 5, 4, 3], [1, 1, 2, 1]),
    ([10, 5, 4, 3], [1, 1, 1, 2]),
    ([10, 5, 4, 3], [2, 2, 2, 2]),
    ([128, 1, 1, 1], [1, 16, 4, 1]),
]


def _binary_cases() -> list[Case]:
    out = []
    for type in FLOATS:
        for op in ("ADD", "SUB", "MUL", "DIV"):
            for ne, nr in _BCAST:
                out.append(_binary(op, type, ne, nr, "cont"))
            out.append(_binary(op, type, [10, 5, 4, 3], [1, 1, 1, 1], "perm1"))
            out.append(_binary(op, type, [10, 5, 4, 3], [1, 2, 1, 1], "perm1"))
            out.append(_binary(op, type, [10, 5, 4, 3], [1, 1, 1, 1], "perm0"))
    return out


def _add1(type: GGMLType, ne: Sequence[int]) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, type, ne, "a")
        b = leaf(ctx, type, [1], "b")
        return Built(builder("add1")(a, b), [a, b])

    return Case("ADD1", {"type": type, "ne": list(ne)}, build, lambda a, b: ref.binary("ADD", a, b))


def _acc(ne_a: Sequence[int], ne_b: Sequence[int], rows_off: int) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne_a, "a")
        b = leaf(ctx, F32, ne_b, "b")
        out = builder("acc")(a, b, a.nb[1], a.nb[2], a.nb[3], rows_off * a.nb[1])
        return Built(out, [a, b])

    def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        nb1 = ne_a[0] * 4
        nb2 = nb1 * ne_a[1]
        nb3 = nb2 * ne_a[2]
        return ref.acc(a, b, nb1, nb2, nb3, rows_off * nb1, 4, add=True)

    return Case("ACC", {"type": F32, "ne_a": list(ne_a), "ne_b": list(ne_b), "offset_rows": rows_off}, build, reference)


# ------------------------------------------------------------------------------------------------ unary


#: input ranges where an op needs them (test-backend-ops keeps SQRT/LOG positive, spreads SIN/COS)
_RANGE: dict[str, tuple[float, float]] = {
    "SQRT": (0.0, 1.0),
    "LOG": (0.001, 1.0),
    "SIN": (-6.0, 6.0),
    "COS": (-6.0, 6.0),
    "FLOOR": (-10.0, 10.0),
    "CEIL": (-10.0, 10.0),
    "ROUND": (-10.0, 10.0),
    "TRUNC": (-10.0, 10.0),
    "SOFTPLUS": (-25.0, 25.0),
    "GELU": (-12.0, 12.0),
}


def _elementwise(op: str, type: GGMLType, ne: Sequence[int], layout: str, make: str, *args: float) -> Case:
    """A one-operand op: ``make`` is the builder (``unary`` takes the sub-op, others their scalar params)."""

    def build(ctx: Context) -> Built:
        a = strided_rows(ctx, type, ne, 3) if layout == "rows" else leaf(ctx, type, ne, "a")
        fn = builder(make)
        out = fn(a, UnaryOp[op]) if make == "unary" else fn(a, *args)
        lo, hi = _RANGE.get(op, (-1.0, 1.0))
        return Built(out, [a], {a.view_src or a: uniform(lo, hi)})

    p = [*args, 0.0, 0.0]
    if op == "CLAMP":
        reference = lambda a: ref.clamp(a, p[0], p[1])  # noqa: E731
    elif op == "SCALE":
        reference = lambda a: ref.scale(a, p[0], p[1])  # noqa: E731 - scale() alone is scale_bias(s, 0)
    elif op == "LEAKY_RELU":
        reference = lambda a: ref.leaky_relu(a, p[0])  # noqa: E731
    else:
        reference = ref.UNARY[op]
    params: dict[str, object] = {"type": type, "ne": list(ne), "layout": layout}
    if args:
        params["params"] = [float(x) for x in args]
    return Case(op, params, build, reference)


_UNARY_OPS = [u.name for u in UnaryOp if u.name != "XIELU"]


def _unary_cases() -> list[Case]:
    out = []
    for type in FLOATS:
        for op in _UNARY_OPS:
            out.append(_elementwise(op, type, [128, 2, 2, 2], "cont", "unary"))
            out.append(_elementwise(op, type, [5, 7, 11, 3], "cont", "unary"))
            out.append(_elementwise(op, type, [128, 2, 2, 2], "rows", "unary"))
        for op in ("SQR", "SQRT", "LOG", "SIN", "COS"):
            out.append(_elementwise(op, type, [10, 5, 4, 3], "cont", op.lower()))
            out.append(_elementwise(op, type, [10, 5, 4, 3], "rows", op.lower()))
        out.append(_elementwise("SCALE", type, [10, 10, 10, 10], "cont", "scale", 2.0))
        out.append(_elementwise("SCALE", type, [10, 10, 10, 10], "cont", "scale_bias", 2.0, 1.0))
        out.append(_elementwise("CLAMP", type, [10, 10, 10, 10], "cont", "clamp", -0.5, 0.5))
        out.append(_elementwise("LEAKY_RELU", type, [10, 5, 4, 3], "cont", "leaky_relu", 0.1))
    out.append(_elementwise("SCALE", F32, [100, 10, 10, 10], "rows", "scale_bias", 2.0, 1.0))
    return out


# ------------------------------------------------------------------------------------------------ GLU


def _glu(op: str, type: GGMLType, ne: Sequence[int], mode: str, swapped: bool = False) -> Case:
    """``mode``: ``fused`` (halves of a), ``fused_rows`` (fused, rows apart) or ``split`` (a and b)."""

    def build(ctx: Context) -> Built:
        wide = [2 * ne[0], *ne[1:]]
        if mode == "split":
            a, b = leaf(ctx, type, ne, "a"), leaf(ctx, type, ne, "b")
            return Built(builder("glu_split")(a, b, GluOp[op]), [a, b])
        a = strided_rows(ctx, type, wide, 4) if mode == "fused_rows" else leaf(ctx, type, wide, "a")
        return Built(builder("glu")(a, GluOp[op], swapped), [a, None])

    params = {"type": type, "ne": list(ne), "mode": mode, "swapped": swapped}
    return Case(op, params, build, lambda a, b: ref.glu(op, a, b, swapped))


def _glu_cases() -> list[Case]:
    out = []
    for type in FLOATS:
        for op in ("REGLU", "GEGLU", "SWIGLU", "GEGLU_ERF", "GEGLU_QUICK"):
            for swapped in (False, True):
                out.append(_glu(op, type, [64, 2, 2, 2], "fused", swapped))
                out.append(_glu(op, type, [5, 7, 3, 2], "fused", swapped))
            out.append(_glu(op, type, [64, 3, 2, 1], "fused_rows"))
            out.append(_glu(op, type, [128, 2, 2, 2], "split"))
            out.append(_glu(op, type, [5, 7, 3, 2], "split"))
    return out


def _add_id(n: int, n_used: int, n_tok: int, n_expert: int) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, [n, n_used, n_tok], "a")
        b = leaf(ctx, F32, [n, n_expert], "b")
        ids = leaf(ctx, GGMLType.I32, [n_used, n_tok], "ids")
        return Built(builder("add_id")(a, b, ids), [a, b, ids], {ids: indices(n_expert)})

    return Case(
        "ADD_ID", {"type": F32, "n": n, "n_used": n_used, "n_tokens": n_tok, "n_experts": n_expert}, build, ref.add_id
    )


def _swiglu_oai(ne: Sequence[int], mode: str, alpha: float, limit: float) -> Case:
    def build(ctx: Context) -> Built:
        if mode == "split":
            a, b = leaf(ctx, F32, ne, "a"), leaf(ctx, F32, ne, "b")
        else:
            a, b = leaf(ctx, F32, [2 * ne[0], *ne[1:]], "a"), None
        out = builder("swiglu_oai")(a, b, alpha, limit)
        init = {t: uniform(-8.0, 8.0) for t in (a, b) if t is not None}
        return Built(out, [a, b], init)

    params = {"type": F32, "ne": list(ne), "mode": mode, "alpha": alpha, "limit": limit}
    return Case("SWIGLU_OAI", params, build, lambda a, b: ref.swiglu_oai(a, b, alpha, limit, False))


def _xielu(ne: Sequence[int], alpha_n: float, alpha_p: float, beta: float, eps: float) -> Case:
    def build(ctx: Context) -> Built:
        a = leaf(ctx, F32, ne, "a")
        return Built(builder("xielu")(a, alpha_n, alpha_p, beta, eps), [a], {a: uniform(-4.0, 4.0)})

    params = {"type": F32, "ne": list(ne), "alpha_n": alpha_n, "alpha_p": alpha_p, "beta": beta, "eps": eps}
    return Case("XIELU", params, build, lambda a: ref.xielu(a, alpha_n, alpha_p, beta, eps))


def cases() -> list[Case]:
    """Every elementwise case."""
    out = _binary_cases()
    out += [_add1(t, [10, 5, 4, 3]) for t in FLOATS]
    out += [_acc([256, 17, 1, 1], [256, 16, 1, 1], 1), _acc([16, 8, 4, 2], [16, 3, 4, 2], 2)]
    out += _unary_cases()
    out += _glu_cases()
    out += [_add_id(32, 2, 5, 4), _add_id(7, 3, 1, 8)]
    for alpha, limit in ((0.5, 2.0), (1.702, 7.0)):
        out.append(_swiglu_oai([64, 2, 2, 2], "fused", alpha, limit))
        out.append(_swiglu_oai([64, 2, 2, 2], "split", alpha, limit))
    out += [_xielu([128, 2, 2, 2], 0.8, 0.8, 0.5, -1e-6), _xielu([5, 7, 11, 3], 0.3, 1.2, 0.1, -1e-3)]
    return out
