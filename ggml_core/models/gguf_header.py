"""A bounded walk over a GGUF file's header: every length, count, type and offset checked before it is used.

The walk *is* the reader: gguf-py's reader (which builds one numpy object per array element, so a 262k-entry
vocabulary costs seconds and a 1.6M-element array gigabytes) is not on the load path. Every quantity is checked
against the bytes that are really there, so that each malformed file gets a :class:`~ggml_core.GGUFError` naming
the file and the field, in time proportional to the file's size.

What the walk keeps is compact, so that memory stays a small multiple of the header even for absurd files
(200k tiny keys, 200k zero-size tensors): keys and tensor names in one dict each, everything else in ``int64``
tables, and for each array of strings only the offsets of its elements (one ``int64`` per string, in one table for
all string arrays). :class:`KVInfo` and :class:`TensorInfo` objects are made on demand, values are decoded from the
memory map when asked for.

Layout (little-endian): ``"GGUF" | version u32 | n_tensors u64 | n_kv u64 | n_kv × (key, type u32, value) |
n_tensors × (name, n_dims u32, ne u64 × n_dims, type u32, offset u64) | padding to the alignment | data``.
A value is a scalar, a string (``u64`` length + UTF-8 bytes) or an array (element type u32, count u64, elements).
"""

from __future__ import annotations

import enum
import mmap
import os
import stat
import struct
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, overload

import numpy as np

from ggml_core._errors import GGUFError
from ggml_core._tensor import MAX_DIMS, MAX_NAME
from ggml_core._text import text_repr
from ggml_core._types import GGMLType

__all__ = [
    "GGUF_MAGIC",
    "HeaderInfo",
    "KVInfo",
    "KVTable",
    "TensorInfo",
    "TensorTable",
    "ValueType",
    "read_header",
]

GGUF_MAGIC: Final = b"GGUF"
#: the versions this loader reads (version 1 used 32-bit counts and is long gone)
SUPPORTED_VERSIONS: Final = (2, 3)
DEFAULT_ALIGNMENT: Final = 32
#: a key longer than this is not a key (the longest in llama.cpp is under 100 bytes)
MAX_KEY_BYTES: Final = 4096
#: ggml's limit on a dimension (int64)
MAX_DIM: Final = 2**63 - 1


class ValueType(enum.IntEnum):
    """``enum gguf_type``: the type of a metadata value."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


#: struct format of each fixed-size value type
_SCALAR: Final[dict[ValueType, str]] = {
    ValueType.UINT8: "<B",
    ValueType.INT8: "<b",
    ValueType.UINT16: "<H",
    ValueType.INT16: "<h",
    ValueType.UINT32: "<I",
    ValueType.INT32: "<i",
    ValueType.FLOAT32: "<f",
    ValueType.BOOL: "<B",
    ValueType.UINT64: "<Q",
    ValueType.INT64: "<q",
    ValueType.FLOAT64: "<d",
}
_SIZE: Final[dict[int, int]] = {int(t): struct.calcsize(f) for t, f in _SCALAR.items()}
_TYPES: Final[dict[int, GGMLType]] = {int(t): t for t in GGMLType}
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")

# columns of the metadata table
_K_TYPE, _K_OFFSET, _K_ITEM, _K_COUNT, _K_DATA, _K_STR = range(6)
# columns of the tensor table
_T_NDIMS, _T_NE, _T_TYPE, _T_REL, _T_NBYTES = 0, 1, 1 + MAX_DIMS, 2 + MAX_DIMS, 3 + MAX_DIMS
_T_COLS: Final = 4 + MAX_DIMS


@dataclass(frozen=True, slots=True)
class KVInfo:
    """One metadata entry: key, type, element type and count (arrays), offset of its type field in the file."""

    key: str
    type: ValueType
    offset: int
    item_type: ValueType | None = None
    count: int = 1
    #: the decoded value of a scalar or string (arrays are read through :class:`~ggml_core.models.GGUFFile`)
    value: Any = None
    #: arrays: file offset of the first element
    data_offset: int = 0


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's description: name, ggml ``ne`` (ne[0] fastest), type and byte range inside the file."""

    name: str
    ne: tuple[int, ...]
    type: GGMLType
    #: offset relative to the start of the data section, as stored
    rel_offset: int
    #: absolute offset in the file
    offset: int
    nbytes: int

    @property
    def nelements(self) -> int:
        """Total number of elements."""
        n = 1
        for d in self.ne:
            n *= d
        return n


