"""Recurrent families against llama.cpp built here (``ggml_core.testing.llama_cpp``; skipped with the reason where it
cannot be built), on tiny random GGUFs: logits of a whole prompt, token by token, across calls and across ubatches;
and the recurrent state's life cycle (cleared on reset, sized in the cache).

Bounds: f32 weights and state ≤ 1e-4 max |Δlogit|, q8_0 weights ≤ 1e-3.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from delta_net_models import DeltaNetConfig, delta_net_model_weights, write_delta_net_model
from llama_cpp_logits import TOKENS, assert_within, cpu_params, llama_cpp_prompt_and_steps, prompt_and_steps

from ggml_core import DeviceNotFoundError
from ggml_core.backend.registry import get_registry
from ggml_core.cli import main
from ggml_core.models import Model, PlacementRequest
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


@pytest.fixture(scope="module")
def mamba2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = MambaConfig()
    return write_mamba2(tmp_path_factory.mktemp("mamba2") / "mamba2.gguf", cfg, mamba2_weights(cfg))


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
def test_mamba2_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, wtype: str) -> None:
    cfg = MambaConfig()
    path = write_mamba2(tmp_path / f"mamba2-{wtype}.gguf", cfg, mamba2_weights(cfg, 1), wtype)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-4 if wtype == "f32" else 1e-3
    with Model.load(path, cpu_params()) as m:
        got = prompt_and_steps(m)
    assert_within(got, want, bound)


@pytest.mark.parametrize("wtype", ["f32"])
def test_granitehybrid_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, wtype: str) -> None:
    """Mamba-2 layers around an attention layer (per-layer KV heads), each with an FFN; Granite's embedding,
    residual, attention and logit scales; a prompt longer than one ubatch."""
    cfg = GraniteConfig()
    path = write_granitehybrid(tmp_path / f"granite-{wtype}.gguf", cfg, granite_weights(cfg, 2), wtype)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-4 if wtype == "f32" else 1e-3
    with Model.load(path, cpu_params(batch_size=6)) as m:
        assert [m.hp.is_recurrent(il) for il in range(3)] == [True, False, True]
        got = prompt_and_steps(m)
    assert_within(got, want, bound)


@pytest.mark.parametrize("variant", ["f32", "q8_0", "swa"])
def test_lfm2_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, variant: str) -> None:
    """Short convolutions around an attention layer (QK-norm, NEOX rope), each with an FFN; with a sliding window
    of 4 on the attention layer in the ``swa`` variant; a prompt longer than one ubatch."""
    cfg = LFM2Config(n_swa=4 if variant == "swa" else 0)
    wtype = "q8_0" if variant == "q8_0" else "f32"
    path = write_lfm2(tmp_path / f"lfm2-{variant}.gguf", cfg, lfm2_weights(cfg, 3), wtype)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-3 if wtype == "q8_0" else 1e-4
    with Model.load(path, cpu_params(batch_size=5)) as m:
        assert [m.hp.is_recurrent(il) for il in range(cfg.n_layer)] == [k == 0 for k in cfg.kv_heads]
        got = prompt_and_steps(m)
    assert_within(got, want, bound)


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
def test_nemotron_h_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, wtype: str) -> None:
    """Mamba-2, attention without rope and squared-ReLU MLP layers, by per-layer KV heads and FFN widths."""
    cfg = NemotronConfig()
    path = write_nemotron_h(tmp_path / f"nemotron-{wtype}.gguf", cfg, nemotron_weights(cfg, 6), wtype)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-4 if wtype == "f32" else 1e-3
    with Model.load(path, cpu_params(batch_size=6)) as m:
        kinds = ["M" if m.hp.is_recurrent(il) else "A" if m.hp.has_attention(il) else "F" for il in range(4)]
        assert "".join(kinds) == cfg.kinds
        assert [m.kv.k[il].ne[1] for il in range(4)] == [0, 64, 0, 0]  # cells for the attention layer only
        got = prompt_and_steps(m)
    assert_within(got, want, bound)


def test_mamba2_state_carries_across_calls_and_ubatches(mamba2: Path) -> None:
    """The same logits whether the prompt goes in one batch, in ubatches of 5, or as three calls of decode."""
    with Model.load(mamba2, cpu_params()) as m:
        whole = m.process_prompt(TOKENS, all_logits=True)
    with Model.load(mamba2, cpu_params(batch_size=5)) as m:
        batched = m.process_prompt(TOKENS, all_logits=True)
        m.reset()
        parts = np.concatenate([m.decode(TOKENS[a:b], all_logits=True) for a, b in ((0, 7), (7, 8), (8, 16))])
    assert np.abs(batched - whole).max() <= 1e-5
    assert np.abs(parts - whole).max() <= 1e-5


def test_mamba2_reset_clears_the_state(mamba2: Path) -> None:
    """After reset, a sequence starts from zero state: the same first logits as a fresh model's."""
    with Model.load(mamba2, cpu_params()) as m:
        first = m.decode(TOKENS[:4], all_logits=True)
        m.decode(TOKENS[4:])
        m.reset()
        again = m.decode(TOKENS[:4], all_logits=True)
        states = [t for t in (*m.kv.r, *m.kv.s) if t is not None]
        hp = m.hp
    np.testing.assert_array_equal(first, again)
    assert len(states) == 2 * hp.n_layer  # every mamba2 layer is recurrent
    assert m.kv.nbytes == 4 * hp.n_layer * (hp.n_embd_r + hp.n_embd_s)  # no K/V cells, only the states


