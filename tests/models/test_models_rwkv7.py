"""The rwkv7 family against llama.cpp built here (``ggml_core.testing.llama_cpp``; skipped with the reason where it
cannot be built), on tiny random GGUFs (n_embd 128, head size 64, 2 layers): logits of a whole prompt, token by
token, across ubatches and across calls; on OpenCL0 and split over OpenCL0 + CPU; the state's life cycle; files
llama.cpp would refuse.

Bounds: f32 weights ≤ 1e-4 max |Δlogit|, q8_0 weights ≤ 1e-3.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from llama_cpp_logits import TOKENS, assert_within, cpu_params, llama_cpp_prompt_and_steps, prompt_and_steps

from ggml_core import DeviceNotFoundError
from ggml_core._errors import GGUFError
from ggml_core.backend.registry import get_registry
from ggml_core.models import Model, PlacementRequest
from ggml_core.testing.rwkv_models import RwkvConfig, rwkv7_weights, write_rwkv7


def _max_diff(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape
    return float(np.abs(got - want).max())


@pytest.fixture(scope="module")
def rwkv7(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = RwkvConfig()
    return write_rwkv7(tmp_path_factory.mktemp("rwkv7") / "rwkv7.gguf", cfg, rwkv7_weights(cfg))


@pytest.mark.parametrize("wtype", ["f32", "q8_0"])
def test_rwkv7_matches_llama_cpp(tmp_path: Path, llama_cpp_harness: None, wtype: str) -> None:
    """The whole prompt in one batch, in ubatches of 5, and token by token, against llama.cpp's."""
    cfg = RwkvConfig()
    path = write_rwkv7(tmp_path / f"rwkv7-{wtype}.gguf", cfg, rwkv7_weights(cfg, 1), wtype)
    want = llama_cpp_prompt_and_steps(path)
    bound = 1e-4 if wtype == "f32" else 1e-3
    with Model.load(path, cpu_params()) as m:
        assert m.hp.wkv_head_size == 64 and all(m.hp.is_recurrent(il) for il in range(cfg.n_layer))
        got = prompt_and_steps(m)
    with Model.load(path, cpu_params(batch_size=5)) as m:
        batched = m.process_prompt(TOKENS, all_logits=True)
    assert_within(got, want, bound)
    assert _max_diff(batched, want[0]) <= bound, f"ubatches of 5: max |Δ| {_max_diff(batched, want[0]):.3g}"


def test_rwkv7_state_carries_across_calls(rwkv7: Path) -> None:
    """The prompt as three calls of decode (7, 1 and 8 tokens) gives the logits of one batch."""
    with Model.load(rwkv7, cpu_params()) as m:
        whole = m.process_prompt(TOKENS, all_logits=True)
        m.reset()
        parts = np.concatenate([m.decode(TOKENS[a:b], all_logits=True) for a, b in ((0, 7), (7, 8), (8, 16))])
    assert _max_diff(parts, whole) <= 1e-5


def test_rwkv7_reset_clears_the_state(rwkv7: Path) -> None:
    """After reset a sequence starts from zero token shifts and a zero WKV state: a fresh model's first logits;
    the cache holds only those states."""
    with Model.load(rwkv7, cpu_params()) as m:
        first = m.decode(TOKENS[:4], all_logits=True)
        later = m.decode(TOKENS[:4], all_logits=True)
        m.reset()
        again = m.decode(TOKENS[:4], all_logits=True)
        hp, nbytes = m.hp, m.kv.nbytes
    assert _max_diff(later, first) > 1e-3  # the state carried over, so the same tokens read differently
    np.testing.assert_array_equal(first, again)
    assert hp.n_embd_r == 2 * hp.n_embd and hp.n_embd_s == hp.n_embd * hp.wkv_head_size
    assert nbytes == 4 * hp.n_layer * (hp.n_embd_r + hp.n_embd_s)


@pytest.mark.parametrize(
    ("cfg", "culprit"),
    [
        (RwkvConfig(head_size=48), "wkv.head_size"),
        (RwkvConfig(lora_gate=0), "gate_lora_rank"),
        (RwkvConfig(n_ff=0), "feed_forward_length"),
    ],
)
def test_rwkv7_bad_sizes_name_the_key(tmp_path: Path, cfg: RwkvConfig, culprit: str) -> None:
    """A head size that does not divide n_embd, an ungated file, no channel-mix width: one error naming the key."""
    good = RwkvConfig()
    path = write_rwkv7(tmp_path / "bad.gguf", cfg, rwkv7_weights(good))
    with pytest.raises(GGUFError, match=culprit):
        Model.load(path, cpu_params())


def test_rwkv7_on_opencl_and_split(rwkv7: Path) -> None:
    """OpenCL0 alone and a layer split over OpenCL0 + CPU (a layer's states on each device) give the CPU's logits,
    as a prompt in ubatches of 5 and token by token."""
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")

    def run(req: PlacementRequest) -> tuple[np.ndarray, np.ndarray]:
        with Model.load(rwkv7, cpu_params(placement=req, batch_size=5)) as m:
            prompt = m.process_prompt(TOKENS, all_logits=True)
            m.reset()
            return prompt, np.stack([m.decode([t])[-1] for t in TOKENS])

    cpu = run(PlacementRequest(devices=["CPU"]))
    for req in (PlacementRequest(devices=["OpenCL0"]), PlacementRequest(devices=["OpenCL0", "CPU"], n_gpu_layers=1)):
        for got, want in zip(run(req), cpu, strict=True):
            assert _max_diff(got, want) <= 1e-4, f"{req.devices}: max |Δ| {_max_diff(got, want):.3g}"
