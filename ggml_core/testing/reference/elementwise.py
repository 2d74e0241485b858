"""numpy references for elementwise ops: binary with broadcasting, math, UNARY sub-ops, GLU, SCALE, CLAMP, ACC.

Written from the ops' definitions plus ggml's measured CPU numerics (``ggml-semantics.md``): GELU and GELU_QUICK
go through an f16 lookup table (GELU exact outside ±10), everything else is float32 math. Inputs are arrays of
numpy shape ``(ne3, ne2, ne1, ne0)``; results are float32 (the runner rounds them to the output type).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np

__all__ = [
    "UNARY",
    "acc",
    "add_id",
    "binary",
    "clamp",
    "gelu",
    "gelu_erf",
    "gelu_quick",
    "glu",
    "leaky_relu",
    "repeat_to",
    "scale",
    "swiglu_oai",
    "xielu",
]

F = np.float32


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def repeat_to(b: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``b`` tiled an integer number of times along every axis to ``shape`` (ggml's ``i % ne`` broadcasting)."""
    reps = tuple(s // n for s, n in zip(shape, b.shape, strict=True))
    return np.tile(b, reps)


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ADD, SUB, MUL, DIV of ``a`` and ``b`` repeated over ``a``, in float32."""
    x, y = _f(a), repeat_to(_f(b), a.shape)
    fn = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide}[op]
    return fn(x, y)


def acc(a: np.ndarray, b: np.ndarray, nb1: int, nb2: int, nb3: int, offset: int, esize: int, add: bool) -> np.ndarray:
    """ACC (``add``) or SET: ``a`` with ``b`` added into (or written over) the view of ``a`` at byte ``offset``
    with byte strides ``nb1..nb3`` (element size ``esize``)."""
    out = np.array(a, dtype=np.float32).reshape(-1)
    ne3, ne2, ne1, ne0 = b.shape
    i0 = np.arange(ne0) * esize
    i1 = np.arange(ne1) * nb1
    i2 = np.arange(ne2) * nb2
    i3 = np.arange(ne3) * nb3
    byte = offset + i3[:, None, None, None] + i2[None, :, None, None] + i1[None, None, :, None] + i0
    flat = (byte // esize).reshape(-1)
    vals = _f(b).reshape(-1)
    if add:
        out[flat] = out[flat] + vals
    else:
        out[flat] = vals
    return out.reshape(a.shape)


def scale(x: np.ndarray, s: float, b: float) -> np.ndarray:
    """SCALE: x·s + b."""
    return _f(x) * F(s) + F(b)


def clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """CLAMP to [lo, hi]."""
    return np.minimum(np.maximum(_f(x), F(lo)), F(hi))


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    """LEAKY_RELU: x for x > 0, slope·x below."""
    v = _f(x)
    return np.where(v > 0, v, F(slope) * v).astype(np.float32)


# ----------------------------------------------------------------------------------------------- activations


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = F(math.sqrt(2.0 / math.pi))
    return F(0.5) * x * (F(1.0) + np.tanh(c * x * (F(1.0) + F(0.044715) * x * x)))


def _gelu_quick_exact(x: np.ndarray) -> np.ndarray:
    return x * (F(1.0) / (F(1.0) + np.exp(F(-1.702) * x)))


@cache
def _table(kind: str) -> np.ndarray:
    """f16(activation(h)) for every f16 bit pattern h, as float32 (ggml's CPU lookup tables)."""
    h = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    fn = _gelu_tanh if kind == "gelu" else _gelu_quick_exact
    with np.errstate(all="ignore"):
        return fn(h).astype(np.float16).astype(np.float32)


def _lookup(x: np.ndarray, kind: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        bits = _f(x).astype(np.float16).view(np.uint16)
    return _table(kind)[bits]


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU as ggml's CPU computes it: 0 at x ≤ −10, x at x ≥ 10, else the tanh-GELU f16 table at f16(x)."""
    v = _f(x)
    return np.where(v <= -10, F(0.0), np.where(v >= 10, v, _lookup(v, "gelu"))).astype(np.float32)


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """GELU_QUICK: the f16 table of x·sigmoid(1.702x) at f16(x), for every x."""
    return _lookup(x, "gelu_quick")


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """GELU_ERF: 0.5·x·(1 + erf(x/√2)) (float64 math, rounded to float32)."""
    v = np.asarray(x, dtype=np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2.0)) if v.size else v
    return (0.5 * v * (1.0 + erf)).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return F(1.0) / (F(1.0) + np.exp(-x))


def _hardsigmoid(x: np.ndarray) -> np.ndarray:
    return np.minimum(F(1.0), np.maximum(F(0.0), (x + F(3.0)) / F(6.0)))


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return (np.sign(x) * np.floor(np.abs(x) + F(0.5))).astype(np.float32)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, F(20.0))))).astype(np.float32)


