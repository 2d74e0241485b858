"""``--split-mode tensor`` for every family of ``ggml_core.models.tensor_parallel.FAMILIES`` gives
the one-device logits over CPU + OpenCL0, over CPU + an RPC server and over two RPC servers on loopback, for a prompt
and the decode steps after it; mixtures of experts split each expert by its width (MUL_MAT_ID, per-expert biases),
gpt-oss's attention sinks split by head, a single KV head is mirrored while the query heads split; uneven
``--tensor-split``; recurrent and hybrid families are refused by name.

Bounds: the one-device run on the CPU, f32 weights within 1e-4 (the all-reduce sums in another order), quantized
weights (q8_0, gpt-oss's MXFP4 experts) within 1e-3. Gemma's GEGLU reads ggml's f16 GELU table at f16(gate): a
float32 difference of the reordered sums that moves a gate across an f16 rounding step moves that GELU output by one
f16 step, so gemma2/gemma3 take tests/test_models_families.py's bounds, relative to the largest logit: 2e-4 (f32)
and 1e-3 (q8_0); measured up to 3.7e-5 of the largest logit. (The mirrored single KV head alone, in a
llama or qwen3 model without GELU, stays within 4e-7.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from delta_net_models import DeltaNetConfig, delta_net_model_weights, write_delta_net_model
from gpt_oss_models import SEED, gpt_oss_weights, write_gpt_oss
from opencl_device import opencl_backend
from tiny_models import TinyConfig, fuse_phi3, random_weights, write_model

from ggml_core import AllocationError, get_registry
from ggml_core.backend import reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.tensor_parallel import DELTA_NET_FAMILIES, FAMILIES
from ggml_core.sched import SplitError, SplitKind, SplitState
from ggml_core.testing.recurrent_models import (
    GraniteConfig,
    LFM2Config,
    MambaConfig,
    NemotronConfig,
    granite_weights,
    lfm2_weights,
    mamba2_weights,
    nemotron_weights,
    write_granitehybrid,
    write_lfm2,
    write_mamba2,
    write_nemotron_h,
)
from ggml_core.testing.rwkv_models import RwkvConfig, rwkv7_weights, write_rwkv7

PROMPT = [1, 5, 9, 3, 7, 2, 11, 4, 8]
STEPS = [60, 33, 17, 25, 40]
TOL = {"f32": 1e-4, "q8_0": 1e-3, "mxfp4": 1e-3}
GEMMA_REL = {"f32": 2e-4, "q8_0": 1e-3}
CONFIGS = {
    "llama": TinyConfig(n_layer=3),
    "llama-moe": TinyConfig(n_expert=4, n_expert_used=2),
    "qwen2": TinyConfig(arch="qwen2"),
    "qwen3": TinyConfig(arch="qwen3"),
    "qwen3moe": TinyConfig(arch="qwen3moe", n_expert=4, n_expert_used=2),
    "qwen2moe": TinyConfig(arch="qwen2moe", n_expert=4, n_expert_used=2),
    "dots1": TinyConfig(arch="dots1", n_layer=3, n_expert=4, n_expert_used=2, n_dense_lead=1),
    "gemma2": TinyConfig(arch="gemma2", n_swa=4, attn_softcap=3.0, final_softcap=5.0, tied_output=True),
    # gemma3's real small models have one KV head: mirrored, the query heads split
    "gemma3": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, n_swa=4, tied_output=True),
    "gemma3-2kv": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=2, n_swa=4, tied_output=True),
}

# each expert two q8_0 blocks wide, so that the quantized experts split
_QWEN35MOE = DeltaNetConfig(arch="qwen35moe", n_ff_exp=64)
_QWEN3NEXT = DeltaNetConfig(arch="qwen3next", sections=None, n_ff_exp=64)
#: the hybrid families' test models (recurrent mixers between attention layers) by path and weight type
HYBRIDS: dict[str, Callable[[Path, str], Path]] = {
    "mamba2": lambda p, w: write_mamba2(p, MambaConfig(), mamba2_weights(MambaConfig(), 1), w),
    "granitehybrid": lambda p, w: write_granitehybrid(p, GraniteConfig(), granite_weights(GraniteConfig(), 1), w),
    "nemotron_h": lambda p, w: write_nemotron_h(p, NemotronConfig(), nemotron_weights(NemotronConfig(), 4), w),
    "lfm2": lambda p, w: write_lfm2(p, LFM2Config(), lfm2_weights(LFM2Config(), 4), w),
    "qwen35": lambda p, w: write_delta_net_model(p, DeltaNetConfig(), delta_net_model_weights(DeltaNetConfig(), 1), w),
    "qwen35moe": lambda p, w: write_delta_net_model(p, _QWEN35MOE, delta_net_model_weights(_QWEN35MOE, 1), w),
    "qwen3next": lambda p, w: write_delta_net_model(p, _QWEN3NEXT, delta_net_model_weights(_QWEN3NEXT, 1), w),
    "rwkv7": lambda p, w: write_rwkv7(p, RwkvConfig(), rwkv7_weights(RwkvConfig(), 1), w),
}


def _model(tmp_path: Path, family: str, wtype: str) -> Path:
    """A test model of ``family`` (``gpt-oss``: f32 with MXFP4 experts, ``wtype`` "mxfp4")."""
    if family == "gpt-oss":
        return write_gpt_oss(tmp_path / "gpt-oss.gguf", gpt_oss_weights(SEED))
    if family in HYBRIDS:
        return HYBRIDS[family](tmp_path / f"{family}-{wtype}.gguf", wtype)
    cfg = CONFIGS[family]
    return write_model(tmp_path / f"{family}-{wtype}.gguf", cfg, random_weights(cfg, 3), wtype)


def _run(path: Path, devices: list[str], split: tuple[float, ...] | None = None) -> tuple[np.ndarray, Model]:
    """The prompt's logits, then one row per decode step; ``split``: ``-sm tensor`` with these proportions."""
    mode = "tensor" if len(devices) > 1 else "layer"
    req = PlacementRequest(devices=devices, split_mode=mode, tensor_split=split)
    with Model.load(path, ModelParams(placement=req, kv_type="f32", n_ctx=64, progress=False)) as m:
        first = m.process_prompt(PROMPT, all_logits=True)
        return np.concatenate([first, *(m.decode([t]) for t in STEPS)]), m


