"""All-reduce of tensor-parallel partial sums, built as graph nodes the scheduler runs.

``partials[d]`` lives on device ``d``. The generic path sums them on the first device: ADD nodes placed there read
the other devices' partials (the scheduler copies each in, with its async copies and events), in device order, so
the result is the same on every run; every later reader on another device gets the sum copied back by the
scheduler. A plugin whose registries own every device may build the reduction itself (the hook
``ggml_build_all_reduce``): it places its nodes with ``place(node, device)`` and returns the tensor holding the sum,
or None to leave it to the generic path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ggml_core import ops
from ggml_core._errors import GGMLError
from ggml_core._tensor import Tensor
from ggml_core.backend.interfaces import Device
from ggml_core.backend.registry import get_registry
from ggml_core.sched._split_state import SplitError

__all__ = ["Place", "all_reduce"]

#: puts a node on one of the meta device's devices
Place = Callable[[Tensor, Device], None]


def all_reduce(
    partials: Sequence[Tensor], devices: Sequence[Device], place: Place, *, use_hooks: bool = True
) -> Tensor:
    """The sum of ``partials`` (one per device, same shape and type), as a tensor of the graph being built."""
    if use_hooks:
        built = _plugin_all_reduce(partials, devices, place)
        if built is not None:
            return built
    acc = partials[0]
    for d in range(1, len(partials)):
        acc = ops.add(acc, partials[d]).set_name(f"{partials[0].name}-allreduce{d}")
        place(acc, devices[0])
    return acc


def _plugin_all_reduce(partials: Sequence[Tensor], devices: Sequence[Device], place: Place) -> Tensor | None:
    """The reduction of the plugin owning every device, if it implements ``ggml_build_all_reduce``."""
    owners = {getattr(dev.reg, "plugin", None) for dev in devices}
    if len(owners) != 1 or None in owners:
        return None
    (owner,) = owners
    hook = getattr(get_registry().pm.hook, "ggml_build_all_reduce", None)
    if hook is None:
        return None
    for impl in hook.get_hookimpls():
        if impl.plugin_name != owner:
            continue
        try:
            result = impl.function(partials=list(partials), devices=list(devices), place=place)
        except GGMLError:
            raise
        except Exception as exc:  # a plugin's failure becomes one named error
            raise SplitError(
                partials[0], f"plugin {owner!r}: ggml_build_all_reduce raised {type(exc).__name__}: {exc}"
            ) from exc
        if result is None:
            return None
        want = partials[0]
        if not isinstance(result, Tensor) or result.ne != want.ne or result.type != want.type:
            raise SplitError(
                want,
                f"plugin {owner!r}: ggml_build_all_reduce returned {result!r:.80}, not a tensor of the partials' "
                f"shape {list(want.ne)} and type {want.type.name}",
            )
        return result
    return None
