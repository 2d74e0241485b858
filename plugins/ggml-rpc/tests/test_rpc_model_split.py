"""A LLaMA model split by layers over the local CPU and one or two RPC devices (ggml-core servers on loopback)
gives the logits of the CPU alone — through the scheduler, as a prompt and token by token; ``ggml-core run --rpc``
does the same from the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rpc_helpers import TOKENS, rel, split_logits

from ggml_core.cli import main
from ggml_core.models import scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_rpc import RPCReg
from ggml_rpc.server import RPCServer

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default model (small random LLaMA, 4 layers), written to a temporary directory."""
    return write_default_model(tmp_path_factory.mktemp("model") / "default.gguf")


def test_cpu_plus_one_rpc_device(model_path: Path, server: RPCServer, rpc_registry: Callable[..., list[str]]) -> None:
    (rpc,) = rpc_registry(server)
    cpu_prompt, cpu_steps, _ = split_logits(model_path, ["CPU"], None)
    prompt, steps, m = split_logits(model_path, ["CPU", rpc], [1, 1])
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", rpc}
    assert m.executor.n_splits >= 2
    assert rel(prompt, cpu_prompt) < 1e-6 and rel(steps, cpu_steps) < 1e-6
    assert server.stats["GRAPH_COMPUTE"] > 0 and server.stats["SET_TENSOR"] > 0


