"""``ggml-core rpc-server`` (a command of this plugin: serves, says what it serves, warns off loopback; says where
it comes from when the plugin is not loaded) and ``use_rpc_servers`` behind ``ggml-core run --rpc``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from ggml_core.cli._rpc_option import use_rpc_servers
from ggml_rpc import Connection
from ggml_rpc.cli import loopback_warning
from ggml_rpc.protocol import Cmd
from ggml_rpc.server import RPCServer, is_loopback


def test_rpc_server_command_serves_until_stopped() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU", "--max-memory", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(line.strip().startswith("0:") for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        text = "".join(lines)
        assert "protocol v7.0.0" in text and "local cache : n/a" in text and "0: CPU" in text, text
        assert "grants 100 MiB" in text, text  # --max-memory: the budget all clients share
        assert "peer copies : 127.0.0.1:" in text, text  # other servers reach it at its bound address
        endpoint = next(line.split(":", 1)[1].strip() for line in lines if line.strip().startswith("endpoint"))
        assert endpoint.startswith("127.0.0.1:")  # loopback unless told otherwise
        conn = Connection(endpoint, timeout=10)
        assert conn.ggml_core and conn.request(Cmd.DEVICE_COUNT) == b"\x01\x00\x00\x00"
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_limits_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from ggml_core.cli import main

    flags = ("--max-memory", "--max-client-memory", "--frame-timeout", "--min-rate", "--hello-timeout", "--cache-max")
    for flag in flags:
        with pytest.raises(SystemExit) as exc:
            main(["rpc-server", "--port", "0", flag, "0"])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"argument {flag}: must be a finite number in (0.0, inf]" in err, err


def test_the_peer_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from ggml_core.cli import main

    assert main(["rpc-server", "--port", "0", "--peer-address", "nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--peer-address: RPC endpoint 'nowhere': expected HOST:PORT" in err, err
    with pytest.raises(SystemExit):
        main(["rpc-server", "--port", "0", "--cache-min", "-1"])
    assert "argument --cache-min" in capsys.readouterr().err


def test_a_server_without_any_device_says_to_install_ggml_cpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its default device is the CPU: without one (and no accelerator) the command fails with one line."""
    from ggml_core.backend.registry import Registry, reset_registry
    from ggml_core.cli import main

    monkeypatch.delenv("GGML_RPC_SERVERS", raising=False)
    reset_registry(Registry(environ={"GGML_BACKENDS": "rpc"}))  # the installed plugins, the CPU's left out
    try:
        code = main(["rpc-server", "--port", "0"])
    finally:
        reset_registry()
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "no device to serve" in err and "install ggml-cpu" in err, err


def test_warning_off_loopback() -> None:
    assert loopback_warning("127.0.0.1") is None and loopback_warning("::1") is None
    assert loopback_warning("localhost") is None
    text = loopback_warning("0.0.0.0")
    assert text is not None and "no authentication" in text and "Never expose" in text
    assert is_loopback("127.0.0.5") and not is_loopback("10.0.0.1") and not is_loopback("example.org")