def _two_sequences(m: Model) -> list[np.ndarray]:
    """The logits of the prompt and decode steps, twice, with ``reset`` between (the states cleared)."""
    runs = []
    for _ in range(2):
        first = m.process_prompt(PROMPT, all_logits=True)
        runs.append(np.concatenate([first, *(m.decode([t]) for t in STEPS)]))
        m.reset()
    return runs


def _check_split(m: Model, devices: list[str]) -> None:
    """Every layer's attention and FFN (or each expert) really was split: shards on each device (a hybrid's last
    attention layer and last FFN)."""
    tp = m.executor.tensor_parallel
    assert tp is not None and tp.owner is not None
    owner = tp.owner
    hp = m.hp
    attn = ["attn_q.weight", "attn_output.weight"]
    ffn = ["ffn_gate_exps.weight", "ffn_down_exps.weight"] if hp.is_moe else ["ffn_up.weight", "ffn_down.weight"]
    if hp.attn_sinks:
        attn += ["attn_sinks.weight", "attn_q.bias"]
        ffn += ["ffn_up_exps.bias"]
    attn_layers = [il for il in range(hp.n_layer) if hp.has_attention(il)]
    ffn_layers = [il for il in range(hp.n_layer) if m.weights.get(f"blk.{il}.{ffn[1]}") is not None]
    dense_lead = [
        il for il in range(hp.n_layer) if hp.is_moe and m.weights.get(f"blk.{il}.ffn_down.weight") is not None
    ]
    # Mamba-2 mixers split by groups of heads, delta nets by value heads, short convolutions by channel, their
    # states too
    mamba = [il for il in range(hp.n_layer) if hp.is_recurrent(il)]
    mixer = ("ssm_in.weight", "ssm_conv1d.weight", "ssm_out.weight")
    if hp.arch in DELTA_NET_FAMILIES:
        mixer = ("attn_qkv.weight", "ssm_conv1d.weight", "ssm_out.weight")
    elif hp.arch == "lfm2":
        mixer = ("shortconv.in_proj.weight", "shortconv.conv.weight", "shortconv.out_proj.weight")
    elif hp.arch == "rwkv7":  # the time mix by head, the channel mix (its FFN) by width
        mixer = ("time_mix_key.weight", "time_mix_output.weight")
        ffn, ffn_layers = ["channel_mix_key.weight", "channel_mix_value.weight"], mamba
    names = [f"blk.{il}.{n}" for il in attn_layers[-1:] for n in attn]
    names += [f"blk.{il}.{n}" for il in ffn_layers[-1:] for n in ffn]
    names += [f"blk.{il}.{n}" for il in mamba[-1:] for n in mixer]
    for il in mamba:
        # LFM2 keeps only its window (r: s is None); RWKV-7's token shift (r) holds whole inputs, mirrored
        split_states = [m.kv.s[il]] if hp.arch == "rwkv7" else [m.kv.r[il], m.kv.s[il]]
        assert {t.name for t in split_states if t is not None} <= {t.name for t in owner.caches}
    for name in names:
        t = m.weights[name]
        assert owner.state(t).kind is SplitKind.SPLIT, name
        for d, dev in enumerate(devices):
            buf = owner.shard(t, d).buffer
            assert buf is not None and buf.buffer_type.device is not None
            assert buf.buffer_type.device.name == dev
    # one all-reduce after each attention, each FFN, each split recurrent mixer
    assert owner.n_all_reduces == len(attn_layers) + len(ffn_layers) + len(dense_lead) + len(mamba)


