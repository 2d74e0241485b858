"""One model split across CPU + OpenCL0 (PoCL here) through the scheduler gives the CPU's logits; placement flags
follow llama.cpp; the fit check refuses a share a device cannot hold, saying how many layers would fit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from opencl_device import require_opencl
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import AllocationError, DeviceNotFoundError, get_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, plan_placement
from ggml_core.testing.plugin_tests import model_logits

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33]
CFG = TinyConfig(n_layer=4)


def _logits(path: Path, req: PlacementRequest, kv_type: str, *, step: bool = False) -> tuple[np.ndarray, Model]:
    return model_logits(path, req, TOKENS, step=step, kv_type=kv_type, n_ctx=64)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def _energy(a: np.ndarray, b: np.ndarray) -> float:
    """Squared error over the reference's squared norm."""
    return float(((a - b) ** 2).sum() / (b**2).sum())


@pytest.mark.parametrize(
    ("wtype", "kv_type"), [("f32", "f32"), ("f32", "f16"), ("f16", "f16"), ("q8_0", "f16"), ("q4_0", "f32")]
)
@pytest.mark.parametrize("step", [False, True], ids=["batch", "token-by-token"])
def test_cpu_plus_opencl_gives_the_cpu_logits(tmp_path: Path, wtype: str, kv_type: str, step: bool) -> None:
    require_opencl()
    w = random_weights(CFG, 0)
    path = write_model(tmp_path / "m.gguf", CFG, w, wtype)
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), kv_type, step=step)
    split, m = _logits(path, PlacementRequest(devices=["CPU", "OpenCL0"], tensor_split=[1, 1]), kv_type, step=step)
    # layers really are on both devices, in more than one split
    names = {s.name for s in m.placement.shares if s.layers}
    assert names == {"CPU", "OpenCL0"}
    assert m.executor.n_splits >= 2
    ref = reference_logits(CFG, w, TOKENS, wtype, kv_type)
    if wtype == "f16":
        # f16 activations: another device sums in another order, so an activation on an f16 rounding boundary may
        # round the other way (seen on an AMD EPYC: one token's logits 2e-4 off, the others 2e-7): a few f16 ulps
        # (2^-11 each) at most anywhere, and 1e-7 of the energy in all. A misplaced or skipped layer gives ~1.
        assert _rel(split, cpu) < 2e-3
        assert _energy(split, cpu) < 1e-7
        assert _energy(split, ref) < 1e-7
    else:
        # another device sums in another order: float32 rounding, accumulated over 4 layers
        assert _rel(split, cpu) < 1e-5
        assert _rel(split, ref) < 1e-5


def test_mixture_of_experts_split(tmp_path: Path) -> None:
    """MUL_MAT_ID layers shared between CPU and OpenCL0 (the scheduler sends what a device lacks to the CPU)."""
    require_opencl()
    cfg = TinyConfig(n_expert=4, n_expert_used=2)
    w = random_weights(cfg, 7)
    path = write_model(tmp_path / "moe.gguf", cfg, w, "q8_0")
    split, m = _logits(path, PlacementRequest(devices=["CPU", "OpenCL0"], tensor_split=[1, 1]), "f32")
    assert m.executor.n_splits >= 2
    assert _rel(split, reference_logits(cfg, w, TOKENS, "q8_0", "f32")) < 1e-5


def test_rope_factors_stay_with_their_layers(tmp_path: Path) -> None:
    """rope_freqs.weight is copied to each layer's device (as llama.cpp does), so it does not cut splits."""
    require_opencl()
    cfg = CFG.with_(rope_freqs=True)
    w = random_weights(cfg, 3)
    path = write_model(tmp_path / "rf.gguf", cfg, w)
    got, m = _logits(path, PlacementRequest(devices=["OpenCL0"]), "f32")
    assert m.executor.n_splits == 2  # the embeddings on the CPU, everything else on OpenCL0
    assert _rel(got, reference_logits(cfg, w, TOKENS)) < 1e-5


def test_everything_on_opencl_with_flash_attention(tmp_path: Path) -> None:
    require_opencl()
    w = random_weights(CFG, 1)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    cpu, _ = _logits(path, PlacementRequest(devices=["CPU"]), "f16")
    with Model.load(
        path, ModelParams(placement=PlacementRequest(devices=["OpenCL0"]), n_ctx=64, progress=False, flash_attn=True)
    ) as m:
        assert m.placement.device_of(0).name == "OpenCL0"
        got = m.process_prompt(TOKENS, all_logits=True)
    assert float(((got - cpu) ** 2).sum() / (cpu**2).sum()) < 1e-6


