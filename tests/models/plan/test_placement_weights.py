"""Weight buffer types chosen per weight (llama.cpp's ``select_weight_buft``), in-process with the tests' partial
device: ``Sub0`` (tests/sched_plugin) computes only the ops it is given, f32 (and f16 weights for MUL_MAT), in
private memory. The model's logits are compared with the CPU alone and with the numpy reference."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import DeviceNotFoundError, GGMLOp
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available
from ggml_core.models.plan.bufts import describe_weights, moe_overrides, parse_overrides

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4]
CFG = TinyConfig(n_layer=3)


@pytest.fixture()
def sub() -> Iterator[Callable[..., SubsetDevice]]:
    """Register Sub devices in the process-wide registry (dropped afterwards)."""

    def make(*ops: GGMLOp, name: str = "Sub0", **kw: object) -> SubsetDevice:
        dev = SubsetDevice(name, ops, **kw) if ops else SubsetDevice(name, **kw)  # type: ignore[arg-type]
        get_registry().register_plugin(SubsetPlugin([dev], "a partial test device"), f"sub-{name.lower()}")
        return dev

    reset_registry()
    yield make
    reset_registry()


def _run(path: Path, req: PlacementRequest, kv_type: str = "f32") -> tuple[np.ndarray, Model]:
    with Model.load(path, ModelParams(placement=req, kv_type=kv_type, n_ctx=64, progress=False)) as m:
        return m.process_prompt(TOKENS, all_logits=True), m


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_weights_go_where_their_op_runs(sub: Callable[..., SubsetDevice], tmp_path: Path) -> None:
    dev = sub()
    w = random_weights(CFG, 1)
    path = write_model(tmp_path / "m.gguf", CFG, w, "q8_0")  # Sub0's MUL_MAT takes f32/f16 weights, not q8_0
    got, m = _run(path, PlacementRequest(devices=["Sub0"]))
    ch = m.placement.weights
    assert ch["blk.0.attn_norm.weight"].device is dev  # MUL on an f32 vector: Sub0
    assert ch["blk.0.attn_q.weight"].device.name == "CPU"
    assert "Sub0 does not run MUL_MAT on a q8_0 weight" in ch["blk.0.attn_q.weight"].reason
    assert ch["token_embd.weight"].device.name == "CPU"
    # Sub0 has no SET_ROWS: the KV caches are in host memory, said in the notes
    assert all(m.placement.kv_device_of(i).name == "CPU" for i in range(CFG.n_layer))
    assert any("cannot write a f32 KV cache" in n for n in m.placement.notes)
    assert dev.stats["computes"] > 0 and m.executor.n_splits > 1
    cpu, _ = _run(path, PlacementRequest(devices=["none"]))
    assert _rel(got, cpu) < 1e-5
    assert _rel(got, reference_logits(CFG, w, TOKENS, "q8_0", "f32")) < 1e-5
    lines = describe_weights(list(ch.values()))
    assert any(ln.startswith("Sub0: blk.{0-2}.{attn_norm.weight,ffn_norm.weight}") for ln in lines), lines


def test_a_device_running_nothing_of_a_layer_gets_none_of_it(sub: Callable[..., SubsetDevice], tmp_path: Path) -> None:
    sub(GGMLOp.SCALE)  # nothing the model uses
    w = random_weights(CFG, 2)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    got, m = _run(path, PlacementRequest(devices=["Sub0"]))
    assert [s.name for s in m.placement.shares] == ["CPU"]
    assert {m.placement.device_of(i).name for i in range(-1, CFG.n_layer + 1)} == {"CPU"}
    assert any("Sub0 runs none of layer 0's ops" in n for n in m.placement.notes)
    assert _rel(got, reference_logits(CFG, w, TOKENS, "f32", "f32")) < 1e-5


def test_f32_weights_all_on_the_device(sub: Callable[..., SubsetDevice], tmp_path: Path) -> None:
    dev = sub(GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM, GGMLOp.SET_ROWS)
    w = random_weights(CFG, 3)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    got, m = _run(path, PlacementRequest())  # default list: every GPU (Sub0 is one), never the host CPU via OpenCL
    ch = m.placement.weights
    layer = [c for c in ch.values() if c.slot >= 0]
    assert layer and all(c.device is dev and c.buft is dev.buffer_type() for c in layer)
    assert "on its layer's device Sub0" in ch["blk.1.ffn_up.weight"].reason
    assert _rel(got, reference_logits(CFG, w, TOKENS, "f32", "f32")) < 1e-5


def test_overrides_parse_and_match_as_llama_cpp() -> None:
    (o,) = parse_overrides(r"blk\.[12]\.ffn_.*=CPU")
    assert o.matches("blk.1.ffn_up.weight") and not o.matches("blk.0.ffn_up.weight")
    assert o.matches("xblk.2.ffn_gate.weightx")  # regex_search: a match anywhere
    assert [x.buft for x in parse_overrides("a=CPU,b=OpenCL0")] == ["CPU", "OpenCL0"]
    for bad in ("noequals", "=CPU", "pat=", "(=CPU"):
        with pytest.raises(ValueError, match="-ot"):
            parse_overrides(bad)
    (cmoe,) = moe_overrides(None)
    assert cmoe.matches("blk.7.ffn_down_exps.weight") and cmoe.matches("blk.0.ffn_gate_chexps.weight")
    assert not cmoe.matches("blk.7.ffn_down.weight") and not cmoe.matches("blk.7.ffn_gate_inp.weight")
    two = moe_overrides(2)
    hits = [
        f"blk.{i}.ffn_up_exps.weight" for i in range(4) if any(x.matches(f"blk.{i}.ffn_up_exps.weight") for x in two)
    ]
    assert hits == ["blk.0.ffn_up_exps.weight", "blk.1.ffn_up_exps.weight"]
    with pytest.raises(ValueError, match="--n-cpu-moe"):
        moe_overrides(-1)


def test_override_to_cpu_and_unknown_buffer_type(sub: Callable[..., SubsetDevice], tmp_path: Path) -> None:
    dev = sub(GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM, GGMLOp.SET_ROWS)
    w = random_weights(CFG, 4)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    req = PlacementRequest(devices=["Sub0"], overrides=parse_overrides(r"ffn_(up|down)=CPU"))
    got, m = _run(path, req)
    ch = m.placement.weights
    assert (
        ch["blk.0.ffn_up.weight"].device.name == "CPU" and "-ot 'ffn_(up|down)=CPU'" in ch["blk.0.ffn_up.weight"].reason
    )
    assert ch["blk.0.ffn_gate.weight"].device is dev
    assert _rel(got, reference_logits(CFG, w, TOKENS, "f32", "f32")) < 1e-5
    with pytest.raises(ValueError, match="unknown buffer type 'GPU9'"):
        _run(path, PlacementRequest(overrides=parse_overrides("ffn=GPU9")))
    sub(GGMLOp.SCALE, name="Sub1")
    with pytest.raises(ValueError, match="cannot be used from Sub1 memory"):
        _run(path, PlacementRequest(overrides=parse_overrides("attn_q=Sub1")))


def test_no_kv_offload_keeps_every_cache_on_the_host(tmp_path: Path) -> None:
    """OpenCL0 (PoCL here; named, as a host_cpu device must be) writes its caches in place unless -nkvo."""
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 5), "f32")
    on, m_on = _run(path, PlacementRequest(devices=["OpenCL0"]))
    assert {m_on.placement.kv_device_of(i).name for i in range(CFG.n_layer)} == {"OpenCL0"}
    off, m_off = _run(path, PlacementRequest(devices=["OpenCL0"], kv_offload=False))
    assert {m_off.placement.kv_device_of(i).name for i in range(CFG.n_layer)} == {"CPU"}
    ocl = next(s for s in m_off.placement.shares if s.name == "OpenCL0")
    assert ocl.kv_bytes == 0 and ocl.layers == list(range(CFG.n_layer))
    assert _rel(off, on) < 1e-5
