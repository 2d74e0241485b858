"""``ggml-core devices`` names the vector ISA and int8 dot-product variant the CPU plugin's kernels use.

The expectation is derived from this machine's /proc/cpuinfo flags and the switches, so it holds on any x86-64
(AVX2, AVX-512, with or without VNNI); and when numba is loaded, the variant it names must be the one the block
kernels were actually built with (``jit._simd.HAS_VNNI``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ggml_cpu import plugin


def _flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    pytest.skip("no flags line in /proc/cpuinfo")


def test_variant_follows_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    monkeypatch.delenv("GGML_CPU_VNNI", raising=False)
    pytest.importorskip("numba")
    from ggml_cpu.jit import _jit

    if _jit.disabled_reason() is not None:
        pytest.skip(f"compiled kernels off: {_jit.disabled_reason()}")
    flags = _flags()
    text = plugin.kernel_variant()
    want_isa = "AVX-512" if {"avx512f", "avx512bw", "avx512vl"} <= flags else "AVX2" if "avx2" in flags else None
    if want_isa is not None:
        assert want_isa in text
    vnni = "avx_vnni" in flags or {"avx512_vnni", "avx512vl"} <= flags
    assert ("VNNI int8 dots (vpdpbusd)" in text) == vnni
    if not vnni:
        assert ("AVX2 int8 pair sums" in text) == ("avx2" in flags)
    monkeypatch.setenv("GGML_CPU_VNNI", "0")
    want = "AVX2 int8 pair sums" if "avx2" in flags else "generic int8 dots"
    assert want in plugin.kernel_variant()


def test_variant_when_compiled_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "ggml_cpu.jit._jit", raising=False)
    monkeypatch.setenv("GGML_CPU_NUMBA", "0")
    assert plugin.kernel_variant() == "numpy only (disabled by GGML_CPU_NUMBA=0)"


def test_device_description_and_features_name_the_variant() -> None:
    reg = plugin.cpu_reg()
    dev = reg.enumerate_devices()[0]
    assert plugin.kernel_variant() in dev.description
    assert reg.features()["kernels"] == plugin.kernel_variant()


def test_named_variant_is_the_built_one() -> None:
    """Under the environment the kernels were built in (this process's)."""
    from ggml_core import GGMLType
    from ggml_cpu import quant

    if not quant.block_kernels_ready(GGMLType.Q8_0):
        pytest.skip("compiled kernels unavailable here")
    from ggml_cpu.jit import _simd

    assert ("vpdpbusd" in plugin.kernel_variant()) == _simd.HAS_VNNI
    assert ("vpmaddubsw" in plugin.kernel_variant()) == _simd.HAS_AVX2_SUMS


# ------------------------------------------------------------------------------------------------ BLAS kernels

AVX512 = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx2"})


def _fake_core(monkeypatch: pytest.MonkeyPatch, core: bytes) -> None:
    from ggml_cpu import threads

    def get_corename() -> bytes:
        return core

    monkeypatch.setattr(threads, "openblas_function", lambda stem: get_corename if stem == "get_corename" else None)


@pytest.mark.parametrize(
    ("core", "forced", "flags", "expected", "warns"),
    [
        (b"SkylakeX", None, AVX512, "OpenBLAS SkylakeX kernels", False),
        (b"Haswell", "Haswell", AVX512, "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell", True),
        (b"Haswell", "Haswell", frozenset({"avx2"}), "OpenBLAS Haswell kernels (OPENBLAS_CORETYPE=Haswell)", False),
        (b"SkylakeX", "SkylakeX", AVX512, "OpenBLAS SkylakeX kernels (OPENBLAS_CORETYPE=SkylakeX)", False),
    ],
)
def test_blas_kernels_say_when_openblas_is_held_to_narrower_vectors(
    monkeypatch: pytest.MonkeyPatch, core: bytes, forced: str | None, flags: frozenset[str], expected: str, warns: bool
) -> None:
    _fake_core(monkeypatch, core)
    if forced is None:
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_CORETYPE", forced)
    text = plugin.blas_kernels(flags)
    assert text.startswith(expected)
    assert ("unset it" in text) is warns


def test_blas_kernels_are_named_by_the_loaded_openblas() -> None:
    """With numpy's bundled OpenBLAS, the device description names the core OpenBLAS itself reports."""
    import ctypes

    from ggml_cpu import threads

    fn = threads.openblas_function("get_corename")
    if fn is None:
        pytest.skip("numpy's BLAS here is not OpenBLAS (or not found in /proc/self/maps)")
    fn.restype = ctypes.c_char_p
    core = fn().decode()
    text = plugin.blas_kernels()
    assert text.startswith(f"OpenBLAS {core} kernels")
    assert text in plugin.cpu_reg().enumerate_devices()[0].description
    assert plugin.cpu_reg().features()["BLAS kernels"] == text
