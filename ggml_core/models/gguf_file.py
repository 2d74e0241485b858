"""An open GGUF file: checked header, metadata read through ``gguf.GGUFReader``, tensor data memory-mapped.

:func:`open_gguf` first walks the header with :func:`~ggml_core.models.gguf_header.read_header` (bounded, every
field checked), then opens the file with gguf-py's memory-mapping reader for the metadata. Tensor descriptions come
from the checked walk, tensor bytes are zero-copy slices of the reader's ``np.memmap``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
from gguf import GGUFReader

from ggml_core._errors import GGUFError
from ggml_core.models.gguf_header import HeaderInfo, KVInfo, TensorInfo, ValueType, read_header

__all__ = ["GGUFFile", "open_gguf"]

_INT_TYPES: Final = frozenset(
    {
        ValueType.UINT8,
        ValueType.INT8,
        ValueType.UINT16,
        ValueType.INT16,
        ValueType.UINT32,
        ValueType.INT32,
        ValueType.UINT64,
        ValueType.INT64,
    }
)
_FLOAT_TYPES: Final = frozenset({ValueType.FLOAT32, ValueType.FLOAT64})
_NP: Final[dict[ValueType, str]] = {
    ValueType.UINT8: "<u1",
    ValueType.INT8: "<i1",
    ValueType.UINT16: "<u2",
    ValueType.INT16: "<i2",
    ValueType.UINT32: "<u4",
    ValueType.INT32: "<i4",
    ValueType.FLOAT32: "<f4",
    ValueType.BOOL: "<u1",
    ValueType.UINT64: "<u8",
    ValueType.INT64: "<i8",
    ValueType.FLOAT64: "<f8",
}

_MISSING: Final = object()


class _Reader(GGUFReader):
    """gguf-py's reader, minus its tensor list: tensors come from the checked header walk.

    (gguf-py builds its tensor list with its own type table, which may lag behind ggml's; our walk already
    checked every tensor against ggml's types.)
    """

    def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
        self.tensors = []


class GGUFFile:
    """A validated, memory-mapped GGUF file.

    :param path: the file
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.header: HeaderInfo = read_header(self.path)
        try:
            self._reader = _Reader(self.path, "r")
        except (ValueError, KeyError, IndexError, OverflowError) as exc:  # the walk should have caught it first
            raise GGUFError(self.path, "file", f"gguf-py could not read it: {exc}") from None
        if self._reader.data_offset != self.header.data_offset:
            raise GGUFError(
                self.path,
                "data section",
                f"gguf-py places it at {self._reader.data_offset}, the header walk at {self.header.data_offset}",
            )
        self._tensors = {t.name: t for t in self.header.tensors}

    def __repr__(self) -> str:
        h = self.header
        return f"GGUFFile({self.path!r}, v{h.version}, {len(h.kv)} keys, {len(self._tensors)} tensors)"

    # ------------------------------------------------------------------------------------------ memory

    @property
    def memmap(self) -> np.ndarray:
        """The whole file as a read-only ``uint8`` memory map."""
        return self._reader.data

    @property
    def data_offset(self) -> int:
        """Byte offset of the tensor data section."""
        return self.header.data_offset

    @property
    def data_section(self) -> np.ndarray:
        """The tensor data section as a read-only ``uint8`` view of the memory map (no copy)."""
        return self._reader.data[self.header.data_offset :]

    @property
    def tensors(self) -> list[TensorInfo]:
        """Every tensor description, in file order."""
        return list(self.header.tensors)

    def has_tensor(self, name: str) -> bool:
        """True when the file holds a tensor of this name."""
        return name in self._tensors

    def tensor_info(self, name: str) -> TensorInfo:
        """The description of tensor ``name`` (GGUFError naming it when absent)."""
        t = self._tensors.get(name)
        if t is None:
            raise GGUFError(self.path, f"tensor {name!r}", "is missing")
        return t

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of tensor ``name``: a read-only ``uint8`` view of the memory map."""
        t = self.tensor_info(name)
        return self._reader.data[t.offset : t.offset + t.nbytes]

    # ------------------------------------------------------------------------------------------ metadata

    @property
    def keys(self) -> list[str]:
        """Every metadata key, in file order."""
        return list(self.header.kv)

    def has(self, key: str) -> bool:
        """True when the metadata holds ``key``."""
        return key in self.header.kv

    def _kv(self, key: str) -> KVInfo:
        kv = self.header.kv.get(key)
        if kv is None:
            raise GGUFError(self.path, f"metadata {key!r}", "is missing")
        return kv

    def get(self, key: str, default: Any = _MISSING) -> Any:
        """A metadata value: int/float/bool/str for scalars, a numpy array or list of str for arrays."""
        kv = self.header.kv.get(key)
        if kv is None:
            if default is _MISSING:
                raise GGUFError(self.path, f"metadata {key!r}", "is missing")
            return default
        if kv.type != ValueType.ARRAY:
            return kv.value
        if kv.item_type == ValueType.STRING:
            return self.get_strings(key)
        return self.get_numbers(key)

    def get_int(self, key: str, default: int | None = None, *, minimum: int | None = None) -> int:
        """An integer value (any integer type); ``default`` when absent, else GGUFError."""
        kv = self.header.kv.get(key)
        if kv is None:
            if default is None:
                raise GGUFError(self.path, f"metadata {key!r}", "is missing (required)")
            return default
        if kv.type not in _INT_TYPES:
            raise GGUFError(self.path, f"metadata {key!r}", f"must be an integer, is {kv.type.name.lower()}")
        value = int(kv.value)
        if minimum is not None and value < minimum:
            raise GGUFError(self.path, f"metadata {key!r}", f"is {value}, must be at least {minimum}")
        return value

    def get_float(self, key: str, default: float | None = None) -> float:
        """A float value (float32/float64, integers accepted); ``default`` when absent, else GGUFError."""
        kv = self.header.kv.get(key)
        if kv is None:
            if default is None:
                raise GGUFError(self.path, f"metadata {key!r}", "is missing (required)")
            return default
        if kv.type not in _FLOAT_TYPES | _INT_TYPES:
            raise GGUFError(self.path, f"metadata {key!r}", f"must be a number, is {kv.type.name.lower()}")
        value = float(kv.value)
        if not np.isfinite(value):
            raise GGUFError(self.path, f"metadata {key!r}", f"is {value}, not a finite number")
        return value

    def get_str(self, key: str, default: str | None = None) -> str:
        """A string value; ``default`` when absent, else GGUFError."""
        kv = self.header.kv.get(key)
        if kv is None:
            if default is None:
                raise GGUFError(self.path, f"metadata {key!r}", "is missing (required)")
            return default
        if kv.type != ValueType.STRING:
            raise GGUFError(self.path, f"metadata {key!r}", f"must be a string, is {kv.type.name.lower()}")
        return str(kv.value)

    def get_bool(self, key: str, default: bool) -> bool:
        """A boolean value; ``default`` when absent."""
        kv = self.header.kv.get(key)
        if kv is None:
            return default
        if kv.type != ValueType.BOOL:
            raise GGUFError(self.path, f"metadata {key!r}", f"must be a bool, is {kv.type.name.lower()}")
        return bool(kv.value)

    def _array(self, key: str, item_types: Sequence[ValueType] | None) -> KVInfo:
        kv = self._kv(key)
        if kv.type != ValueType.ARRAY:
            raise GGUFError(self.path, f"metadata {key!r}", f"must be an array, is {kv.type.name.lower()}")
        assert kv.item_type is not None
        if item_types is not None and kv.item_type not in item_types:
            names = " or ".join(t.name.lower() for t in item_types)
            raise GGUFError(self.path, f"metadata {key!r}", f"must hold {names}, holds {kv.item_type.name.lower()}")
        return kv

    def get_numbers(self, key: str, item_types: Sequence[ValueType] | None = None) -> np.ndarray:
        """A numeric array as a numpy array (a copy, native byte order)."""
        kv = self._array(key, item_types)
        assert kv.item_type is not None
        if kv.item_type == ValueType.STRING:
            raise GGUFError(self.path, f"metadata {key!r}", "holds strings, not numbers")
        start = kv.offset + 4 + 4 + 8  # value type, element type, count
        dt = np.dtype(_NP[kv.item_type])
        raw = self._reader.data[start : start + kv.count * dt.itemsize]
        out = raw.view(dt).astype(dt.newbyteorder("="))
        return out.astype(bool) if kv.item_type == ValueType.BOOL else out

    def get_strings(self, key: str) -> list[str]:
        """An array of strings (invalid UTF-8 gives GGUFError naming the element)."""
        self._array(key, [ValueType.STRING])
        field = self._reader.fields[key]
        out = []
        for i, idx in enumerate(field.data):
            try:
                out.append(bytes(field.parts[idx]).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise GGUFError(self.path, f"metadata {key!r}[{i}]", f"is not valid UTF-8 ({exc.reason})") from None
        return out

    def get_raw_strings(self, key: str) -> list[bytes]:
        """An array of strings as raw bytes (for vocabularies that may hold partial UTF-8)."""
        self._array(key, [ValueType.STRING])
        field = self._reader.fields[key]
        return [bytes(field.parts[idx]) for idx in field.data]


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate a GGUF file (see :class:`GGUFFile`)."""
    return GGUFFile(path)
