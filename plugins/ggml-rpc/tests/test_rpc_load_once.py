"""Load once: weights a ggml-core server already holds in its tensor cache (``--cache-dir``, by FNV-1a hash) are not
sent again. Such a server advertises its cache and the smallest tensor it keeps in HELLO; the client asks
(SET_TENSOR_HASH) for every larger weight, and for none at all when the server has no cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_LIMITS
from rpc_helpers import TOKENS, rel, split_logits

from ggml_core import get_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_rpc import RPCDevice, _fnv
from ggml_rpc.protocol import Caps
from ggml_rpc.server import RPCServer

pytestmark = [
    pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed"),
    pytest.mark.skipif(not _fnv.fast(), reason="the hash cache needs numba for a fast FNV-1a (pip install numba)"),
]


def _load(path: Path, names: list[str]) -> np.ndarray:
    params = ModelParams(
        placement=PlacementRequest(devices=names, tensor_split=None), kv_type="f32", n_ctx=64, progress=False
    )
    with Model.load(path, params) as m:
        return m.process_prompt(TOKENS, all_logits=True)


def test_a_second_load_sends_no_weight_bytes(
    tmp_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    from dataclasses import replace

    path = write_default_model(tmp_path / "default.gguf")
    local, _, _ = split_logits(path, ["CPU"], None)
    server = make_server(cache_dir=tmp_path / "cache", limits=replace(TEST_LIMITS, cache_min_bytes=0))
    (name,) = rpc_registry(server)
    dev = get_registry().get_device(name)
    assert isinstance(dev, RPCDevice)
    conn = dev.conn
    assert conn.caps & Caps.TENSOR_CACHE and conn.cache_min == 0
    rounds = []
    for _ in range(2):
        counts, sent, cached, hits = (
            conn.counts.copy(),
            conn.bytes_sent,
            conn.weights_cached,
            server.stats["cache hits"],
        )
        logits = _load(path, [name])
        rounds.append(
            (
                conn.counts - counts,
                conn.bytes_sent - sent,
                conn.weights_cached - cached,
                server.stats["cache hits"] - hits,
            )
        )
        assert rel(logits, local) < 1e-5
    (first, sent1, cached1, hits1), (second, sent2, weights, hits2) = rounds
    asked = first["SET_TENSOR_HASH"]
    assert asked > 0 and second["SET_TENSOR_HASH"] == asked  # every weight is asked for ...
    assert hits2 == asked and weights > 1 << 20  # ... and the second time every one is found
    assert hits1 < asked and cached1 < weights  # (the first load finds only its own repeats: equal norm weights)
    assert second["SET_TENSOR"] == first["SET_TENSOR"] - (asked - hits1)  # no weight SET_TENSOR the second time
    assert sent2 <= sent1 - (weights - cached1) + 1024  # and none of the weights' bytes


def test_a_ggml_core_server_without_a_cache_is_not_asked(
    tmp_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    path = write_default_model(tmp_path / "default.gguf")
    server = make_server()
    (name,) = rpc_registry(server)
    _load(path, [name])
    assert server.stats["SET_TENSOR_HASH"] == 0 and server.stats["SET_TENSOR"] > 0


def test_the_upload_line_names_the_server_and_the_bytes_it_already_held(
    tmp_path: Path,
    make_server: Callable[..., RPCServer],
    rpc_registry: Callable[..., list[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dataclasses import replace

    path = write_default_model(tmp_path / "default.gguf")
    server = make_server(cache_dir=tmp_path / "cache", limits=replace(TEST_LIMITS, cache_min_bytes=0))
    (name,) = rpc_registry(server)
    dev = get_registry().get_device(name)
    assert isinstance(dev, RPCDevice)
    params = ModelParams(placement=PlacementRequest(devices=[name]), kv_type="f32", n_ctx=64, progress=True)
    held = []
    for _ in range(2):
        before = dev.conn.weights_cached
        Model.load(path, params).close()
        held.append(dev.conn.weights_cached - before)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip().startswith("uploaded")]
    assert len(lines) == 2 and all(f" to {name} ({dev.conn.endpoint}/0) in " in line for line in lines)
    assert held[1] > 1 << 20  # the second load finds every weight on the server
    assert lines[1].endswith(f", {held[1] / 2**20:.1f} MiB of it already held there (not sent)")
