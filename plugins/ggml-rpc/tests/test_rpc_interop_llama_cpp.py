"""Interoperability with llama.cpp (commit 0c1e570 from the llama-cpp-python 0.3.36 sdist, RPC protocol 7.0.0).

- our client against llama.cpp's ``ggml-rpc-server``: a LLaMA model split over CPU + that server gives the CPU-alone
  logits, and a LLaMA-style block computed there matches our CPU;
- llama.cpp's own RPC client (``ggml_backend_rpc_add_server`` + ggml's public API, tests/interop/
  rpc_client_harness.cpp) against our server: its graphs match ggml's CPU backend, GRAPH_RECOMPUTE and the
  SET_TENSOR_HASH cache are used, nothing is refused;
- the numbering our wire format relies on matches the headers the binaries were built from.

The first run downloads the sdist and builds (~65-110 s on 2 cores); later runs use the cache. Needs cmake, a C/C++
compiler and network access once; skips with the reason otherwise.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from llama_cpp_interop import LlamaCppTools, Unavailable, llama_cpp_server, llama_cpp_tools
from rpc_helpers import rel, run_layer, split_logits

from ggml_core import Device, GGMLOp, GGMLType
from ggml_core.models import scheduler_available
from ggml_core.models.default_model import write_default_model
from ggml_rpc import RPCDevice, RPCReg, _fnv, add_server
from ggml_rpc.server import RPCServer, ServerLimits


@pytest.fixture(scope="module")
def tools() -> LlamaCppTools:
    try:
        return llama_cpp_tools()
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture()
def llama_server(tools: LlamaCppTools, tmp_path: Path) -> str:
    with llama_cpp_server(tools, tmp_path / "ggml-rpc-server.log") as endpoint:
        yield endpoint  # type: ignore[misc]


def test_headers_match_our_numbering(tools: LlamaCppTools) -> None:
    ggml_h = (tools.include / "ggml.h").read_text()
    ops = re.findall(r"GGML_OP_(\w+)", ggml_h[ggml_h.index("enum ggml_op {") : ggml_h.index("GGML_OP_COUNT,")])
    assert ops == [op.name for op in GGMLOp]
    types = dict(re.findall(r"^\s*GGML_TYPE_(\w+)\s*=\s*(\d+),", ggml_h, re.M))  # not the commented-out ones
    types.pop("COUNT", None)
    assert {k: int(v) for k, v in types.items()} == {t.name: int(t) for t in GGMLType}
    rpc_h = (tools.include / "ggml-rpc.h").read_text()
    version = [int(re.search(rf"RPC_PROTO_{p}_VERSION\s+(\d+)", rpc_h).group(1)) for p in ("MAJOR", "MINOR", "PATCH")]  # type: ignore[union-attr]
    assert version == [7, 0, 0]
    rpc_cpp = (tools.include / "ggml-rpc.cpp.txt").read_text()
    cmds = re.findall(r"RPC_CMD_(\w+)", rpc_cpp[rpc_cpp.index("enum rpc_cmd {") : rpc_cpp.index("RPC_CMD_COUNT,")])
    from ggml_rpc.protocol import Cmd

    assert cmds == [c.name for c in Cmd if c < Cmd.COUNT]


def test_our_client_against_llama_cpp_server(
    llama_server: str, cpu: Device, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = RPCReg(llama_server).devices[0]
    assert isinstance(dev, RPCDevice) and not dev.conn.ggml_core and dev.conn.version == (7, 0, 0)
    free, total = dev.memory()
    assert 0 < free <= total
    # a LLaMA-style block with quantized weights: ggml's CPU kernels there, ours here. Both sides round the
    # activations a product reads to its weights' dot type (f16, or q8_0 blocks), but the values they round are
    # float32 sums taken in different orders (~1e-7 relative apart), so now and then one lands on the other side of
    # a rounding step. One such flip moves an f16 activation by one ulp (2^-11 relative) and shifts an output by
    # about 2^-11 * |w x| ~ 1e-4 of the largest output (K = 64..256): the f16 bound allows a few flips, 1e-3. f32
    # has no rounding step (float32 summation order only). A q8_0 step is 1/127 of the block's largest value, so a
    # 1e-7 difference crosses one rarely (~1e-5 per value), but when it does the output moves by ~1e-3 of its
    # largest value: the quantized bounds allow one such flip.
    bounds = {"f32": 1e-4, "f16": 1e-3, "q8_0": 2e-3, "q4_0": 2e-3}
    for wtype, bound in bounds.items():
        want = run_layer(cpu, wtype, [1, 2])
        got = run_layer(dev, wtype, [1, 2])
        for w, g in zip(want, got, strict=True):
            assert rel(g, w) < bound, wtype


@pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")
def test_model_split_over_cpu_and_llama_cpp_server(
    llama_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggml_core.backend.registry import get_registry, reset_registry

    path = write_default_model(tmp_path / "default.gguf")
    monkeypatch.setenv("GGML_RPC_SERVERS", llama_server)
    reset_registry()
    try:
        (rpc,) = [d.name for d in get_registry().get_reg(f"RPC[{llama_server}]").devices]
        cpu_prompt, cpu_steps, _ = split_logits(path, ["CPU"], None)
        prompt, steps, m = split_logits(path, ["CPU", rpc], [1, 1])
        assert {s.name for s in m.placement.shares if s.layers} == {"CPU", rpc}
        assert m.executor.n_splits >= 2
    finally:
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()
    # ggml's kernels on the remote side sum in their own order: float32 rounding over 4 layers
    assert rel(prompt, cpu_prompt) < 1e-4 and rel(steps, cpu_steps) < 1e-4
    assert np.argmax(prompt, -1).tolist() == np.argmax(cpu_prompt, -1).tolist()


@pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")
@pytest.mark.parametrize("order", ["ours first", "llama.cpp's first"])
def test_a_split_over_our_server_and_llama_cpp_s_relays_the_activations(
    llama_server: str,
    make_server: Callable[..., RPCServer],
    rpc_registry: Callable[..., list[str]],
    tmp_path: Path,
    order: str,
) -> None:
    """llama.cpp's server advertises no peer copies: the activations between it and ours go through the client
    (GET_TENSOR, then SET_TENSOR), in either direction, and the logits are the local run's."""
    from ggml_core import get_registry

    path = write_default_model(tmp_path / "default.gguf")
    _, local_steps, _ = split_logits(path, ["CPU"], None)
    ours = make_server()
    names = rpc_registry(ours)
    registry = get_registry()
    theirs = add_server(llama_server, registry)
    names.append(registry.get_reg(theirs).devices[0].name)
    if order != "ours first":
        names.reverse()
    _, steps, m = split_logits(path, names, [1, 1])
    assert {s.name for s in m.placement.shares if s.layers} == set(names)
    conns = [dev.conn for dev in (registry.get_device(n) for n in names) if isinstance(dev, RPCDevice)]
    assert not any(c.counts["EXT_PEER_SEND"] or c.counts["EXT_PEER_RECV"] for c in conns)
    assert conns[0].counts["GET_TENSOR"] > 0  # the first server's outputs were read by the client
    assert rel(steps, local_steps) < 1e-4  # (ggml's kernels on llama.cpp's side sum in their own order)