class KVTable(Mapping[str, KVInfo]):
    """The metadata entries by key, in file order; each :class:`KVInfo` is made when asked for."""

    def __init__(self, path: str, buf: Any, index: dict[str, int], table: np.ndarray, str_offsets: np.ndarray):
        self._path, self._buf, self._index, self._table, self._str_offsets = path, buf, index, table, str_offsets

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __getitem__(self, key: str) -> KVInfo:
        row = self._table[self._index[key]]
        vtype = ValueType(int(row[_K_TYPE]))
        if vtype == ValueType.ARRAY:
            item = ValueType(int(row[_K_ITEM]))
            return KVInfo(key, vtype, int(row[_K_OFFSET]), item, int(row[_K_COUNT]), None, int(row[_K_DATA]))
        return KVInfo(key, vtype, int(row[_K_OFFSET]), value=self._scalar(key, vtype, int(row[_K_DATA])))

    def _scalar(self, key: str, vtype: ValueType, at: int) -> Any:
        if vtype == ValueType.STRING:
            n = _U64.unpack_from(self._buf, at)[0]
            return _utf8(self._path, f"metadata {text_repr(key)}", bytes(self._buf[at + 8 : at + 8 + n]))
        value = struct.unpack_from(_SCALAR[vtype], self._buf, at)[0]
        return bool(value) if vtype == ValueType.BOOL else value

    def string_offsets(self, key: str) -> np.ndarray:
        """For an array of strings: ``count + 1`` file offsets; string i is ``[o[i] + 8, o[i + 1])``."""
        row = self._table[self._index[key]]
        start = int(row[_K_STR])
        return self._str_offsets[start : start + int(row[_K_COUNT]) + 1]


class TensorTable(Sequence[TensorInfo]):
    """The tensor descriptions in file order (a sequence), and by name (:meth:`get`)."""

    def __init__(self, names: list[str], index: dict[str, int], table: np.ndarray, data_offset: int):
        self._names, self._index, self._table, self._data_offset = names, index, table, data_offset

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, i: int) -> TensorInfo: ...
    @overload
    def __getitem__(self, i: slice) -> list[TensorInfo]: ...
    def __getitem__(self, i: int | slice) -> TensorInfo | list[TensorInfo]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        row = self._table[i].tolist()
        ne = tuple(row[_T_NE : _T_NE + row[_T_NDIMS]])
        rel = row[_T_REL]
        return TensorInfo(self._names[i], ne, _TYPES[row[_T_TYPE]], rel, self._data_offset + rel, row[_T_NBYTES])

    def has(self, name: str) -> bool:
        """True when a tensor of this name exists."""
        return name in self._index

    def get(self, name: str) -> TensorInfo | None:
        """The tensor of this name, or None."""
        i = self._index.get(name)
        return None if i is None else self[i]


class HeaderInfo:
    """Everything the walk found: version, metadata, tensor infos, alignment, data offset, and the file's bytes."""

    def __init__(self, path: str, version: int, buf: Any, kv: KVTable, tensors: TensorTable, alignment: int,
                 data_offset: int) -> None:  # fmt: skip
        self.path, self.version, self.kv, self.tensors = path, version, kv, tensors
        self.alignment, self.data_offset = alignment, data_offset
        #: the whole file, read-only, memory-mapped (``uint8``)
        self.buf: np.ndarray = buf
        self.file_size = int(buf.size)


