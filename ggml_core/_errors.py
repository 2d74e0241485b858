"""Exception classes: one per failure kind, each carrying the culprit.

Every class derives from :class:`GGMLError` and from the builtin exception a caller would naturally catch
(``ValueError`` for bad arguments, ``MemoryError`` for allocations, ...), so ``except ValueError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ggml_core._text import safe_text

__all__ = [
    "AllocationError",
    "BufferFreedError",
    "ChatTemplateError",
    "ComputeError",
    "DeviceNotFoundError",
    "GGMLError",
    "GGUFError",
    "GraphError",
    "GraphInUseError",
    "ModelInUseError",
    "OpError",
    "OpFilterError",
    "OutOfBoundsError",
    "PluginError",
    "TensorDataError",
    "TensorError",
    "UnknownTypeError",
    "UnsupportedOpError",
    "VocabularyError",
]


class GGMLError(Exception):
    """Base class of every error raised by ggml-core and its plugins."""


class OpError(GGMLError, ValueError):
    """An op builder rejected its operands (shape, type or parameter), as ggml's ``ggml_*`` constructors would.

    :param op: the op's ggml name (``"MUL_MAT"``)
    :param operands: the offending tensors
    """

    def __init__(self, op: str, message: str, operands: Sequence[Any] = ()) -> None:
        desc = ", ".join(_describe(t) for t in operands)
        super().__init__(f"{op}: {message}" + (f" (operands: {desc})" if desc else ""))
        self.op = op
        self.operands = tuple(operands)


class TensorError(GGMLError, ValueError):
    """A tensor cannot be used this way: a view outside its source, data of the wrong size, no buffer bound."""

    def __init__(self, tensor: Any, message: str) -> None:
        super().__init__(f"tensor {_describe(tensor)}: {message}")
        self.tensor = tensor


class UnknownTypeError(GGMLError, ValueError, TypeError):
    """A ggml type given by name or id is not one of ggml's types (or is neither a name nor an id)."""

    def __init__(self, given: object, message: str) -> None:
        super().__init__(message)
        self.given = given


class TensorDataError(TensorError):
    """Values given for a tensor cannot be stored in its type as they are: integers out of the type's range,
    floats that would overflow to inf, non-numeric (object, string, complex) data, a ragged nested list."""


class BufferFreedError(TensorError):
    """A tensor is used after the buffer holding its memory was freed (``buffer.free()``)."""

    def __init__(self, tensor: Any, buffer: Any) -> None:
        name = getattr(buffer, "name", buffer)
        super().__init__(
            tensor,
            f"its {name} buffer was freed (buffer.free()); allocate the tensor again (a new buffer, "
            "alloc_ctx_tensors or an allocator) before using it",
        )
        self.buffer = buffer


class OutOfBoundsError(GGMLError, IndexError):
    """A read or write would leave a buffer (or a tensor's extent inside it)."""

    def __init__(self, what: str, offset: int, size: int, limit: int) -> None:
        super().__init__(
            f"{what}: access of {size} bytes at offset {offset} is outside its {limit} bytes "
            f"(would end at {offset + size})"
        )
        self.offset, self.size, self.limit = offset, size, limit


class AllocationError(GGMLError, MemoryError):
    """A device could not allocate a buffer; says which device, how much was asked and how much is free."""

    def __init__(self, device: str, size: int, free: int | None = None, reason: str = "") -> None:
        msg = f"device {device}: cannot allocate {_mib(size)}"
        if free is not None:
            msg += f" ({_mib(free)} free)"
        if reason:
            msg += f": {reason}"
        super().__init__(msg)
        self.device, self.size, self.free = device, size, free


class DeviceNotFoundError(GGMLError, LookupError):
    """No device (or registry) has this name; carries close matches for a "did you mean" hint."""

    def __init__(self, name: str, known: Sequence[str], suggestions: Sequence[str] = ()) -> None:
        msg = f"no device named {name!r}"
        if suggestions:
            msg += f"; did you mean {' or '.join(repr(s) for s in suggestions)}?"
        msg += f" (available: {', '.join(known) if known else 'none'})"
        super().__init__(msg)
        self.name, self.known, self.suggestions = name, tuple(known), tuple(suggestions)


