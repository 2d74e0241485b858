"""Cases for matrix products: MUL_MAT (every weight type, batch 1 and >1, broadcast over dims 2/3, non-contiguous
operands), MUL_MAT_ID and OUT_PROD. Threshold 5e-4 (test-backend-ops)."""

from __future__ import annotations

from collections.abc import Sequence

from ggml_core._context import Context
from ggml_core._types import GGMLType
from ggml_core.testing._case import Built, Case, Check, builder
from ggml_core.testing._inputs import unique_indices
from ggml_core.testing.cases._util import WEIGHT_TYPES, leaf, permuted
from ggml_core.testing.reference import matmul as ref

__all__ = ["cases"]

T = GGMLType
MM_CHECK = Check.nmse(5e-4)


def _mul_mat(
    wtype: GGMLType,
    btype: GGMLType,
    m: int,
    n: int,
    k: int,
    bs: Sequence[int] = (1, 1),
    nr: Sequence[int] = (1, 1),
    layout: str = "cont",
    perf_only: bool = False,
) -> Case:
    """a [k, m, bs0, bs1] of ``wtype`` times b [k, n, bs0*nr0, bs1*nr1]; ``layout``: cont, perm_b, perm_ab."""
    ne_a = [k, m, bs[0], bs[1]]
    ne_b = [k, n, bs[0] * nr[0], bs[1] * nr[1]]

    def build(ctx: Context) -> Built:
        a = permuted(ctx, wtype, ne_a, (0, 2, 1, 3)) if layout == "perm_ab" else leaf(ctx, wtype, ne_a, "a")
        b = permuted(ctx, btype, ne_b, (0, 2, 1, 3)) if layout in ("perm_b", "perm_ab") else leaf(ctx, btype, ne_b, "b")
        return Built(builder("mul_mat")(a, b), [a, b])

    params = {"type_a": wtype, "type_b": btype, "m": m, "n": n, "k": k, "bs": list(bs), "nr": list(nr)}
    if layout != "cont":
        params["layout"] = layout
    flops = 2 * m * n * k * ne_b[2] * ne_b[3]
    return Case("MUL_MAT", params, build, lambda a, b: ref.mul_mat(a, b, wtype), MM_CHECK, flops, perf_only=perf_only)


def _mul_mat_id(wtype: GGMLType, n_expert: int, n_used: int, b_rows_one: bool, m: int, n_tok: int, k: int) -> Case:
    def build(ctx: Context) -> Built:
        as_ = leaf(ctx, wtype, [k, m, n_expert], "as")
        b = leaf(ctx, T.F32, [k, 1 if b_rows_one else n_used, n_tok], "b")
        ids = leaf(ctx, T.I32, [n_used, n_tok], "ids")
        return Built(builder("mul_mat_id")(as_, b, ids), [as_, b, ids], {ids: unique_indices(n_expert)})

    params = {"type_a": wtype, "n_mats": n_expert, "n_used": n_used, "b": b_rows_one, "m": m, "n": n_tok, "k": k}
    flops = 2 * m * k * n_used * n_tok
    return Case("MUL_MAT_ID", params, build, lambda a, b, i: ref.mul_mat_id(a, b, i, wtype), MM_CHECK, flops)


def _out_prod(atype: GGMLType, m: int, n: int, k: int, bs: Sequence[int], nr: Sequence[int], trans_b: bool) -> Case:
    ne_a = [m, k, bs[0], bs[1]]
    ne_b = [n, k, bs[0] * nr[0], bs[1] * nr[1]]

    def build(ctx: Context) -> Built:
        a = leaf(ctx, atype, ne_a, "a")
        if trans_b:
            b = builder("transpose")(leaf(ctx, T.F32, [k, n, ne_b[2], ne_b[3]], "b"))
        else:
            b = leaf(ctx, T.F32, ne_b, "b")
        return Built(builder("out_prod")(a, b), [a, b])

    params = {"type_a": atype, "m": m, "n": n, "k": k, "bs": list(bs), "nr": list(nr), "trans_b": trans_b}
    return Case("OUT_PROD", params, build, ref.out_prod, MM_CHECK, 2 * m * n * k * ne_b[2] * ne_b[3])


def cases() -> list[Case]:
    """Every matrix-product case (and a few perf-only large ones)."""
    out = []
    for w in WEIGHT_TYPES:
        for n in (1, 5):
            out.append(_mul_mat(w, T.F32, 16, n, 256))
    out.append(_mul_mat(T.F16, T.F16, 16, 5, 256))
    for w in (T.F32, T.F16, T.Q4_0, T.Q8_0, T.Q4_K):
        k = 256 if w == T.Q4_K else 64
        out.append(_mul_mat(w, T.F32, 16, 5, k, bs=(2, 1), nr=(3, 1)))
        out.append(_mul_mat(w, T.F32, 16, 5, k, bs=(2, 3), nr=(2, 2)))
        out.append(_mul_mat(w, T.F32, 16, 5, k, bs=(2, 3), nr=(1, 1), layout="perm_b"))
        out.append(_mul_mat(w, T.F32, 16, 1, k, bs=(3, 2), nr=(1, 1), layout="perm_ab"))
    out.append(_mul_mat(T.F32, T.F32, 33, 17, 96))  # sizes that are no multiple of anything
    for w in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q8_0, T.Q4_K, T.Q6_K):  # past the tile sizes of GPU kernels
        out.append(_mul_mat(w, T.F32, 67, 19, 512))
        out.append(_mul_mat(w, T.F32, 129, 1, 1024))
    for w in (T.F32, T.F16, T.Q4_0, T.Q8_0, T.Q4_K, T.MXFP4):  # MXFP4: gpt-oss's experts
        for b_one in (False, True):
            for n_tok in (1, 5):
                out.append(_mul_mat_id(w, 4, 2, b_one, 16, n_tok, 256))
    for a in (T.F32, T.F16, T.Q8_0):
        out.append(_out_prod(a, 32, 12, 8, (1, 1), (1, 1), False))
        out.append(_out_prod(a, 32, 12, 8, (2, 1), (2, 3), False))
    out.append(_out_prod(T.F32, 32, 12, 8, (1, 1), (1, 1), True))
    for w in (T.F32, T.F16, T.Q4_0, T.Q8_0):
        for n in (1, 32):
            out.append(_mul_mat(w, T.F32, 4096, n, 4096, perf_only=True))
    return out