def _compare(tmp_path: Path, family: str, wtype: str, devices: list[str]) -> float:
    path = _model(tmp_path, family, wtype)
    one, _ = _run(path, ["CPU"])
    got, m = _run(path, devices)
    _check_split(m, devices)
    assert got.shape == one.shape
    tol = TOL[wtype]
    if m.hp.ffn_act == "gelu":  # the f16 GELU table (see the module's doc)
        tol = GEMMA_REL[wtype] * float(np.abs(one).max())
    diff = float(np.abs(got - one).max())
    assert diff <= tol, f"{family} {wtype} over {devices}: max |Δlogit| {diff} > {tol}"
    return diff


@pytest.fixture()
def rpc_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The device names of two ggml-rpc servers on 127.0.0.1, each serving the CPU (the registry pointed at both)."""
    rpc = pytest.importorskip("ggml_rpc", reason="RPC devices need the ggml-rpc plugin")
    from ggml_rpc.server import RPCServer

    servers = [RPCServer([get_registry().get_device("CPU")], "127.0.0.1", 0).start() for _ in range(2)]
    monkeypatch.setenv("GGML_RPC_SERVERS", ",".join(s.address for s in servers))
    reset_registry()
    try:
        yield [get_registry().get_reg(f"RPC[{s.address}]").devices[0].name for s in servers]
    finally:
        rpc.disconnect_all()
        for s in servers:
            s.shutdown()
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()


ALL = [(f, w) for f in [*CONFIGS, *HYBRIDS] for w in ("f32", "q8_0")] + [("gpt-oss", "mxfp4")]
KEY = [
    ("llama", "f32"),
    ("llama", "q8_0"),
    ("gemma3", "f32"),
    ("gemma3", "q8_0"),
    ("qwen3moe", "f32"),
    ("qwen3moe", "q8_0"),
    ("gpt-oss", "mxfp4"),
    ("granitehybrid", "f32"),
    ("granitehybrid", "q8_0"),
    ("qwen35", "f32"),
]


def test_every_family_listed_is_tested() -> None:
    tested = {CONFIGS[f].arch for f in CONFIGS} | {"gpt-oss"} | set(HYBRIDS)
    assert set(FAMILIES) == tested


@pytest.mark.parametrize(("family", "wtype"), ALL)
def test_family_over_cpu_and_opencl(tmp_path: Path, family: str, wtype: str) -> None:
    _compare(tmp_path, family, wtype, ["CPU", opencl_backend().device.name])


@pytest.mark.parametrize(("family", "wtype"), KEY)
def test_family_over_cpu_and_an_rpc_server(tmp_path: Path, rpc_devices: list[str], family: str, wtype: str) -> None:
    _compare(tmp_path, family, wtype, ["CPU", rpc_devices[0]])


@pytest.mark.parametrize(("family", "wtype"), KEY)
def test_family_over_two_rpc_servers(tmp_path: Path, rpc_devices: list[str], family: str, wtype: str) -> None:
    _compare(tmp_path, family, wtype, rpc_devices)


def test_uneven_split_of_heads_and_experts(tmp_path: Path, rpc_devices: list[str]) -> None:
    """qwen3moe, -ts 3,1 over 4 KV heads: 3 KV heads and 3/4 of each expert's width on the CPU."""
    cfg = CONFIGS["qwen3moe"].with_(n_head_kv=4)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 5), "f32")
    one, _ = _run(path, ["CPU"])
    got, m = _run(path, ["CPU", rpc_devices[0]], (3, 1))
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None
    assert owner.state(m.weights["blk.0.attn_k.weight"]) == SplitState.split(1, (48, 16))
    assert owner.state(m.weights["blk.0.ffn_up_exps.weight"]) == SplitState.split(1, (72, 24))
    assert owner.state(m.weights["blk.0.ffn_down_exps.weight"]) == SplitState.split(0, (72, 24))
    assert np.abs(got - one).max() <= TOL["f32"]