def test_llama_cpp_client_against_our_server(
    tools: LlamaCppTools, make_server: Callable[..., RPCServer], tmp_path: Path
) -> None:
    server = make_server(cache_dir=tmp_path / "cache")
    proc = subprocess.run(
        [str(tools.harness), server.address], capture_output=True, text=True, timeout=600, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    cases = re.findall(r"^CASE (\S+) (\S+) (\S+)$", out, re.M)
    assert len(cases) == 10, out
    for name, diff, scale in cases:
        assert float(diff) <= 1e-5 * max(1.0, float(scale)), f"{name}: {diff} (scale {scale})\n{out}"
    assert "WEIGHTS round=0 same" in out and "WEIGHTS round=1 same" in out
    assert server.stats["refused"] == 0 and server.stats["internal errors"] == 0
    assert server.stats["graphs computed"] == 20
    assert server.stats["GRAPH_RECOMPUTE"] >= 9  # each case's second compute re-ran the stored graph
    assert server.stats["SET_TENSOR_HASH"] == 2  # weights over 10 MiB try the cache first
    if _fnv.fast():
        assert server.stats["cache hits"] == 1  # the second upload of the same weights sent no data


def test_llama_cpp_client_sees_an_over_budget_allocation_as_a_failed_one(
    tools: LlamaCppTools, make_server: Callable[..., RPCServer]
) -> None:
    """Over the server's budget, ALLOC_BUFFER answers remote pointer 0: llama.cpp's client gets a null buffer (its
    ordinary allocation failure) and the connection keeps working."""
    server = make_server(limits=ServerLimits(max_memory=8 << 20, frame_timeout=5.0, hello_timeout=5.0))
    proc = subprocess.run(
        [str(tools.harness), server.address, "--alloc", str(64 << 20)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert f"ALLOC {64 << 20} null" in out and "ALLOC 4096 ok" in out, out
    assert server.stats["refused"] == 0 and server.stats["internal errors"] == 0


def test_a_token_against_llama_cpp_server_fails_cleanly(llama_server: str) -> None:
    """llama.cpp's server takes no token: our client says so in one line, and the server keeps serving."""
    from ggml_rpc import Connection
    from ggml_rpc.protocol import Cmd, RPCAuthError

    with pytest.raises(RPCAuthError, match=r"closed the connection when given the token: it takes no token"):
        Connection(llama_server, token=b"secret", connect_timeout=10)
    conn = Connection(llama_server, connect_timeout=10)  # a plain client is served as before
    assert conn.request(Cmd.DEVICE_COUNT) == b"\x01\x00\x00\x00"
    conn.close()


def test_llama_cpp_client_against_our_token_server_fails_cleanly(
    tools: LlamaCppTools, make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's client cannot send a token: our server refuses it with one log line and keeps serving."""
    import logging

    from ggml_rpc import Connection
    from ggml_rpc.protocol import Cmd

    caplog.set_level(logging.WARNING, logger="ggml_rpc.server")
    server = make_server(token=b"secret")
    proc = subprocess.run([str(tools.harness), server.address], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0  # it found the connection closed
    lines = [r for r in caplog.records if r.name == "ggml_rpc.server" and r.levelno >= logging.WARNING]
    assert lines and all("no token" in r.getMessage() and r.exc_info is None for r in lines), lines
    assert server.stats["internal errors"] == 0
    conn = Connection(server.address, token=b"secret")
    assert conn.request(Cmd.DEVICE_COUNT) == b"\x01\x00\x00\x00"
    conn.close()
