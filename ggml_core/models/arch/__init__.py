"""The model families, one module each (llama.cpp's ``llm_build_*`` per architecture is the model).

A family module defines ``ARCH``, an :class:`Architecture`: its GGUF name, rope mode, what it reads beyond the
common keys (:meth:`Architecture.read`), its layer's tensors (``layer_weights``) and its layer's graph
(``build_layer``), written with :mod:`ggml_core.models.blocks`. Every module of this package that defines ``ARCH``
is registered; adding a family is adding a file (docs/models.md shows how).

The registry is the top of the models' layers: what depends on a file's family goes through it — its
hyperparameters (:func:`read_hparams`) and its weights (:func:`weight_specs`); the modules below take the family's
traits as arguments.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Final

from ggml_core._errors import GGUFError
from ggml_core._text import text_repr
from ggml_core.models.arch._base import Architecture
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams, read_shared_hparams
from ggml_core.models.weights import WeightSpec, family_weight_specs

__all__ = ["ARCHITECTURES", "Architecture", "get_architecture", "read_hparams", "supported_archs", "weight_specs"]


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


def supported_archs() -> dict[str, int]:
    """Architecture name → rope mode, for every registered family."""
    return {name: a.rope_type for name, a in ARCHITECTURES.items()}


def read_hparams(f: GGUFFile) -> HParams:
    """Read and check the hyperparameters; GGUFError naming the file and key on anything missing or absurd."""
    arch_name = f.get_str("general.architecture")
    arch = ARCHITECTURES.get(arch_name)
    if arch is None:
        raise GGUFError(
            f.path,
            "metadata 'general.architecture'",
            f"{text_repr(arch_name)} is not supported (supported: {', '.join(ARCHITECTURES)}; see 'ggml-core models')",
        )
    hp = read_shared_hparams(f, arch_name, rope_type=arch.rope_type, recurrent=arch.recurrent, moe=arch.moe)
    return arch.read(f, hp)


def weight_specs(f: GGUFFile, hp: HParams) -> list[WeightSpec]:
    """Every weight of the model with its expected shape; GGUFError naming the tensor when one is missing or wrong."""
    arch = get_architecture(hp.arch)
    return family_weight_specs(
        f, hp, arch.layer_weights, frame_norm=arch.frame_norm is not None, output_norm=arch.output_norm
    )
