"""What the host offers: its memory, its CPU (name, flags), the vector ISA the compiled kernels target and the
kernels OpenBLAS chose. Nothing here imports numba or the kernels."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import platform
import sys

__all__ = ["blas_kernels", "cpu_name", "cpuinfo", "host_memory", "kernel_variant"]


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of RAM, from /proc/meminfo where present."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.count(":") == 1}
        return info.get("MemAvailable", info.get("MemFree", 0)), info.get("MemTotal", 0)
    except (OSError, ValueError, IndexError):
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0
        return pages * size, pages * size


def cpuinfo(key: str) -> str:
    """The first ``key`` line of /proc/cpuinfo ('' when unreadable: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(key):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def cpu_name() -> str:
    return cpuinfo("model name") or platform.processor() or platform.machine() or "CPU"


def kernel_variant() -> str:
    """The vector ISA the compiled kernels target here and the int8 dot-product variant they use, without
    importing numba (the same decision as ``jit._simd``: VNNI's ``vpdpbusd`` when the CPU has AVX-VNNI or
    AVX-512 VNNI+VL, numba targets the host CPU and ``GGML_CPU_VNNI`` is not 0; else AVX2's ``vpmaddubsw`` pair
    sums where there is AVX2, else generic sums), e.g. ``AVX-512, VNNI int8 dots``.
    """
    jit = sys.modules.get("ggml_cpu.jit._jit")  # loaded: its verdict; else the same checks, no imports
    if jit is not None:
        reason = jit.disabled_reason()
    elif os.environ.get("GGML_CPU_NUMBA", "1").strip().lower() in ("0", "false", "no", "off"):
        reason = "disabled by GGML_CPU_NUMBA=0"
    else:
        try:
            found = importlib.util.find_spec("numba") is not None
        except (ImportError, ValueError):  # a broken or blocked install
            found = False
        reason = None if found else "numba is not installed: pip install numba"
    if reason is not None:
        return f"numpy only ({reason})"
    flags = set(cpuinfo("flags").split())
    if {"avx512f", "avx512bw", "avx512vl"} <= flags:
        isa = "AVX-512"
    elif "avx2" in flags:
        isa = "AVX2"
    elif flags:
        isa = "SSE" if "sse4_2" in flags else "baseline x86-64"
    else:
        isa = platform.machine() or "unknown ISA"
    target = os.environ.get("NUMBA_CPU_NAME")  # numba compiling for another CPU: no host features
    has_vnni = "avx_vnni" in flags or ("avx512_vnni" in flags and "avx512vl" in flags)
    why = "no VNNI" if not has_vnni else "GGML_CPU_VNNI=0"
    if target:
        dots = "generic int8 dots"
    elif has_vnni and os.environ.get("GGML_CPU_VNNI", "1") != "0":
        dots = "VNNI int8 dots (vpdpbusd)"
    elif "avx2" in flags:
        dots = f"AVX2 int8 pair sums (vpmaddubsw, {why})"
    else:
        dots = f"generic int8 dots ({why})"
    return f"numba for {'NUMBA_CPU_NAME=' + target if target else 'this CPU'}: {isa}, {dots}"


#: the CPU flags OpenBLAS's AVX-512 (SkylakeX) kernels need, as /proc/cpuinfo names them
_AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})


def blas_kernels(cpu_flags: frozenset[str] | set[str] | None = None) -> str:
    """Which kernels OpenBLAS chose for this CPU (its core name), and a warning when ``OPENBLAS_CORETYPE`` holds
    it to narrower vectors than the CPU has: OpenBLAS reads that variable once, when numpy loads it, so the f32
    products of a whole process follow it. On an AMD EPYC (Zen 5) with ``OPENBLAS_CORETYPE=Haswell`` set by the
    machine's environment, a one-thread 128 × 512 × 1536 SGEMM took 1.96 ms against 1.23 ms with OpenBLAS's own
    choice (SkylakeX). Empty when the BLAS is not OpenBLAS."""
    from ggml_cpu import threads

    fn = threads.openblas_function("get_corename")
    if fn is None:
        return ""
    fn.argtypes, fn.restype = [], ctypes.c_char_p
    core = (fn() or b"?").decode(errors="replace")
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if not forced:
        return f"OpenBLAS {core} kernels"
    if cpu_flags is None:
        cpu_flags = set(cpuinfo("flags").split())
    narrower = cpu_flags >= _AVX512_FLAGS and core.lower() in ("haswell", "zen", "sandybridge", "prescott", "core2")
    note = "; this CPU has AVX-512: unset it for OpenBLAS's AVX-512 kernels (f32 products ~1.6x)" if narrower else ""
    return f"OpenBLAS {core} kernels (OPENBLAS_CORETYPE={forced}{note})"
