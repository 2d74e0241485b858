"""Tokens and TLS: off by default (llama.cpp's peers keep working), and when asked for, every mismatch fails
cleanly on both sides — one line naming what to do, no traceback, and the server keeps serving everyone else.

The certificate is self-signed and made for the test (``cryptography`` if installed, else ``openssl req``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from rpc_helpers import start_server_process

from ggml_core import Context, alloc_ctx_tensors
from ggml_rpc import Connection, RPCError, RPCReg
from ggml_rpc import _security as security
from ggml_rpc.cli import loopback_warning
from ggml_rpc.protocol import Cmd, RPCAuthError, RPCConfigError
from ggml_rpc.server import RPCServer

TOKEN = b"correct horse battery staple"


def _self_signed(dirname: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (PEM)."""
    cert, key = dirname / "cert.pem", dirname / "key.pem"
    try:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("neither the cryptography package nor the openssl command is available to make a certificate")
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        return cert, key
    pk = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    crt = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(pk.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2)).add_extension(san, critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(pk, hashes.SHA256())
    )  # fmt: skip
    cert.write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        pk.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, key


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture()
def trust(pem: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The client trusts the test's self-signed certificate."""
    monkeypatch.setenv("GGML_RPC_TLS_CA", str(pem[0]))


def _server_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "ggml_rpc.server" and r.levelno >= logging.WARNING]


def _wait_lines(caplog: pytest.LogCaptureFixture, n: int) -> list[logging.LogRecord]:
    deadline = time.monotonic() + 10
    while len(_server_lines(caplog)) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return _server_lines(caplog)


def _roundtrip(endpoint: str) -> np.ndarray:
    """Write and read back a tensor on the server's device 0 (a fresh connection)."""
    (dev,) = RPCReg(endpoint).devices
    ctx = Context()
    t = ctx.new_tensor("f32", (64,))
    alloc_ctx_tensors(ctx, dev.init_backend())
    want = np.arange(64, dtype=np.float32)
    t.set_data(want)
    return np.asarray(t.to_numpy()).reshape(-1)


def test_tls_and_token_serve_a_client_that_has_both(
    make_server: Callable[..., RPCServer], pem: tuple[Path, Path], trust: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = make_server(token=TOKEN, tls=security.server_context(str(pem[0]), str(pem[1])))
    token_file = pem[0].parent / "token"
    token_file.write_bytes(TOKEN + b"\n")  # a trailing newline (echo) is not part of the token
    monkeypatch.setenv("GGML_RPC_TOKEN_FILE", str(token_file))
    got = _roundtrip(f"tls://{srv.address}")
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32))
    assert srv.stats["SET_TENSOR"] >= 1 and srv.stats["refused"] == 0


def _refused_both_sides(
    caplog: pytest.LogCaptureFixture,
    srv: RPCServer,
    connect: Callable[[], object],
    client_says: str,
    server_says: str,
    good: Callable[[], object],
) -> None:
    """``connect`` raises one line matching ``client_says``; the server logs one line with ``server_says`` and no
    traceback; then ``good`` (a correct client) is served."""
    caplog.set_level(logging.WARNING, logger="ggml_rpc.server")
    with pytest.raises(RPCAuthError, match=client_says) as exc:
        connect()
    assert "\n" not in str(exc.value) and srv.address.split(":")[-1] in str(exc.value)
    (line,) = _wait_lines(caplog, 1)
    msg = line.getMessage()
    assert server_says in msg and "\n" not in msg and line.exc_info is None, msg
    assert srv.stats["internal errors"] == 0
    good()  # the server keeps serving


@pytest.fixture()
def tls_server(make_server: Callable[..., RPCServer], pem: tuple[Path, Path]) -> RPCServer:
    return make_server(token=TOKEN, tls=security.server_context(str(pem[0]), str(pem[1])))


def _good(srv: RPCServer) -> Callable[[], object]:
    def good() -> None:
        conn = Connection(f"tls://{srv.address}", token=TOKEN)
        assert conn.request(Cmd.DEVICE_COUNT) == b"\x01\x00\x00\x00"
        conn.close()

    return good


def test_a_wrong_token_fails_cleanly(tls_server: RPCServer, trust: None, caplog: pytest.LogCaptureFixture) -> None:
    ep = f"tls://{tls_server.address}"
    _refused_both_sides(
        caplog, tls_server, lambda: Connection(ep, token=b"wrong"), "refused the token", "wrong token",
        _good(tls_server),
    )  # fmt: skip


