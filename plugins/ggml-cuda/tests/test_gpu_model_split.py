"""On a real GPU: the LLaMA-family default model split over CUDA0 + CPU (through the scheduler), and run entirely
on CUDA0 with flash attention, gives the CPU's logits. Skips, with the plugin's reason, without a CUDA device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ggml_core.models import Model, PlacementRequest, scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_core.testing.plugin_tests import model_logits
from ggml_cuda._device import CUDADevice

pytestmark = pytest.mark.gpu

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33, 12, 40, 41, 17]


def _logits(
    path: Path, req: PlacementRequest, *, kv_type: str = "f16", flash_attn: bool = False, step: bool = False
) -> tuple[np.ndarray, Model]:
    return model_logits(path, req, TOKENS, step=step, kv_type=kv_type, n_ctx=64, flash_attn=flash_attn)


def _nmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a.astype(np.float64) - b) ** 2).sum() / (b.astype(np.float64) ** 2).sum())


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_default_model(tmp_path_factory.mktemp("model") / "default.gguf")


@pytest.mark.parametrize("step", [False, True], ids=["prompt", "token-by-token"])
def test_split_over_cuda_and_cpu_gives_the_cpu_logits(gpu: CUDADevice, model_path: Path, step: bool) -> None:
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed: no multi-device runs")
    cpu, _ = _logits(model_path, PlacementRequest(devices=["CPU"]), step=step)
    split, m = _logits(model_path, PlacementRequest(devices=["CUDA0", "CPU"], tensor_split=[1, 1]), step=step)
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", "CUDA0"}
    assert m.executor.n_splits >= 2
    assert _nmse(split, cpu) < 1e-6


def test_everything_on_cuda_with_flash_attention(gpu: CUDADevice, model_path: Path) -> None:
    cpu, _ = _logits(model_path, PlacementRequest(devices=["CPU"]))
    got, m = _logits(model_path, PlacementRequest(devices=["CUDA0"]), flash_attn=True)
    assert m.placement.device_of(0).name == "CUDA0"
    assert _nmse(got, cpu) < 1e-5
