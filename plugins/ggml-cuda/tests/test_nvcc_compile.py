"""Every kernel source compiles with nvcc for sm_80 and sm_90 (``--ptx``: no GPU needed), and the compile
cache keys images by sources, architecture and flags. Tests needing nvcc skip, saying so, where it is absent.
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cuda_helpers import kernel_sources
from fake_driver import kernel_names

from ggml_cuda import _compile
from ggml_cuda._compile import CompileError, arch_flag, compile_module, module_names

ARCHS = ("sm_80", "sm_90")  # the PTX fixture (conftest.py) compiles for these


def test_there_are_kernel_modules() -> None:
    assert set(module_names()) >= {"elementwise", "matmul", "matmul_q", "movement", "norm", "attention", "flash_attn"}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("module", module_names())
def test_module_compiles_and_exports_every_kernel(ptx: dict[tuple[str, str], str], module: str, arch: str) -> None:
    text = ptx[(module, arch)]
    assert not text.startswith("COMPILE ERROR"), text
    assert f".target {arch}" in text
    declared = kernel_names(kernel_sources()[module])
    assert declared, f"{module}.cu declares no kernels"
    for name in declared:
        assert f".entry {name}(" in text, f"{name} missing from the {arch} PTX of {module}.cu"


def test_tensor_core_kernels_use_mma(ptx: dict[tuple[str, str], str]) -> None:
    for arch in ARCHS:
        text = ptx[("matmul", arch)]
        assert "mma.sync.aligned" in text or "wmma.mma.sync" in text
        assert "cp.async" in text  # sm_80+: asynchronous copies into shared memory


def test_a_cubin_for_hopper_compiles(nvcc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CUDA_CACHE_DIR", str(tmp_path))
    image = compile_module("norm", "sm_90", nvcc=nvcc)
    assert image[:4] == b"\x7fELF"  # native machine code, not PTX for the driver to compile
    assert len(list(tmp_path.glob("norm-sm_90-*.cubin"))) == 1


def test_arch_flag_from_compute_capability() -> None:
    assert arch_flag((9, 0)) == "sm_90"
    assert arch_flag((8, 6)) == "sm_86"
    assert arch_flag((12, 0)) == "sm_120"
    with pytest.raises(ValueError):
        arch_flag((0, -1))


# ------------------------------------------------------------------------------------ the cache, with a fake nvcc


@pytest.fixture()
def fake_nvcc(tmp_path: Path) -> tuple[Path, Path]:
    """A script standing in for nvcc: logs its arguments and writes the -o file (no CUDA toolkit needed)."""
    log = tmp_path / "calls.log"
    script = tmp_path / "nvcc"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 99.9"; exit 0; fi\n'
        f'echo "$@" >> "{log}"\n'
        'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done\n'
        'printf "IMAGE" > "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def test_images_are_cached_per_architecture_in_memory_and_on_disk(
    fake_nvcc: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, log = fake_nvcc
    cache = tmp_path / "cache"
    monkeypatch.setenv("GGML_CUDA_CACHE_DIR", str(cache))
    monkeypatch.setattr(_compile, "_images", {})
    assert compile_module("norm", "sm_80", nvcc=str(script)) == b"IMAGE"
    assert compile_module("norm", "sm_90", nvcc=str(script)) == b"IMAGE"
    assert compile_module("norm", "sm_90", nvcc=str(script)) == b"IMAGE"  # memory
    calls = log.read_text().splitlines()
    assert len(calls) == 2
    assert "-arch=sm_80" in calls[0] and "-arch=sm_90" in calls[1] and "--cubin" in calls[0]
    assert "-O3" in calls[0] and "--use_fast_math" not in calls[0]
    monkeypatch.setattr(_compile, "_images", {})
    assert compile_module("norm", "sm_90", nvcc=str(script)) == b"IMAGE"  # disk
    assert len(log.read_text().splitlines()) == 2
    assert len(list(cache.glob("norm-*.cubin"))) == 2


def test_a_failing_nvcc_is_a_compile_error_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "nvcc"
    script.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo v; exit 0; fi\necho "error: boom" >&2\nexit 2\n')
    script.chmod(0o755)
    monkeypatch.setenv("GGML_CUDA_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(_compile, "_images", {})
    expected = r"compiling kernels/norm\.cu for sm_90 failed: nvcc exited with 2:\nerror: boom"
    with pytest.raises(CompileError, match=expected):
        compile_module("norm", "sm_90", nvcc=str(script))


def test_missing_nvcc_is_a_compile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_compile, "find_nvcc", lambda: None)
    monkeypatch.setattr(_compile, "_images", {})
    with pytest.raises(CompileError, match="nvcc not found"):
        compile_module("norm", "sm_90")


def test_unknown_module_is_a_compile_error(fake_nvcc: tuple[Path, Path]) -> None:
    with pytest.raises(CompileError, match="no such kernel source"):
        compile_module("nope", "sm_90", nvcc=str(fake_nvcc[0]))
