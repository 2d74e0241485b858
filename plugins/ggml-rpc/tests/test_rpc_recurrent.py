"""Recurrent and hybrid families (Mamba-2, Granite 4, LFM2, Nemotron-H, RWKV-7) split by layers over the CPU and
an RPC device (a ggml-core server on loopback): their recurrent states live on the server for its layers, and the
logits are the CPU's, as a prompt and token by token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rpc_helpers import rel, split_logits

from ggml_core.models import scheduler_available
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
from ggml_rpc.server import RPCServer

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

FAMILIES: dict[str, Callable[[Path], Path]] = {
    "mamba2": lambda p: write_mamba2(p, MambaConfig(n_layer=4), mamba2_weights(MambaConfig(n_layer=4), 5)),
    "granitehybrid": lambda p: write_granitehybrid(p, GraniteConfig(), granite_weights(GraniteConfig(), 5)),
    "lfm2": lambda p: write_lfm2(p, LFM2Config(), lfm2_weights(LFM2Config(), 5)),
    "nemotron_h": lambda p: write_nemotron_h(p, NemotronConfig(), nemotron_weights(NemotronConfig(), 5)),
    "rwkv7": lambda p: write_rwkv7(p, RwkvConfig(n_layer=4), rwkv7_weights(RwkvConfig(n_layer=4), 5)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_recurrent_family_over_cpu_and_rpc(
    tmp_path: Path, server: RPCServer, rpc_registry: Callable[..., list[str]], family: str
) -> None:
    path = FAMILIES[family](tmp_path / f"{family}.gguf")
    (rpc,) = rpc_registry(server)
    cpu_prompt, cpu_steps, _ = split_logits(path, ["CPU"], None)
    prompt, steps, m = split_logits(path, ["CPU", rpc], [1, 1])
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", rpc}
    assert rel(prompt, cpu_prompt) < 1e-5 and rel(steps, cpu_steps) < 1e-5
    assert server.stats["GRAPH_COMPUTE"] > 0
