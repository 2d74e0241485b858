"""An open GGUF file: the checked header walk's metadata and tensor infos over the memory-mapped file.

:func:`open_gguf` walks the header with :func:`~ggml_core.models.gguf_header.read_header` (bounded, every field
checked) and keeps its memory map. Values are decoded from it when asked for: numeric arrays are zero-copy numpy
views, arrays of strings are a :class:`StringArray` (one offsets table; strings decoded on access), tensor bytes are
zero-copy slices. gguf-py is not used.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any, Final, overload

import numpy as np

from ggml_core._errors import GGUFError
from ggml_core.models.gguf_header import HeaderInfo, KVInfo, TensorInfo, ValueType, read_header

__all__ = ["GGUFFile", "StringArray", "open_gguf"]

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


class StringArray(Sequence[str]):
    """An array of strings in the file: ``len``, indexing and iteration decode from the memory map on demand.

    :param offsets: ``count + 1`` file offsets; string i's bytes are ``buf[offsets[i] + 8 : offsets[i + 1]]``
    """

    def __init__(self, path: str, key: str, buf: np.ndarray, offsets: np.ndarray) -> None:
        self._path, self._key, self._buf, self.offsets = path, key, buf, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} strings")
        i %= n
        return self._decode(i, self.raw(i))

    def raw(self, i: int) -> bytes:
        """String ``i`` as bytes."""
        return self._buf[int(self.offsets[i]) + 8 : int(self.offsets[i + 1])].tobytes()

    def _decode(self, i: int, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(self._path, f"metadata {self._key!r}[{i}]", f"is not valid UTF-8 ({exc.reason})") from None

    def raw_list(self) -> list[bytes]:
        """Every string as bytes (one pass over the array's bytes)."""
        offs = self.offsets.tolist()
        if not offs:
            return []
        blob = self._buf[offs[0] : offs[-1]].tobytes()
        base = offs[0]
        return [blob[a - base + 8 : b - base] for a, b in itertools.pairwise(offs)]

    def region(self) -> np.ndarray:
        """The array's bytes in the file, from the first string's 8-byte length to the last string's end (a view)."""
        offs = self.offsets
        return self._buf[int(offs[0]) : int(offs[-1])] if len(offs) else self._buf[:0]

    def take(self, indices: Sequence[int]) -> list[str]:
        """The strings at ``indices`` (decoded; GGUFError naming an invalid one), without decoding the others."""
        offs = self.offsets
        if not len(indices) or not len(offs):
            return []
        base, blob = int(offs[0]), self.region().tobytes()
        at = np.asarray(indices, dtype=np.int64)
        out = []
        for i, a, b in zip(at.tolist(), (offs[at] - base + 8).tolist(), (offs[at + 1] - base).tolist(), strict=True):
            out.append(self._decode(i, blob[a:b]))
        return out

    def tolist(self) -> list[str]:
        """Every string decoded (GGUFError naming the first invalid one)."""
        raws = self.raw_list()
        try:
            return [r.decode("utf-8") for r in raws]
        except UnicodeDecodeError:
            for i, r in enumerate(raws):
                self._decode(i, r)
            raise


class GGUFFile:
    """A validated, memory-mapped GGUF file.

    :param path: the file
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.header: HeaderInfo = read_header(self.path)
        self._buf = self.header.buf

    def __repr__(self) -> str:
        h = self.header
        return f"GGUFFile({self.path!r}, v{h.version}, {len(h.kv)} keys, {len(h.tensors)} tensors)"

    # ------------------------------------------------------------------------------------------ memory

    @property
    def memmap(self) -> np.ndarray:
        """The whole file as a read-only ``uint8`` memory map."""
        return self._buf

    @property
    def data_offset(self) -> int:
        """Byte offset of the tensor data section."""
        return self.header.data_offset

    @property
    def data_section(self) -> np.ndarray:
        """The tensor data section as a read-only ``uint8`` view of the memory map (no copy)."""
        return self._buf[self.header.data_offset :]

    @property
    def tensors(self) -> Sequence[TensorInfo]:
        """Every tensor description, in file order (made on access: cheap to hold for any number of tensors)."""
        return self.header.tensors

    def has_tensor(self, name: str) -> bool:
        """True when the file holds a tensor of this name."""
        return self.header.tensors.has(name)

    def tensor_info(self, name: str) -> TensorInfo:
        """The description of tensor ``name`` (GGUFError naming it when absent)."""
        t = self.header.tensors.get(name)
        if t is None:
            raise GGUFError(self.path, f"tensor {name!r}", "is missing")
        return t

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw bytes of tensor ``name``: a read-only ``uint8`` view of the memory map."""
        t = self.tensor_info(name)
        return self._buf[t.offset : t.offset + t.nbytes]

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
        """A numeric array as a read-only numpy view of the memory map (bool arrays: a converted copy)."""
        kv = self._array(key, item_types)
        assert kv.item_type is not None
        if kv.item_type == ValueType.STRING:
            raise GGUFError(self.path, f"metadata {key!r}", "holds strings, not numbers")
        dt = np.dtype(_NP[kv.item_type])
        out = self._buf[kv.data_offset : kv.data_offset + kv.count * dt.itemsize].view(dt)
        return out.astype(bool) if kv.item_type == ValueType.BOOL else out

    def get_string_array(self, key: str) -> StringArray:
        """An array of strings, lazily decoded (see :class:`StringArray`)."""
        self._array(key, [ValueType.STRING])
        return StringArray(self.path, key, self._buf, self.header.kv.string_offsets(key))

    def get_strings(self, key: str) -> list[str]:
        """An array of strings (invalid UTF-8 gives GGUFError naming the element)."""
        return self.get_string_array(key).tolist()

    def get_raw_strings(self, key: str) -> list[bytes]:
        """An array of strings as raw bytes (for vocabularies that may hold partial UTF-8)."""
        return self.get_string_array(key).raw_list()


def open_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Open and validate a GGUF file (see :class:`GGUFFile`)."""
    return GGUFFile(path)
