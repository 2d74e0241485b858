"""numpy references for normalisations: NORM, RMS_NORM, L2_NORM (per row) and GROUP_NORM (per channel group).

Float64 math rounded to float32 at the end; variances are biased (divide by n), as in ggml.
"""

from __future__ import annotations

import numpy as np

__all__ = ["group_norm", "l2_norm", "norm", "rms_norm"]


def norm(a: np.ndarray, eps: float) -> np.ndarray:
    """(x − mean) / sqrt(var + eps) over each row."""
    x = np.asarray(a, dtype=np.float64)
    y = x - x.mean(axis=-1, keepdims=True)
    var = (y * y).mean(axis=-1, keepdims=True)
    return (y / np.sqrt(var + np.float32(eps))).astype(np.float32)


def rms_norm(a: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) over each row."""
    x = np.asarray(a, dtype=np.float64)
    ms = (x * x).mean(axis=-1, keepdims=True)
    return (x / np.sqrt(ms + np.float32(eps))).astype(np.float32)


def l2_norm(a: np.ndarray, eps: float) -> np.ndarray:
    """x / max(‖x‖₂, eps) over each row."""
    x = np.asarray(a, dtype=np.float64)
    n = np.sqrt((x * x).sum(axis=-1, keepdims=True))
    return (x / np.maximum(n, np.float32(eps))).astype(np.float32)


def group_norm(a: np.ndarray, n_groups: int, eps: float) -> np.ndarray:
    """Normalise groups of ceil(C / n_groups) channels (dim 2) over dims 0, 1 and the group's channels."""
    x = np.asarray(a, dtype=np.float64)  # (N, C, H, W)
    channels = x.shape[1]
    per = -(-channels // n_groups)
    out = np.empty_like(x)
    for start in range(0, channels, per):
        g = x[:, start : start + per]
        m = g.mean(axis=(1, 2, 3), keepdims=True)
        d = g - m
        var = (d * d).mean(axis=(1, 2, 3), keepdims=True)
        out[:, start : start + per] = d / np.sqrt(var + np.float32(eps))
    return out.astype(np.float32)