def test_one_kv_head_mirrored_with_uneven_query_heads(tmp_path: Path, rpc_devices: list[str]) -> None:
    """One KV head (as gemma3's small models) over three devices, -ts 2,1,1: K, V and the cache mirrored (on the
    first device, read by the others), the 4 query heads split 2 + 1 + 1; qwen3, whose SiLU keeps the f32 bound."""
    cfg = CONFIGS["qwen3"].with_(n_head_kv=1)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 6), "f32")
    one, _ = _run(path, ["CPU"])
    got, m = _run(path, ["CPU", *rpc_devices], (2, 1, 1))
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None
    assert owner.state(m.weights["blk.0.attn_q.weight"]) == SplitState.split(1, (32, 16, 16))
    assert owner.state(m.weights["blk.0.attn_k.weight"]).kind is SplitKind.MIRRORED
    assert [t.name for t in owner.mirrored_caches].count("cache_k_l0") == 1
    assert np.abs(got - one).max() <= TOL["f32"]


def test_recurrent_states_stay_on_the_first_device_and_clear_with_the_cache(tmp_path: Path) -> None:
    """A mixer that cannot split is mirrored (computed on the first device), its states are caches there: a qwen35
    delta net with one run of value heads (2 key heads, 2 value heads) for two devices; a second sequence after
    ``reset`` gives the first one's logits."""
    cfg = DeltaNetConfig(n_v_heads=2)
    path = write_delta_net_model(tmp_path / "m.gguf", cfg, delta_net_model_weights(cfg, 5))
    one, _ = _run(path, ["CPU"])
    req = PlacementRequest(devices=["CPU", opencl_backend().device.name], split_mode="tensor")
    with Model.load(path, ModelParams(placement=req, kv_type="f32", n_ctx=64, progress=False)) as m:
        runs = _two_sequences(m)
        owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
        assert owner is not None
        il = next(il for il in range(m.hp.n_layer) if m.hp.is_recurrent(il))
        assert {f"cache_r_l{il}", f"cache_s_l{il}"} <= {t.name for t in owner.mirrored_caches}
        for t in owner.mirrored_caches:
            assert t.buffer is not None and t.buffer.buffer_type.device.name == "CPU"  # type: ignore[union-attr]
        assert owner.state(m.weights[f"blk.{il}.ssm_out.weight"]).kind is SplitKind.MIRRORED
    for got in runs:
        assert np.abs(got - one).max() <= TOL["f32"]


def test_mamba2_split_by_groups_of_heads_unevenly(tmp_path: Path, rpc_devices: list[str]) -> None:
    """granitehybrid with 4 groups of 2 heads, -ts 3,1: 3 groups (6 heads) on the CPU, 1 on the RPC server; the
    fused ``ssm_in`` holds each device's z, x, B, C and dt rows; the states split alike and clear with the cache."""
    cfg = GraniteConfig(n_group=4)
    path = write_granitehybrid(tmp_path / "m.gguf", cfg, granite_weights(cfg, 2))
    one, _ = _run(path, ["CPU"])
    devices = ["CPU", rpc_devices[0]]
    req = PlacementRequest(devices=devices, split_mode="tensor", tensor_split=(3, 1))
    with Model.load(path, ModelParams(placement=req, kv_type="f32", n_ctx=64, progress=False)) as m:
        runs = _two_sequences(m)
        owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
        assert owner is not None
        ch, bc = (96, 32), (48, 16)  # 16-wide heads; 16 states per group
        assert owner.state(m.weights["blk.0.ssm_in.weight"]) == SplitState.segmented(1, [ch, ch, bc, bc, (6, 2)])
        assert owner.state(m.weights["blk.0.ssm_norm.weight"]) == SplitState.split(1, (3, 1))
        caches = {t.name: t for t in owner.caches}
        assert owner.state(caches["cache_s_l0"]) == SplitState.split(0, (96 * 16, 32 * 16))
        assert owner.state(caches["cache_r_l0"]) == SplitState.segmented(0, [(3 * x, 3 * y) for x, y in (ch, bc, bc)])
    for got in runs:
        assert np.abs(got - one).max() <= TOL["f32"]


