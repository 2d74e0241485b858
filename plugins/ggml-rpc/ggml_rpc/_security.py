"""Tokens and TLS, both optional (off by default, so that llama.cpp's clients and servers keep working).

- **Token**: a shared secret read from a file (``rpc-server --token FILE``; clients: ``GGML_RPC_TOKEN_FILE=FILE``).
  A client with a token sends it in an EXT_AUTH frame *before* HELLO; a server with a token serves nothing until it
  has compared it (in constant time) with its own. Plain peers never see the frame: a client sends it only when
  given a token, and a server without a token answers it "not required" and closes (nothing was secured).
- **TLS**: ``rpc-server --tls-cert FILE --tls-key FILE`` wraps every connection in TLS (1.2 or newer) before HELLO;
  clients connect to ``tls://host:port`` and verify the server's certificate against the system's CAs or
  ``GGML_RPC_TLS_CA=FILE`` (a CA or the server's own self-signed certificate), host name included.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import stat
from typing import Final

from ggml_rpc.protocol import TOKEN_MAX, RPCConfigError

__all__ = [
    "TLS_CA_ENV",
    "TLS_SCHEME",
    "TOKEN_FILE_ENV",
    "client_context",
    "client_token",
    "read_token",
    "server_context",
    "tokens_equal",
]

#: the client's token file
TOKEN_FILE_ENV: Final = "GGML_RPC_TOKEN_FILE"
#: the CA (or self-signed server certificate) a client trusts for ``tls://`` endpoints, besides the system's
TLS_CA_ENV: Final = "GGML_RPC_TLS_CA"
#: the endpoint prefix that asks for TLS
TLS_SCHEME: Final = "tls://"


def _regular(path: str, what: str) -> None:
    """``path`` must be a regular file (a FIFO would block the open, a directory fail it obscurely)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise RPCConfigError(path, f"cannot open the {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RPCConfigError(path, f"the {what} is not a regular file")


def read_token(path: str, what: str = "token file") -> bytes:
    """The token in ``path``: its bytes without surrounding whitespace (1 to :data:`TOKEN_MAX` bytes). ``what``
    names the file in errors (``token file (--token)``)."""
    _regular(path, what)
    try:
        with open(path, "rb") as f:
            raw = f.read(TOKEN_MAX * 2 + 1)
    except OSError as exc:
        raise RPCConfigError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    token = raw.strip()
    if not token:
        raise RPCConfigError(path, f"the {what} is empty: write a secret into it (e.g. openssl rand -hex 32)")
    if len(token) > TOKEN_MAX:
        raise RPCConfigError(path, f"the {what} holds more than {TOKEN_MAX} bytes")
    return token


def client_token() -> bytes | None:
    """The token from ``GGML_RPC_TOKEN_FILE`` (None when it is unset or empty)."""
    path = os.environ.get(TOKEN_FILE_ENV, "").strip()
    return read_token(path, f"token file ({TOKEN_FILE_ENV})") if path else None


def tokens_equal(given: bytes, expected: bytes) -> bool:
    """Compared in constant time, over digests so that not even the length leaks."""
    return hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(expected).digest())


def client_context(cafile: str | None = None) -> ssl.SSLContext:
    """TLS for a client: certificates verified, host name checked; trusts ``cafile`` (default
    ``GGML_RPC_TLS_CA``) besides the system's CAs."""
    ca = cafile if cafile is not None else os.environ.get(TLS_CA_ENV, "").strip() or None
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca is not None:
        _regular(ca, f"CA certificate ({TLS_CA_ENV})")
        try:
            ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as exc:
            raise RPCConfigError(ca, f"cannot load it as a PEM certificate ({TLS_CA_ENV}): {_why(exc)}") from None
    return ctx


def server_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """TLS for the server (1.2 or newer) from a PEM certificate chain and its key."""
    _regular(certfile, "certificate (--tls-cert)")
    _regular(keyfile, "key (--tls-key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(certfile, keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise RPCConfigError(
            f"{certfile}, {keyfile}", f"cannot load the certificate and its key (PEM): {_why(exc)}"
        ) from None
    return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)
