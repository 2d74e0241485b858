"""``--split-mode tensor``: a tiny llama's every layer split over two devices through the meta device gives the
one-device logits (and the float64 numpy reference of tests/tiny_models.py), over CPU + OpenCL0 and over CPU + an
RPC server on loopback, for a prompt batch and token by token; uneven ``--tensor-split`` and head counts split
unevenly (one KV head mirrored); other families and impossible splits are refused by name; the CLI end to end.
The other families: tests/sched/test_split_tensor_families.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from opencl_device import opencl_backend
from tiny_models import TinyConfig, fuse_phi3, random_weights, reference_logits, write_model

from ggml_core import AllocationError, get_registry
from ggml_core.backend import reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.tensor_parallel import SUPPORTED
from ggml_core.sched import SplitError, SplitKind, SplitState

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33]
CFG = TinyConfig(n_layer=3)
#: the largest logit difference from the one-device run: f32 weights (the reduction sums in another order), q8_0
TOL = {"f32": 1e-4, "q8_0": 1e-3}


def _opencl_or_skip() -> str:
    """The OpenCL device's name (skips without one)."""
    return opencl_backend().device.name


@pytest.fixture()
def rpc_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """(address, device name) of a ggml-rpc server on 127.0.0.1 serving the CPU (the registry pointed at it)."""
    rpc = pytest.importorskip("ggml_rpc", reason="CPU + RPC needs the ggml-rpc plugin")
    from ggml_rpc.server import RPCServer

    srv = RPCServer([get_registry().get_device("CPU")], "127.0.0.1", 0).start()
    monkeypatch.setenv("GGML_RPC_SERVERS", srv.address)
    reset_registry()
    try:
        yield srv.address, get_registry().get_reg(f"RPC[{srv.address}]").devices[0].name
    finally:
        rpc.disconnect_all()
        srv.shutdown()
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()


def _run(path: Path, req: PlacementRequest, *, step: bool, kv_type: str = "f32") -> tuple[np.ndarray, Model]:
    m = Model.load(path, ModelParams(placement=req, kv_type=kv_type, n_ctx=64, progress=False))
    with m:
        if step:
            return np.concatenate([m.decode([t]) for t in TOKENS]), m
        return m.process_prompt(TOKENS, all_logits=True), m


def _tensor(devices: list[str], split: tuple[float, ...] | None = None) -> PlacementRequest:
    return PlacementRequest(devices=devices, split_mode="tensor", tensor_split=split)


def _check_split(m: Model, devices: list[str], cfg: TinyConfig) -> None:
    """Every layer really was split: shards on each device, two all-reduces per layer, caches by KV heads."""
    tp = m.executor.tensor_parallel
    assert tp is not None and tp.owner is not None
    owner = tp.owner
    assert owner.n_all_reduces == 2 * cfg.n_layer  # after attn_output and after ffn_down
    for il in range(cfg.n_layer):
        for name in ("attn_q.weight", "attn_k.weight", "ffn_up.weight", "attn_output.weight", "ffn_down.weight"):
            t = m.weights[f"blk.{il}.{name}"]
            assert owner.state(t).kind is SplitKind.SPLIT
            for d, dev in enumerate(devices):
                buf = owner.shard(t, d).buffer
                assert buf is not None and buf.buffer_type.device is not None
                assert buf.buffer_type.device.name == dev
        assert [c.name for c in owner.caches].count(f"cache_k_l{il}") == 1
    assert owner.state(m.weights["output.weight"]).kind is SplitKind.MIRRORED


def _compare(tmp_path: Path, second: str, wtype: str, step: bool, cfg: TinyConfig = CFG) -> None:
    w = random_weights(cfg, 3)
    path = write_model(tmp_path / f"{wtype}.gguf", cfg, w, wtype)
    one, _ = _run(path, PlacementRequest(devices=["CPU"]), step=step)
    got, m = _run(path, _tensor(["CPU", second]), step=step)
    _check_split(m, ["CPU", second], cfg)
    assert got.shape == (len(TOKENS), cfg.n_vocab)
    assert np.abs(got - one).max() <= TOL[wtype]
    ref = reference_logits(cfg, w, TOKENS, wtype, "f32")
    assert np.abs(got - ref).max() <= 1e-3 * max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
