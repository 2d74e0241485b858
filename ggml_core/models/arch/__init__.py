"""The model families, one module each (llama.cpp's ``llm_build_*`` per architecture is the model).

A family module defines ``ARCH``, an :class:`Architecture`: its GGUF name, rope mode, what it reads beyond the
common keys (:meth:`Architecture.read`), its layer's tensors (``layer_weights``) and its layer's graph
(``build_layer``), written with :mod:`ggml_core.models.blocks`. Every module of this package that defines ``ARCH``
is registered; adding a family is adding a file (docs/models.md shows how).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Final

from ggml_core.models.arch._base import Architecture

__all__ = ["ARCHITECTURES", "Architecture", "get_architecture"]


def _discover() -> dict[str, Architecture]:
    found: dict[str, Architecture] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        arch = getattr(importlib.import_module(f"{__name__}.{info.name}"), "ARCH", None)
        if isinstance(arch, Architecture):
            found[arch.name] = arch
    return found


#: GGUF ``general.architecture`` → its family
ARCHITECTURES: Final[dict[str, Architecture]] = _discover()


def get_architecture(name: str) -> Architecture:
    """The family of this GGUF architecture name (KeyError naming the supported ones)."""
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise KeyError(f"architecture {name!r} is not supported (supported: {', '.join(ARCHITECTURES)})") from None
