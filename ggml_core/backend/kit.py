"""The frame every device plugin shares: its op → kernel table and its two registration hooks.

A device plugin reads top to bottom as checks → kernels → buffers → device → registration. The two pieces that
would otherwise be written again in every plugin live here:

- :class:`KernelTable`: each op family's module registers its kernels with ``@KERNELS.kernel(op, ...,
  supports=predicate)``; the device asks ``KERNELS.supports(node, *context)`` in ``supports_op`` and the backend
  takes ``KERNELS.get(node)`` when it binds a graph. What a kernel is (a thunk maker, a list of launches) is the
  plugin's own business: the table is generic in it.
- :class:`LazyReg`: a registry that finds its devices on first use and says why it has none.
- :class:`PluginHooks`: the process-wide registry object, made on first use, and the hooks ``ggml_api_version``
  and ``ggml_register_backends`` that hand it to the core.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from ggml_core._errors import UnsupportedOpError
from ggml_core._tensor import Tensor
from ggml_core.backend.hookspecs import hookimpl
from ggml_core.backend.interfaces import API_VERSION, BackendReg
from ggml_core.ops import GGMLOp

__all__ = ["EMPTY_OPS", "KernelTable", "LazyReg", "PluginHooks"]

K = TypeVar("K")
R = TypeVar("R", bound=BackendReg)

#: ops that compute nothing: the node is a window on its source's memory (ggml_op_is_empty)
EMPTY_OPS = frozenset({GGMLOp.NONE, GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE})

#: a support predicate: ``(*context, node) -> bool``, where the context is whatever the plugin passes to
#: :meth:`KernelTable.supports` (nothing, the device's limits, its info record)
Supports = Callable[..., bool]


class KernelTable(Generic[K]):
    """op → (kernel, support predicate) for one device plugin.

    :param device: the name errors give for the plugin's device (``"CPU"``, ``"OpenCL"``)
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self._kernels: dict[GGMLOp, K] = {}
        self._supports: dict[GGMLOp, Supports] = {}

    def kernel(self, *ops: GGMLOp, supports: Supports) -> Callable[[K], K]:
        """Decorator: register the decorated kernel for ``ops``, each computed exactly when ``supports`` says."""
        if not ops:
            raise ValueError(f"{self.device}: a kernel must be registered for at least one op")

        def deco(fn: K) -> K:
            for op in ops:
                if op in self._kernels:
                    raise ValueError(f"{self.device}: {op.name} has two kernels; register one per op")
                self._kernels[op] = fn
                self._supports[op] = supports
            return fn

        return deco

    def add(self, op: GGMLOp, kernel: K, supports: Supports) -> None:
        """Register ``kernel`` for ``op`` (the same as the decorator, for kernels built at run time)."""
        self.kernel(op, supports=supports)(kernel)

    def supports(self, node: Tensor, *context: Any) -> bool:
        """True when a kernel exists for ``node``'s op and its predicate accepts the node (views always)."""
        if node.op in EMPTY_OPS:
            return True
        pred = self._supports.get(node.op)
        if pred is None:
            return False
        try:
            return bool(pred(*context, node))
        except Exception:  # noqa: BLE001 - a predicate must never take the host down; unknown means unsupported
            return False

    def get(self, node: Tensor) -> K:
        """The kernel registered for ``node``'s op; :class:`UnsupportedOpError` naming the node when none is."""
        fn = self._kernels.get(node.op)
        if fn is None:
            raise UnsupportedOpError(node, [self.device])
        return fn

    def __contains__(self, op: object) -> bool:
        return op in self._kernels

    def __iter__(self) -> Iterator[GGMLOp]:
        return iter(sorted(self._kernels, key=lambda op: op.value))

    def __len__(self) -> int:
        return len(self._kernels)


class LazyReg(BackendReg):
    """A registry that finds its devices on first use (:meth:`enumerate_devices`) and says why it has none.

    Reading :attr:`unavailable_reason` enumerates first, so ``ggml-core plugins`` shows the same reason as
    ``ggml-core devices``; an enumeration that raises becomes the reason, never an exception.
    """

    def __init__(self, name: str, *, description: str = "", priority: int = 0) -> None:
        self._reason: str | None = None
        super().__init__(name, description=description, priority=priority)

    @property
    def unavailable_reason(self) -> str | None:
        """Why this registry has no devices (enumerating them first), or None."""
        if getattr(self, "_devices", None) is None and hasattr(self, "_lock"):
            try:
                self.devices  # noqa: B018 - enumeration records the reason
            except Exception as exc:  # noqa: BLE001 - a reason is shown, never raised
                self._reason = f"device enumeration failed: {type(exc).__name__}: {exc}"
        return self._reason

    @unavailable_reason.setter
    def unavailable_reason(self, value: str | None) -> None:
        self._reason = value


class PluginHooks(Generic[R]):
    """A plugin's registry, made on first use, and the two hooks that register it.

    A plugin module ends with::

        HOOKS = PluginHooks(OpenCLReg)
        ggml_api_version = HOOKS.ggml_api_version
        ggml_register_backends = HOOKS.ggml_register_backends

    :param make: builds the registry (called once, on first use)
    """

    def __init__(self, make: Callable[[], R]) -> None:
        self._make = make
        self._reg: R | None = None

    def reg(self) -> R:
        """The process-wide registry of this plugin."""
        if self._reg is None:
            self._reg = self._make()
        return self._reg

    @hookimpl
    def ggml_api_version(self) -> int:
        """This plugin speaks the current plugin API."""
        return API_VERSION

    @hookimpl
    def ggml_register_backends(self, register: Callable[[BackendReg], None]) -> None:
        """Register the plugin's registry (it reports its own reason when it has no devices)."""
        register(self.reg())
