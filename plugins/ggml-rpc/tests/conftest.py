"""Fixtures of the RPC tests: in-process servers on 127.0.0.1 (ephemeral ports) serving the CPU plugin's device,
and client devices connected to them. Every connection is closed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import ggml_core as g
from ggml_core import Device
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_rpc import RPCDevice, RPCReg, disconnect_all
from ggml_rpc.server import RPCServer, ServerLimits

#: limits small enough that a test never waits long for a stalled connection
TEST_LIMITS = ServerLimits(frame_timeout=5.0, hello_timeout=5.0, max_clients=4)


@pytest.fixture(autouse=True)
def _rpc_timeouts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Client timeouts that bound every test; shared connections closed afterwards."""
    monkeypatch.setenv("GGML_RPC_TIMEOUT", "60")
    monkeypatch.setenv("GGML_RPC_CONNECT_TIMEOUT", "5")
    yield
    disconnect_all()


@pytest.fixture(scope="session")
def cpu() -> Device:
    """The CPU plugin's device (the served device and the reference)."""
    try:
        return g.get_device("CPU")
    except g.DeviceNotFoundError as exc:
        pytest.skip(f"the CPU plugin (ggml-cpu) is not installed: {exc}")


@pytest.fixture()
def make_server(cpu: Device) -> Iterator[Callable[..., RPCServer]]:
    """Start servers (CPU device unless told otherwise) on 127.0.0.1:0; all are shut down afterwards."""
    started: list[RPCServer] = []

    def make(devices: list[Device] | None = None, **kw: object) -> RPCServer:
        kw.setdefault("limits", TEST_LIMITS)
        srv = RPCServer(devices or [cpu], "127.0.0.1", 0, **kw)  # type: ignore[arg-type]
        started.append(srv.start())
        return srv

    yield make
    disconnect_all()
    for s in started:
        s.shutdown()


@pytest.fixture()
def server(make_server: Callable[..., RPCServer]) -> RPCServer:
    """One server serving the CPU."""
    return make_server()


@pytest.fixture()
def rpc_dev(server: RPCServer) -> RPCDevice:
    """The client device for the server's device 0."""
    dev = RPCReg(server.address).devices[0]
    assert isinstance(dev, RPCDevice)
    return dev


@pytest.fixture()
def rpc_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., list[str]]]:
    """Point the process-wide registry at servers (GGML_RPC_SERVERS); returns their device names."""

    def use(*servers: RPCServer) -> list[str]:
        monkeypatch.setenv("GGML_RPC_SERVERS", ",".join(s.address for s in servers))
        reset_registry()
        names = []
        for s in servers:
            names += [d.name for d in get_registry().get_reg(f"RPC[{s.address}]").devices]
        return names

    yield use
    monkeypatch.delenv("GGML_RPC_SERVERS", raising=False)
    reset_registry()
