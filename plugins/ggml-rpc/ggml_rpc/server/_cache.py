"""The tensor cache directory (``--cache-dir``): files named by the FNV-1a 64 hash of their bytes, with a quota.

SET_TENSOR with ``cache_flag`` stores its data when it is larger than llama.cpp's threshold (10 MiB); the data is
hashed and written as it streams in (to a temporary file, renamed when complete, so a half-written file never has
a hash's name). The directory holds at most ``max_bytes``: before a file is added, the least recently used ones
(by modification time, refreshed on every hit) are removed. SET_TENSOR_HASH finds a file by hash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import IO, Final

from ggml_rpc import _fnv

__all__ = ["CacheWriter", "TensorCache"]

log = logging.getLogger("ggml_rpc.server")

_NAME: Final = re.compile(r"[0-9a-f]{16}")


class TensorCache:
    """A directory of cached tensors, at most ``max_bytes`` in all, files of more than ``min_bytes`` only."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int, min_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        #: name -> size, least recently used first
        self._lru: OrderedDict[str, int] = OrderedDict()
        found = []
        for p in self.dir.iterdir():
            if p.name.startswith(".part-"):
                with contextlib.suppress(OSError):
                    p.unlink()  # a store that never finished
            elif _NAME.fullmatch(p.name) and p.is_file():
                st = p.stat()
                found.append((st.st_mtime, p.name, st.st_size))
        for _, name, size in sorted(found):
            self._lru[name] = size
        with self._lock:
            self._evict(0)

    @property
    def bytes(self) -> int:
        """Bytes held now."""
        with self._lock:
            return sum(self._lru.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._lru)

    def wants(self, n: int) -> bool:
        """True when data of ``n`` bytes is to be cached."""
        return self.min_bytes < n <= self.max_bytes

    def lookup(self, digest: int) -> Path | None:
        """The file of a hash (marked as just used), or None."""
        name = f"{digest & (2**64 - 1):016x}"
        with self._lock:
            if name not in self._lru:
                return None
            self._lru.move_to_end(name)
        path = self.dir / name
        with contextlib.suppress(OSError):
            os.utime(path)  # the order survives a restart
            return path
        with self._lock:
            self._lru.pop(name, None)
        return None

    def load(
        self, path: Path, digest: int, room: int, write: Callable[[int, memoryview], None], stage: memoryview
    ) -> bool:
        """Copy the cache file ``path`` through ``write(offset, chunk)`` in chunks of ``stage``, hashing it on the
        way; False when it is not usable (larger than ``room`` bytes, unreadable, short, or not of ``digest``).

        A file whose hash turns out wrong leaves the tensor partly written; the answer 'not cached' makes the
        client send the data itself, which overwrites it.
        """
        try:
            with path.open("rb") as f:
                n = os.fstat(f.fileno()).st_size
                if n > room:
                    return False
                h, at = _fnv.FNV_OFFSET, 0
                while at < n:
                    chunk = stage[: min(stage.nbytes, n - at)]
                    if f.readinto(chunk) != chunk.nbytes:
                        return False
                    if _fnv.fast():
                        h = _fnv.fnv1a64(chunk, h)
                    write(at, chunk)
                    at += chunk.nbytes
        except OSError as exc:
            log.warning("cache file %s could not be read: %s", path, exc)
            return False
        if _fnv.fast() and h != digest:
            log.warning("cache file %s does not hold the data of its hash; ignored", path)
            return False
        return True

    def writer(self, n: int) -> CacheWriter | None:
        """A writer for ``n`` bytes of data about to arrive, or None when they are not to be cached."""
        if not self.wants(n):
            return None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".part-")
        except OSError as exc:
            log.warning("cannot write to the cache directory %s: %s", self.dir, exc)
            return None
        return CacheWriter(self, os.fdopen(fd, "wb"), Path(tmp), n)

    def _evict(self, room: int) -> None:
        """Remove least recently used files until ``room`` more bytes fit (lock held)."""
        total = sum(self._lru.values())
        while self._lru and total + room > self.max_bytes:
            name, size = self._lru.popitem(last=False)
            total -= size
            with contextlib.suppress(OSError):
                (self.dir / name).unlink()
            log.info(
                "cache: removed %s (%d bytes, least recently used) to stay within %d bytes", name, size, self.max_bytes
            )

    def _commit(self, tmp: Path, digest: int, n: int) -> None:
        name = f"{digest:016x}"
        with self._lock:
            if name in self._lru:
                self._lru.move_to_end(name)
                tmp.unlink(missing_ok=True)
                return
            self._evict(n)
            os.replace(tmp, self.dir / name)
            self._lru[name] = n
        log.info("cached %d bytes as %s", n, name)


class CacheWriter:
    """Hashes and writes data as it arrives; :meth:`finish` gives it its hash's name, :meth:`abort` drops it."""

    def __init__(self, cache: TensorCache, f: IO[bytes], tmp: Path, n: int) -> None:
        self.cache, self._f, self._tmp, self.n = cache, f, tmp, n
        self._hash = _fnv.FNV_OFFSET
        self._got = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """The next bytes."""
        self._hash = _fnv.fnv1a64(data, self._hash)
        self._f.write(data)
        self._got += memoryview(data).nbytes

    def finish(self) -> None:
        """Store the file (only if every byte came)."""
        try:
            self._f.close()
            if self._got != self.n:
                raise OSError(f"{self._got} of {self.n} bytes")
            self.cache._commit(self._tmp, self._hash, self.n)
        except OSError as exc:
            log.warning("could not store a cache file in %s: %s", self.cache.dir, exc)
            self.abort()

    def abort(self) -> None:
        """Drop the partial file."""
        with contextlib.suppress(OSError):
            self._f.close()
        with contextlib.suppress(OSError):
            self._tmp.unlink()