@pytest.mark.parametrize("step", [False, True], ids=["prompt", "token-by-token"])
def test_cpu_plus_opencl_gives_the_one_device_logits(tmp_path: Path, wtype: str, step: bool) -> None:
    _compare(tmp_path, _opencl_or_skip(), wtype, step)


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
@pytest.mark.parametrize("step", [False, True], ids=["prompt", "token-by-token"])
def test_cpu_plus_rpc_gives_the_one_device_logits(
    tmp_path: Path, rpc_server: tuple[str, str], wtype: str, step: bool
) -> None:
    _compare(tmp_path, rpc_server[1], wtype, step)


def test_cli_run_over_cpu_and_rpc(tmp_path: Path, rpc_server: tuple[str, str]) -> None:
    address = rpc_server[0]
    name = "RPC0"  # the one server's device in a fresh process (this process numbers every server it has seen)
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 2), "f32")
    toks = ",".join(map(str, TOKENS))
    out = {}
    for mode, extra in (("layer", ("--device", "CPU")), ("tensor", ("--rpc", address, "--device", f"CPU,{name}"))):
        npy = tmp_path / f"{mode}.npy"
        r = _cli("run", str(path), "-sm", mode, *extra, "--tokens", toks, "-n", "1", "--json", "--logits-out", str(npy))
        assert r.returncode == 0, r.stderr
        out[mode] = np.load(npy)
        assert json.loads(r.stdout)["split_mode"] == mode
    assert np.abs(out["tensor"] - out["layer"]).max() <= 1e-4


def test_prompt_in_batches_then_generation(tmp_path: Path) -> None:
    """Two graph shapes (prompt chunks of 4, then chunks and decode steps of 1) share one set of shards and one
    cache."""
    second = _opencl_or_skip()
    w = random_weights(CFG, 5)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    outs = []
    for req in (PlacementRequest(devices=["CPU"]), _tensor(["CPU", second])):
        with Model.load(path, ModelParams(placement=req, kv_type="f16", n_ctx=64, batch_size=4, progress=False)) as m:
            first = m.process_prompt(TOKENS[:9], all_logits=True)
            outs.append(np.concatenate([first, m.decode([TOKENS[9]]), m.decode([TOKENS[10]])]))
            if req.split_mode == "tensor":
                tp = m.executor.tensor_parallel
                assert tp is not None and len({id(g.state["tensor_parallel"]) for g in m._graphs.values()}) == 2
    np.testing.assert_allclose(outs[1], outs[0], atol=1e-4, rtol=0)


def test_uneven_tensor_split(tmp_path: Path) -> None:
    """-ts 3,1 over 4 KV heads: 3 heads (and 3/4 of the feed-forward) on the CPU, 1 on the other device."""
    second = _opencl_or_skip()
    cfg = CFG.with_(n_head_kv=4)
    w = random_weights(cfg, 9)
    path = write_model(tmp_path / "m.gguf", cfg, w, "f32")
    one, _ = _run(path, PlacementRequest(devices=["CPU"]), step=False)
    got, m = _run(path, _tensor(["CPU", second], (3, 1)), step=False)
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None
    assert owner.state(m.weights["blk.0.attn_k.weight"]) == SplitState.split(1, (48, 16))
    assert owner.state(m.weights["blk.0.ffn_down.weight"]) == SplitState.split(0, (72, 24))
    assert np.abs(got - one).max() <= 1e-4


def test_heads_that_do_not_divide_split_unevenly(tmp_path: Path) -> None:
    """3 heads (3 KV heads) over 2 equal shares: 2 + 1."""
    second = _opencl_or_skip()
    cfg = CFG.with_(n_embd=48, n_head=3, n_head_kv=3)
    w = random_weights(cfg, 4)
    path = write_model(tmp_path / "m.gguf", cfg, w, "f32")
    one, _ = _run(path, PlacementRequest(devices=["CPU"]), step=True)
    got, m = _run(path, _tensor(["CPU", second], (1, 1)), step=True)
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None and owner.state(m.weights["blk.1.attn_q.weight"]) == SplitState.split(1, (32, 16))
    assert np.abs(got - one).max() <= 1e-4


