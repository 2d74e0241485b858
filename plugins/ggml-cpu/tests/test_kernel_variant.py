"""``ggml-core devices`` names the vector ISA and int8 dot-product variant the CPU plugin's kernels use.

The expectation is derived from this machine's /proc/cpuinfo flags and the switches, so it holds on any x86-64
(AVX2, AVX-512, with or without VNNI); and when numba is loaded, the variant it names must be the one the block
kernels were actually built with (``qdot._simd.HAS_VNNI``).
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
    from ggml_cpu.kernels.qdot import _jit

    if _jit.disabled_reason() is not None:
        pytest.skip(f"compiled kernels off: {_jit.disabled_reason()}")
    flags = _flags()
    text = plugin.kernel_variant()
    want_isa = "AVX-512" if {"avx512f", "avx512bw", "avx512vl"} <= flags else "AVX2" if "avx2" in flags else None
    if want_isa is not None:
        assert want_isa in text
    vnni = "avx_vnni" in flags or {"avx512_vnni", "avx512vl"} <= flags
    assert ("VNNI int8 dots (vpdpbusd)" in text) == vnni
    monkeypatch.setenv("GGML_CPU_VNNI", "0")
    assert "generic int8 dots" in plugin.kernel_variant()


def test_variant_when_compiled_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "ggml_cpu.kernels.qdot._jit", raising=False)
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
    from ggml_cpu.kernels import qdot

    if not qdot.block_kernels_ready(GGMLType.Q8_0):
        pytest.skip("compiled kernels unavailable here")
    from ggml_cpu.kernels.qdot import _simd

    assert ("vpdpbusd" in plugin.kernel_variant()) == _simd.HAS_VNNI
