"""``--rpc HOST:PORT,...`` of ``ggml-core run`` and ``plan``: endpoints for the RPC plugin, before devices are listed.

The core imports no plugin: it extends ``GGML_RPC_SERVERS``, the variable the ggml-rpc plugin reads when it
registers its backends, reloads the registry, and then asks each named server's registry (``RPC[host:port]``) for
its devices. A server the user named and did not get is an error naming the endpoint and what failed (as in
llama.cpp), never a quiet run without it.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

from ggml_core._errors import DeviceNotFoundError, GGMLError

__all__ = ["use_rpc_servers"]

_MISSING = "the ggml-rpc plugin is not installed: install ggml-rpc (pip install -e plugins/ggml-rpc)"
_TLS = "tls://"


def _registry_name(endpoint: str) -> str:
    """``RPC[host:port]`` (``RPC[tls://host:port]``): the plugin's registry for ``endpoint`` (``[v6]:port`` loses
    its brackets, the port its leading zeros, as the plugin writes them)."""
    text = endpoint.strip()
    scheme = _TLS if text[: len(_TLS)].lower() == _TLS else ""
    host, _, port = text[len(scheme) :].rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return f"RPC[{scheme}{host}:{int(port)}]"


def use_rpc_servers(endpoints: Sequence[str] | None) -> None:
    """Add ``endpoints`` to ``GGML_RPC_SERVERS``, reload the registry, and connect to each.

    Called before any device is enumerated (``ggml-core run --rpc host:port``). Raises ``RuntimeError`` when the
    ggml-rpc plugin is not installed or not loaded, and the plugin's error (``ggml_rpc.RPCError``, a
    ``ConnectionError``) naming the endpoint and what failed when a server cannot be reached, refuses the
    handshake or reports no device.
    """
    if not endpoints:
        return
    if importlib.util.find_spec("ggml_rpc") is None:
        raise RuntimeError(f"--rpc: {_MISSING}")
    from ggml_core.backend.registry import get_registry, reset_registry

    known = [e.strip() for e in os.environ.get("GGML_RPC_SERVERS", "").split(",") if e.strip()]
    os.environ["GGML_RPC_SERVERS"] = ",".join(dict.fromkeys([*known, *endpoints]))
    reset_registry()
    registry = get_registry()
    for endpoint in dict.fromkeys(endpoints):
        name = _registry_name(endpoint)
        try:
            reg = registry.get_reg(name)
        except DeviceNotFoundError:
            raise RuntimeError(
                f"--rpc {endpoint}: the ggml-rpc plugin is installed but did not load (GGML_BACKENDS may leave it "
                "out; see 'ggml-core plugins')"
            ) from None
        if reg.devices:
            continue
        error = getattr(reg, "error", None)
        if isinstance(error, GGMLError):
            raise error
        reason = reg.unavailable_reason or "the server reports no device"
        raise RuntimeError(f"--rpc {endpoint}: {reason}")