# ------------------------------------------------------------------------------------------------ placement rules


def _slots(n_layer: int, per_layer: int = 1000) -> dict[int, int]:
    return {i: per_layer for i in range(-1, n_layer + 1)}


def test_split_mode_layer_follows_llama_cpp() -> None:
    """n_gpu_layers counts the output layer; the first layers stay on the CPU; the CPU is the host, not an offload
    device, so naming it in --device does not take a share of the offloaded slots (llama.cpp rejects it there)."""
    require_opencl()
    req = PlacementRequest(devices=["OpenCL0", "CPU"], n_gpu_layers=4, tensor_split=[1, 1], split_mode="layer")
    p = plan_placement(req, 6, _slots(6), 0, 0, check_fit=False)
    # 7 slots (6 layers + output), 4 offloaded: layers 3..5 + output, all on OpenCL0 (the CPU's share is not counted)
    assert [p.device_of(i).name for i in range(-1, 7)] == ["CPU"] * 4 + ["OpenCL0"] * 4
    two = plan_placement(PlacementRequest(devices=["OpenCL0", "CPU"], n_gpu_layers=2), 6, _slots(6), 0, 0)
    assert [two.device_of(i).name for i in range(-1, 7)] == ["CPU"] * 6 + ["OpenCL0"] * 2
    # without -ngl a named CPU takes its --tensor-split share like a device (a ggml-core extension)
    both = plan_placement(PlacementRequest(devices=["CPU", "OpenCL0"], tensor_split=[1, 1]), 6, _slots(6), 0, 0)
    assert [both.device_of(i).name for i in range(-1, 7)] == ["CPU"] * 5 + ["OpenCL0"] * 3
    none = plan_placement(PlacementRequest(devices=["OpenCL0"], split_mode="none"), 6, _slots(6), 0, 0, check_fit=False)
    assert {none.device_of(i).name for i in range(7)} == {"OpenCL0"} and none.device_of(-1).name == "CPU"
    off = plan_placement(PlacementRequest(devices=["none"]), 6, _slots(6), 0, 0)
    assert {off.device_of(i).name for i in range(-1, 7)} == {"CPU"}


def test_default_placement_is_every_gpu_and_rpc_device_never_the_host_cpu() -> None:
    p = plan_placement(PlacementRequest(), 3, _slots(3), 0, 0, check_fit=False)
    devs = get_registry().devices()
    gpus = [d for d in devs if d.type.name == "GPU" and not getattr(d, "host_cpu", False)]
    expect = {d.name for d in gpus} or {d.name for d in devs if d.type.name == "IGPU"} or {"CPU"}
    got = {p.device_of(i).name for i in range(4)}
    assert got <= expect and (len(expect) > 4 or got == expect)
    assert p.device_of(-1).name == "CPU"


def test_unknown_device_is_a_clear_error() -> None:
    with pytest.raises(DeviceNotFoundError, match="no device named 'CPUU'"):
        plan_placement(PlacementRequest(devices=["CPUU"]), 2, _slots(2), 0, 0)


def test_fit_is_checked_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device with room for 2 of its 4 layers: the error names it, the sizes, and how many layers fit."""
    cpu = get_registry().get_device("CPU")
    kv_layer, compute = 10 * 2**20, 4 * 2**20
    monkeypatch.setattr(cpu, "memory", lambda: (compute + 2 * kv_layer + 2**20, 2**34))
    with pytest.raises(AllocationError) as err:
        plan_placement(PlacementRequest(devices=["CPU"]), 4, _slots(4), kv_layer, compute)
    text = str(err.value)
    assert "device CPU" in text and "KV cache 40.0 MiB" in text and "at most 2 of its 4 layers would fit" in text


def test_fit_error_from_model_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 0), "f32")
    cpu = get_registry().get_device("CPU")
    monkeypatch.setattr(cpu, "memory", lambda: (1024, 2**34))
    with pytest.raises(AllocationError, match="does not fit"):
        Model.load(path, ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=64, progress=False))
