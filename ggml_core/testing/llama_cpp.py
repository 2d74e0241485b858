"""llama.cpp itself, built on this machine, as the reference for tests and benchmarks.

The llama-cpp-python 0.3.36 sdist vendors llama.cpp at commit 0c1e570. :func:`harness` downloads it with pip (once,
into the cache), builds llama.cpp's static libraries with CMake for *this* CPU, and compiles
``llama_cpp_harness.cpp`` (ggml-core's own driver of llama.cpp's C API) against them. The harness gives logits,
greedy continuations, token ids and tokens/s computed by llama.cpp, through :class:`LlamaCpp`.

Build flags: ``GGML_NATIVE=OFF`` with each x86 extension switched on only when ``/proc/cpuinfo`` lists it, and
AMX always off (on the Sapphire Rapids VMs here, cpuinfo lists AMX but the VM faults on its tile instructions:
``-march=native`` builds die with SIGILL). The cache key includes those flags, so a cache copied to a machine of
another kind is rebuilt rather than trusted.

Cache: ``GGML_LLAMA_CPP_CACHE`` or ``~/.cache/ggml-core/llama.cpp-0c1e570``. First build: the library targets only,
about 4-8 minutes on 2 cores. :func:`llama_bench` builds llama.cpp's own ``llama-bench`` with the RPC backend from
the same source with the same ISA flags (benchmarks only; nothing in the tests asks for it). :class:`Unavailable`
says why when there is no compiler, no cmake or no network.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["LlamaCpp", "Unavailable", "cmake_isa_flags", "cpu_model", "harness", "llama_bench"]

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
VENDOR = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
COMMIT = "0c1e570"
HARNESS_SOURCE = Path(__file__).with_name("llama_cpp_harness.cpp")
LIBS = ("src/libllama.a", "ggml/src/libggml.a", "ggml/src/libggml-cpu.a", "ggml/src/libggml-base.a")
BASE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
#: ggml's CMake option → the /proc/cpuinfo flags it needs
ISA_OPTIONS = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_BMI2": ("bmi2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_AVX512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"),
    "GGML_AVX512_VBMI": ("avx512vbmi",),
    "GGML_AVX512_VNNI": ("avx512_vnni",),
    "GGML_AVX512_BF16": ("avx512_bf16",),
}


class Unavailable(Exception):
    """llama.cpp cannot be built or run here (no compiler, no cmake, no network); the message says why."""


def _cpuinfo() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "unknown CPU", set()
    model, flags = "unknown CPU", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == "unknown CPU":
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    return model, flags


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (benchmarks print it)."""
    return _cpuinfo()[0]


def cmake_isa_flags() -> list[str]:
    """``-DGGML_X=ON|OFF`` for each x86 extension, ON only when this CPU lists every flag it needs."""
    _, flags = _cpuinfo()
    avx512 = all(f in flags for f in ISA_OPTIONS["GGML_AVX512"])
    out = []
    for option, needs in ISA_OPTIONS.items():
        on = all(f in flags for f in needs) and (avx512 or not option.startswith("GGML_AVX512"))
        out.append(f"-D{option}={'ON' if on else 'OFF'}")
    return out


def cache_dir() -> Path:
    """Where the sdist and the builds (one per set of flags) are kept between runs."""
    env = os.environ.get("GGML_LLAMA_CPP_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ggml-core" / f"llama.cpp-{COMMIT}"


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None, what: str = "") -> None:
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise Unavailable(f"{what or cmd[0]} took longer than {timeout:.0f} s (log: {log})") from exc
    if proc.returncode:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:])
        raise Unavailable(f"{what or cmd[0]} failed with exit code {proc.returncode} (log: {log}):\n{tail}")