def test_cpu_plus_two_rpc_devices(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    s1, s2 = make_server(), make_server()
    names = rpc_registry(s1, s2)
    cpu_prompt, cpu_steps, _ = split_logits(model_path, ["CPU"], None)
    prompt, steps, m = split_logits(model_path, ["CPU", *names], [1, 1, 2])
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", *names}
    assert rel(prompt, cpu_prompt) < 1e-6 and rel(steps, cpu_steps) < 1e-6
    assert s1.stats["GRAPH_COMPUTE"] > 0 and s2.stats["GRAPH_COMPUTE"] > 0


def test_run_command_with_rpc_flag(
    model_path: Path, server: RPCServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggml_core.backend.registry import reset_registry

    monkeypatch.delenv("GGML_RPC_SERVERS", raising=False)
    name = RPCReg(server.address).devices[0].name  # names are given per endpoint, once per process
    base = ["run", str(model_path), "--tokens", "1,5,9,3", "-n", "0", "--json", "--kv-type", "f32"]
    split = ["--rpc", server.address, "--device", f"CPU,{name}", "--tensor-split", "1,1"]
    try:
        assert main([*base, "--device", "CPU", "--logits-out", str(tmp_path / "cpu.npy")]) == 0
        assert main([*base, *split, "--logits-out", str(tmp_path / "split.npy")]) == 0
    finally:
        reset_registry()
    cpu, split = np.load(tmp_path / "cpu.npy"), np.load(tmp_path / "split.npy")
    assert rel(split, cpu) < 1e-5
    assert server.stats["GRAPH_COMPUTE"] > 0  # the remote device took layers


def test_a_server_can_serve_opencl(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """Any ggml-core device can be served: OpenCL0 (PoCL here) behind the server; its op set is asked remotely."""
    from ggml_core import DeviceNotFoundError, get_registry

    try:
        ocl = get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
    server = make_server([ocl])
    (rpc,) = rpc_registry(server)
    assert "OpenCL0" in get_registry().get_device(rpc).description
    cpu_prompt, _, _ = split_logits(model_path, ["CPU"], None)
    prompt, _, m = split_logits(model_path, ["CPU", rpc], [1, 1])
    assert {s.name for s in m.placement.shares if s.layers} == {"CPU", rpc}
    assert rel(prompt, cpu_prompt) < 1e-4  # another device sums in another order
    assert server.stats["EXT_SUPPORTS_OP"] > 0 and server.stats["graphs computed"] > 0
    assert server.stats["refused"] == 0


def test_rpc_flag_alone_adds_the_servers_devices_to_the_default_list(
    model_path: Path,
    server: RPCServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As llama.cpp: ``--rpc HOST:PORT`` without ``--device`` offloads to the server's devices (RPC devices first)."""
    import json

    from ggml_core.backend.registry import reset_registry

    monkeypatch.delenv("GGML_RPC_SERVERS", raising=False)
    base = ["run", str(model_path), "--tokens", "1,5,9,3", "-n", "0", "--json", "--kv-type", "f32", "--no-warmup"]
    try:
        assert main([*base, "--device", "none", "--logits-out", str(tmp_path / "cpu.npy")]) == 0
        capsys.readouterr()
        assert main([*base, "--rpc", server.address, "--logits-out", str(tmp_path / "rpc.npy")]) == 0
        info = json.loads(capsys.readouterr().out)
    finally:
        reset_registry()
    held = [d["name"] for d in info["devices"] if d["layers"]]
    assert held and held[0].startswith("RPC"), info["devices"]
    assert server.stats["GRAPH_COMPUTE"] > 0 and server.stats["SET_TENSOR"] > 0
    assert rel(np.load(tmp_path / "rpc.npy"), np.load(tmp_path / "cpu.npy")) < 1e-5


def _two_servers(
    make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> tuple[list[str], list]:
    """Two servers in the registry that copy nothing to each other (as llama.cpp's): their device names and the
    client's connections to them."""
    from ggml_core import get_registry
    from ggml_rpc import RPCDevice

    names = rpc_registry(make_server(peer_copy=False), make_server(peer_copy=False))
    conns = []
    for n in names:
        dev = get_registry().get_device(n)
        assert isinstance(dev, RPCDevice)
        conns.append(dev.conn)
    return names, conns


def test_round_trips_per_decoded_token_are_counted(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """The client counts the commands that wait for an answer (network round trips) and the bytes each way. A
    decode step of a layer split costs each server one: the read of its output, which the server answers only after
    the graph sent before it (the scheduler's wait for the graph makes no round trip of its own)."""
    from ggml_core.models import Model, ModelParams, PlacementRequest

    names, conns = _two_servers(make_server, rpc_registry)
    params = ModelParams(
        placement=PlacementRequest(devices=["CPU", *names], tensor_split=[1, 1, 1]), kv_type="f32", n_ctx=64,
        progress=False,
    )  # fmt: skip
    steps = 8
    with Model.load(model_path, params) as m:
        m.process_prompt([1, 5, 9, 3])
        m.decode([7])  # the first step stores each server's graph (GRAPH_COMPUTE); later ones re-run it
        before = [(c.round_trips, c.bytes_sent, c.bytes_received, c.counts.copy()) for c in conns]
        for t in range(steps):
            m.decode([10 + t])
    for c, (trips, sent, received, counts) in zip(conns, before, strict=True):
        step = c.counts - counts
        answered = step["DEVICE_COUNT"] + step["GET_TENSOR"] + step["GET_ALLOC_SIZE"] + step["ALLOC_BUFFER"]
        assert c.round_trips - trips == answered == step["GET_TENSOR"] == steps, (c.endpoint, step)
        assert step["GRAPH_RECOMPUTE"] == steps and step["GRAPH_COMPUTE"] == 0, step
        assert c.bytes_sent > sent and c.bytes_received - received >= steps * 4 * 128  # an activation row at least


def test_one_tensor_crosses_the_boundary_between_servers_per_decoded_token(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """Layers over two servers only: the split boundary carries one tensor from the first server to the second,
    the residual (each layer's norm runs on the device of the weight that scales it, as llama.cpp pins it, so the
    next layer's norm does not cross as well): one round trip and one 128-float row per decoded token for the
    first server, one (the logits) for the second; the logits are the CPU's."""
    from ggml_core.models import Model, ModelParams, PlacementRequest

    _, local_steps, _ = split_logits(model_path, ["CPU"], None)
    names, conns = _two_servers(make_server, rpc_registry)
    params = ModelParams(
        placement=PlacementRequest(devices=names, tensor_split=[1, 1]), kv_type="f32", n_ctx=64, progress=False
    )
    with Model.load(model_path, params) as m:
        assert {s.name for s in m.placement.shares if s.layers} == set(names)
        first = m.decode([TOKENS[0]])  # plans and sends each server's graph
        before = [(c.round_trips, c.bytes_received, c.counts.copy()) for c in conns]
        steps = np.concatenate([first, *(m.decode([t]) for t in TOKENS[1:])])
    assert rel(steps, local_steps) < 1e-5
    n = len(TOKENS) - 1
    (trips0, got0, counts0), (trips1, _, counts1) = (
        (c.round_trips - t, c.bytes_received - r, c.counts - k) for c, (t, r, k) in zip(conns, before, strict=True)
    )
    assert counts0["GET_TENSOR"] == n and trips0 == n and got0 == n * (8 + 128 * 4), (counts0, got0)
    assert counts1["GET_TENSOR"] == n and trips1 == n, counts1


def test_a_prompt_over_two_servers_costs_one_round_trip_per_server(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """A 64-token prompt after a reset, layers over two servers that copy nothing to each other: the boundary's
    one tensor (32 KiB of residual) from the first server, the logits from the second — one round trip each, as
    llama.cpp's client; the stored graphs are re-run (GRAPH_RECOMPUTE), and the logits are the CPU's."""
    from ggml_core.models import Model, ModelParams, PlacementRequest

    ids = [1 + (i * 7) % 200 for i in range(64)]
    cpu = ModelParams(placement=PlacementRequest(devices=["CPU"]), kv_type="f32", n_ctx=128, progress=False)
    with Model.load(model_path, cpu) as m:
        local = m.process_prompt(ids)
    names, conns = _two_servers(make_server, rpc_registry)
    params = ModelParams(
        placement=PlacementRequest(devices=names, tensor_split=[1, 1]), kv_type="f32", n_ctx=128, progress=False
    )
    prompts = 3
    with Model.load(model_path, params) as m:
        m.process_prompt(ids)  # plans and sends each server's graph
        before = [(c.round_trips, c.counts.copy()) for c in conns]
        for _ in range(prompts):
            m.reset()
            assert rel(m.process_prompt(ids), local) < 1e-5
    for c, (trips, counts) in zip(conns, before, strict=True):
        got = c.counts - counts
        assert c.round_trips - trips == got["GET_TENSOR"] == prompts, (c.endpoint, got)
        assert got["GRAPH_RECOMPUTE"] == prompts and got["GRAPH_COMPUTE"] == 0, (c.endpoint, got)


class _CountingSocket:
    """A socket that counts its ``sendall`` calls (each a write to the kernel)."""

    def __init__(self, sock: object) -> None:
        self._sock = sock
        self.writes = 0

    def sendall(self, data: bytes) -> None:
        self.writes += 1
        self._sock.sendall(data)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._sock, name)


def test_a_splits_inputs_and_graph_launch_leave_in_one_write(
    model_path: Path, make_server: Callable[..., RPCServer], rpc_registry: Callable[..., list[str]]
) -> None:
    """Small tensor writes wait for the connection's next command: per decoded token each server gets two writes,
    its split's inputs with the graph launch, and the read of its output — and the logits are the CPU's."""
    from ggml_core.models import Model, ModelParams, PlacementRequest

    _, local_steps, _ = split_logits(model_path, ["CPU"], None)
    names, conns = _two_servers(make_server, rpc_registry)
    params = ModelParams(
        placement=PlacementRequest(devices=names, tensor_split=[1, 1]), kv_type="f32", n_ctx=64, progress=False
    )
    with Model.load(model_path, params) as m:
        first = m.decode([TOKENS[0]])
        socks = []
        for c in conns:
            c._sock = _CountingSocket(c._sock)
            socks.append(c._sock)
        before = [c.counts.copy() for c in conns]
        steps = np.concatenate([first, *(m.decode([t]) for t in TOKENS[1:])])
        writes = [s.writes for s in socks]
        step_counts = [c.counts - k for c, k in zip(conns, before, strict=True)]
    assert rel(steps, local_steps) < 1e-5
    n = len(TOKENS) - 1
    for c, w, got in zip(conns, writes, step_counts, strict=True):
        assert got["SET_TENSOR"] >= 4 * n and got["GRAPH_RECOMPUTE"] == n and got["GET_TENSOR"] == n, got
        assert w == 2 * n, (c.endpoint, w, got)