def test_the_command_belongs_to_the_plugin() -> None:
    """``rpc-server`` is listed by ``--help`` while the plugin loads, and is unknown (with the reason) when not."""
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS")}
    listed = subprocess.run([sys.executable, "-m", "ggml_core.cli", "--help"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "rpc-server" in listed.stdout, listed.stdout + listed.stderr
    off = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0"],
        capture_output=True,
        text=True,
        env={**env, "GGML_BACKENDS": "cpu"},
        timeout=120,
    )
    assert off.returncode == 2 and "Traceback" not in off.stderr
    assert "unknown command 'rpc-server'" in off.stderr and "ggml-rpc plugin, which is disabled" in off.stderr


def test_missing_plugin_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ggml_rpc" else real(name, *a))
    with pytest.raises(RuntimeError, match="install ggml-rpc"):
        use_rpc_servers(["127.0.0.1:1"])


def test_use_rpc_servers_extends_the_environment(
    monkeypatch: pytest.MonkeyPatch, make_server: Callable[..., RPCServer]
) -> None:
    import os

    from ggml_core.backend.registry import reset_registry

    s1, s2 = make_server(), make_server()
    monkeypatch.setenv("GGML_RPC_SERVERS", s1.address)
    try:
        use_rpc_servers([s2.address, s1.address])
        assert os.environ["GGML_RPC_SERVERS"] == f"{s1.address},{s2.address}"
        use_rpc_servers(None)  # nothing asked: nothing changes
        assert os.environ["GGML_RPC_SERVERS"] == f"{s1.address},{s2.address}"
    finally:
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()


def test_an_unreachable_server_is_reported_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from ggml_core.backend.registry import get_registry, reset_registry

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    monkeypatch.setenv("GGML_RPC_SERVERS", f"127.0.0.1:{port}")
    reset_registry()
    try:
        reg = get_registry()
        names = [d.name for d in reg.devices()]
        assert "CPU" in names  # the other devices are still there
        rpc = reg.get_reg(f"RPC[127.0.0.1:{port}]")
        assert rpc.unavailable_reason is not None and "cannot connect" in rpc.unavailable_reason
    finally:
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()


def _free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there
    return port


def _cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GGML_RPC_SERVERS", "GGML_BACKENDS")}
    return subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *argv],
        capture_output=True,
        text=True,
        env={**base, "GGML_RPC_CONNECT_TIMEOUT": "3", **(env or {})},
        timeout=180,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("run", "--tokens", "1,2", "-n", "1"),
        ("run", "--list-devices"),
        ("plan",),
        ("plan", "--list-devices"),
    ],
)
def test_an_unreachable_rpc_endpoint_is_an_error(argv: tuple[str, ...]) -> None:
    """``--rpc`` names a server the user wants: nothing listening there ends the command (exit 2, one line)."""
    ep = f"127.0.0.1:{_free_port()}"
    out = _cli(*argv, "--rpc", ep)
    err = out.stderr.strip()
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in err and err.count("\n") == 0, err
    assert f"RPC server {ep}: cannot connect" in err, err


def test_a_server_that_never_answers_hello_is_an_error(fake_server_hello: str) -> None:
    out = _cli("run", "--list-devices", "--rpc", fake_server_hello, env={"GGML_RPC_CONNECT_TIMEOUT": "1"})
    err = out.stderr.strip()
    assert out.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert f"RPC server {fake_server_hello}: no complete HELLO answer within 1 s" in err, err


def test_a_server_of_another_protocol_is_an_error() -> None:
    from rpc_helpers import ScriptedServer

    with ScriptedServer({Cmd.HELLO: bytes([6, 0, 0, 0]) + bytes(24)}) as srv:
        out = _cli("run", "--list-devices", "--rpc", srv.address)
    err = out.stderr.strip()
    assert out.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert f"RPC server {srv.address}: speaks RPC protocol 6.0.0" in err, err


def test_add_server_into_a_loaded_registry_raises_for_an_unreachable_server() -> None:
    from ggml_core.backend.registry import Registry
    from ggml_rpc import RPCError, add_server

    ep = f"127.0.0.1:{_free_port()}"
    with pytest.raises(RPCError, match=rf"RPC server {ep}: cannot connect"):
        add_server(ep, Registry().load())


@pytest.fixture()
def fake_server_hello() -> Iterator[str]:
    """A server that accepts connections and never says a word."""
    import socket

    lst = socket.create_server(("127.0.0.1", 0))
    yield f"127.0.0.1:{lst.getsockname()[1]}"
    lst.close()


@pytest.mark.parametrize("form", ["[::1]:{port}", "TLS://127.0.0.1:{port}", "127.0.0.1:0{port}"])
def test_use_rpc_servers_finds_the_registry_of_every_endpoint_spelling(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Brackets, the scheme's case and leading zeros are spelled as the plugin names its registry: the error is the
    server's own (what failed), not "the plugin did not load"."""
    from ggml_core.backend.registry import reset_registry
    from ggml_rpc import RPCError

    monkeypatch.setenv("GGML_RPC_SERVERS", "")
    try:
        with pytest.raises(RPCError, match=r"RPC server .*: (cannot connect|the TLS handshake)"):
            use_rpc_servers([form.format(port=_free_port())])
    finally:
        monkeypatch.delenv("GGML_RPC_SERVERS")
        reset_registry()