def _utf8(path: str, what: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GGUFError(path, what, f"is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None


class _Cursor:
    """Reads little-endian values from the mapped file, raising GGUFError on a short read."""

    def __init__(self, path: str, buf: Any, size: int) -> None:
        self.path = path
        self.buf = buf
        self.size = size
        self.pos = 0

    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise GGUFError(
                self.path,
                what,
                f"needs {n} bytes at offset {self.pos} but the file ends at {self.size} (truncated or corrupt)",
            )

    def u32(self, what: str) -> int:
        self.need(4, what)
        value: int = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def u64(self, what: str) -> int:
        self.need(8, what)
        value: int = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return value

    def string(self, what: str, limit: int) -> str:
        n = self.u64(f"{what} (length)")
        if n > limit:
            raise GGUFError(self.path, what, f"string length {n} is over the limit of {limit} bytes")
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return _utf8(self.path, what, raw)

    def skip_strings(self, count: int, what: str, out: array[int]) -> None:
        """Step over ``count`` strings, appending each one's offset (and the end) to ``out``."""
        buf, pos, size = self.buf, self.pos, self.size
        unpack = _U64.unpack_from
        append = out.append
        for i in range(count):
            append(pos)
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"{what}[{i}] (length)")
            n = unpack(buf, pos)[0]
            pos += 8 + n
            if pos > size:
                self.pos = pos - n
                self.need(n, f"{what}[{i}]")
        append(pos)
        self.pos = pos


def _value_type(cur: _Cursor, what: str) -> ValueType:
    raw = cur.u32(what)
    try:
        return ValueType(raw)
    except ValueError:
        raise GGUFError(cur.path, what, f"unknown value type {raw} (known: 0..12)") from None


def _read_kv(cur: _Cursor, index: int, rows: array[int], str_offsets: array[int]) -> str:
    """Read one entry, append its row (type, offset, item type, count, data offset, string table start)."""
    buf, pos, size = cur.buf, cur.pos, cur.size
    # fast path: a well-formed scalar entry wholly inside the file (errors take the checked path below)
    if pos + 8 <= size:
        n = _U64.unpack_from(buf, pos)[0]
        at = pos + 8 + n
        if 0 < n <= MAX_KEY_BYTES and at + 4 <= size:
            vtype = _U32.unpack_from(buf, at)[0]
            width = _SIZE.get(vtype)
            if width is not None and at + 4 + width <= size and (vtype != ValueType.BOOL or buf[at + 4] <= 1):
                try:
                    key = buf[pos + 8 : at].decode("utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    cur.pos = at + 4 + width
                    rows.extend((vtype, at, -1, 1, at + 4, -1))
                    return key
    key = cur.string(f"metadata entry {index} key", MAX_KEY_BYTES)
    if not key:
        raise GGUFError(cur.path, f"metadata entry {index} key", "is empty")
    what = f"metadata {text_repr(key)}"
    offset = cur.pos
    vtype = _value_type(cur, f"{what} type")
    if vtype == ValueType.STRING:
        at = cur.pos
        n = cur.u64(f"{what} (length)")
        cur.need(n, what)
        cur.pos += n
        rows.extend((vtype, offset, -1, 1, at, -1))
        return key
    if vtype != ValueType.ARRAY:
        at = cur.pos
        size = _SIZE[vtype]
        cur.need(size, what)
        if vtype == ValueType.BOOL and cur.buf[at] > 1:
            raise GGUFError(cur.path, what, f"boolean value {cur.buf[at]} is neither 0 nor 1")
        cur.pos += size
        rows.extend((vtype, offset, -1, 1, at, -1))
        return key
    itype = _value_type(cur, f"{what} array element type")
    count = cur.u64(f"{what} array length")
    at = cur.pos
    if itype == ValueType.ARRAY:
        raise GGUFError(cur.path, what, "arrays of arrays are not supported")
    if itype == ValueType.STRING:
        # every string has at least its 8-byte length: bound the count before looping
        if count > cur.remaining() // 8:
            raise GGUFError(
                cur.path, what, f"array of {count} strings cannot fit in the {cur.remaining()} bytes left in the file"
            )
        start = len(str_offsets)
        cur.skip_strings(count, what, str_offsets)
        rows.extend((vtype, offset, itype, count, at, start))
        return key
    item = _SIZE[itype]
    if count > cur.remaining() // item:
        raise GGUFError(
            cur.path,
            what,
            f"array of {count} {itype.name.lower()} values ({count * item} bytes) runs past the end of the file "
            f"({cur.remaining()} bytes left)",
        )
    cur.pos += count * item
    rows.extend((vtype, offset, itype, count, at, -1))
    return key


_DIMS: Final = [struct.Struct(f"<{n}QIQ") for n in range(MAX_DIMS + 1)]


def _read_tensor_info(cur: _Cursor, index: int, rows: array[int]) -> str:
    """Read one tensor info and append its row (n_dims, ne × 4, type, offset, nbytes)."""
    buf, pos = cur.buf, cur.pos
    # fast path: a well-formed info wholly inside the file, read with two unpacks (errors take the checked path)
    if pos + 12 <= cur.size:
        n = _U64.unpack_from(buf, pos)[0]
        at = pos + 8 + n
        if n < MAX_NAME and at + 4 <= cur.size:
            n_dims = _U32.unpack_from(buf, at)[0]
            if 1 <= n_dims <= MAX_DIMS and at + 4 + _DIMS[n_dims].size <= cur.size:
                *ne, raw_type, offset = _DIMS[n_dims].unpack_from(buf, at + 4)
                ttype = _TYPES.get(raw_type)
                if ttype is not None and max(ne) <= MAX_DIM and ne[0] % ttype.block_size == 0:
                    try:
                        name = buf[pos + 8 : at].decode("utf-8")
                    except UnicodeDecodeError:
                        pass
                    else:
                        cur.pos = at + 4 + _DIMS[n_dims].size
                        nbytes = min(_nbytes(ne, ttype), 2**62)
                        rows.extend((n_dims, *ne, *(1,) * (MAX_DIMS - n_dims), ttype, min(offset, MAX_DIM), nbytes))
                        return name
    name = cur.string(f"tensor info {index} name", MAX_NAME - 1)
    what = f"tensor {text_repr(name)}"
    n_dims = cur.u32(f"{what} n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(cur.path, f"{what} n_dims", f"{n_dims} dimensions; ggml tensors have 1 to {MAX_DIMS}")
    ne = [cur.u64(f"{what} ne[{i}]") for i in range(n_dims)]
    raw_type = cur.u32(f"{what} type")
    ttype = _TYPES.get(raw_type)
    if ttype is None:
        raise GGUFError(cur.path, f"{what} type", f"unknown ggml type id {raw_type}")
    offset = cur.u64(f"{what} offset")
    for i, d in enumerate(ne):
        if d > MAX_DIM:
            raise GGUFError(cur.path, f"{what} ne[{i}]", f"dimension {d} is over ggml's limit of {MAX_DIM}")
    if ne[0] % ttype.block_size:
        raise GGUFError(
            cur.path,
            f"{what} ne[0]",
            f"{ne[0]} is not a multiple of {ttype.traits.name}'s block size {ttype.block_size}",
        )
    nbytes = _nbytes(ne, ttype)
    # an offset or size past the file is an error found below; keep the table's numbers within int64
    rows.extend((n_dims, *ne, *(1,) * (MAX_DIMS - n_dims), ttype, min(offset, MAX_DIM), min(nbytes, 2**62)))
    return name


def _nbytes(ne: Sequence[int], ttype: GGMLType) -> int:
    n = ne[0] // ttype.block_size * ttype.type_size
    for d in ne[1:]:
        n *= d
    return n


def read_header(path: str | os.PathLike[str]) -> HeaderInfo:
    """Walk and check the header of the GGUF file at ``path``; raise :class:`GGUFError` on anything malformed.

    The file stays memory-mapped (read-only) for as long as the returned object, or a view of it, lives.
    """
    p = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):  # opening a FIFO would block; a device or directory cannot map
            raise GGUFError(p, "file", "cannot be read: it is not a regular file (a directory, FIFO, socket or device)")
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise GGUFError(p, "header", f"file is {size} bytes, shorter than a GGUF header (24 bytes)")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise GGUFError(p, "file", f"cannot be read: {exc.strerror or exc}") from None
    return _walk(p, mm, size)


def _walk(path: str, mm: mmap.mmap, size: int) -> HeaderInfo:
    cur = _Cursor(path, mm, size)
    magic = bytes(mm[0:4])
    if magic != GGUF_MAGIC:
        raise GGUFError(path, "header.magic", f"is {magic!r}, not {GGUF_MAGIC!r}: this is not a GGUF file")
    cur.pos = 4
    version = cur.u32("header.version")
    if version not in SUPPORTED_VERSIONS:
        if int.from_bytes(version.to_bytes(4, "little"), "big") in SUPPORTED_VERSIONS:
            raise GGUFError(path, "header.version", "the file is big-endian; only little-endian GGUF is supported")
        raise GGUFError(path, "header.version", f"version {version} is not supported (supported: 2, 3)")
    n_tensors = cur.u64("header.n_tensors")
    n_kv = cur.u64("header.n_kv")
    # the smallest metadata entry: key length 8 + 1 byte of key + type 4 + 1 byte value
    if n_kv > cur.remaining() // 14:
        raise GGUFError(path, "header.n_kv", f"{n_kv} metadata entries cannot fit in a file of {size} bytes")
    # the smallest tensor info: name length 8 + 1 + n_dims 4 + one dim 8 + type 4 + offset 8
    if n_tensors > cur.remaining() // 33:
        raise GGUFError(path, "header.n_tensors", f"{n_tensors} tensors cannot fit in a file of {size} bytes")
    kv_index: dict[str, int] = {}
    kv_rows: array[int] = array("q")
    str_offsets: array[int] = array("q")
    for i in range(n_kv):
        key = _read_kv(cur, i, kv_rows, str_offsets)
        if key in kv_index:
            raise GGUFError(path, f"metadata {text_repr(key)}", "appears twice")
        kv_index[key] = i
    kv = KVTable(path, mm, kv_index, _table(kv_rows, 6), np.frombuffer(str_offsets, dtype=np.int64))
    alignment = _alignment(path, kv)
    names: list[str] = []
    t_index: dict[str, int] = {}
    t_rows: array[int] = array("q")
    for i in range(n_tensors):
        name = _read_tensor_info(cur, i, t_rows)
        if name in t_index:
            raise GGUFError(path, f"tensor {text_repr(name)}", "appears twice")
        t_index[name] = i
        names.append(name)
    data_offset = cur.pos + (-cur.pos) % alignment
    if n_tensors and data_offset > size:
        raise GGUFError(path, "data section", f"starts at {data_offset}, past the end of the file ({size} bytes)")
    table = _table(t_rows, _T_COLS)
    _check_spans(path, names, table, alignment, size - data_offset)
    buf = np.frombuffer(mm, dtype=np.uint8)
    return HeaderInfo(path, version, buf, kv, TensorTable(names, t_index, table, data_offset), alignment, data_offset)


def _table(rows: array[int], cols: int) -> np.ndarray:
    return np.frombuffer(rows, dtype=np.int64).reshape(-1, cols) if rows else np.zeros((0, cols), np.int64)


def _alignment(path: str, kv: KVTable) -> int:
    if "general.alignment" not in kv:
        return DEFAULT_ALIGNMENT
    info = kv["general.alignment"]
    if info.type != ValueType.UINT32:
        raise GGUFError(path, "metadata 'general.alignment'", f"must be uint32, is {info.type.name.lower()}")
    a = int(info.value)
    if a == 0 or a & (a - 1) or a > 2**20:
        raise GGUFError(path, "metadata 'general.alignment'", f"{a} is not a power of two up to 1 MiB")
    return a


def _check_spans(path: str, names: list[str], table: np.ndarray, alignment: int, data_size: int) -> None:
    """Every tensor aligned, inside the data section, and not overlapping another (vectorised over the table)."""
    rel, nbytes = table[:, _T_REL], table[:, _T_NBYTES]
    misaligned = rel % alignment != 0
    outside = (rel > data_size) | (nbytes > data_size - rel)
    bad = np.flatnonzero(misaligned | outside)
    if bad.size:
        i = int(bad[0])
        what = f"tensor {text_repr(names[i])} offset"
        r = int(rel[i])
        if misaligned[i]:
            raise GGUFError(path, what, f"{r} is not a multiple of the alignment {alignment}")
        row = table[i].tolist()
        n = _nbytes(row[_T_NE : _T_NE + row[_T_NDIMS]], _TYPES[row[_T_TYPE]])
        raise GGUFError(
            path,
            what,
            f"data [{r}, {r + n}) lies outside the data section of {data_size} bytes "
            "(file truncated or offset corrupt)",
        )
    sized = np.flatnonzero(nbytes > 0)  # a tensor of no bytes overlaps nothing
    if sized.size < 2:
        return
    order = sized[np.lexsort((rel[sized] + nbytes[sized], rel[sized]))]
    starts, ends = rel[order], rel[order] + nbytes[order]
    reach = np.maximum.accumulate(ends)[:-1]
    hit = np.flatnonzero(starts[1:] < reach)
    if hit.size:
        j = int(hit[0]) + 1
        k = int(np.argmax(ends[:j] > starts[j]))  # the first earlier span still open at this start
        a, b = int(order[k]), int(order[j])
        raise GGUFError(
            path,
            f"tensor {text_repr(names[b])} offset",
            f"data at {int(rel[b])} overlaps tensor {text_repr(names[a])} [{int(rel[a])}, {int(rel[a] + nbytes[a])})",
        )
