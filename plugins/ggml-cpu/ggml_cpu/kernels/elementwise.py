"""Elementwise kernels: binary ops with ggml's repeat-broadcasting, SCALE, UNARY sub-ops, GLU."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, UnaryOp

from ggml_cpu.kernels._base import FLOAT_TYPES, Thunk, arr, f32, kernel, store

__all__ = ["UNARY_FUNCS", "gelu_f16_table", "repeat_pair"]


# ------------------------------------------------------------------------------------------------ broadcasting


def _split8(x: np.ndarray, rep: tuple[int, ...]) -> np.ndarray:
    """View a 4-d array of shape S as 8-d (S/b, b) per dimension, where ``rep`` gives b."""
    shape: list[int] = []
    strides: list[int] = []
    for n, s, b in zip(x.shape, x.strides, rep):
        shape += [n // b, b]
        strides += [s * b, s]
    return np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def repeat_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """8-d views of ``a`` and of ``b`` repeated over it (ggml's ``i % ne`` broadcasting) for numpy ufuncs."""
    bshape = b.shape
    a8 = _split8(a, bshape)
    b8 = np.lib.stride_tricks.as_strided(
        b,
        shape=[d for n in bshape for d in (1, n)],
        strides=[d for s in b.strides for d in (0, s)],
    )
    return a8, b8


_BINARY: dict[GGMLOp, Callable[..., np.ndarray]] = {
    GGMLOp.ADD: np.add,
    GGMLOp.SUB: np.subtract,
    GGMLOp.MUL: np.multiply,
    GGMLOp.DIV: np.divide,
}


def _binary_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type in FLOAT_TYPES and b.type in FLOAT_TYPES and node.type in FLOAT_TYPES


@kernel(GGMLOp.ADD, GGMLOp.SUB, GGMLOp.MUL, GGMLOp.DIV, supports=_binary_ok)
def _bind_binary(node: Tensor) -> Thunk:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    fn = _BINARY[node.op]
    if a.type == b.type == node.type == GGMLType.F32:
        av, bv, dv = arr(a), arr(b), arr(node)
        a8, b8 = repeat_pair(av, bv)
        d8 = _split8(dv, bv.shape)

        def run() -> None:
            with np.errstate(all="ignore"):
                fn(a8, b8, out=d8)

        return run

    def run_mixed() -> None:
        av, bv = f32(a), f32(b)
        a8, b8 = repeat_pair(av, bv)
        out = np.empty(av.shape, np.float32)
        with np.errstate(all="ignore"):
            fn(a8, b8, out=_split8(out, bv.shape))
        store(node, out)

    return run_mixed


def _float_in_out(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _map(node: Tensor, fn: Callable[[np.ndarray], np.ndarray]) -> Thunk:
    """A thunk applying a float32 function from src0 to node."""
    a = node.src[0]
    assert a is not None

    def run() -> None:
        with np.errstate(all="ignore"):
            store(node, fn(f32(a)))

    return run


@kernel(GGMLOp.SCALE, supports=_float_in_out)
def _bind_scale(node: Tensor) -> Thunk:
    s = np.float32(node.op_param_f32(0))
    b = np.float32(node.op_param_f32(1))
    if b == 0:
        return _map(node, lambda x: x * s)
    return _map(node, lambda x: x * s + b)


# ------------------------------------------------------------------------------------------------ UNARY


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = np.float32(0.7978845608028654)  # sqrt(2/pi)
    a = np.float32(0.044715)
    return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * x * (np.float32(1.0) + a * x * x)))


def _gelu_quick_exact(x: np.ndarray) -> np.ndarray:
    return x * (np.float32(1.0) / (np.float32(1.0) + np.exp(np.float32(-1.702) * x)))


