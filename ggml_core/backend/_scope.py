"""Which registries a placement that names its devices needs enumerated (``--device CPU``, ``devices=["CPU"]``).

Enumerating a registry is what costs: OpenCL's pyopencl import and program build, WebGPU's wgpu import (which parses
wgpu-native's C header), CUDA's driver. A placement that names only ``CPU`` needs none of that, so within
:meth:`Registry.enumerating_only` the registry lists only the devices of the registries that can provide the named
ones: those of the first-party distribution that owns each name (ggml's naming: a device's name starts with its
registry's name, ``CPU``, ``OpenCL0``, ``CUDA0``, ``WebGPU0``, ``RPC[host:port]``), always the CPU's, and every
plugin without a distribution (registered in-process by the program itself).

The result is the same device the full listing gives, not an approximation: a name in a first-party family can only
be claimed by its owner or by a plugin without a distribution (:func:`._naming.may_use`), and the scope holds both,
so no registry left out could have won the name. A name outside those families (a third-party device) gives no
scope: everything is enumerated, as without names. Without names (the default placement, ``ggml-core devices``)
nothing changes. The one answer that can differ is "the first CPU-type device" (the host): a third-party registry
left out cannot offer one. The host is then the CPU's own device, as llama.cpp's is.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

from ggml_core.backend._naming import normalize_dist, reserved_owner

__all__ = ["CPU_OWNER", "applied", "current", "in_scope", "lifted", "scope_owners"]

#: the distribution whose device is the host; always in a scope
CPU_OWNER: Final = "ggml-cpu"


def scope_owners(names: Sequence[str] | None) -> frozenset[str] | None:
    """The first-party distributions whose registries can provide ``names`` (the CPU's always among them); None
    when there are no names (the default placement) or one is outside the first-party families (enumerate all).

    ``none`` and blank entries name no device (``--device none``: the CPU only).
    """
    if names is None:
        return None
    owners = {CPU_OWNER}
    for raw in names:
        name = str(raw).strip()
        if not name or name.lower() == "none":
            continue
        owner = reserved_owner(name)
        if owner is None:
            return None
        owners.add(owner)
    return frozenset(owners)


def in_scope(distribution: str | None, owners: Iterable[str]) -> bool:
    """A registry of a plugin from ``distribution`` is enumerated under a scope of ``owners``."""
    if distribution is None:
        return True
    return normalize_dist(distribution) in set(owners)


#: the scope in effect: (the registry it applies to, its owners)
_SCOPE: contextvars.ContextVar[tuple[object, frozenset[str]] | None] = contextvars.ContextVar("scope", default=None)


@contextlib.contextmanager
def applied(registry: object, names: Sequence[str] | None) -> Iterator[bool]:
    """Within the block, ``registry`` lists only the registries that can provide ``names``; yields whether a scope
    applies (False: no names, or a name outside the first-party families)."""
    owners = scope_owners(names)
    if owners is None:
        yield False
        return
    token = _SCOPE.set((registry, owners))
    try:
        yield True
    finally:
        _SCOPE.reset(token)


@contextlib.contextmanager
def lifted() -> Iterator[None]:
    """Within the block, no scope applies (a lookup that failed in the scope retries on the full listing)."""
    token = _SCOPE.set(None)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current(registry: object) -> frozenset[str] | None:
    """The owners of the scope in effect for ``registry``, or None."""
    scope = _SCOPE.get()
    return scope[1] if scope is not None and scope[0] is registry else None
