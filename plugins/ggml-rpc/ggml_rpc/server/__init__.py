"""The hardened RPC server: any ggml-core device served over ggml's RPC protocol 7.0.0.

- :mod:`._validate`: tensor checks (type, block layout, extent inside an owned buffer) and per-connection handles
- :mod:`._rebuild`: each received node rebuilt through the core op builders and compared with what was sent
- :mod:`._graph`: GRAPH_COMPUTE parsed within limits, bound to memory, checked against the device
- :mod:`._greeting`: the start of a connection: TLS and the token when configured, then HELLO
- :mod:`._session`: one connection, one command at a time; a bad message closes only that connection
- :mod:`._limits`: every bound (:class:`ServerLimits`) and the byte pools grants are counted against
- :mod:`._work`: work bounds from op parameters (pooling windows, convolution kernels), checked before compute
- :mod:`._cache`: the tensor cache directory with its quota (least recently used files go first)
- :mod:`._server`: the listener (loopback by default), threads, client limit, memory budgets
"""

from ggml_rpc.server._limits import Budget, ServerLimits
from ggml_rpc.server._rebuild import CUSTOM_OPS, REBUILDERS
from ggml_rpc.server._server import DEFAULT_PORT, RPCServer, default_devices, is_loopback
from ggml_rpc.server._validate import Refused

__all__ = [
    "CUSTOM_OPS",
    "DEFAULT_PORT",
    "REBUILDERS",
    "Budget",
    "RPCServer",
    "Refused",
    "ServerLimits",
    "default_devices",
    "is_loopback",
]
