"""``--rpc HOST:PORT,...`` of ``ggml-core run`` and ``plan``: endpoints for the RPC plugin, before devices are listed.

The core imports no plugin: it only extends ``GGML_RPC_SERVERS``, the variable the ggml-rpc plugin reads when it
registers its backends, and reloads the registry.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence

__all__ = ["use_rpc_servers"]

_MISSING = "the ggml-rpc plugin is not installed: install ggml-rpc (pip install -e plugins/ggml-rpc)"


def use_rpc_servers(endpoints: Sequence[str] | None) -> None:
    """Add ``endpoints`` to ``GGML_RPC_SERVERS`` and reload the registry so that their devices appear.

    Called before any device is enumerated (``ggml-core run --rpc host:port``); raises ``RuntimeError`` when the
    ggml-rpc plugin is not installed.
    """
    if not endpoints:
        return
    if importlib.util.find_spec("ggml_rpc") is None:
        raise RuntimeError(f"--rpc: {_MISSING}")
    from ggml_core.backend.registry import reset_registry

    known = [e.strip() for e in os.environ.get("GGML_RPC_SERVERS", "").split(",") if e.strip()]
    os.environ["GGML_RPC_SERVERS"] = ",".join(dict.fromkeys([*known, *endpoints]))
    reset_registry()
