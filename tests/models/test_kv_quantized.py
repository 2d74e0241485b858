"""Quantized KV caches (llama.cpp's ``-ctk`` / ``-ctv``): against llama.cpp, the definition and the f16 cache.

A tiny llama with 32-wide heads (a q4_0/q8_0 block is 32 values, which must divide the head). SET_ROWS quantizes
each token's K and V rows; K is read by MUL_MAT or FLASH_ATTN_EXT, a quantized V only by FLASH_ATTN_EXT.

Bounds. llama.cpp with ``-ctk q8_0 -ctv q8_0 -fa on`` stores the same bits (ggml-cpu's x86 Q8_0 rounding on both
sides), so only float32 summation orders differ: measured 2.4e-7 max |Δlogit| on logits of magnitude ~2; the bound
is 1e-4, as for every f32 model against llama.cpp. The definition (tests/tiny_models.py's reference_logits with
the cache rows quantized and dequantized as ggml does, float64 elsewhere) gets 1e-4 too. Against our own f16 cache
the quantization error shows: q8_0 moves the logits by a few 1e-3, q4_0 by a few 1e-2 (measured); the bounds
(1e-2 and 0.2 of max |logit| 2.03) only say the run is the same model, the exact checks are the two above.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_models import TinyConfig, llama_cpp_built, random_weights, reference_logits, write_model  # noqa: F401

from ggml_core import GGMLOp
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available
from ggml_core.testing import llama_cpp

CFG = TinyConfig(n_embd=128, n_head=4, n_head_kv=2, n_vocab=64, n_ctx=64)  # head_dim 32
TOKENS = [1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33, 17, 25, 40, 12, 6]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("kvq") / "llama.gguf", CFG, random_weights(CFG, 0), "f32", vocab=True)


def _ours(path: Path, type_k: str, type_v: str, fa: bool | None, *, steps: bool = False) -> np.ndarray:
    p = ModelParams(
        placement=PlacementRequest(devices=["CPU"]), n_ctx=64, type_k=type_k, type_v=type_v, flash_attn=fa,
        progress=False,
    )  # fmt: skip
    with Model.load(path, p) as m:
        if steps:
            return np.stack([m.decode([t])[-1] for t in TOKENS])
        return m.process_prompt(TOKENS, all_logits=True)


def test_q8_0_cache_with_flash_attention_matches_llama_cpp(model: Path, built: None) -> None:
    ref = llama_cpp.LlamaCpp(model, threads=1, kv_type="q8_0", flash_attn=True)
    want, want_steps = ref.logits(TOKENS), ref.logits(TOKENS, steps=True)
    got, got_steps = _ours(model, "q8_0", "q8_0", True), _ours(model, "q8_0", "q8_0", True, steps=True)
    assert np.abs(got - want).max() <= 1e-4, f"max |Δlogit| = {np.abs(got - want).max():.3g}"
    assert np.abs(got_steps - want_steps).max() <= 1e-4, f"steps: max |Δ| = {np.abs(got_steps - want_steps).max():.3g}"


@pytest.mark.parametrize(
    ("type_k", "type_v", "fa"),
    [
        ("q8_0", "q8_0", True),
        ("q8_0", "f32", False),  # K by MUL_MAT on the quantized cache
        ("q4_0", "f32", False),
        ("q4_0", "q4_0", True),
        ("q5_1", "q4_1", True),  # K and V of different types
        ("q5_0", "q8_0", True),
        ("iq4_nl", "iq4_nl", True),
        ("iq4_nl", "f32", False),
    ],
)
def test_quantized_cache_matches_the_definition(model: Path, type_k: str, type_v: str, fa: bool) -> None:
    want = reference_logits(CFG, random_weights(CFG, 0), TOKENS, "f32", type_k, type_v=type_v)
    got = _ours(model, type_k, type_v, fa)
    assert np.abs(got - want).max() <= 1e-4, f"{type_k}/{type_v}: max |Δlogit| = {np.abs(got - want).max():.3g}"
    steps = _ours(model, type_k, type_v, fa, steps=True)
    assert np.abs(steps - got).max() <= 1e-4, f"steps against one batch: {np.abs(steps - got).max():.3g}"


@pytest.mark.parametrize(("type_k", "type_v", "bound"), [("q8_0", "q8_0", 1e-2), ("q4_0", "q4_0", 0.2)])
def test_quantized_cache_stays_near_the_f16_cache(model: Path, type_k: str, type_v: str, bound: float) -> None:
    base = _ours(model, "f16", "f16", True)
    got = _ours(model, type_k, type_v, True)
    assert 0 < np.abs(got - base).max() <= bound, f"{type_k}: max |Δlogit| = {np.abs(got - base).max():.3g}"
    assert (got.argmax(-1) == base.argmax(-1)).mean() >= 0.75


def test_flash_attention_auto_turns_on_for_a_quantized_v(model: Path) -> None:
    p = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=64, kv_type="q8_0", flash_attn=None)
    with Model.load(model, p) as m:
        assert m.params.flash_attn is True
        assert m.kv is not None and m.kv.k[0].type.traits.name == "q8_0" and m.kv.v[0].type.traits.name == "q8_0"


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"type_v": "q8_0", "flash_attn": False}, "V cache quantization requires flash_attn"),
        ({"type_k": "q4_2"}, "--cache-type-k: unsupported cache type 'q4_2'"),
    ],
)
def test_refusals_are_one_line(model: Path, kw: dict[str, object], message: str) -> None:
    p = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=64, progress=False, **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message) as exc:
        Model.load(model, p)
    assert "\n" not in str(exc.value)


def test_a_block_wider_than_the_head_is_refused(tmp_path: Path) -> None:
    cfg = TinyConfig(n_vocab=64)  # head_dim 16: a q8_0 block of 32 does not fit
    path = write_model(tmp_path / "narrow.gguf", cfg, random_weights(cfg, 0), "f32", vocab=True)
    p = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=64, type_k="q8_0", progress=False)
    with pytest.raises(ValueError, match="block of 32 values does not divide n_embd_head_k=16"):
        Model.load(path, p)


def test_a_device_that_cannot_write_the_cache_leaves_it_on_the_host(model: Path) -> None:
    """A device that runs MUL_MAT and writes only f32 caches (tests/sched_plugin's SubsetDevice) holds the layers;
    the q8_0 caches stay in host memory (a placement note says why), attention reads them there: the logits are
    the CPU's."""
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed")
    from sched_plugin import SubsetDevice, SubsetPlugin

    from ggml_core.backend.registry import get_registry, reset_registry

    want = _ours(model, "q8_0", "q8_0", True)
    reset_registry()
    try:
        ops = (GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM, GGMLOp.SET_ROWS)
        dev = SubsetDevice("Sub0", ops)
        get_registry().register_plugin(SubsetPlugin([dev]), "sub-kvq")
        p = ModelParams(n_ctx=64, kv_type="q8_0", flash_attn=True, progress=False)
        with Model.load(model, p) as m:
            assert all(m.placement.device_of(i) is dev for i in range(CFG.n_layer))
            assert all(m.placement.kv_device_of(i).name == "CPU" for i in range(CFG.n_layer))
            assert any("Sub0 cannot write a q8_0 KV cache" in n for n in m.placement.notes), m.placement.notes
            got = m.process_prompt(TOKENS, all_logits=True)
    finally:
        reset_registry()
    assert np.abs(got - want).max() <= 1e-4, f"max |Δlogit| = {np.abs(got - want).max():.3g}"


def _opencl_or_skip() -> str:
    from opencl_device import opencl_backend

    return str(opencl_backend().device.name)


@pytest.mark.parametrize(
    ("type_k", "type_v", "fa", "on_device"),
    [
        ("q8_0", "q8_0", True, True),
        ("q4_0", "f16", False, True),
        ("iq4_nl", "q5_1", True, False),  # OpenCL's SET_ROWS writes no iq4_nl: the caches stay on the host
    ],
)
def test_opencl_holds_the_caches_it_can_write(model: Path, type_k: str, type_v: str, fa: bool, on_device: bool) -> None:
    """Every layer on OpenCL: its caches there when it writes the types (SET_ROWS), else on the host with a note;
    the logits are the CPU's to the device's own summation order (measured 5e-5 at most)."""
    ocl = _opencl_or_skip()
    want = _ours(model, type_k, type_v, fa)
    p = ModelParams(
        placement=PlacementRequest(devices=[ocl]), n_ctx=64, type_k=type_k, type_v=type_v, flash_attn=fa,
        progress=False,
    )  # fmt: skip
    with Model.load(model, p) as m:
        got = m.process_prompt(TOKENS, all_logits=True)
        kv_devs = {m.placement.kv_device_of(i).name for i in range(CFG.n_layer)}
        notes = m.placement.notes
    assert kv_devs == ({ocl} if on_device else {"CPU"}), kv_devs
    assert on_device or any(f"{ocl} cannot write a {type_k}/{type_v} KV cache" in n for n in notes), notes
    assert np.abs(got - want).max() <= 1e-3, f"max |Δlogit| = {np.abs(got - want).max():.3g}"


def test_split_mode_tensor_refuses_a_quantized_v_cache(model: Path) -> None:
    """-sm tensor reads V by rows without flash attention; a quantized K is split at block boundaries
    (tests/sched/test_split_tensor.py), a quantized V is refused before anything is planned."""
    ocl = _opencl_or_skip()
    req = PlacementRequest(devices=["CPU", ocl], split_mode="tensor")
    p = ModelParams(placement=req, n_ctx=64, type_k="q8_0", type_v="q8_0", flash_attn=True, progress=False)
    with pytest.raises(ValueError, match="V cache is f16 or f32, got -ctv q8_0; quantize K only"):
        Model.load(model, p)
