"""Per-device kernel modules: compiled once per architecture (``_compile``), loaded once per device."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ggml_cuda._compile import compile_module
from ggml_cuda._driver import Driver

__all__ = ["Programs"]

Compiler = Callable[[str, str], bytes]


def _default_compiler(module: str, arch: str) -> bytes:
    return compile_module(module, arch)


class Programs:
    """The loaded modules and kernel handles of one device.

    :param driver: the driver layer
    :param ordinal: the device
    :param arch: ``sm_XY`` for nvcc's ``-arch``
    :param compiler: (module, arch) → image; tests pass a fake
    """

    def __init__(self, driver: Driver, ordinal: int, arch: str, compiler: Compiler | None = None) -> None:
        self.driver = driver
        self.ordinal = ordinal
        self.arch = arch
        self._compiler = compiler or _default_compiler
        self._modules: dict[str, Any] = {}
        self._functions: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def module(self, name: str) -> Any:
        """The loaded module ``kernels/<name>.cu`` (compiled for this device's architecture on first use)."""
        with self._lock:
            mod = self._modules.get(name)
            if mod is None:
                image = self._compiler(name, self.arch)
                mod = self.driver.module_load(self.ordinal, image)
                self._modules[name] = mod
            return mod

    def function(self, module: str, kernel: str) -> Any:
        """The handle of ``kernel`` in ``module``."""
        key = (module, kernel)
        fn = self._functions.get(key)
        if fn is None:
            mod = self.module(module)
            fn = self.driver.function(self.ordinal, mod, kernel)
            with self._lock:
                self._functions[key] = fn
        return fn

    @property
    def loaded(self) -> list[str]:
        """Names of the modules loaded so far."""
        return sorted(self._modules)