def _wrap(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def run(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(_f(x)), dtype=np.float32)

    return run


_UNARY_MATH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "ABS": np.abs,
    "SGN": lambda x: np.sign(x),
    "NEG": np.negative,
    "STEP": lambda x: (x > 0).astype(np.float32),
    "TANH": np.tanh,
    "ELU": lambda x: np.where(x > 0, x, np.expm1(x)),
    "RELU": lambda x: np.where(x > 0, x, F(0.0)),
    "SIGMOID": _sigmoid,
    "GELU": gelu,
    "GELU_QUICK": gelu_quick,
    "GELU_ERF": gelu_erf,
    "SILU": lambda x: x / (F(1.0) + np.exp(-x)),
    "HARDSWISH": lambda x: x * _hardsigmoid(x),
    "HARDSIGMOID": _hardsigmoid,
    "EXP": np.exp,
    "EXPM1": np.expm1,
    "SOFTPLUS": _softplus,
    "FLOOR": np.floor,
    "CEIL": np.ceil,
    "ROUND": _round_half_away,
    "TRUNC": np.trunc,
    "SQR": lambda x: x * x,
    "SQRT": np.sqrt,
    "LOG": np.log,
    "SIN": np.sin,
    "COS": np.cos,
}
#: UNARY sub-op name (and the math ops SQR..COS) → float32 function with ggml's CPU numerics
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {name: _wrap(fn) for name, fn in _UNARY_MATH.items()}

_GLU_ACT: dict[str, str] = {
    "REGLU": "RELU",
    "GEGLU": "GELU",
    "SWIGLU": "SILU",
    "GEGLU_ERF": "GELU_ERF",
    "GEGLU_QUICK": "GELU_QUICK",
}


def glu(op: str, a: np.ndarray, b: np.ndarray | None, swapped: bool) -> np.ndarray:
    """GLU: act(x)·g; fused (``b`` None: x and g are the halves of each row of ``a``) or split (x = a, g = b)."""
    if b is None:
        n = a.shape[-1] // 2
        x, g = a[..., :n], a[..., n : 2 * n]
        if swapped:
            x, g = g, x
    else:
        x, g = a, b
    return UNARY[_GLU_ACT[op]](x) * _f(g)


def add_id(a: np.ndarray, b: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """ADD_ID: a (1, T, U, n) plus row ``ids[t, u]`` of b (1, 1, E, n)."""
    idx = np.asarray(ids)[0, 0].astype(np.int64)  # (T, U)
    return _f(a) + _f(b)[0, 0][idx][None]


def swiglu_oai(a: np.ndarray, b: np.ndarray | None, alpha: float, limit: float, swapped: bool) -> np.ndarray:
    """SWIGLU_OAI: x = min(x, limit), g = clamp(g, −limit, limit); x·sigmoid(alpha·x)·(g + 1)."""
    if b is None:
        n = a.shape[-1] // 2
        x, g = (a[..., n:], a[..., :n]) if swapped else (a[..., :n], a[..., n:])
    else:
        x, g = a, b
    x = np.minimum(_f(x), F(limit))
    g = np.clip(_f(g), F(-limit), F(limit))
    with np.errstate(over="ignore"):
        return x / (F(1.0) + np.exp(F(alpha) * -x)) * (g + F(1.0))


def _softplus_scalar(v: float) -> float:
    return v if v > 20.0 else float(np.log(F(1.0) + np.exp(F(v))))


def xielu(x: np.ndarray, alpha_n: float, alpha_p: float, beta: float, eps: float) -> np.ndarray:
    """XIELU with ggml's stored parameters αn = beta + softplus(alpha_n), αp = softplus(alpha_p):
    αp·x² + β·x for x > 0, else (expm1(min(x, eps)) − x)·αn + β·x."""
    v = _f(x)
    an, ap, b = F(beta + _softplus_scalar(alpha_n)), F(_softplus_scalar(alpha_p)), F(beta)
    with np.errstate(over="ignore"):
        neg = (np.expm1(np.minimum(v, F(eps))) - v) * an + b * v
    return np.where(v > 0, ap * v * v + b * v, neg).astype(np.float32)
