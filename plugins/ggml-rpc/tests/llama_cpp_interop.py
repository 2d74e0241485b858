"""llama.cpp's RPC server and client for the interop tests, built from the llama-cpp-python 0.3.36 sdist.

The sdist vendors llama.cpp at commit 0c1e570 (RPC protocol 7.0.0). :func:`llama_cpp_tools` downloads it with pip
into a user cache directory, unpacks it into a temporary directory, builds only the CMake target
``ggml-rpc-server`` (CPU only, static libraries, ~65-110 s on 2 cores) and keeps the server binary, ggml's static
libraries and headers in the cache; ``tests/interop/rpc_client_harness.cpp`` (ggml's own RPC client driven through
ggml's public API) is compiled against them in seconds. Later runs reuse the cache. Nothing is built inside the
repository. Cache: ``GGML_RPC_LLAMA_CACHE`` or ``~/.cache/ggml-core/llama-rpc-server-0c1e570``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LlamaCppTools", "llama_cpp_server", "llama_cpp_tools"]

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
VENDOR = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
HARNESS = Path(__file__).parent / "interop" / "rpc_client_harness.cpp"
LIBS = ("ggml-rpc/libggml-rpc.a", "libggml.a", "libggml-cpu.a", "libggml-base.a")
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_RPC=ON",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary, and static libraries for the harness
    "-DGGML_NATIVE=OFF",
]


class Unavailable(Exception):
    """llama.cpp's tools cannot be had here (no compiler, no cmake, no network); the message says why."""


@dataclass(frozen=True)
class LlamaCppTools:
    """The built binaries and the headers they were built from."""

    server: Path
    harness: Path
    include: Path


def cache_dir() -> Path:
    """Where the sdist, the binaries, the libraries and the headers are kept between runs."""
    env = os.environ.get("GGML_RPC_LLAMA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ggml-core" / "llama-rpc-server-0c1e570"


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None) -> None:
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{cmd[0]} took longer than {timeout:.0f} s (log: {log})") from exc
    if proc.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed with exit code {proc.returncode} (log: {log}):\n{tail}")


def _tools() -> tuple[str, str]:
    cmake = shutil.which("cmake")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cmake is None:
        raise Unavailable("cmake is not installed (needed to build llama.cpp's ggml-rpc-server)")
    if cxx is None or cc is None:
        raise Unavailable("no C/C++ compiler (cc and c++) is installed (needed to build llama.cpp's ggml-rpc-server)")
    return cmake, cxx


def _download(cache: Path, log: Path) -> Path:
    sdist = cache / SDIST_FILE
    if sdist.is_file():
        return sdist
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(cache)]
    try:
        _run(cmd, log, 600)
    except RuntimeError as exc:
        raise Unavailable(f"cannot download the {SDIST} sdist from PyPI (network?): {exc}") from exc
    if not sdist.is_file():
        raise Unavailable(f"pip download left no {SDIST_FILE} in {cache}")
    return sdist


def _unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(VENDOR)]
        tar.extractall(into, members=members, filter="data")
    return into / VENDOR


def _build_server(cache: Path, cmake: str, log: Path) -> None:
    sdist = _download(cache, log)
    with tempfile.TemporaryDirectory(prefix="llama-rpc-build-") as tmp:
        src = _unpack(sdist, Path(tmp))
        build = Path(tmp) / "build"
        _run([cmake, "-S", str(src), "-B", str(build), *CMAKE_FLAGS], log, 600)
        jobs = str(max(1, min(4, os.cpu_count() or 2)))
        _run([cmake, "--build", str(build), "--target", "ggml-rpc-server", "-j", jobs], log, 1800)
        (cache / "lib").mkdir(exist_ok=True)
        for lib in LIBS:
            shutil.copy2(build / "ggml" / "src" / lib, cache / "lib" / Path(lib).name)
        shutil.rmtree(cache / "include", ignore_errors=True)
        shutil.copytree(src / "ggml" / "include", cache / "include")
        shutil.copy2(src / "ggml" / "src" / "ggml-rpc" / "ggml-rpc.cpp", cache / "include" / "ggml-rpc.cpp.txt")
        shutil.copy2(build / "bin" / "ggml-rpc-server", cache / "ggml-rpc-server.tmp")
        os.replace(cache / "ggml-rpc-server.tmp", cache / "ggml-rpc-server")


def _build_harness(cache: Path, cxx: str, target: Path, log: Path) -> None:
    libs = [str(cache / "lib" / Path(lib).name) for lib in LIBS]
    base = [cxx, "-O1", "-std=c++17", "-I", str(cache / "include"), str(HARNESS), *libs]
    tmp = target.with_suffix(".tmp")
    try:
        _run([*base, "-fopenmp", "-lpthread", "-ldl", "-o", str(tmp)], log, 300)
    except RuntimeError:  # ggml built without OpenMP (no libgomp here)
        _run([*base, "-lpthread", "-ldl", "-o", str(tmp)], log, 300)
    os.replace(tmp, target)


def llama_cpp_tools() -> LlamaCppTools:
    """Build (or find in the cache) llama.cpp's ggml-rpc-server and the client harness.

    Raises :class:`Unavailable` with the reason when this machine cannot build them.
    """
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(HARNESS.read_bytes()).hexdigest()[:12]
    harness = cache / f"rpc_client_harness-{digest}"
    server = cache / "ggml-rpc-server"
    if server.is_file() and harness.is_file():
        return LlamaCppTools(server, harness, cache / "include")
    cmake, cxx = _tools()
    log = cache / "build.log"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (parallel test runs wait for it)
        if not server.is_file() or not (cache / "lib" / "libggml-rpc.a").is_file():
            _build_server(cache, cmake, log)
        if not harness.is_file():
            for old in cache.glob("rpc_client_harness-*"):  # built from an earlier version of the harness
                old.unlink()
            _build_harness(cache, cxx, harness, log)
    return LlamaCppTools(server, harness, cache / "include")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_cpp_server(tools: LlamaCppTools, log: Path) -> Iterator[str]:
    """Run llama.cpp's ggml-rpc-server on 127.0.0.1 (a free port); yields ``host:port``; stopped afterwards.

    One thread: ggml's OpenMP threads spin while they wait, which on a small shared machine starves the rest.
    """
    port = _free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(tools.server), "-H", "127.0.0.1", "-p", str(port), "-t", "1"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while True:  # a probe connection is accepted and dropped (its output is buffered: no line to wait for)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ggml-rpc-server does not listen:\n{log.read_text(errors='replace')}") from None
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
