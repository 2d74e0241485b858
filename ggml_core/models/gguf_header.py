"""A bounded walk over a GGUF file's header: every length, count, type and offset checked before it is used.

gguf-py's reader trusts the file: an absurd array count makes it loop for hours, a huge string length makes it
allocate, a tensor offset past the end gives a short view that fails much later. This walk reads the same header
with every quantity checked against the bytes that are really there, so that each malformed file gets a
:class:`~ggml_core.GGUFError` naming the file and the field — in time proportional to the file's size, with no
allocation larger than the file. Only then is the file handed to ``gguf.GGUFReader``.

Layout (little-endian): ``"GGUF" | version u32 | n_tensors u64 | n_kv u64 | n_kv × (key, type u32, value) |
n_tensors × (name, n_dims u32, ne u64 × n_dims, type u32, offset u64) | padding to the alignment | data``.
"""

from __future__ import annotations

import enum
import itertools
import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from typing import Any, Final

from ggml_core._errors import GGUFError
from ggml_core._tensor import MAX_DIMS, MAX_NAME
from ggml_core._types import GGMLType

__all__ = ["GGUF_MAGIC", "HeaderInfo", "KVInfo", "TensorInfo", "ValueType", "read_header"]

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


@dataclass(frozen=True)
class KVInfo:
    """One metadata entry: its key, type, element type (arrays), element count (arrays) and file offset."""

    key: str
    type: ValueType
    offset: int
    item_type: ValueType | None = None
    count: int = 1
    #: the decoded value for scalars and strings (arrays are decoded on demand by the file object)
    value: Any = None


@dataclass(frozen=True)
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


@dataclass
class HeaderInfo:
    """Everything the walk found: version, metadata entries, tensor infos, alignment, data offset, file size."""

    path: str
    version: int
    file_size: int
    kv: dict[str, KVInfo] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    alignment: int = DEFAULT_ALIGNMENT
    data_offset: int = 0


