"""FNV-1a 64, the hash of ggml's RPC tensor cache (SET_TENSOR_HASH), with a compiled loop when numba is present.

FNV-1a is one multiply per byte and cannot be vectorised; the pure-Python loop manages ~10 MB/s, so the client
only uses the hash cache (which is for tensors over 10 MiB) when :func:`fast` is true.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

import numpy as np

__all__ = ["FNV_OFFSET", "FNV_PRIME", "fast", "fnv1a64"]

FNV_OFFSET: Final = 0xCBF29CE484222325
FNV_PRIME: Final = 0x100000001B3
_MASK: Final = 2**64 - 1

_compiled: Callable[[np.ndarray, int], int] | None = None
_tried = False
_lock = threading.Lock()


def _compile() -> Callable[[np.ndarray, int], int] | None:
    global _compiled, _tried
    with _lock:
        if _tried:
            return _compiled
        _tried = True
        try:
            import numba
        except ImportError:
            return None

        @numba.njit(cache=False, nogil=True)
        def loop(data: np.ndarray, h: int) -> int:  # pragma: no cover - compiled
            acc = np.uint64(h)
            prime = np.uint64(FNV_PRIME)
            for i in range(data.size):
                acc = (acc ^ np.uint64(data[i])) * prime
            return acc

        _compiled = loop
        return _compiled


def fast() -> bool:
    """True when the compiled loop is available (numba installed)."""
    return _compile() is not None


def fnv1a64(data: bytes | bytearray | memoryview | np.ndarray, h: int = FNV_OFFSET) -> int:
    """FNV-1a 64 of ``data`` (offset basis ``0xcbf29ce484222325``, prime ``0x100000001b3``)."""
    arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    fn = _compile() if arr.size > 4096 else None
    if fn is not None:
        return int(fn(arr, np.uint64(h & _MASK))) & _MASK
    for b in arr.tobytes():
        h = ((h ^ b) * FNV_PRIME) & _MASK
    return h
