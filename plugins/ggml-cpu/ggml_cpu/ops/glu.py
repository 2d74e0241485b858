"""GLU kernels: REGLU, GEGLU, SWIGLU, SWIGLU_OAI, GEGLU_ERF, GEGLU_QUICK (fused, swapped and split forms).

Fused: each row of src0 holds ``[x | g]`` (``[g | x]`` when swapped) and the result has half its width.
Split: ``act(src0) · src1`` for two tensors of one shape. GEGLU and GEGLU_QUICK use ggml's f16 GELU tables (see
:mod:`ggml_cpu.ops.unary`); on f16 inputs the tables are read for every value, without GEGLU's ±10 cut-off.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor
from ggml_cpu.ops._base import KERNELS, Thunk, f32, store
from ggml_cpu.ops._compiled import (
    flat,
    kernel,
    params,
    rows_of,
    split_rows,
)
from ggml_cpu.ops.unary import gelu, gelu_erf, gelu_f16_table, gelu_quick, gelu_quick_f16_table, silu

__all__: list[str] = []

_F32 = np.float32

#: activation applied to x (float32 in, float32 out); the gate multiplies afterwards
_ACT: dict[GluOp, Callable[[np.ndarray], np.ndarray]] = {
    GluOp.REGLU: lambda x: np.where(x > 0, x, _F32(0.0)),
    GluOp.GEGLU: gelu,
    GluOp.SWIGLU: silu,
    GluOp.GEGLU_ERF: gelu_erf,
    GluOp.GEGLU_QUICK: gelu_quick,
}

_F16_TABLES: dict[GluOp, Callable[[], np.ndarray]] = {
    GluOp.GEGLU: gelu_f16_table,
    GluOp.GEGLU_QUICK: gelu_quick_f16_table,
}


def _glu_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None
    op = GluOp(node.op_param_i32(0))
    types_ok = a.type in (GGMLType.F32, GGMLType.F16) and (b is None or b.type == a.type) and node.type == a.type
    if op == GluOp.SWIGLU_OAI:
        return types_ok and a.type == GGMLType.F32
    return types_ok and op in _ACT


@KERNELS.kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(node: Tensor) -> Thunk:
    op = GluOp(node.op_param_i32(0))
    swapped = bool(node.op_param_i32(1))
    a, b = node.src[0], node.src[1]
    assert a is not None
    n = node.ne[0]
    fast = bind_glu(node)
    if fast is not None:
        return fast
    if op == GluOp.SWIGLU_OAI:
        alpha, limit = _F32(node.op_param_f32(2)), _F32(node.op_param_f32(3))

        def act_gate(x: np.ndarray, g: np.ndarray) -> np.ndarray:
            x = np.minimum(x, limit)
            g = np.clip(g, -limit, limit)
            e = np.exp((alpha * -x).astype(np.float64)).astype(np.float32)
            return x / (_F32(1.0) + e) * (g + _F32(1.0))

    elif op in _F16_TABLES and a.type == GGMLType.F16:
        table = _F16_TABLES[op]()

        def act_gate(x: np.ndarray, g: np.ndarray) -> np.ndarray:  # x holds f16 values exactly
            return table[x.astype(np.float16).view(np.uint16)] * g

    else:
        act = _ACT[op]

        def act_gate(x: np.ndarray, g: np.ndarray) -> np.ndarray:
            return act(x) * g

    def run() -> None:
        av = f32(a)
        if b is None:
            x, g = av[..., :n], av[..., n : 2 * n]
            if swapped:
                x, g = g, x
        else:
            x, g = av, f32(b)
        with np.errstate(all="ignore"):
            store(node, act_gate(x, g))

    return run


# ------------------------------------------------------------------------------------- the compiled path


def bind_glu(node: Tensor) -> Thunk | None:
    """SWIGLU or GEGLU of f32 rows, split (``src1`` the gate) or fused (``[x | g]`` rows, swapped or not). GEGLU
    (Gemma's feed-forward) runs on the calling thread: ~13 µs a decode step's 2,048 values, where the numpy path's
    dozen array operations took ~65 µs (Gemma 3 270M, one thread: 0.23 against 1.16 ms a token)."""
    a, b = node.src[0], node.src[1]
    op = GluOp(node.op_param_i32(0))
    if a is None or op not in (GluOp.SWIGLU, GluOp.GEGLU):
        return None
    fn = kernel("GLU_SPEC" if op == GluOp.SWIGLU else "GEGLU_SPEC", module="_glu_kernels")
    if fn is None:
        return None
    if a.type != GGMLType.F32 or node.type != GGMLType.F32 or (b is not None and b.type != GGMLType.F32):
        return None
    x, out = flat(a), flat(node)
    g = flat(b) if b is not None else x
    if x is None or out is None or g is None:
        return None
    n = node.ne[0]
    x_off, g_off = 0, 0
    if b is None:
        x_off, g_off = (n, 0) if node.op_param_i32(1) else (0, n)
    p = params(*node.ne, *x[1][1:], *out[1][1:], *g[1][1:], x_off, g_off)
    xv, gv, ov = x[0], g[0], out[0]
    if op == GluOp.GEGLU:
        from ggml_cpu.ops.unary import gelu_f16_table

        table = gelu_f16_table()
        return lambda: fn(xv, gv, ov, p, table)

    def serial() -> None:
        fn(xv, gv, ov, p)

    split = split_rows("GLU", (xv, gv, ov), p, (), rows_of(p), node.nelements, serial)
    return serial if split is serial else lambda: split()  # a closure: profilers label it
