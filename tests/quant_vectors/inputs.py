"""The deterministic float32 rows on which ggml-core's quantizers are compared with ggml.

``make_rows()`` returns a ``(rows, ROW_LEN)`` float32 array: edge-case rows first (zeros, constants, tiny, huge
and subnormal magnitudes, outliers, ties, ramps), then ``N_RANDOM_ROWS`` random rows from several distributions
whose scale changes from block to block. Row length 512 is a multiple of every block size (32 and 256).

Only exact arithmetic, ``np.linspace``, ``np.ldexp`` and numpy's ``Generator`` (uniform, normal, integers) are
used, so the rows are the same on every platform; ``golden.json`` also records their digest. Both
``tests/quants/test_quants.py`` and ``regen.py`` build their inputs here.
"""

from __future__ import annotations

import numpy as np

ROW_LEN = 512
N_RANDOM_ROWS = 96
DEFAULT_SEED = 20240601


def _wave(i: np.ndarray, period: int) -> np.ndarray:
    """A smooth-ish periodic sequence in [-1, 1] from exact arithmetic (a triangle wave)."""
    phase = (i % period) / period
    return 1.0 - 4.0 * np.abs(phase - 0.5)


def edge_rows() -> np.ndarray:
    """Hand-picked rows that exercise the special cases of ggml's quantizers."""
    n = ROW_LEN
    i = np.arange(n, dtype=np.float64)
    w = _wave(i * 7.0, 23)  # pseudo-irregular values
    rows: list[np.ndarray] = [
        np.zeros(n),
        np.full(n, -0.0),
        np.full(n, 1.0),
        np.full(n, 0.5),
        np.full(n, -2.5),
        np.full(n, 3.7),
        np.full(n, 1e-8),
        np.where(i % 2 == 0, 1e-8, -3e-8),
        np.full(n, 1e-16),  # below GROUP_MAX_EPS
        np.where(i % 3 == 0, 2e-15, -1e-15),  # around GROUP_MAX_EPS
        np.full(n, 1e-40),  # float32 subnormal
        np.where(i % 2 == 0, 1e-38, -3e-39),
        np.full(n, 65504.0),
        np.full(n, 1e7),  # scales overflow f16
        np.where(i % 2 == 0, 1e30, -1e29),
        np.where(i % 5 == 0, 1e20, 1.0),
        np.where(i % 2 == 0, 1.0, -1.0),
        np.where(i % 2 == 0, -1.0, 1.0),  # first |max| is negative
        np.linspace(-1.0, 1.0, n),
        np.linspace(0.0, 1.0, n),
        np.linspace(-1.0, 0.0, n),
        np.linspace(-3.0, 7.0, n),
        (i % 8) - 4.0,  # integer grid: rounding ties
        ((i % 16) - 8.0) * 0.5,  # half-integers
        ((i % 32) - 15.5) / 16.0,
        np.where(i == 7, 1.0, 0.0),  # one spike in a zero row
        np.where(i % 32 == 31, -1.0, 0.0),
        np.where(i % 256 == 100, 1000.0, w),  # outlier in a smooth row
        np.where(i % 16 == 0, 50.0, 0.01 * w),
        np.where((i // 16) % 2 == 0, 0.0, w),  # alternating zero sub-blocks
        np.where((i // 32) % 3 == 0, 1e-9, w),
        np.abs(w) + 0.25,  # strictly positive
        -np.abs(w) - 0.25,  # strictly negative
        w * 10.0 ** ((i // 16) % 7 - 3),  # sub-block scales 1e-3 .. 1e3
        w * 10.0 ** ((i // 32) % 9 - 4),
    ]
    return np.stack([np.asarray(r, dtype=np.float64) for r in rows]).astype(np.float32)


def random_rows(seed: int, n_rows: int = N_RANDOM_ROWS) -> np.ndarray:
    """Random rows: several distributions, per-16-element magnitudes spread over many binades."""
    rng = np.random.default_rng(seed)
    n = ROW_LEN
    out = np.empty((n_rows, n), dtype=np.float32)
    for r in range(n_rows):
        kind = r % 8
        u = rng.uniform(-1.0, 1.0, n)
        if kind == 0:
            v = rng.standard_normal(n)
        elif kind == 1:
            v = u
        elif kind == 2:
            v = u / (1.0 - 0.9 * np.abs(u))  # peaked, longer tails
        elif kind == 3:
            v = u / (1.0 - 0.999 * np.abs(u)) ** 2  # heavy tails
        elif kind == 4:
            v = np.abs(u) ** 3 + 0.01  # positive, skewed
        elif kind == 5:
            v = rng.standard_normal(n) + rng.uniform(-3.0, 3.0)  # offset
        elif kind == 6:
            v = rng.standard_normal(n) * (rng.uniform(0.0, 1.0, n) < 0.1)  # sparse
        else:
            v = np.round(rng.standard_normal(n) * 4.0) / 4.0  # coarse grid: many ties
        # every third row: each 16 values get their own magnitude; otherwise one magnitude per row
        exps = rng.integers(-20, 21, n // 16).repeat(16) if r % 3 == 0 else np.full(n, rng.integers(-10, 11))
        out[r] = np.ldexp(v, exps).astype(np.float32)
    return out


def make_rows(seed: int = DEFAULT_SEED) -> np.ndarray:
    """Edge rows followed by ``N_RANDOM_ROWS`` random rows, float32 ``(rows, ROW_LEN)``."""
    return np.concatenate([edge_rows(), random_rows(seed)])