def _sdist(cache: Path, log: Path) -> Path:
    sdist = cache / SDIST_FILE
    if not sdist.is_file():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(cache)]
        _run(cmd, log, 900, what=f"downloading the {SDIST} sdist (network?)")
    if not sdist.is_file():
        raise Unavailable(f"pip download left no {SDIST_FILE} in {cache}")
    return sdist


def _compilers() -> tuple[str, str]:
    cmake = shutil.which("cmake")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cmake is None or cxx is None or (shutil.which("cc") or shutil.which("gcc")) is None:
        raise Unavailable("building llama.cpp needs cmake and a C/C++ compiler (apt-get install cmake g++)")
    return cmake, cxx


def _configure_and_build(cache: Path, tmp: Path, flags: list[str], target: str, log: Path) -> tuple[Path, Path]:
    """Unpack the vendored llama.cpp into ``tmp``, configure it with ``flags`` and build ``target``: (src, build)."""
    cmake, _ = _compilers()
    sdist = _sdist(cache, log)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(VENDOR)]
        tar.extractall(tmp, members=members, filter="data")
    src, build = tmp / VENDOR, tmp / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    _run([cmake, "-S", str(src), "-B", str(build), *gen, *flags], log, 600, what="cmake")
    jobs = str(max(1, min(4, os.cpu_count() or 2)))
    _run([cmake, "--build", str(build), "--target", target, "-j", jobs], log, 3600, what=f"building {target}")
    return src, build


def _build(cache: Path, out: Path, flags: list[str], log: Path) -> None:
    _, cxx = _compilers()
    with tempfile.TemporaryDirectory(prefix="llama-cpp-build-") as tmp:
        src, build = _configure_and_build(cache, Path(tmp), [*BASE_FLAGS, *flags], "llama", log)
        libs = [str(build / lib) for lib in LIBS]
        includes = ["-I", str(src / "include"), "-I", str(src / "ggml" / "include")]
        base = [cxx, "-O2", "-std=c++17", *includes, str(HARNESS_SOURCE), *libs]
        tmp_bin = out.with_suffix(".tmp")
        try:
            _run([*base, "-fopenmp", "-lpthread", "-ldl", "-o", str(tmp_bin)], log, 600, what="linking the harness")
        except Unavailable:  # ggml built without OpenMP
            _run([*base, "-lpthread", "-ldl", "-o", str(tmp_bin)], log, 600, what="linking the harness")
        os.replace(tmp_bin, out)


def _cached(out: Path, build: Callable[[], None]) -> Path:
    """``out`` when the cache has it, else after ``build()`` made it (one build at a time; parallel runs wait)."""
    if out.is_file():
        return out
    with (out.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            build()
    return out


def harness() -> Path:
    """The harness binary for this CPU (built on first use; later calls find it in the cache)."""
    flags = cmake_isa_flags()
    key = hashlib.sha256(" ".join([*BASE_FLAGS, *flags]).encode() + HARNESS_SOURCE.read_bytes()).hexdigest()[:12]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"llama_cpp_harness-{key}"
    return _cached(out, lambda: _build(cache, out, flags, cache / f"build-{key}.log"))


def _bench_flags() -> list[str]:
    """:data:`BASE_FLAGS` with llama.cpp's tools, its common library and the RPC backend switched on."""
    on = {"-DLLAMA_BUILD_TOOLS=OFF": "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_COMMON=OFF": "-DLLAMA_BUILD_COMMON=ON"}
    return [*(on.get(f, f) for f in BASE_FLAGS), "-DGGML_RPC=ON", *cmake_isa_flags()]


def llama_bench() -> Path:
    """llama.cpp's ``llama-bench`` with the RPC backend (``--rpc host:port,...``), for this CPU.

    Built on first use (the ``llama-bench`` target only, with llama.cpp's common library; same source and ISA flags
    as :func:`harness`; about 13-20 minutes on 2 cores), then found in the cache: ``llama-bench-<key>`` next to the
    harness. The build's log: ``build-bench-<key>.log`` there.
    """
    flags = _bench_flags()
    key = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12]
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"llama-bench-{key}"

    def build() -> None:
        with tempfile.TemporaryDirectory(prefix="llama-bench-build-") as tmp:
            _, tree = _configure_and_build(cache, Path(tmp), flags, "llama-bench", cache / f"build-bench-{key}.log")
            shutil.copy2(tree / "bin" / "llama-bench", out.with_suffix(".tmp"))
            os.replace(out.with_suffix(".tmp"), out)

    return _cached(out, build)