def test_delta_net_split_by_value_heads(tmp_path: Path, rpc_devices: list[str]) -> None:
    """qwen35 with 2 key heads and 6 value heads over three devices: value heads 2 + 2 + 2 (each device's first
    reads key head 0), q and k (the first parts of ``attn_qkv``) on the first device; states split alike."""
    cfg = DeltaNetConfig(n_v_heads=6, n_head_kv=1)  # the one KV head mirrored over the three devices
    path = write_delta_net_model(tmp_path / "m.gguf", cfg, delta_net_model_weights(cfg, 4))
    one, _ = _run(path, ["CPU"])
    req = PlacementRequest(devices=["CPU", *rpc_devices], split_mode="tensor")
    with Model.load(path, ModelParams(placement=req, kv_type="f32", n_ctx=64, progress=False)) as m:
        runs = _two_sequences(m)
        owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
        assert owner is not None
        keys, v = (32, 0, 0), (32, 32, 32)  # 16-wide heads
        assert owner.state(m.weights["blk.0.attn_qkv.weight"]) == SplitState.segmented(1, [keys, keys, v])
        assert owner.state(m.weights["blk.0.ssm_beta.weight"]) == SplitState.split(1, (2, 2, 2))
        caches = {t.name: t for t in owner.caches}
        assert owner.state(caches["cache_s_l0"]) == SplitState.split(0, (512, 512, 512))
    for got in runs:
        assert np.abs(got - one).max() <= TOL["f32"]


def test_mamba2_with_fewer_groups_than_devices_stays_whole(tmp_path: Path) -> None:
    """One group (as in many Mamba-2 models) over two devices: the gated norm spans every head, so the mixer and its
    states stay on the first device, and the logits are still the one-device ones."""
    cfg = MambaConfig(n_group=1)
    path = write_mamba2(tmp_path / "m.gguf", cfg, mamba2_weights(cfg, 3))
    one, _ = _run(path, ["CPU"])
    got, m = _run(path, ["CPU", opencl_backend().device.name])
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None
    assert owner.state(m.weights["blk.0.ssm_in.weight"]).kind is SplitKind.MIRRORED
    assert {"cache_r_l0", "cache_s_l0"} <= {t.name for t in owner.mirrored_caches}
    assert np.abs(got - one).max() <= TOL["f32"]


def test_kv_heads_that_cannot_cover_the_devices_are_a_clear_error(tmp_path: Path, rpc_devices: list[str]) -> None:
    """2 KV heads over 3 devices: each needs one; (one KV head would be mirrored instead)."""
    cfg = CONFIGS["qwen3moe"]
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 1), "f32")
    with pytest.raises(SplitError, match=r"^cannot split 2 KV heads over 3 devices: .*use at most 2 devices$"):
        _run(path, ["CPU", *rpc_devices])


def test_other_families_are_refused_by_name(tmp_path: Path) -> None:
    cfg = TinyConfig(arch="phi3")
    path = write_model(tmp_path / "m.gguf", cfg, fuse_phi3(cfg, random_weights(cfg, 1)), "f32")
    supported = ", ".join(FAMILIES)
    with pytest.raises(SplitError, match=rf"^-sm tensor supports: {supported}; this model is phi3$"):
        _run(path, ["CPU", opencl_backend().device.name])


def test_fit_chooses_shares_that_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenCL0 first (it holds the mirrored output matrix) with 6 MB free, the CPU with 7 MB: shares by free memory
    (0.46) overfill OpenCL0; ``--fit on`` re-chooses them from each device's room (2 of 8 KV heads there), and the
    logits are the one-device ones; an explicit ``--tensor-split`` is kept and refused."""
    second = opencl_backend().device.name
    cfg = TinyConfig(n_layer=3, n_head=8, n_head_kv=8, n_embd=128, n_ff=256, n_vocab=512)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 1), "f32")
    one, _ = _run(path, ["CPU"])
    for name, free in ((second, 6_000_000), ("CPU", 7_000_000)):
        monkeypatch.setattr(get_registry().get_device(name), "memory", lambda free=free: (free, free))
    got, m = _run(path, [second, "CPU"])
    owner = m.executor.tensor_parallel.owner  # type: ignore[union-attr]
    assert owner is not None
    assert owner.state(m.weights["blk.0.attn_k.weight"]) == SplitState.split(1, (32, 96))
    assert any(n.startswith("--fit: tensor split shares from each device's free memory") for n in m.placement.notes)
    assert all(s.total_bytes <= s.device.memory()[0] for s in m.placement.shares)
    assert np.abs(got - one).max() <= TOL["f32"]
    with pytest.raises(AllocationError, match=rf"device {second}: .*its -sm tensor share does not fit"):
        _run(path, [second, "CPU"], (1, 1))