def _f16_table(fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    # ggml's tables: for every f16 bit pattern h, f16(fn(f32(h)))
    with np.errstate(all="ignore"):
        xs = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        return fn(xs).astype(np.float16).astype(np.float32)


_TABLES: dict[str, np.ndarray] = {}


def gelu_f16_table(name: str) -> np.ndarray:
    """ggml's f16 lookup table for ``"gelu"`` or ``"gelu_quick"`` (65536 float32 values, indexed by f16 bits)."""
    if name not in _TABLES:
        _TABLES[name] = _f16_table(_gelu_tanh if name == "gelu" else _gelu_quick_exact)
    return _TABLES[name]


def _lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[x.astype(np.float16).view(np.uint16)]


def _gelu(x: np.ndarray) -> np.ndarray:
    # ggml CPU (GGML_GELU_FP16): x <= -10 -> 0, x >= 10 -> x, otherwise the f16 table at f16(x)
    y = _lookup(x, gelu_f16_table("gelu"))
    return np.where(x <= -10.0, np.float32(0.0), np.where(x >= 10.0, x, y)).astype(np.float32)


def _gelu_quick(x: np.ndarray) -> np.ndarray:
    # ggml CPU: the f16 table for every x (no +-10 cut-off)
    return _lookup(x, gelu_f16_table("gelu_quick"))


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    from math import erf

    verf = np.vectorize(erf, otypes=[np.float64])
    return (0.5 * x.astype(np.float64) * (1.0 + verf(x.astype(np.float64) / np.sqrt(2.0)))).astype(np.float32)


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(x)).astype(np.float32)


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.minimum(np.float32(1.0), np.maximum(np.float32(0.0), (x + np.float32(3.0)) / np.float32(6.0)))


#: float32 → float32 implementations of ggml's UNARY sub-ops, with ggml's CPU numerics
UNARY_FUNCS: dict[UnaryOp, Callable[[np.ndarray], np.ndarray]] = {
    UnaryOp.ABS: np.abs,
    UnaryOp.SGN: lambda x: np.sign(x).astype(np.float32),
    UnaryOp.NEG: np.negative,
    UnaryOp.STEP: lambda x: (x > 0).astype(np.float32),
    UnaryOp.TANH: np.tanh,
    UnaryOp.ELU: _elu,
    UnaryOp.RELU: lambda x: np.maximum(x, np.float32(0.0)),
    UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.GELU: _gelu,
    UnaryOp.GELU_QUICK: _gelu_quick,
    UnaryOp.GELU_ERF: _gelu_erf,
    UnaryOp.SILU: _silu,
    UnaryOp.HARDSWISH: lambda x: x * _hardsigmoid(x),
    UnaryOp.HARDSIGMOID: _hardsigmoid,
    UnaryOp.EXP: np.exp,
}


def _unary_ok(node: Tensor) -> bool:
    return _float_in_out(node) and UnaryOp(node.op_param_i32(0)) in UNARY_FUNCS


@kernel(GGMLOp.UNARY, supports=_unary_ok)
def _bind_unary(node: Tensor) -> Thunk:
    return _map(node, UNARY_FUNCS[UnaryOp(node.op_param_i32(0))])


# ------------------------------------------------------------------------------------------------ GLU


def _geglu_act(x: np.ndarray) -> np.ndarray:
    # ggml's geglu: x <= -10 -> 0, x >= 10 -> x, else the gelu f16 table
    return _gelu(x)


_GLU: dict[GluOp, Callable[[np.ndarray], np.ndarray]] = {
    GluOp.REGLU: lambda x: np.maximum(x, np.float32(0.0)),
    GluOp.GEGLU: _geglu_act,
    GluOp.SWIGLU: _silu,
    GluOp.GEGLU_ERF: _gelu_erf,
    GluOp.GEGLU_QUICK: _gelu_quick,
}


def _glu_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None
    return (
        GluOp(node.op_param_i32(0)) in _GLU
        and a.type in (GGMLType.F32, GGMLType.F16)
        and (b is None or b.type == a.type)
        and node.type == a.type
    )


@kernel(GGMLOp.GLU, supports=_glu_ok)
def _bind_glu(node: Tensor) -> Thunk:
    act = _GLU[GluOp(node.op_param_i32(0))]
    swapped = bool(node.op_param_i32(1))
    a, b = node.src[0], node.src[1]
    assert a is not None
    n = node.ne[0]

    def run() -> None:
        av = f32(a)
        if b is None:
            x, g = av[..., :n], av[..., n : 2 * n]
            if swapped:
                x, g = g, x
        else:
            x, g = av, f32(b)
        with np.errstate(all="ignore"):
            store(node, act(x) * g)

    return run
