"""The plugin author's whole API: seven pluggy hooks in the entry-point group ``ggml.backends``.

A plugin is a module (named by its entry point) with ``@hookimpl`` functions. Only ``ggml_api_version`` and
``ggml_register_backends`` are required. Hooks receive a ``register`` callback rather than returning lists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import argparse

    from ggml_core._tensor import Tensor
    from ggml_core.backend.interfaces import BackendReg, BufferType, Device

__all__ = ["ENTRY_POINT_GROUP", "PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "ggml"
ENTRY_POINT_GROUP = "ggml.backends"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def ggml_api_version() -> int:  # type: ignore[empty-body]
    """Return the ggml-core plugin API version this plugin was written for (``ggml_core.API_VERSION``)."""


@hookspec
def ggml_score() -> int:  # type: ignore[empty-body]
    """Optional: how well this plugin fits this machine; 0 means it cannot run here and is skipped."""


@hookspec
def ggml_register_backends(register: Callable[[BackendReg], None]) -> None:
    """Register each backend registry (device family) this plugin provides: ``register(reg)``."""


@hookspec
def ggml_register_devices(reg: BackendReg, register: Callable[[Device], None]) -> None:
    """Optional: add devices to any registry, yours or another plugin's (e.g. remote endpoints)."""


@hookspec
def ggml_register_buffer_types(device: Device, register: Callable[[BufferType], None]) -> None:
    """Optional: offer extra buffer types for any device (pinned host memory, repacked weights...)."""


@hookspec
def ggml_register_commands(
    register: Callable[[str, Callable[[Any, str], Any], Callable[[argparse.Namespace], int | None]], None],
) -> None:
    """Optional: add ``ggml-core`` subcommands: ``register(name, add_parser, run)``.

    ``add_parser(subparsers, name)`` adds the command's parser (``subparsers.add_parser(name, help=...)``) and its
    options, as the core's own commands do; ``run(args)`` runs it and returns the exit code. Import heavy modules
    inside ``run``, not at the top of your plugin: ``ggml-core --help`` calls every ``add_parser``.
    """


@hookspec
def ggml_build_all_reduce(
    partials: Sequence[Tensor], devices: Sequence[Device], place: Callable[[Tensor, Device], None]
) -> Tensor | None:
    """Optional: build the sum of tensor-parallel partial results over devices that all belong to your plugin.

    ``partials[i]`` (same shape and type) is computed on ``devices[i]``. Build the reduction from op builders
    (``ggml_core.ops``), call ``place(node, device)`` for every node you create (the scheduler copies an operand
    that lives on another device in), and return the tensor holding the sum; every device then reads it (copied
    where needed). Return None to leave it to the core's generic path (the partials copied to ``devices[0]`` and
    added there, in device order). Called while a meta device turns a graph into per-device graphs, only for the
    plugin whose registries own every device.
    """
