"""ggml-rpc: remote devices over ggml's RPC protocol 7.0.0 (llama.cpp's ``rpc-server``), and a hardened server.

- client: ``GGML_RPC_SERVERS=host:port,...`` (or :func:`add_server`, or ``ggml-core run --rpc host:port``) turns
  every device of each server into a ggml-core device ``RPC0``, ``RPC1``, ... (:mod:`ggml_rpc.plugin`)
- server: ``ggml-core rpc-server`` serves local devices (:mod:`ggml_rpc.server`)
- wire format: :mod:`ggml_rpc.protocol`; connections: :mod:`ggml_rpc.client`
"""

from ggml_rpc.client import Connection, disconnect_all, parse_endpoint
from ggml_rpc.plugin import RPCBackend, RPCBuffer, RPCBufferType, RPCDevice, RPCReg, add_server, configured_endpoints
from ggml_rpc.protocol import PROTO_VERSION, RPCError, RPCNoCPUError, RPCVersionError

__all__ = [
    "PROTO_VERSION",
    "Connection",
    "RPCBackend",
    "RPCBuffer",
    "RPCBufferType",
    "RPCDevice",
    "RPCError",
    "RPCNoCPUError",
    "RPCReg",
    "RPCVersionError",
    "add_server",
    "configured_endpoints",
    "disconnect_all",
    "parse_endpoint",
]