@dataclass(frozen=True)
class LlamaCpp:
    """llama.cpp's answers for one GGUF model, through the harness (CPU backend only)."""

    model: Path
    threads: int = 2
    kv_type: str = "f32"
    flash_attn: bool = False
    #: OpenMP threads sleep between graphs (leaves the cores to a test process). Timings need False: a passive wait
    #: slows llama.cpp's generation ~7x; :meth:`bench` never uses it.
    passive_wait: bool = True

    def _call(self, args: list[str], stdin: str | None = None, timeout: float = 600) -> str:
        exe = harness()
        env = dict(os.environ)
        if self.passive_wait and args[0] != "bench":
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        else:  # llama.cpp as it runs by default (passive: q8_0 bench-model generation 2,000 -> 280 tok/s measured)
            env.pop("OMP_WAIT_POLICY", None)
        proc = subprocess.run(
            [str(exe), *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        if proc.returncode:
            raise RuntimeError(f"llama.cpp ({args[0]}) failed: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    def _with_tokens(self, mode: str, tokens: list[int], n_ctx: int, n_gen: int = 0) -> tuple[str, bytes]:
        """Run ``mode`` on ``tokens``: (its standard output, the bytes it wrote to OUT)."""
        with tempfile.TemporaryDirectory(prefix="llama-cpp-") as tmp:
            path, out = Path(tmp) / "tokens.bin", Path(tmp) / "out.bin"
            np.asarray(tokens, "<i4").tofile(path)
            common = [str(self.model), str(self.threads), str(n_ctx), self.kv_type, str(int(self.flash_attn))]
            text = self._call([mode, *common, str(path), str(n_gen) if mode == "generate" else str(out)])
            return text, out.read_bytes() if out.is_file() else b""

    def logits(self, tokens: list[int], steps: bool = False, n_ctx: int = 0) -> np.ndarray:
        """float32 [len(tokens), n_vocab]: all positions in one batch, or with ``steps`` one decode call each."""
        _, raw = self._with_tokens("steps" if steps else "logits", tokens, n_ctx or max(len(tokens) + 8, 64))
        return np.frombuffer(raw, "<f4").reshape(len(tokens), -1).copy()

    def generate(self, tokens: list[int], n: int, n_ctx: int = 0) -> list[int]:
        """Greedy continuation: up to ``n`` token ids (stops at an end-of-generation token, which it includes)."""
        text, _ = self._with_tokens("generate", tokens, n_ctx or len(tokens) + n + 8, n)
        return [int(t) for t in text.split()]

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama.cpp's token ids for ``text`` (``llama_tokenize``)."""
        out = self._call(["tokenize", str(self.model), str(int(add_special)), str(int(parse_special))], stdin=text)
        return [int(t) for t in out.split()]

    def bench(self, n_prompt: int, n_gen: int, reps: int) -> dict[str, list[float]]:
        """Seconds per repetition for a prompt of ``n_prompt`` tokens ("pp") and ``n_gen`` steps ("tg")."""
        args = [str(self.model), str(self.threads), str(n_prompt), str(n_gen), str(reps), self.kv_type]
        out = self._call(["bench", *args, str(int(self.flash_attn))], timeout=1800)
        times: dict[str, list[float]] = {"pp": [], "tg": []}
        for line in out.splitlines():
            kind, _, value = line.partition(" ")
            times[kind].append(float(value))
        return times
