"""Batch inputs written in place (``BuiltGraph.write_inputs``: token ids, positions, masks, cache cells straight into
the graph's host memory) and logits read straight from it give exactly what the ``set_data`` path gives.

The reference is the same model with :meth:`BuiltGraph.host_view` turned off, so every input goes through
``Tensor.set_data`` (converted and bounds-checked) and the logits through ``to_numpy``. Both runs compute the same
graphs on the same kernels, so the logits must be equal bit for bit, and the greedy tokens equal. The runs cross a
padding step of the cache window (n_kv 256 → 300: new graphs, re-allocated inputs), wrap the sliding-window ring
(gemma3: 256 cells), evict graphs from the runner's cache (prompt batches of several shapes), come back to a graph
re-allocated after another ran, and split over CPU + OpenCL0 (the scheduler copies the host inputs to the device).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from opencl_device import require_opencl
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.models.graph import BuiltGraph

N_CTX = 300
PROMPT = [int(t) for t in np.random.default_rng(3).integers(0, 64, 250)]
N_GEN = 12  # positions 250..261: across the 256-cell padding step and the swa ring's wrap

CONFIGS = {
    "llama": TinyConfig(n_layer=2),
    "gemma3": TinyConfig(arch="gemma3", n_layer=6, n_head_kv=1, n_swa=4, tied_output=True),
    "qwen3moe": TinyConfig(arch="qwen3moe", n_layer=2, n_expert=4, n_expert_used=2),
}


def _run(path: Path, req: PlacementRequest, *, in_place: bool, flash_attn: bool, mp: pytest.MonkeyPatch) -> tuple:
    with mp.context() as m:
        if not in_place:
            m.setattr(BuiltGraph, "host_view", lambda self, t: None)
        params = ModelParams(
            placement=req, n_ctx=N_CTX, batch_size=64, flash_attn=flash_attn, kv_type="f32", progress=False
        )
        with Model.load(path, params) as model:
            prompt = model.process_prompt(PROMPT, all_logits=True)
            steps, ids = [], []
            tok = int(np.argmax(prompt[-1]))
            for _ in range(N_GEN):
                ids.append(tok)
                logits = model.decode([tok])
                steps.append(logits)
                tok = int(np.argmax(logits[-1]))
            # another shape, then the one-token graph again: re-allocated, its views must follow
            steps.append(model.decode([tok, 3], all_logits=True))
            steps.append(model.decode([7]))
            views = sum(len(bg._views) for bg in model._graphs.values())
    return prompt, np.concatenate(steps), ids, views


def _same(path: Path, req: PlacementRequest, flash_attn: bool, mp: pytest.MonkeyPatch) -> int:
    ref_prompt, ref_steps, ref_ids, none = _run(path, req, in_place=False, flash_attn=flash_attn, mp=mp)
    prompt, steps, ids, views = _run(path, req, in_place=True, flash_attn=flash_attn, mp=mp)
    assert none == 0
    assert ids == ref_ids
    assert np.array_equal(prompt.view(np.uint32), ref_prompt.view(np.uint32))
    assert np.array_equal(steps.view(np.uint32), ref_steps.view(np.uint32))
    assert np.isfinite(steps).all()
    return views


@pytest.mark.parametrize("flash_attn", [False, True], ids=["v-trans", "flash"])
@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_in_place_inputs_give_the_set_data_logits(
    tmp_path: Path, arch: str, flash_attn: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = CONFIGS[arch]
    path = write_model(tmp_path / f"{arch}.gguf", cfg, random_weights(cfg, 0), "f32")
    views = _same(path, PlacementRequest(devices=["CPU"]), flash_attn, monkeypatch)
    assert views > 0  # the in-place path really ran


def test_in_place_inputs_on_a_cpu_plus_opencl_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_opencl()
    cfg = TinyConfig(n_layer=4)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 0), "f32")
    _same(path, PlacementRequest(devices=["CPU", "OpenCL0"], tensor_split=[1, 1]), False, monkeypatch)


def test_one_token_mask_equals_the_definition() -> None:
    """A decode step's mask (``mask_into``'s one-token path) equals :meth:`KVCache.mask`, the definition, for
    empty cells (−1) between used ones, a window narrower than the cells, and positions before and after them."""
    from ggml_core import GGMLType
    from ggml_core.models.kvcache import KVCache

    kv = KVCache(None, 16, GGMLType.F16, True)  # type: ignore[arg-type]  # the full group needs no hparams
    kv.cell_pos = {"full": np.array([0, 1, -1, 5, 3, 9, -1, 2, 7, 4, 6, 8, 10, 11, -1, 12], np.int64)}
    for p in (0, 3, 6, 12, 40):
        for width in (16, 8):
            for dt in (np.float32, np.float16):
                out = np.full((1, width), 7, dt)
                kv.mask_into(out, "full", np.array([p], np.int32))
                want = kv.mask("full", np.array([p]), width).astype(dt)
                assert np.array_equal(out, want), (p, width, dt)
