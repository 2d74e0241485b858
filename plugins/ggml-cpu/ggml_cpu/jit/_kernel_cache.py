"""Where numba's cache of the compiled kernels lives, and what invalidates an entry.

* **Root.** ``$NUMBA_CACHE_DIR/ggml-cpu`` when that is set, else ``$XDG_CACHE_HOME/ggml-cpu`` (``~/.cache/...``:
  writable where site-packages is not, and shared by every environment and reinstall), else the package's own
  ``jit/__pycache__``; None when none is writable (kernels then compile in every process).
* **Key.** numba keys a kernel on its own source file's contents, not on the helpers it inlines from other files
  (``_simd``'s intrinsics, the row kernels), so each kernel goes to a folder named after the contents of every
  module of this package its module imports, directly or not (found by reading their import statements), with
  the numba and llvmlite versions and the code settings: editing or adding an unrelated file (another op's
  kernels, the Python drivers) keeps the other kernels' entries, and an upgrade that leaves a kernel's sources as
  they were keeps it too.
* **Location inside.** numba names its sub-folder after the absolute path of the source folder; kernels here use
  the package-relative path instead (:data:`LOCATOR`), so that two environments with the same sources share the
  entries.
* **Clean-up.** Folders no process used for 30 days are removed.

Imported only once numba is loaded (see :mod:`._jit`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from numba.core.caching import UserProvidedCacheLocator

__all__ = ["LOCATOR", "PackageLocator", "cached", "kernel_dir", "record_seconds", "recorded_seconds", "root", "sources"]

#: ``ggml_cpu``'s folder (this file is ``ggml_cpu/jit/_kernel_cache.py``)
_PACKAGE: Final = Path(__file__).resolve().parents[1]
#: folders unused this long are removed (other installs sharing the root keep theirs)
_STALE_SECONDS: Final = 30 * 86400
#: each kernel's seconds of its last compile, in the cache root (the compile notice's estimate)
_TIMES: Final = "compile-seconds.json"
#: numba's ``CACHE_LOCATOR_CLASSES`` while our kernels compile
LOCATOR: Final = f"{__name__}.PackageLocator"


class PackageLocator(UserProvidedCacheLocator):
    """numba's locator for ``NUMBA_CACHE_DIR``, with the sub-folder named after the package-relative source folder
    (``ggml_cpu_quant``) instead of a hash of its absolute path."""

    @classmethod
    def get_suitable_cache_subpath(cls, py_file: str) -> str:
        parts = Path(os.path.abspath(py_file)).parent.parts
        if _PACKAGE.name not in parts:
            return str(super().get_suitable_cache_subpath(py_file))
        first = len(parts) - 1 - parts[::-1].index(_PACKAGE.name)
        return "_".join(parts[first:])


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        return True
    except OSError:
        return False


_root: list[Path | None] = []


def root() -> Path | None:
    """The writable folder holding the kernels' cache folders (None: no writable location); stale folders in it
    are removed on the first call."""
    if not _root:
        user = os.environ.get("NUMBA_CACHE_DIR")
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        candidates = [Path(user) / "ggml-cpu"] if user else []
        candidates += [Path(xdg) / "ggml-cpu", Path(__file__).parent / "__pycache__"]
        found = next((c for c in candidates if _writable(c)), None)
        if found is not None:
            _prune(found)
        _root.append(found)
    return _root[0]


def _prune(folder: Path) -> None:
    now = time.time()
    for old in folder.glob("numba-*"):
        try:
            stale = old.is_dir() and now - old.stat().st_mtime > _STALE_SECONDS
        except OSError:
            continue
        if stale:
            shutil.rmtree(old, ignore_errors=True)


def _module_file(name: str) -> Path | None:
    """The source of the ``ggml_cpu`` module ``name`` (None for a name that is not a module of the package)."""
    parts = name.split(".")[1:]
    for path in (_PACKAGE.joinpath(*parts).with_suffix(".py"), _PACKAGE.joinpath(*parts, "__init__.py")):
        if parts and path.is_file():
            return path
    return None


#: ``from ggml_cpu.x import a, b`` (parenthesised over lines too) and ``import ggml_cpu.x``, anywhere in a file
_FROM: Final = re.compile(r"^\s*from\s+(ggml_cpu[\w.]*)\s+import\s+(\([^)]*\)|[^\n]*)", re.MULTILINE)
_IMPORT: Final = re.compile(r"^\s*import\s+(ggml_cpu[\w.]*)", re.MULTILINE)


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """The ``ggml_cpu`` modules that ``path`` imports, anywhere in the file: ``from package import module`` names
    the module only (not the package's ``__init__``, which imports much that the kernels never call). Read with
    regular expressions, not parsed: this runs in every process that loads a kernel (parsing the ~20 modules a
    kernel depends on took a large part of a second)."""
    text = path.read_text(encoding="utf-8")
    out = set(_IMPORT.findall(text))
    for module, names in _FROM.findall(text):
        for name in re.sub(r"#[^\n]*|[()\\]", " ", names).split(","):
            name = name.split(" as ")[0].strip()
            if name:
                full = f"{module}.{name}"
                out.add(full if _module_file(full) is not None else module)
    return frozenset(out)


def sources(module: str) -> list[Path]:
    """The source of the ``ggml_cpu`` module ``module`` and of every package module it imports, directly or not
    (sorted)."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        path = _module_file(todo.pop())
        if path is not None and path not in seen:
            seen.add(path)
            todo.extend(_imports(path))
    return sorted(seen)


@functools.cache
def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


_keys: dict[str, str] = {}


def _sources_key(module: str) -> str:
    """Hash of the contents of :func:`sources` of ``module``."""
    key = _keys.get(module)
    if key is None:
        h = hashlib.sha256()
        for path in sources(module):
            h.update(str(path.relative_to(_PACKAGE)).encode())
            h.update(_digest(path))
        key = _keys[module] = h.hexdigest()[:12]
    return key


_used: set[Path] = set()


def kernel_dir(module: str, tag: str) -> str | None:
    """The cache folder of kernels defined in ``module`` (``tag``: the numba version and code settings), created
    and marked used; None when there is no writable root."""
    base = root()
    if base is None:
        return None
    folder = base / f"numba-{_sources_key(module)}-{tag}"
    if folder not in _used:
        _used.add(folder)
        with contextlib.suppress(OSError):
            folder.mkdir(parents=True, exist_ok=True)
            os.utime(folder)
    return str(folder)


def cached(folder: str, fn: Callable[..., Any]) -> bool:
    """True when numba's cache in ``folder`` has an index for ``fn`` (it then loads instead of compiling; numba
    names the index ``module.qualname-line.pyXY<abiflags>.nbi``, without ``<`` and ``>``)."""
    sub = PackageLocator.get_suitable_cache_subpath(fn.__code__.co_filename)
    full = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}".replace("<", "").replace(">", "")
    version = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
    return Path(folder, sub, f"{full}-{fn.__code__.co_firstlineno}.{version}.nbi").is_file()


def recorded_seconds() -> dict[str, float]:
    """Each kernel's wall seconds of its last compile in this cache root (empty: none recorded, or no root)."""
    base = root()
    try:
        data = json.loads((base / _TIMES).read_text(encoding="utf-8")) if base is not None else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and v >= 0}


def record_seconds(name: str, seconds: float) -> None:
    """Remember that kernel ``name`` took ``seconds`` to compile (replaced atomically; lost silently when the root
    is not writable)."""
    base = root()
    if base is None:
        return
    data = recorded_seconds()
    data[name] = round(seconds, 3)
    tmp = base / f".{_TIMES}.{os.getpid()}"
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, base / _TIMES)
