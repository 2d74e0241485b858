"""Elementwise math: UNARY sub-ops, SQR/SQRT/LOG/SIN/COS, SCALE, CLAMP, LEAKY_RELU, with ggml's CPU numerics.

Where ggml differs from the textbook this follows ggml (see docs/ops-semantics.md):

- GELU on f32 reads an f16 lookup table at ``f16(x)`` for ``-10 < x < 10`` (0 below, x above); on f16 input
  the table is used for every value. GELU_QUICK always uses its table (no cut-off).
- GELU_ERF is ``0.5·x·(1 + erf(x/√2))`` in float32 steps, with an accurate vectorised erf.
- Comparisons follow C's ternaries: RELU/STEP/SGN/LEAKY_RELU map NaN to 0, CLAMP maps NaN to ``max``.
- EXPM1 is ``expf(x) - 1`` (as ggml computes it), ROUND rounds half away from zero.
- SCALE with a bias is one fused multiply-add (``fma(x, s, b)``), as ggml's SIMD loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor, UnaryOp
from ggml_cpu.ops._base import FLOAT_TYPES, KERNELS, Thunk, arr, f32, store

__all__ = ["UNARY_FUNCS", "erf", "gelu_f16_table", "gelu_quick_f16_table"]

_F32 = np.float32
_SQRT_2_OVER_PI: Final = _F32(0.79788456080286535587989211986876)
_SQRT_2_INV: Final = _F32(0.70710678118654752440084436210484)
_GELU_COEF_A: Final = _F32(0.044715)
_GELU_QUICK_COEF: Final = _F32(-1.702)


# ------------------------------------------------------------------------------------------------ erf


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in float64 (≈1e-14 absolute): Maclaurin series below 2.5, Laplace's continued fraction
    for erfc above. Vectorised, so it replaces ``np.vectorize(math.erf)``.
    """
    x = np.asarray(x, dtype=np.float64)
    ax = np.abs(x)
    out = np.empty_like(ax)
    small = ax < 2.5
    xs = ax[small]
    x2 = xs * xs
    term, total = xs.copy(), xs.copy()
    for n in range(1, 60):  # erf(x) = 2/√π · Σ (-1)^n x^(2n+1) / (n! (2n+1))
        term = term * (-x2) / n
        total += term / (2 * n + 1)
    out[small] = total * (2.0 / math.sqrt(math.pi))
    xl = ax[~small]
    with np.errstate(over="ignore", under="ignore"):
        frac = xl.copy()  # erfc(x) = exp(-x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        for k in range(80, 0, -1):
            frac = xl + (k / 2.0) / frac
        out[~small] = 1.0 - np.exp(-xl * xl) / (math.sqrt(math.pi) * frac)
    return np.copysign(out, x)


# ------------------------------------------------------------------------------------------------ GELU tables


