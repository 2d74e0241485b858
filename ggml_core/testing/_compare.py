"""The comparison of test-backend-ops: NaN fails, infinities must match in sign, NMSE against a threshold.

``NMSE = Σ(a − b)² / Σa²`` with ``a`` the reference values and ``b`` the values under test. Positions where both
sides hold an infinity (or ±FLT_MAX) of the same sign agree and are left out of the sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ggml_core.testing._case import Check, CheckKind

__all__ = ["Comparison", "compare", "jaccard_distance", "nmse"]

_FLT_MAX: Final = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class Comparison:
    """The verdict of one comparison: passed, the error measured (NMSE or distance) and a message on failure."""

    passed: bool
    error: float
    message: str = ""


def nmse(expected: np.ndarray, actual: np.ndarray) -> float:
    """Σ(expected − actual)² / Σexpected² in float64 (0 when both are all zero, inf when only expected is)."""
    a = np.asarray(expected, dtype=np.float64).reshape(-1)
    b = np.asarray(actual, dtype=np.float64).reshape(-1)
    num = float(np.sum((a - b) ** 2))
    den = float(np.sum(a * a))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def jaccard_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Distance between two multisets: 0 when equal, 1 when disjoint (test-backend-ops' ``jdst``)."""
    va, ca = np.unique(np.asarray(a).reshape(-1), return_counts=True)
    vb, cb = np.unique(np.asarray(b).reshape(-1), return_counts=True)
    n = max(a.size, 1)
    counts: dict[object, int] = {}
    for v, c in zip(va.tolist(), ca.tolist(), strict=True):
        counts[v] = counts.get(v, 0) + c
    for v, c in zip(vb.tolist(), cb.tolist(), strict=True):
        counts[v] = counts.get(v, 0) - c
    return sum(abs(c) for c in counts.values()) / (2 * n)


def _index(shape: tuple[int, ...], flat: int) -> str:
    """A flat index as ggml's element coordinates ``[i0,i1,i2,i3]`` (ne[0] first)."""
    idx = np.unravel_index(flat, shape) if shape else ()
    return "[" + ",".join(str(int(i)) for i in reversed(idx)) + "]"


def _big(x: np.ndarray) -> np.ndarray:
    return np.isinf(x) | (np.abs(np.nan_to_num(x, nan=0.0, posinf=np.inf, neginf=-np.inf)) >= _FLT_MAX)


def compare(expected: np.ndarray, actual: np.ndarray, check: Check) -> Comparison:
    """Judge ``actual`` against ``expected`` with ``check`` (shapes must agree)."""
    exp = np.asarray(expected)
    act = np.asarray(actual)
    if exp.size != act.size:
        return Comparison(False, float("inf"), f"result has {act.size} values, expected {exp.size}")
    shape = exp.shape
    act = act.reshape(shape)
    if check.kind == CheckKind.EXACT:
        return _exact(exp, act)
    if check.kind == CheckKind.SET:
        return _row_sets(exp, act)
    return _nmse_check(exp, act, check.threshold)


def _exact(exp: np.ndarray, act: np.ndarray) -> Comparison:
    same = exp == act
    if np.issubdtype(exp.dtype, np.floating) or np.issubdtype(act.dtype, np.floating):
        same |= np.isnan(exp.astype(np.float64)) & np.isnan(act.astype(np.float64))
    bad = np.flatnonzero(~same.reshape(-1))
    if bad.size == 0:
        return Comparison(True, 0.0)
    i = int(bad[0])
    e, a = exp.reshape(-1)[i], act.reshape(-1)[i]
    return Comparison(
        False,
        bad.size / exp.size,
        f"{bad.size} of {exp.size} values differ (first at {_index(exp.shape, i)}: expected {e}, got {a})",
    )


def _row_sets(exp: np.ndarray, act: np.ndarray) -> Comparison:
    k = exp.shape[-1] if exp.ndim else 1
    e_rows = exp.reshape(-1, k)
    a_rows = act.reshape(-1, k)
    total = 0.0
    first = -1
    for r in range(e_rows.shape[0]):
        d = jaccard_distance(e_rows[r], a_rows[r])
        if d > 0 and first < 0:
            first = r
        total += d
    if total == 0.0:
        return Comparison(True, 0.0)
    return Comparison(
        False,
        total,
        f"row {first} holds {sorted(a_rows[first].tolist())}, expected the set {sorted(e_rows[first].tolist())} "
        f"(set distance {total:.3g})",
    )


def _nmse_check(exp: np.ndarray, act: np.ndarray, threshold: float) -> Comparison:
    e = exp.astype(np.float64).reshape(-1)
    a = act.astype(np.float64).reshape(-1)
    nan = np.flatnonzero(np.isnan(a) | np.isnan(e))
    if nan.size:
        i = int(nan[0])
        return Comparison(False, float("nan"), f"NaN at {_index(exp.shape, i)} (expected {e[i]:.6g}, got {a[i]:.6g})")
    be, ba = _big(e), _big(a)
    either = be | ba
    if either.any():
        mismatch = np.flatnonzero(either & ~(be & ba & (np.signbit(e) == np.signbit(a))))
        if mismatch.size:
            i = int(mismatch[0])
            return Comparison(
                False, float("inf"), f"inf mismatch at {_index(exp.shape, i)}: expected {e[i]:.6g}, got {a[i]:.6g}"
            )
        keep = ~either
        e, a = e[keep], a[keep]
    err = nmse(e, a)
    if err <= threshold:
        return Comparison(True, err)
    worst = int(np.argmax(np.abs(e - a))) if e.size else 0
    where = ""
    if e.size:
        where = f"; largest difference {abs(e[worst] - a[worst]):.3g} (expected {e[worst]:.6g}, got {a[worst]:.6g})"
    return Comparison(False, err, f"NMSE = {err:.9f} > {threshold:.9f}{where}")
