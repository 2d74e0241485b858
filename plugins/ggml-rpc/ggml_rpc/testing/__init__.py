"""Test beds for RPC over real networks: server hosts in network namespaces behind (delay, rate) links."""

from ._netbed import (
    Host,
    Link,
    NetBed,
    NetBedError,
    ServerArgv,
    Traffic,
    ggml_core_server,
    llama_cpp_server,
    netbed_unavailable,
)

__all__ = [
    "Host",
    "Link",
    "NetBed",
    "NetBedError",
    "ServerArgv",
    "Traffic",
    "ggml_core_server",
    "llama_cpp_server",
    "netbed_unavailable",
]