class PluginError(GGMLError):
    """A backend plugin failed to load or to answer a hook (raised only with ``GGML_STRICT_PLUGINS=1``)."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"plugin {plugin!r}: {message}")
        self.plugin = plugin


class UnsupportedOpError(GGMLError):
    """No backend that was asked supports a graph node."""

    def __init__(self, node: Any, devices: Sequence[str]) -> None:
        super().__init__(
            f"node {_describe(node)}: op {getattr(node, 'op_desc', '?')} is supported by none of the devices asked "
            f"({', '.join(devices) or 'none'}); add a device that supports it (the CPU supports every op)"
        )
        self.node, self.devices = node, tuple(devices)


class GraphError(GGMLError, ValueError):
    """A graph is malformed or over its size limit."""


class GraphInUseError(GGMLError, RuntimeError):
    """A graph was handed to a compute while another thread was computing it.

    A graph's tensors (inputs, intermediates that an allocator lets share memory, outputs) are shared data, so
    two computes of one graph at once would overwrite each other. Give each thread its own graph, or hold one lock
    around setting the inputs, computing and reading the outputs.
    """

    def __init__(self, graph: Any, backend: str) -> None:
        super().__init__(
            f"{backend}: {graph!r} is being computed by another thread; a graph's tensors are shared, so one thread "
            "at a time may set its inputs, compute it and read its outputs (use one graph per thread, or a lock "
            "around all three)"
        )
        self.graph, self.backend = graph, backend


class ModelInUseError(GGMLError, RuntimeError):
    """A thread went on with a model's sequence (its KV cache) after another thread changed it.

    One :class:`~ggml_core.models.Model` holds one sequence; its calls are serialised (one thread at a time), but a
    thread's ``generate()`` after another thread's would continue the other thread's text, a wrong answer.
    """

    def __init__(self, model: str) -> None:
        super().__init__(
            f"{model}: another thread changed this model's sequence (its KV cache) since this thread's last call, so "
            "going on would mix the two; call reset() first, hold model.lock across the calls that make one "
            "sequence, or give each thread its own Model"
        )
        self.model = model


class ComputeError(GGMLError, RuntimeError):
    """A backend failed while computing a node; names the node, its op and the backend."""

    def __init__(self, node: Any, backend: str, message: str) -> None:
        super().__init__(f"{backend}: computing {_describe(node)} failed: {message}")
        self.node, self.backend = node, backend


class GGUFError(GGMLError, ValueError):
    """A GGUF file is malformed or unsupported; names the file and the field."""

    def __init__(self, path: str, field: str, message: str) -> None:
        # the path may come from a peer or a file's own metadata: printed escaped and bounded
        super().__init__(f"{safe_text(str(path), 300)}: {field}: {message}")
        self.path, self.field = path, field


class ChatTemplateError(GGUFError):
    """A chat template does not parse, fails while rendering, or runs past a rendering limit (time, size of its
    output or of a value it builds, nesting of calls); names the template (file and metadata key)."""


class VocabularyError(GGMLError, ValueError):
    """Text has a character or byte the vocabulary cannot encode (no token for it, no byte tokens, no unknown
    token); names the vocabulary and the character."""

    def __init__(self, vocab: str, text: str, message: str) -> None:
        super().__init__(f"{vocab}: {message}")
        self.vocab, self.text = vocab, text


class OpFilterError(GGMLError, LookupError):
    """An op filter (``test-ops -o``, ``conformance_suite(ops=...)``) names something that is not an op or a group
    of ops, or selects no conformance case; carries the filter and the names it could have used."""

    def __init__(self, given: str, message: str, valid: Sequence[str] = ()) -> None:
        super().__init__(f"op filter {given!r}: {message}")
        self.given, self.valid = given, tuple(valid)


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n} bytes"


def _describe(t: Any) -> str:
    describe = getattr(t, "describe", None)
    return describe() if callable(describe) else repr(t)


def _public_names() -> None:
    """Tracebacks and reprs name the exceptions as users import them (``ggml_core.OpError``), not by private module.

    Done here, where they are defined, because ``ggml_core`` loads its names on first use: an error raised before
    anyone touched ``ggml_core.OpError`` is named the same way.
    """
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) and issubclass(obj, BaseException):
            obj.__module__ = "ggml_core"


_public_names()
