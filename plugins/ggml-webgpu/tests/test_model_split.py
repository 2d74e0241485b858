"""A LLaMA model split over CPU + WebGPU0 through the scheduler gives the CPU's logits (f32, f16 and quantized
weights, f16 KV cache, batch and token by token), and one placed wholly on WebGPU0 keeps its layers there.

The tiny random-weight GGUF models come from the core's tests (tests/tiny_models.py); elsewhere these skip.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from wgpu_helpers import no_device_reason, webgpu_devices

_CORE_TESTS = Path(__file__).resolve().parents[3] / "tests"
if (_CORE_TESTS / "tiny_models.py").exists() and str(_CORE_TESTS) not in sys.path:
    sys.path.append(str(_CORE_TESTS))
tiny_models = pytest.importorskip("tiny_models", reason="the core's tests/tiny_models.py is not beside the plugin")

from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available  # noqa: E402
from ggml_core.testing.plugin_tests import model_logits  # noqa: E402

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4]
CFG = tiny_models.TinyConfig(n_layer=3)


@pytest.fixture(autouse=True)
def _needs_webgpu() -> None:
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed: no multi-device runs")
    if not webgpu_devices():
        pytest.skip(no_device_reason())


def _logits(path: Path, req: PlacementRequest, kv_type: str, *, step: bool = False) -> tuple[np.ndarray, Model]:
    return model_logits(path, req, TOKENS, step=step, kv_type=kv_type, n_ctx=32)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize(
    ("wtype", "kv_type", "step"),
    [
        ("f32", "f32", False),
        ("f16", "f16", False),
        ("q8_0", "f16", True),
        ("q4_0", "f32", False),
        ("q4_K", "f16", False),
    ],
)
def test_cpu_plus_webgpu_gives_the_cpu_logits(tmp_path: Path, wtype: str, kv_type: str, step: bool) -> None:
    cfg = CFG.with_(n_embd=256, n_ff=256) if wtype == "q4_K" else CFG  # K-quants need rows of 256
    w = tiny_models.random_weights(cfg, 0)
    path = tiny_models.write_model(tmp_path / "m.gguf", cfg, w, wtype)
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), kv_type, step=step)
    split, m = _logits(path, PlacementRequest(devices=["CPU", "WebGPU0"], tensor_split=[1, 1]), kv_type, step=step)
    names = {s.name for s in m.placement.shares if s.layers}
    assert names == {"CPU", "WebGPU0"}  # layers really are on both devices
    assert m.executor.n_splits >= 2
    # the same arithmetic (activation rounding included) summed in another order: float32 rounding over 3 layers
    assert _rel(split, cpu) < 1e-5


def test_everything_on_webgpu(tmp_path: Path) -> None:
    w = tiny_models.random_weights(CFG, 1)
    path = tiny_models.write_model(tmp_path / "m.gguf", CFG, w, "f32")
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), "f16")
    got, m = _logits(path, PlacementRequest(devices=["WebGPU0"]), "f16")
    assert m.placement.device_of(0).name == "WebGPU0"
    assert _rel(got, cpu) < 1e-5
    assert _rel(got, tiny_models.reference_logits(CFG, w, TOKENS, "f32", "f16")) < 1e-4


def test_mixture_of_experts_split(tmp_path: Path) -> None:
    """MUL_MAT_ID layers shared between CPU and WebGPU0 give the CPU's logits."""
    cfg = CFG.with_(n_expert=4, n_expert_used=2)
    w = tiny_models.random_weights(cfg, 7)
    path = tiny_models.write_model(tmp_path / "moe.gguf", cfg, w, "q8_0")
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), "f32")
    split, m = _logits(path, PlacementRequest(devices=["CPU", "WebGPU0"], tensor_split=[1, 1]), "f32")
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", "WebGPU0"}
    assert _rel(split, cpu) < 1e-5


def test_everything_on_webgpu_with_flash_attention(tmp_path: Path) -> None:
    w = tiny_models.random_weights(CFG, 1)
    path = tiny_models.write_model(tmp_path / "m.gguf", CFG, w, "f32")
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), "f16")
    params = ModelParams(placement=PlacementRequest(devices=["WebGPU0"]), n_ctx=32, progress=False, flash_attn=True)
    with Model.load(path, params) as m:
        got = m.process_prompt(TOKENS, all_logits=True)
        assert m.executor.n_splits == 2  # the embeddings on the CPU, every layer (attention included) on WebGPU0
    # flash attention's online softmax (and the CPU's f16 V accumulation) against the CPU's plain softmax path
    assert float(((got - cpu) ** 2).sum() / (cpu**2).sum()) < 1e-6
