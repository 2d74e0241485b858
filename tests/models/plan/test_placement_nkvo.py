"""``--no-kv-offload`` as llama.cpp does it: the caches in host memory *and* the attention that reads them (KQ,
softmax, KQV) on the host, so a device holding the layer never gets the cache copied to it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from test_placement_fit import CFG, OPS
from tiny_models import random_weights, reference_logits, write_model

import ggml_core.models.executor as executor_mod
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available
from ggml_core.models.blocks import ATTENTION_NODE

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture()
def dev() -> Iterator[SubsetDevice]:
    reset_registry()
    d = SubsetDevice("Sub0", OPS)  # runs MUL_MAT and writes f32 caches (SET_ROWS): attention can run on it
    get_registry().register_plugin(SubsetPlugin([d]), "sub-nkvo")
    yield d
    reset_registry()


def _run(path: Path, dev: SubsetDevice, kv_offload: bool, flash: bool = False) -> tuple[np.ndarray, object, set[str]]:
    dev.computed.clear()
    params = ModelParams(
        n_ctx=64, kv_type="f32", progress=False, flash_attn=flash, placement=PlacementRequest(kv_offload=kv_offload)
    )
    with Model.load(path, params) as m:
        logits = m.process_prompt(TOKENS, all_logits=True)
        plan = m.executor.plan()
        kv_devs = {m.placement.kv_device_of(i).name for i in range(CFG.n_layer)}
    assert all(m.placement.device_of(i) is dev for i in range(CFG.n_layer))
    return logits, plan, kv_devs


def _attention_on(dev: SubsetDevice) -> set[str]:
    return {n for n in dev.computed if ATTENTION_NODE.fullmatch(n)}


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def test_no_kv_offload_runs_the_attention_on_the_host(
    dev: SubsetDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = random_weights(CFG, 11)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    on, _, kv_on = _run(path, dev, True)
    assert kv_on == {"Sub0"} and {"kq-0", "kqv-0"} <= _attention_on(dev)  # offloaded: attention on the device
    off, plan_off, kv_off = _run(path, dev, False)
    assert kv_off == {"CPU"}
    assert not _attention_on(dev), _attention_on(dev)
    copied = {c.name for s in plan_off.splits for c in s.inputs}
    assert not any(n.startswith("cache_") for n in copied), copied  # the caches never cross to the device
    # what pinning saves: without it the scheduler copies every layer's cache to the device for the attention
    monkeypatch.setattr(executor_mod, "pin_attention", lambda *a: None)
    unpinned, plan_unpinned, _ = _run(path, dev, False)
    assert any(re.match(r"cache_[kv]_l\d", c.name) for s in plan_unpinned.splits for c in s.inputs)
    assert plan_off.bytes_copied < plan_unpinned.bytes_copied
    ref = reference_logits(CFG, w, TOKENS, "f32", "f32")
    for got in (on, off, unpinned):
        assert _rel(got, ref) < 1e-5  # float32 rounding of the same arithmetic (tiny_models' bound)


def test_pinned_nodes_are_the_attention(tmp_path: Path) -> None:
    """The names the pin matches are the attention nodes of every family's graph, softcapping and flash included."""
    from dataclasses import replace

    cfg = replace(CFG, arch="gemma2", attn_softcap=50.0, final_softcap=30.0, n_swa=4)
    path = write_model(tmp_path / "g.gguf", cfg, random_weights(cfg, 2), "f32")
    for flash in (False, True):
        with Model.load(path, ModelParams(n_ctx=64, progress=False, flash_attn=flash, use_scheduler=True)) as m:
            bg = m.graph(4, m.n_kv_for(4), True)
            names = {re.sub(r"-\d+$", "", t.name) for t in executor_mod.attention_nodes(bg)}
            per_layer = {int(t.name.rsplit("-", 1)[1]) for t in executor_mod.attention_nodes(bg)}
        want = (
            {"fattn"}
            if flash
            else {"kq", "kq_softcap_in", "kq_softcap_tanh", "kq_softcap", "kq_soft_max", "kqv", "kqv_out"}
        )
        assert names == want and per_layer == set(range(cfg.n_layer))