def test_one_kv_head_over_two_devices_is_mirrored(tmp_path: Path) -> None:
    """Fewer KV heads than devices: the one KV head (and its cache) mirrored, the query heads split 2 + 2."""
    second = _opencl_or_skip()
    cfg = CFG.with_(n_head_kv=1)
    w = random_weights(cfg, 1)
    path = write_model(tmp_path / "m.gguf", cfg, w, "f32")
    one, _ = _run(path, PlacementRequest(devices=["CPU"]), step=True)
    got, m = _run(path, _tensor(["CPU", second]), step=True)
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None and owner.state(m.weights["blk.0.attn_q.weight"]) == SplitState.split(1, (32, 32))
    assert owner.state(m.weights["blk.0.attn_v.weight"]).kind is SplitKind.MIRRORED
    assert np.abs(got - one).max() <= 1e-4
    assert np.abs(got - reference_logits(cfg, w, TOKENS, "f32", "f32")).max() <= 1e-3


def test_other_families_are_refused_by_name(tmp_path: Path) -> None:
    cfg = TinyConfig(arch="phi3")
    path = write_model(tmp_path / "m.gguf", cfg, fuse_phi3(cfg, random_weights(cfg, 2)), "f32")
    with pytest.raises(SplitError, match=rf"^-sm tensor supports: {SUPPORTED}; this model is phi3$"):
        Model.load(path, ModelParams(placement=_tensor(["CPU", "CPU"]), n_ctx=64, progress=False))


def test_one_device_and_flash_attention_are_refused(tmp_path: Path) -> None:
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 2), "f32")
    with pytest.raises(ValueError, match="at least two devices, got CPU"):
        Model.load(path, ModelParams(placement=_tensor(["CPU"]), n_ctx=64, progress=False))
    with pytest.raises(SplitError, match="-sm tensor does not support --flash-attn on yet"):
        Model.load(path, ModelParams(placement=_tensor(["CPU", "CPU"]), flash_attn=True, n_ctx=64, progress=False))


@pytest.mark.parametrize("type_k", ["q8_0", "q4_0"])
def test_a_quantized_k_cache_is_split_at_block_boundaries(tmp_path: Path, type_k: str) -> None:
    """-ctk q8_0 / q4_0 (heads of 32 values: one block each) over CPU + OpenCL0: each device writes and reads the
    quantized rows of its own KV heads; the logits are the one-device run's with the same cache type, prompt and
    token by token."""
    second = _opencl_or_skip()
    cfg = CFG.with_(n_embd=128)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 3), "f32")
    outs = []
    for req in (PlacementRequest(devices=["CPU"]), _tensor(["CPU", second])):
        params = ModelParams(placement=req, type_k=type_k, type_v="f32", n_ctx=64, progress=False)
        with Model.load(path, params) as m:
            prompt = m.process_prompt(TOKENS, all_logits=True)
            m.reset()
            outs.append((prompt, np.concatenate([m.decode([t]) for t in TOKENS])))
            if req.split_mode == "tensor":
                _check_split(m, ["CPU", second], cfg)
    for i in range(2):
        np.testing.assert_allclose(outs[1][i], outs[0][i], atol=1e-4, rtol=0)