def _f64(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """A transcendental evaluated in float64 and rounded once to float32, like glibc's ``tanhf``/``expf``/...
    (numpy's own float32 versions are a few ulp off, which shows after f16 rounding or cancellation).
    """
    return fn(np.asarray(x, dtype=np.float64)).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """``0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`` as ggml's compiled ``ggml_gelu_f32``: float32 steps,
    with ``1 + (0.044715·x)·x`` fused into one multiply-add (exact float64 product, one rounding).
    """
    ax = (_GELU_COEF_A * x).astype(np.float32)
    inner = (ax.astype(np.float64) * x + 1.0).astype(np.float32)
    return _F32(0.5) * x * (_F32(1.0) + _f64(np.tanh, _SQRT_2_OVER_PI * x * inner))


def _gelu_quick_exact(x: np.ndarray) -> np.ndarray:
    """``x·(1 / (1 + exp(-1.702·x)))`` in float32 steps (ggml's ``ggml_gelu_quick_f32``)."""
    return x * (_F32(1.0) / (_F32(1.0) + _f64(np.exp, _GELU_QUICK_COEF * x)))


def _f16_table(fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """For every f16 bit pattern h: ``f16(fn(f32(h)))`` as float32 (ggml fills its tables this way at init)."""
    with np.errstate(all="ignore"):
        xs = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        return fn(xs).astype(np.float16).astype(np.float32)


_TABLES: dict[str, np.ndarray] = {}


def gelu_f16_table() -> np.ndarray:
    """ggml's GELU table: 65536 float32 values indexed by the f16 bits of x."""
    if "gelu" not in _TABLES:
        _TABLES["gelu"] = _f16_table(_gelu_tanh)
    return _TABLES["gelu"]


def gelu_quick_f16_table() -> np.ndarray:
    """ggml's GELU_QUICK table: 65536 float32 values indexed by the f16 bits of x."""
    if "gelu_quick" not in _TABLES:
        _TABLES["gelu_quick"] = _f16_table(_gelu_quick_exact)
    return _TABLES["gelu_quick"]


def _lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[np.asarray(x, np.float32).astype(np.float16).view(np.uint16)]


#: from this many values GELU runs compiled (:data:`._unary_kernels.GELU_SPEC`, the same bits)
_GELU_COMPILED_MIN: Final = 4096


def gelu(x: np.ndarray) -> np.ndarray:
    """ggml CPU GELU on float32: 0 for x ≤ -10, x for x ≥ 10, the f16 table at f16(x) otherwise."""
    x = np.asarray(x, np.float32)
    if x.size >= _GELU_COMPILED_MIN:
        from ggml_cpu.jit import _jit

        if _jit.enabled():
            from ggml_cpu.ops._unary_kernels import GELU_SPEC

            fn = _jit.get(GELU_SPEC)
            if fn is not None:
                out = np.empty(x.shape, np.float32)
                fn(np.ascontiguousarray(x).reshape(-1), gelu_f16_table(), out.reshape(-1))
                return out
    y = _lookup(x, gelu_f16_table())
    return np.where(x <= -10.0, _F32(0.0), np.where(x >= 10.0, x, y)).astype(np.float32)


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """ggml CPU GELU_QUICK: the f16 table at f16(x) for every x."""
    return _lookup(x, gelu_quick_f16_table())


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """``0.5·x·(1 + erf(x·(1/√2)))`` with float32 intermediate roundings, as ggml's ``erff`` version."""
    z = (x * _SQRT_2_INV).astype(np.float32)
    return (_F32(0.5) * x * (_F32(1.0) + erf(z).astype(np.float32))).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(-x))``."""
    return x / (_F32(1.0) + _f64(np.exp, -x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return _F32(1.0) / (_F32(1.0) + _f64(np.exp, -x))


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.fmin(_F32(1.0), np.fmax(_F32(0.0), (x + _F32(3.0)) / _F32(6.0)))  # fminf/fmaxf skip NaN


def _round_half_away(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    return np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t).astype(np.float32)  # x - trunc(x) is exact


def _relu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, _F32(0.0))


#: float32 → float32 implementations of ggml's UNARY sub-ops, with ggml's CPU numerics
UNARY_FUNCS: dict[UnaryOp, Callable[[np.ndarray], np.ndarray]] = {
    UnaryOp.ABS: np.abs,
    UnaryOp.SGN: lambda x: np.where(x > 0, _F32(1.0), np.where(x < 0, _F32(-1.0), _F32(0.0))),
    UnaryOp.NEG: np.negative,
    UnaryOp.STEP: lambda x: np.where(x > 0, _F32(1.0), _F32(0.0)),
    UnaryOp.TANH: lambda x: _f64(np.tanh, x),
    UnaryOp.ELU: lambda x: np.where(x > 0, x, _f64(np.expm1, x)),
    UnaryOp.RELU: _relu,
    UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.GELU: gelu,
    UnaryOp.GELU_QUICK: gelu_quick,
    UnaryOp.GELU_ERF: gelu_erf,
    UnaryOp.SILU: silu,
    UnaryOp.HARDSWISH: lambda x: x * _hardsigmoid(x),
    UnaryOp.HARDSIGMOID: _hardsigmoid,
    UnaryOp.EXP: lambda x: _f64(np.exp, x),
    UnaryOp.EXPM1: lambda x: _f64(np.exp, x) - _F32(1.0),
    UnaryOp.SOFTPLUS: lambda x: np.where(x > 20.0, x, _f64(np.log, _F32(1.0) + _f64(np.exp, np.minimum(x, 20.0)))),
    UnaryOp.FLOOR: np.floor,
    UnaryOp.CEIL: np.ceil,
    UnaryOp.ROUND: _round_half_away,
    UnaryOp.TRUNC: np.trunc,
}

#: sub-ops that read ggml's f16 table directly when the input is f16
_F16_TABLES: dict[UnaryOp, Callable[[], np.ndarray]] = {
    UnaryOp.GELU: gelu_f16_table,
    UnaryOp.GELU_QUICK: gelu_quick_f16_table,
}


def _float_in_out(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _map(node: Tensor, fn: Callable[[np.ndarray], np.ndarray]) -> Thunk:
    """A thunk applying a float32 → float32 function from src0 to node (converting both ends)."""
    a = node.src[0]
    assert a is not None

    def run() -> None:
        with np.errstate(all="ignore"):
            store(node, fn(f32(a)))

    return run


def _xielu(node: Tensor) -> Callable[[np.ndarray], np.ndarray]:
    alpha_n, alpha_p, beta, eps = (_F32(node.op_param_f32(i)) for i in range(1, 5))

    def fn(x: np.ndarray) -> np.ndarray:
        neg = (_f64(np.expm1, np.minimum(x, eps)) - x) * alpha_n + beta * x
        return np.where(x > 0, alpha_p * x * x + beta * x, neg).astype(np.float32)

    return fn


def _unary_ok(node: Tensor) -> bool:
    op = UnaryOp(node.op_param_i32(0))
    return _float_in_out(node) and (op in UNARY_FUNCS or op == UnaryOp.XIELU)


@KERNELS.kernel(GGMLOp.UNARY, supports=_unary_ok)
def _bind_unary(node: Tensor) -> Thunk:
    op = UnaryOp(node.op_param_i32(0))
    a = node.src[0]
    assert a is not None
    if op in _F16_TABLES and a.type == GGMLType.F16:
        table = _F16_TABLES[op]()

        def run_table() -> None:
            store(node, table[arr(a).view(np.uint16)])

        return run_table
    if op == UnaryOp.SILU:
        fast = _bind_silu(node, a)
        if fast is not None:
            return fast
    return _map(node, _xielu(node) if op == UnaryOp.XIELU else UNARY_FUNCS[op])


def _bind_silu(node: Tensor, a: Tensor) -> Thunk | None:
    """SILU of contiguous f32 as one call into :data:`._unary_kernels.SILU_SPEC` (the numpy path's bits up
    to ties of ``exp``), or None when compiled kernels are off or the operands are not contiguous f32. The numpy
    path evaluates ``exp`` in float64 and divides in a few array passes: 3.0 ms of granitehybrid's 128-token prompt
    against 0.5 ms compiled (one thread)."""
    if a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    from ggml_cpu.jit import _jit

    if not _jit.enabled():
        return None
    try:
        from ggml_cpu.ops import _unary_kernels
    except Exception as exc:  # noqa: BLE001 - building the row kernels' intrinsics may fail on an odd target
        _jit.note_failure("compiled SILU", exc)
        return None
    x, out = arr(a), arr(node)
    if not (x.flags.c_contiguous and out.flags.c_contiguous and x.flags.aligned and out.flags.aligned):
        return None
    xv, ov = x.reshape(-1), out.reshape(-1)
    if xv.ctypes.data == ov.ctypes.data:  # in place (the allocator reuses a dying input's memory)
        inplace = _jit.get(_unary_kernels.SILU_INPLACE_SPEC)
        return None if inplace is None else lambda: inplace(xv)
    fn = _jit.get(_unary_kernels.SILU_SPEC)
    if fn is None or np.may_share_memory(xv, ov):  # a partial overlap: numpy's copy semantics
        return None
    return lambda: fn(xv, ov)


# ------------------------------------------------------------------------------------------------ simple math ops


_MATH: dict[GGMLOp, Callable[[np.ndarray], np.ndarray]] = {
    GGMLOp.SQR: np.square,
    GGMLOp.SQRT: np.sqrt,
    GGMLOp.LOG: lambda x: _f64(np.log, x),
    GGMLOp.SIN: lambda x: _f64(np.sin, x),
    GGMLOp.COS: lambda x: _f64(np.cos, x),
}


@KERNELS.kernel(*_MATH, supports=_float_in_out)
def _bind_math(node: Tensor) -> Thunk:
    return _map(node, _MATH[node.op])


@KERNELS.kernel(GGMLOp.SCALE, supports=_float_in_out)
def _bind_scale(node: Tensor) -> Thunk:
    s, b = node.op_param_f32(0), node.op_param_f32(1)
    a = node.src[0]
    assert a is not None
    if b == 0.0 and a.type == node.type == GGMLType.F32:

        def run() -> None:  # one pass, straight into the output (Gemma scales every layer's queries)
            with np.errstate(all="ignore"):
                np.multiply(arr(a), _F32(s), out=arr(node))

        return run
    if b == 0.0:
        return _map(node, lambda x: x * _F32(s))
    # one fused multiply-add: the float64 product of two float32 is exact, one rounding to float32 after the sum
    return _map(node, lambda x: (x.astype(np.float64) * s + b).astype(np.float32))


@KERNELS.kernel(GGMLOp.CLAMP, supports=_float_in_out)
def _bind_clamp(node: Tensor) -> Thunk:
    lo, hi = _F32(node.op_param_f32(0)), _F32(node.op_param_f32(1))

    def clamp(x: np.ndarray) -> np.ndarray:  # MAX(MIN(x, hi), lo) with C's ternaries
        t = np.where(x < hi, x, hi)
        return np.where(t > lo, t, lo)

    return _map(node, clamp)


@KERNELS.kernel(GGMLOp.LEAKY_RELU, supports=_float_in_out)
def _bind_leaky_relu(node: Tensor) -> Thunk:
    slope = _F32(node.op_param_f32(0))
    return _map(node, lambda x: np.where(x > 0, x, _F32(0.0)) + slope * np.where(x < 0, x, _F32(0.0)))
