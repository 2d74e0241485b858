"""Call ggml's own reference quantizers through ggml-python's shared libraries (test helper, not library code).

ggml-python (``pip install ggml-python``) builds ggml from source; its ``libggml-base`` exports
``quantize_row_<type>_ref``, ``dequantize_row_<type>`` and the f16/bf16 row converters, which are called here
with ctypes. ``load()`` returns None when ggml-python is not importable.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

#: types whose reference quantizer is compared (ggml has no dequantize_row_q8_1)
QUANT_TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K")
DEQUANT_TYPES = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
    "IQ4_NL", "IQ4_XS", "MXFP4", "NVFP4", "TQ1_0", "TQ2_0", "Q1_0",
)  # fmt: skip


def _c_name(type_name: str) -> str:
    return type_name.lower().replace("_k", "_K")


class GGMLRef:
    """ggml's reference (de)quantizers for rows of a 2-D array."""

    def __init__(self, lib: Any, version: str) -> None:
        self.lib = lib
        self.version = version

    def _fn(self, name: str) -> Any:
        f = getattr(self.lib, name)
        f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        f.restype = None
        return f

    def quantize(self, type_name: str, x: np.ndarray, block: int, type_size: int) -> np.ndarray:
        """``quantize_row_<type>_ref`` over all rows; the output buffer starts zeroed (Q8_K leaves bytes unset)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros((x.shape[0], x.shape[1] // block * type_size), dtype=np.uint8)
        self._fn(f"quantize_row_{_c_name(type_name)}_ref")(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def dequantize(self, type_name: str, b: np.ndarray, block: int, type_size: int) -> np.ndarray:
        """``dequantize_row_<type>`` (ggml's ``to_float``) over all rows."""
        b = np.ascontiguousarray(b, dtype=np.uint8)
        out = np.zeros((b.shape[0], b.shape[1] // type_size * block), dtype=np.float32)
        self._fn(f"dequantize_row_{_c_name(type_name)}")(b.ctypes.data, out.ctypes.data, out.size)
        return out

    def fp32_to_fp16(self, x: np.ndarray) -> np.ndarray:
        """``ggml_fp32_to_fp16_row``: raw f16 bits."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.shape, dtype=np.uint16)
        self._fn("ggml_fp32_to_fp16_row")(x.ctypes.data, out.ctypes.data, x.size)
        return out

    def fp32_to_bf16(self, x: np.ndarray) -> np.ndarray:
        """``ggml_fp32_to_bf16_row_ref``: raw bf16 bits."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.shape, dtype=np.uint16)
        self._fn("ggml_fp32_to_bf16_row_ref")(x.ctypes.data, out.ctypes.data, x.size)
        return out


def load() -> GGMLRef | None:
    """The reference from ggml-python, or None if it is not installed or lacks the symbols."""
    try:
        import ggml
    except (ImportError, OSError, RuntimeError):  # RuntimeError: ggml-python failed to load its library
        return None
    lib = getattr(getattr(ggml, "ggml", None), "lib", None)
    if lib is None:
        return None
    try:
        lib.quantize_row_q4_0_ref  # noqa: B018 - probe that the reference symbols are exported
        ver = lib.ggml_version
        ver.restype = ctypes.c_char_p
        version = ver().decode()
    except AttributeError:
        return None
    return GGMLRef(lib, version)