class _Cursor:
    """Reads little-endian values from a bytes-like object, raising GGUFError on a short read."""

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

    def unpack(self, fmt: str, what: str) -> Any:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def u32(self, what: str) -> int:
        return int(self.unpack("<I", what))

    def u64(self, what: str) -> int:
        return int(self.unpack("<Q", what))

    def string(self, what: str, limit: int | None = None) -> str:
        n = self.u64(f"{what} (length)")
        if limit is not None and n > limit:
            raise GGUFError(self.path, what, f"string length {n} is over the limit of {limit} bytes")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFError(self.path, what, f"is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None

    def skip_string(self, what: str) -> None:
        n = self.u64(f"{what} (length)")
        self.need(n, what)
        self.pos += n


def _value_type(cur: _Cursor, what: str) -> ValueType:
    raw = cur.u32(what)
    try:
        return ValueType(raw)
    except ValueError:
        raise GGUFError(cur.path, what, f"unknown value type {raw} (known: 0..12)") from None


def _read_kv(cur: _Cursor, index: int) -> KVInfo:
    key = cur.string(f"metadata entry {index} key", MAX_KEY_BYTES)
    if not key:
        raise GGUFError(cur.path, f"metadata entry {index} key", "is empty")
    what = f"metadata {key!r}"
    offset = cur.pos
    vtype = _value_type(cur, f"{what} type")
    if vtype == ValueType.STRING:
        return KVInfo(key, vtype, offset, value=cur.string(what))
    if vtype != ValueType.ARRAY:
        value = cur.unpack(_SCALAR[vtype], what)
        if vtype == ValueType.BOOL:
            if value > 1:
                raise GGUFError(cur.path, what, f"boolean value {value} is neither 0 nor 1")
            value = bool(value)
        return KVInfo(key, vtype, offset, value=value)
    itype = _value_type(cur, f"{what} array element type")
    count = cur.u64(f"{what} array length")
    if itype == ValueType.ARRAY:
        raise GGUFError(cur.path, what, "arrays of arrays are not supported")
    if itype == ValueType.STRING:
        # every string has at least its 8-byte length: bound the count before looping
        if count > cur.remaining() // 8:
            raise GGUFError(
                cur.path, what, f"array of {count} strings cannot fit in the {cur.remaining()} bytes left in the file"
            )
        for i in range(count):
            cur.skip_string(f"{what}[{i}]")
    else:
        item = struct.calcsize(_SCALAR[itype])
        if count > cur.remaining() // item:
            raise GGUFError(
                cur.path,
                what,
                f"array of {count} {itype.name.lower()} values ({count * item} bytes) runs past the end of the file "
                f"({cur.remaining()} bytes left)",
            )
        cur.pos += count * item
    return KVInfo(key, vtype, offset, item_type=itype, count=count)


def _read_tensor_info(cur: _Cursor, index: int) -> tuple[str, tuple[int, ...], GGMLType, int]:
    name = cur.string(f"tensor info {index} name", MAX_NAME - 1)
    what = f"tensor {name!r}"
    n_dims = cur.u32(f"{what} n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(cur.path, f"{what} n_dims", f"{n_dims} dimensions; ggml tensors have 1 to {MAX_DIMS}")
    ne = tuple(cur.u64(f"{what} ne[{i}]") for i in range(n_dims))
    raw_type = cur.u32(f"{what} type")
    try:
        ttype = GGMLType(raw_type)
    except ValueError:
        raise GGUFError(cur.path, f"{what} type", f"unknown ggml type id {raw_type}") from None
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
    return name, ne, ttype, offset


def _nbytes(ne: tuple[int, ...], ttype: GGMLType) -> int:
    n = ne[0] // ttype.block_size * ttype.type_size
    for d in ne[1:]:
        n *= d
    return n


def read_header(path: str | os.PathLike[str]) -> HeaderInfo:
    """Walk and check the header of the GGUF file at ``path``; raise :class:`GGUFError` on anything malformed."""
    p = os.fspath(path)
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):  # opening a FIFO would block; a device or directory cannot map
            raise GGUFError(p, "file", "cannot be read: it is not a regular file (a directory, FIFO, socket or device)")
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise GGUFError(p, "header", f"file is {size} bytes, shorter than a GGUF header (24 bytes)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _walk(p, mm, size)
    except OSError as exc:
        raise GGUFError(p, "file", f"cannot be read: {exc.strerror or exc}") from None


def _walk(path: str, mm: Any, size: int) -> HeaderInfo:
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
    info = HeaderInfo(path=path, version=version, file_size=size)
    for i in range(n_kv):
        kv = _read_kv(cur, i)
        if kv.key in info.kv:
            raise GGUFError(path, f"metadata {kv.key!r}", "appears twice")
        info.kv[kv.key] = kv
    align_kv = info.kv.get("general.alignment")
    if align_kv is not None:
        if align_kv.type != ValueType.UINT32:
            raise GGUFError(path, "metadata 'general.alignment'", f"must be uint32, is {align_kv.type.name.lower()}")
        a = int(align_kv.value)
        if a == 0 or a & (a - 1) or a > 2**20:
            raise GGUFError(path, "metadata 'general.alignment'", f"{a} is not a power of two up to 1 MiB")
        info.alignment = a
    raw: list[tuple[str, tuple[int, ...], GGMLType, int]] = []
    names: set[str] = set()
    for i in range(n_tensors):
        t = _read_tensor_info(cur, i)
        if t[0] in names:
            raise GGUFError(path, f"tensor {t[0]!r}", "appears twice")
        names.add(t[0])
        raw.append(t)
    pad = (-cur.pos) % info.alignment
    info.data_offset = cur.pos + pad
    if n_tensors and info.data_offset > size:
        raise GGUFError(path, "data section", f"starts at {info.data_offset}, past the end of the file ({size} bytes)")
    data_size = size - info.data_offset
    spans: list[tuple[int, int, str]] = []
    for name, ne, ttype, rel in raw:
        what = f"tensor {name!r}"
        if rel % info.alignment:
            raise GGUFError(path, f"{what} offset", f"{rel} is not a multiple of the alignment {info.alignment}")
        nbytes = _nbytes(ne, ttype)
        if rel > data_size or nbytes > data_size - rel:
            raise GGUFError(
                path,
                f"{what} offset",
                f"data [{rel}, {rel + nbytes}) lies outside the data section of {data_size} bytes "
                f"(file truncated or offset corrupt)",
            )
        info.tensors.append(TensorInfo(name, ne, ttype, rel, info.data_offset + rel, nbytes))
        spans.append((rel, rel + nbytes, name))
    spans.sort()
    for (s0, e0, n0), (s1, _e1, n1) in itertools.pairwise(spans):
        if s1 < e0:
            raise GGUFError(path, f"tensor {n1!r} offset", f"data at {s1} overlaps tensor {n0!r} [{s0}, {e0})")
    return info
