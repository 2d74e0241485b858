"""Kernel compilation: the package's ``kernels/*.cu`` built with nvcc for one architecture, cached on disk.

Each device compiles a module the first time one of its kernels is needed, with ``-arch=sm_XY`` taken from the
device's compute capability, so Hopper (9.0) gets native sm_90 machine code rather than PTX compiled by the driver
at load time. Images are cached in memory per (architecture, module) and on disk under
``$GGML_CUDA_CACHE_DIR`` (default ``~/.cache/ggml-cuda``), keyed by the sources, the flags and nvcc's version.

This is what pycuda's ``SourceModule`` does (nvcc at run time, a cubin, a disk cache), done here so that it can be
exercised without a driver: compiling needs only nvcc, loading needs the GPU.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path
from typing import Final

from ggml_core import GGMLError

__all__ = [
    "KERNEL_DIR",
    "NVCC_FLAGS",
    "CompileError",
    "arch_flag",
    "cache_dir",
    "compile_module",
    "find_nvcc",
    "module_names",
    "nvcc_version",
    "precompile",
]

#: the folder of the CUDA C sources shipped in the package
KERNEL_DIR: Final = Path(__file__).resolve().parent / "kernels"

#: nvcc flags for every module (no fast math: results follow ggml's float rounding)
NVCC_FLAGS: Final = ("-O3", "-std=c++17", "-lineinfo")

_lock = threading.Lock()
_images: dict[tuple[str, str, str], bytes] = {}


class CompileError(GGMLError, RuntimeError):
    """nvcc failed or is missing; carries the module, the architecture and nvcc's output."""

    def __init__(self, module: str, arch: str, message: str) -> None:
        super().__init__(f"compiling kernels/{module}.cu for {arch} failed: {message}")
        self.module, self.arch = module, arch


def arch_flag(compute_capability: tuple[int, int]) -> str:
    """``sm_XY`` for a compute capability, e.g. (9, 0) → ``"sm_90"``, (8, 6) → ``"sm_86"``."""
    major, minor = compute_capability
    if major < 1 or minor < 0:
        raise ValueError(f"invalid compute capability {compute_capability}")
    return f"sm_{major}{minor}"


def module_names() -> list[str]:
    """The kernel modules (``.cu`` file stems), sorted."""
    return sorted(p.stem for p in KERNEL_DIR.glob("*.cu"))


def _sources_digest(module: str) -> str:
    h = hashlib.sha256()
    path = KERNEL_DIR / f"{module}.cu"
    if not path.is_file():
        raise CompileError(module, "-", f"no such kernel source {path}")
    h.update(path.read_bytes())
    for header in sorted(KERNEL_DIR.glob("*.cuh")):
        h.update(header.name.encode())
        h.update(header.read_bytes())
    return h.hexdigest()


def find_nvcc() -> str | None:
    """nvcc from ``$GGML_CUDA_NVCC``, the PATH, ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``; None if absent."""
    env = os.environ.get("GGML_CUDA_NVCC")
    if env:
        return env if Path(env).is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


@lru_cache(maxsize=8)
def nvcc_version(nvcc: str) -> str:
    """The last line of ``nvcc --version`` (the build), for cache keys and ``features()``."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else "unknown"


def cache_dir() -> Path:
    """Where compiled images are kept between processes."""
    env = os.environ.get("GGML_CUDA_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ggml-cuda"


def compile_module(
    module: str,
    arch: str,
    *,
    target: str = "cubin",
    nvcc: str | None = None,
    extra_flags: Sequence[str] = (),
    use_cache: bool = True,
    timeout: float = 600.0,
) -> bytes:
    """Compile ``kernels/<module>.cu`` for ``arch`` (``"sm_90"``) to a ``cubin`` (or ``ptx``); returns the image.

    Raises :class:`CompileError` with nvcc's output when nvcc is missing or fails.
    """
    if target not in ("cubin", "ptx"):
        raise ValueError(f"target must be 'cubin' or 'ptx', got {target!r}")
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError(module, arch, "nvcc not found (set GGML_CUDA_NVCC or put the CUDA toolkit's bin on PATH)")
    flags = (*NVCC_FLAGS, *extra_flags)
    key_src = "\n".join([_sources_digest(module), arch, target, *flags, nvcc_version(nvcc)])
    key = hashlib.sha256(key_src.encode()).hexdigest()[:32]
    mem_key = (module, arch, key)
    with _lock:
        if mem_key in _images:
            return _images[mem_key]
    disk = cache_dir() / f"{module}-{arch}-{key}.{target}"
    if use_cache and disk.is_file():
        image = disk.read_bytes()
    else:
        image = _run_nvcc(nvcc, module, arch, target, flags, timeout)
        if use_cache:
            _store(disk, image)
    with _lock:
        _images[mem_key] = image
    return image


def _run_nvcc(nvcc: str, module: str, arch: str, target: str, flags: Sequence[str], timeout: float) -> bytes:
    with tempfile.TemporaryDirectory(prefix="ggml-cuda-") as tmp:
        out = Path(tmp) / f"{module}.{target}"
        cmd = [
            nvcc,
            f"--{target}",
            f"-arch={arch}",
            *flags,
            "-I",
            str(KERNEL_DIR),
            "-o",
            str(out),
            str(KERNEL_DIR / f"{module}.cu"),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise CompileError(module, arch, f"nvcc ran longer than {timeout:.0f} s") from exc
        except OSError as exc:
            raise CompileError(module, arch, f"cannot run {nvcc}: {exc}") from exc
        if proc.returncode != 0 or not out.is_file():
            log = (proc.stderr or proc.stdout).strip()
            raise CompileError(module, arch, f"nvcc exited with {proc.returncode}:\n{log}")
        return out.read_bytes()


def _store(path: Path, image: bytes) -> None:
    """Write atomically; a cache that cannot be written is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(image)
        os.replace(tmp, path)
    except OSError:
        pass


def precompile(arch: str, *, jobs: int | None = None, target: str = "cubin") -> dict[str, int]:
    """Compile every module for ``arch`` in parallel (fills the disk cache); returns module → image bytes."""
    names = module_names()
    with ThreadPoolExecutor(max_workers=jobs or min(len(names), os.cpu_count() or 1)) as pool:
        images = list(pool.map(lambda m: compile_module(m, arch, target=target), names))
    return {m: len(img) for m, img in zip(names, images, strict=False)}


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import time

    p = argparse.ArgumentParser(prog="python -m ggml_cuda._compile", description="fill the ggml-cuda kernel cache")
    p.add_argument("--arch", required=True, help="e.g. sm_90")
    p.add_argument("--jobs", type=int, default=None)
    args = p.parse_args(argv)
    start = time.perf_counter()
    sizes = precompile(args.arch, jobs=args.jobs)
    for name, size in sizes.items():
        print(f"{name}: {size} bytes")
    print(f"{len(sizes)} modules for {args.arch} in {time.perf_counter() - start:.1f} s (cache {cache_dir()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