def test_no_token_fails_cleanly(tls_server: RPCServer, trust: None, caplog: pytest.LogCaptureFixture) -> None:
    ep = f"tls://{tls_server.address}"
    _refused_both_sides(
        caplog, tls_server, lambda: Connection(ep), "requires a token .*GGML_RPC_TOKEN_FILE", "no token",
        _good(tls_server),
    )  # fmt: skip


def test_a_plain_client_against_a_tls_server_fails_cleanly(
    tls_server: RPCServer, trust: None, caplog: pytest.LogCaptureFixture
) -> None:
    for token in (None, TOKEN):
        caplog.clear()
        _refused_both_sides(
            caplog, tls_server, lambda token=token: Connection(tls_server.address, token=token),
            rf"serves TLS only: connect to tls://{tls_server.address}", "a plain client", _good(tls_server),
        )  # fmt: skip


def test_a_tls_client_against_a_plain_server_fails_cleanly(
    make_server: Callable[..., RPCServer], trust: None, caplog: pytest.LogCaptureFixture
) -> None:
    srv = make_server()
    _refused_both_sides(
        caplog, srv, lambda: Connection(f"tls://{srv.address}"),
        rf"TLS handshake failed .*does not serve TLS .*connect to {srv.address} without tls://",
        "got 22 (a TLS handshake: this server has no TLS", lambda: Connection(srv.address).close(),
    )  # fmt: skip


def test_a_token_for_a_server_without_one_fails_cleanly(
    make_server: Callable[..., RPCServer], caplog: pytest.LogCaptureFixture
) -> None:
    srv = make_server()
    _refused_both_sides(
        caplog, srv, lambda: Connection(srv.address, token=TOKEN), "takes no token .*would secure nothing",
        "sent a token, and this server was started without --token", lambda: Connection(srv.address).close(),
    )  # fmt: skip


def test_an_untrusted_certificate_fails_cleanly(tls_server: RPCServer, caplog: pytest.LogCaptureFixture) -> None:
    os.environ.pop("GGML_RPC_TLS_CA", None)
    caplog.set_level(logging.WARNING, logger="ggml_rpc.server")
    with pytest.raises(RPCAuthError, match=r"certificate is not trusted .*GGML_RPC_TLS_CA"):
        Connection(f"tls://{tls_server.address}", token=TOKEN)
    (line,) = _wait_lines(caplog, 1)
    assert "TLS handshake failed" in line.getMessage() and line.exc_info is None


def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = security.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(security.hmac, "compare_digest", spy)
    assert security.tokens_equal(b"abc", b"abc") and not security.tokens_equal(b"abc", b"abd")
    assert not security.tokens_equal(b"abc", b"abcd")
    assert len(calls) == 3 and all(len(a) == len(b) == 32 for a, b in calls)  # digests: not even the length leaks


def test_token_and_certificate_files_are_checked(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(RPCConfigError, match="empty"):
        security.read_token(str(empty))
    with pytest.raises(RPCConfigError, match="cannot open"):
        security.read_token(str(tmp_path / "missing"))
    with pytest.raises(RPCConfigError, match="not a regular file"):
        security.read_token(str(tmp_path))
    with pytest.raises(RPCConfigError, match="cannot load the certificate"):
        security.server_context(str(empty), str(pem[1]))


def test_the_off_loopback_warning_names_what_is_missing() -> None:
    plain = loopback_warning("0.0.0.0")
    assert plain is not None and "no authentication and no encryption" in plain and "--token" in plain
    token_only = loopback_warning("0.0.0.0", token=True)
    assert token_only is not None and "read the token" in token_only
    assert loopback_warning("0.0.0.0", token=True, tls=True) is None
    assert loopback_warning("127.0.0.1") is None


def test_the_commands_end_to_end(pem: tuple[Path, Path], tmp_path: Path) -> None:
    """``rpc-server --token --tls-cert --tls-key``, and ``ggml-core run --rpc tls://...`` with the token's file."""
    token, wrong = tmp_path / "token", tmp_path / "wrong"
    token.write_bytes(TOKEN)
    wrong.write_bytes(b"not it")
    proc, endpoint = start_server_process(["--token", str(token), "--tls-cert", str(pem[0]), "--tls-key", str(pem[1])])
    try:
        assert endpoint.startswith("tls://127.0.0.1:")
        base = {k: v for k, v in os.environ.items() if k not in ("GGML_RPC_SERVERS", "GGML_BACKENDS")}
        env = {**base, "GGML_RPC_TLS_CA": str(pem[0]), "GGML_RPC_CONNECT_TIMEOUT": "10"}

        def run(token_file: Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "ggml_core.cli", "run", "--list-devices", "--rpc", endpoint],
                capture_output=True, text=True, env={**env, "GGML_RPC_TOKEN_FILE": str(token_file)}, timeout=120,
            )  # fmt: skip

        bad = run(wrong)
        err = bad.stderr.strip()
        assert bad.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
        assert f"RPC server {endpoint}: the server refused the token" in err
        ok = run(token)
        assert ok.returncode == 0 and "RPC" in ok.stdout, ok.stdout + ok.stderr
    finally:
        proc.terminate()
        _, server_err = proc.communicate(timeout=30)
    assert "wrong token" in server_err and "Traceback" not in server_err, server_err


