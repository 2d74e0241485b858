"""Host-resident MoE experts offloaded for a large batch: only the experts the batch uses are copied (ggml's
scheduler does this since 2025). The tests' partial device ``Sub0`` runs MUL_MAT_ID and asks for every op of 4 or
more rows (``offload_min_batch``), so with ``--cpu-moe`` each expert product goes to it with its weights copied."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import GGMLOp
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available
from ggml_core.models.plan.bufts import moe_overrides

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

OPS = (GGMLOp.MUL_MAT, GGMLOp.MUL_MAT_ID, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM)
CFG = TinyConfig(n_layer=2, n_expert=32, n_expert_used=2)
TOKENS = [5, 17, 3, 42, 8, 23, 11, 60]  # 8 tokens x top-2: at most 16 of the 32 experts per layer


@pytest.fixture()
def dev() -> Iterator[SubsetDevice]:
    reset_registry()
    d = SubsetDevice("Sub0", OPS, offload_min_batch=4)
    get_registry().register_plugin(SubsetPlugin([d]), "sub-moe")
    yield d
    reset_registry()


def _run(path: Path, partial: bool, tokens: list[int]) -> tuple[np.ndarray, int, int]:
    """Logits, bytes copied between devices, and how many splits on Sub0 start with a MUL_MAT_ID."""
    req = PlacementRequest(devices=["Sub0"], overrides=tuple(moe_overrides(None)))
    with Model.load(path, ModelParams(n_ctx=64, kv_type="f32", progress=False, placement=req)) as m:
        sched = m.executor.sched
        assert sched is not None
        sched.partial_expert_copy = partial
        assert all(c.device.name == "CPU" for n, c in m.placement.weights.items() if "_exps" in n)
        before = sched.bytes_copied
        logits = m.process_prompt(tokens, all_logits=True)
        plan = sched.plan()
        n_id = sum(1 for sp in plan.splits if sp.backend == "Sub0" and sp.ops and sp.ops[0] == "MUL_MAT_ID")
        return logits, sched.bytes_copied - before, n_id


def test_only_the_used_experts_are_copied_and_results_are_identical(dev: SubsetDevice, tmp_path: Path) -> None:
    w = random_weights(CFG, 21)
    path = write_model(tmp_path / "moe.gguf", CFG, w, "f32")
    full, full_bytes, n_full = _run(path, False, TOKENS)
    part, part_bytes, n_part = _run(path, True, TOKENS)
    assert n_full == n_part == 3 * CFG.n_layer  # up, gate, down of every layer offloaded with their experts
    np.testing.assert_array_equal(part, full)  # the same products on the same device: bit for bit
    ref = reference_logits(CFG, w, TOKENS, "f32", "f32")
    assert float(np.abs(part - ref).max() / np.abs(ref).max()) < 1e-5
    # each layer's three expert tensors: 64 x 96 f32 per expert = 24 KiB; at most 16 of 32 used, plus padding
    per_tensor_full = 64 * 96 * 4 * CFG.n_expert
    experts_full = 3 * CFG.n_layer * per_tensor_full
    assert full_bytes >= experts_full
    saved = full_bytes - part_bytes
    assert saved >= experts_full * (1 - 16 / 32) - 3 * CFG.n_layer * 16 * 512, (full_bytes, part_bytes)


def test_a_single_token_batch_stays_on_the_host(dev: SubsetDevice, tmp_path: Path) -> None:
    """Below offload_min_batch nothing of the experts moves: no copy to shrink, results equal."""
    w = random_weights(CFG, 22)
    path = write_model(tmp_path / "moe.gguf", CFG, w, "f32")
    a, a_bytes, n_a = _run(path, True, TOKENS[:1])
    b, b_bytes, _ = _run(path, False, TOKENS[:1])
    np.testing.assert_array_equal(a, b)
    assert n_a == 0
    assert a_bytes == b_bytes < 64 * 96 * 4 * CFG.n_expert