def test_a_quantized_v_cache_is_refused(tmp_path: Path) -> None:
    """-sm tensor reads V by rows without flash attention, which a quantized V cache needs."""
    cfg = CFG.with_(n_embd=128)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 3), "f32")
    params = ModelParams(placement=_tensor(["CPU", "CPU"]), type_v="q8_0", n_ctx=64, progress=False)
    with pytest.raises(ValueError, match="V cache is f16 or f32, got -ctv q8_0; quantize K only"):
        Model.load(path, params)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_cli_run_and_plan(tmp_path: Path) -> None:
    second = _opencl_or_skip()
    w = random_weights(CFG, 6)
    path = write_model(tmp_path / "m.gguf", CFG, w, "q8_0")
    toks = ",".join(map(str, TOKENS))
    logits = {}
    for mode, dev in (("layer", "CPU"), ("tensor", f"CPU,{second}")):
        out = tmp_path / f"{mode}.npy"
        r = _cli(
            "run", str(path), "-sm", mode, "--device", dev, "--tokens", toks, "-n", "1", "--json", "--logits-out",
            str(out),
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["split_mode"] == mode
        logits[mode] = np.load(out)
    assert logits["tensor"].shape == (len(TOKENS), CFG.n_vocab)
    assert np.abs(logits["tensor"] - logits["layer"]).max() <= 1e-3
    r = _cli("plan", str(path), "-sm", "tensor", "--device", f"CPU,{second}", "-ts", "1,1", "-c", "64")
    assert r.returncode == 0, r.stderr
    assert f"Meta(CPU,{second}): " in r.stdout and f"{2 * CFG.n_layer} all-reduces per compute" in r.stdout
    assert "blk.0.attn_q.weight: split(axis 1: 32+32)" in r.stdout
    r = _cli("plan", str(path), "-sm", "tensor", "--device", f"CPU,{second}", "-c", "64", "--json")
    assert r.returncode == 0, r.stderr
    planned = json.loads(r.stdout)
    shares = {d["name"]: d for d in planned["devices"]}
    assert set(shares) == {"CPU", second} and all(d["layers"] == CFG.n_layer for d in shares.values())
    assert shares[second]["weights_MB"] > 0 and shares[second]["kv_MB"] == shares["CPU"]["kv_MB"] > 0  # 1 + 1 heads
    tp = planned["tensor_parallel"]
    assert tp["n_all_reduces"] == 2 * CFG.n_layer and tp["split_tensors"]["cache_v_l2"] == "split(axis 0: 16+16)"
    assert set(tp["shard_bytes"]) == {"CPU", second} and all(v > 0 for v in tp["shard_bytes"].values())
    phi3 = TinyConfig(arch="phi3")
    bad = write_model(tmp_path / "phi3.gguf", phi3, fuse_phi3(phi3, random_weights(phi3, 1)), "f32")
    r = _cli("run", str(bad), "-sm", "tensor", "--device", f"CPU,{second}", "--tokens", "1,2")
    assert r.returncode != 0
    assert f"-sm tensor supports: {SUPPORTED}; this model is phi3" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_chat_answers_as_one_device(tmp_path: Path) -> None:
    second = _opencl_or_skip()
    cfg = CFG.with_(n_ctx=256)
    path = write_model(tmp_path / "chat.gguf", cfg, random_weights(cfg, 8), "f32", vocab=True)
    replies = []
    for args in (("--device", "CPU"), ("-sm", "tensor", "--device", f"CPU,{second}")):
        r = _cli("chat", str(path), *args, "-p", "hello", "-st", "-n", "6", "--temp", "0")
        assert r.returncode == 0, r.stderr
        replies.append(r.stdout)
    assert replies[0].strip() and replies[1] == replies[0]


def test_quantized_head_columns_off_block_boundaries_are_a_clear_error(tmp_path: Path) -> None:
    """q8_0 attn_output split by 3 + 1 heads of 16 columns: 48 is not a multiple of its 32-element blocks."""
    second = _opencl_or_skip()
    cfg = CFG.with_(n_head_kv=4)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 1), "q8_0")
    with pytest.raises(SplitError, match=r"attn_output.*must fall on its 32-element block boundaries \(got 0\+48\)"):
        _run(path, _tensor(["CPU", second], (3, 1)), step=False)


def test_a_share_beyond_free_memory_is_refused_before_allocating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    second = _opencl_or_skip()
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 1), "f32")
    dev = get_registry().get_device(second)
    monkeypatch.setattr(dev, "memory", lambda: (4096, 4096))
    with pytest.raises(AllocationError, match=rf"device {second}: .*its -sm tensor share does not fit: weights"):
        Model.load(path, ModelParams(placement=_tensor(["CPU", second]), n_ctx=64, progress=False))