def test_rpc_server_refuses_unusable_security_files(tmp_path: Path, pem: tuple[Path, Path]) -> None:
    cases = [
        (["--token", str(tmp_path / "missing")], "cannot open the token file"),
        (["--tls-cert", str(pem[0])], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(pem[1]), "--tls-key", str(pem[1])], "cannot load the certificate"),
    ]
    for args, want in cases:
        out = subprocess.run(
            [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU", *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        err = out.stderr.strip()
        assert out.returncode == 2 and want in err and "Traceback" not in err and err.count("\n") == 0, err


def test_an_unusable_client_token_file_is_an_error_naming_it(
    server: RPCServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggml_core.backend.registry import Registry
    from ggml_rpc import add_server

    missing = tmp_path / "missing"
    monkeypatch.setenv("GGML_RPC_TOKEN_FILE", str(missing))
    with pytest.raises(RPCConfigError, match=r"cannot open the token file \(GGML_RPC_TOKEN_FILE\)"):
        add_server(server.address, Registry().load())
    base = {k: v for k, v in os.environ.items() if k not in ("GGML_RPC_SERVERS", "GGML_BACKENDS")}
    out = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", "run", "--list-devices", "--rpc", server.address],
        capture_output=True, text=True, env=base, timeout=120,
    )  # fmt: skip
    err = out.stderr.strip()
    assert out.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert f"{missing}: cannot open the token file (GGML_RPC_TOKEN_FILE)" in err


def _trickle(sock: socket.socket, data: bytes, every: float, limit: float) -> float:
    """Send ``data`` a byte at a time until the peer closes; seconds until it did (``limit`` if it never did)."""
    start = time.monotonic()
    sock.settimeout(every)
    for b in data:
        if time.monotonic() - start > limit:
            break
        try:
            sock.sendall(bytes([b]))
            if sock.recv(1) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    return limit


#: the start of a TLS ClientHello record, then filler (a handshake that never completes)
_CLIENT_HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]) + bytes(500)


def test_a_trickled_tls_handshake_is_cut_off_at_the_hello_deadline(
    make_server: Callable[..., RPCServer], pem: tuple[Path, Path]
) -> None:
    """The whole handshake must arrive within ``hello_timeout`` (1 s here), not each of its bytes."""
    import dataclasses

    from conftest import TEST_LIMITS

    limits = dataclasses.replace(TEST_LIMITS, hello_timeout=1.0)
    srv = make_server(tls=security.server_context(str(pem[0]), str(pem[1])), limits=limits)
    host, port = srv.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        took = _trickle(sock, _CLIENT_HELLO, 0.2, 15.0)
    assert took < 8.0, f"a handshake trickled a byte every 0.2 s held the connection {took:.1f} s"
    waited = time.monotonic() + 5.0  # the server thread counts the timeout after the socket closes: let it
    while srv.stats["timed out"] < 1 and time.monotonic() < waited:
        time.sleep(0.02)
    assert srv.stats["timed out"] == 1


def test_a_server_trickling_its_tls_handshake_is_reported_within_the_connect_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lst = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = lst.accept()
        with conn:
            for b in bytes([0x16, 0x03, 0x03, 0x10, 0x00]) + bytes(4000):
                if stop.wait(0.2):
                    return
                with contextlib.suppress(OSError):
                    conn.sendall(bytes([b]))

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        start = time.monotonic()
        with pytest.raises(RPCError, match=r"within 1 s \(GGML_RPC_CONNECT_TIMEOUT\)"):
            Connection(f"tls://127.0.0.1:{lst.getsockname()[1]}", connect_timeout=1)
        assert time.monotonic() - start < 8.0
    finally:
        stop.set()
        lst.close()
        th.join(5)