_FAMILIES = {
    "mamba2": lambda p: write_mamba2(p, MambaConfig(), mamba2_weights(MambaConfig(), 4)),
    "granitehybrid": lambda p: write_granitehybrid(p, GraniteConfig(), granite_weights(GraniteConfig(), 4)),
    "lfm2": lambda p: write_lfm2(p, LFM2Config(), lfm2_weights(LFM2Config(), 4)),
    "nemotron_h": lambda p: write_nemotron_h(p, NemotronConfig(), nemotron_weights(NemotronConfig(), 4)),
    "qwen35": lambda p: write_delta_net_model(p, DeltaNetConfig(), delta_net_model_weights(DeltaNetConfig(), 4)),
    "qwen3next": lambda p: write_delta_net_model(
        p, DeltaNetConfig(arch="qwen3next"), delta_net_model_weights(DeltaNetConfig(arch="qwen3next"), 4)
    ),
}


@pytest.fixture(scope="module")
def opencl0() -> str:
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
    return "OpenCL0"


@pytest.mark.parametrize("family", sorted(_FAMILIES))
def test_recurrent_families_on_opencl_and_split(tmp_path: Path, opencl0: str, family: str) -> None:
    """Each family on OpenCL0 alone and split by layers over OpenCL0 + CPU (states on both devices) gives the CPU's
    logits, as a prompt in ubatches and token by token."""
    path = _FAMILIES[family](tmp_path / f"{family}.gguf")

    def run(req: PlacementRequest) -> tuple[np.ndarray, np.ndarray]:
        with Model.load(path, cpu_params(placement=req, batch_size=6)) as m:
            return prompt_and_steps(m)

    cpu = run(PlacementRequest(devices=["CPU"]))
    for req in (PlacementRequest(devices=[opencl0]), PlacementRequest(devices=[opencl0, "CPU"], n_gpu_layers=1)):
        got = run(req)
        for a, b in zip(got, cpu, strict=True):
            assert np.abs(a - b).max() <= 1e-4, f"{family} on {req.devices}: max |Δ| {np.abs(a - b).max():.3g}"


@pytest.mark.parametrize("family", ["granitehybrid", "mamba2", "nemotron_h"])
def test_run_and_chat_commands_on_cpu_opencl_and_split(
    tmp_path: Path, opencl0: str, family: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ggml-core run`` gives the same prompt logits on the CPU, on OpenCL0 and split over both; ``chat`` answers a
    line (a file without a template chats through chatml)."""
    path = _FAMILIES[family](tmp_path / f"{family}.gguf")
    base = ["run", str(path), "--tokens", "1,5,9,3,7,2", "-n", "0", "--kv-type", "f32"]
    runs = {
        "cpu": ["--device", "CPU"],
        "opencl": ["--device", opencl0],
        "split": ["--device", f"{opencl0},CPU", "-ngl", "1"],
    }
    got = {}
    for name, flags in runs.items():
        out = tmp_path / f"{name}.npy"
        assert main([*base, *flags, "--logits-out", str(out)]) == 0, capsys.readouterr().err
        got[name] = np.load(out)
    for name in ("opencl", "split"):
        assert np.abs(got[name] - got["cpu"]).max() <= 1e-4, name
    stdin = io.StringIO("hello\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdin", stdin)
        assert main(["chat", str(path), "--temp", "0", "-n", "3", "--device", f"{opencl0},CPU", "-ngl", "1"]) == 0
    assert "chatml" in capsys.readouterr().err
