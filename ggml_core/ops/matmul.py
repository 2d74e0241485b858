"""Matrix products: MUL_MAT, MUL_MAT_ID (mixture-of-experts routing), OUT_PROD."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.ops._build import broadcasts, check, finish, new_result
from ggml_core.ops._enum import GGMLOp, Prec

__all__ = ["mul_mat", "mul_mat_id", "mul_mat_set_prec", "out_prod"]


def mul_mat(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_mul_mat``: for a ``[K, M]`` and b ``[K, N]`` the f32 result ``[M, N]`` (numpy: ``b @ a.T``).

    a broadcasts over b's dims 2 and 3 (b.ne[2] % a.ne[2] == 0, b.ne[3] % a.ne[3] == 0); a may be any type,
    quantized included; a must not be transposed.
    """
    check(
        a.ne[0] == b.ne[0],
        "MUL_MAT",
        f"inner dimensions differ: a.ne[0]={a.ne[0]} but b.ne[0]={b.ne[0]} (both operands hold rows of length K)",
        a,
        b,
    )
    check(
        broadcasts(a, b),
        "MUL_MAT",
        f"a (ne[2:]={list(a.ne[2:])}) must broadcast over b (ne[2:]={list(b.ne[2:])}); a zero-sized dim cannot",
        a,
        b,
    )
    check(not a.is_transposed, "MUL_MAT", "a must not be transposed (make it contiguous with cont)", a)
    result = new_result("MUL_MAT", a, GGMLType.F32, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]))
    return finish(result, GGMLOp.MUL_MAT, [a, b])


def mul_mat_set_prec(t: Tensor, prec: Prec) -> None:
    """``ggml_mul_mat_set_prec``: request f32 accumulation (op_params[0])."""
    check(t.op == GGMLOp.MUL_MAT, "MUL_MAT", "set_prec applies to MUL_MAT results only", t)
    t.set_op_param_i32(0, int(prec))


def mul_mat_id(as_: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """``ggml_mul_mat_id``: per token, multiply by the experts chosen in ``ids``.

    ``as_`` ``[K, M, n_expert]``, b ``[K, n_expert_used or 1, n_tokens]``, ids ``[n_expert_used, n_tokens]`` (i32);
    result ``[M, n_expert_used, n_tokens]`` with ``result[:, e, t] = as_[:, :, ids[e, t]] @ b[:, e % b.ne[1], t]``.
    """
    op = "MUL_MAT_ID"
    check(not as_.is_transposed, op, "expert matrices must not be transposed", as_)
    check(ids.type == GGMLType.I32, op, f"ids must be i32, got {ids.type.traits.name}", ids)
    check(as_.ne[3] == 1, op, "as must be 3-d (one matrix per expert)", as_)
    check(b.ne[3] == 1, op, "b must be 3-d", b)
    check(ids.ne[2] == 1 and ids.ne[3] == 1, op, "ids must be 2-d", ids)
    check(ids.ne[1] == b.ne[2], op, f"ids has {ids.ne[1]} token columns, b has {b.ne[2]} tokens", ids, b)
    check(as_.ne[0] == b.ne[0], op, f"inner dimensions differ: {as_.ne[0]} vs {b.ne[0]}", as_, b)
    check(b.ne[1] > 0 and ids.ne[0] % b.ne[1] == 0, op, f"b.ne[1]={b.ne[1]} must divide ids.ne[0]={ids.ne[0]}", ids, b)
    result = new_result(op, as_, GGMLType.F32, (as_.ne[1], ids.ne[0], b.ne[2], 1))
    return finish(result, GGMLOp.MUL_MAT_ID, [as_, b, ids])


def out_prod(a: Tensor, b: Tensor) -> Tensor:
    """``ggml_out_prod``: for a ``[M, K]`` and b ``[N, K]`` the f32 result ``[M, N]`` = Σ_k a[:, k] ⊗ b[:, k]."""
    check(a.ne[1] == b.ne[1], "OUT_PROD", f"a.ne[1]={a.ne[1]} must equal b.ne[1]={b.ne[1]}", a, b)
    check(broadcasts(a, b), "OUT_PROD", f"a (ne[2:]={list(a.ne[2:])}) must broadcast over b's dims 2, 3", a, b)
    check(not a.is_transposed, "OUT_PROD", "a must not be transposed", a)
    result = new_result("OUT_PROD", a, GGMLType.F32, (a.ne[0], b.ne[0], b.ne[2], b.ne[3]))
    return finish(result, GGMLOp.OUT_PROD, [a, b])
