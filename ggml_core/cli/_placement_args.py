"""llama.cpp's placement flags beyond ``--device``/``-ngl``/``-sm``/``-ts``: ``--list-devices``, ``-ot``,
``--cpu-moe``, ``--n-cpu-moe``, ``--no-op-offload``, ``--no-kv-offload``, ``--fit``, ``--fit-target``, ``--fit-ctx``;
shared by ``run`` and ``plan``.

Meanings follow llama.cpp's ``common/arg.cpp`` (docs/models.md puts each next to its llama.cpp counterpart).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from ggml_core.cli.args import INT32_MAX, int_in

#: llama.cpp's defaults, as ``ggml_core.models.params`` has them (not imported here: parsing stays light)
DEFAULT_FIT_TARGET_MIB = 1024
DEFAULT_FIT_CTX = 4096

#: ``--split-mode`` values (``ggml_core.models.params.SPLIT_MODES``, spelled out here: parsing stays light)
SPLIT_MODE_CHOICES = ("none", "layer", "auto", "tensor")
SPLIT_MODE_HELP = (
    "how to share the model; layer: whole layers per device; none: all on --main-gpu; auto: layers from each "
    "device's measured speed on one layer (default when none of -ngl, -ts, --device, --rpc is given; otherwise "
    "layer); tensor: every layer split over all the --device devices (CPU and RPC ones too) in --tensor-split "
    "shares, attention by KV heads (dense llama only)"
)

__all__ = [
    "SPLIT_MODE_CHOICES",
    "SPLIT_MODE_HELP",
    "add_placement_args",
    "list_devices",
    "n_gpu_layers",
    "placement_extras",
]


def n_gpu_layers(text: str) -> int | None:
    """``-ngl N``, ``all`` or ``-1`` (every layer, as given: --fit keeps it), or ``auto`` (None: as if not given,
    --fit and --split-mode auto choose)."""
    if text.strip().lower() == "auto":
        return None
    if text.strip().lower() == "all":
        return -1
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of layers, 'all' or 'auto', got {text!r}") from None
    if not -1 <= n <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be 0..{INT32_MAX} layers, -1, 'all' or 'auto' (every layer), got {n}")
    return n


def add_placement_args(g: Any) -> None:
    """Add the flags to an argument group."""
    g.add_argument(
        "--list-devices", action="store_true", help="print the devices that can take layers (after --rpc) and exit"
    )
    g.add_argument(
        "--override-tensor",
        "-ot",
        action="append",
        metavar="REGEX=BUFT,...",
        help="weights whose name matches REGEX go to buffer type BUFT (e.g. 'ffn_.*_exps=CPU'); repeatable",
    )
    g.add_argument("--cpu-moe", "-cmoe", action="store_true", help="keep every MoE expert weight on the CPU")
    g.add_argument(
        "--n-cpu-moe",
        "-ncmoe",
        type=int,
        metavar="N",
        help="keep the MoE expert weights of the first N layers on the CPU",
    )
    g.add_argument(
        "--no-op-offload",
        action="store_true",
        help="never move an op whose weights are in host memory to a device (large batches do by default)",
    )
    g.add_argument(
        "--no-kv-offload",
        "-nkvo",
        action="store_true",
        help="keep every layer's KV cache, and the attention reading it, in host memory",
    )
    g.add_argument(
        "--kv-offload", "-kvo", dest="no_kv_offload", action="store_false", help="the KV cache with its layer (default)"
    )
    g.add_argument("--op-offload", dest="no_op_offload", action="store_false", help="llama.cpp's default: see above")
    g.add_argument(
        "--fit",
        "-fit",
        choices=["on", "off"],
        default="on",
        help="choose the offloaded layers and an unset context so that every device's share fits its free memory "
        "(default on)",
    )
    g.add_argument(
        "--fit-target",
        "-fitt",
        type=_mib_list,
        metavar="MiB0,MiB1,...",
        help=f"MiB --fit keeps free per device; one value for all (default {DEFAULT_FIT_TARGET_MIB})",
    )
    g.add_argument(
        "--fit-ctx",
        "-fitc",
        type=int_in(1, INT32_MAX),
        default=DEFAULT_FIT_CTX,
        metavar="N",
        help=f"the smallest context --fit may choose when --ctx-size is not given (default {DEFAULT_FIT_CTX})",
    )


def _mib_list(text: str) -> tuple[int, ...]:
    """``--fit-target 1024`` or ``512,2048``: whole MiB, 0 or more."""
    out = []
    for item in text.split(","):
        try:
            v = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected MiB values such as 1024 or 512,2048, got {text!r}") from None
        if not 0 <= v <= INT32_MAX:
            raise argparse.ArgumentTypeError(f"MiB values must be 0..{INT32_MAX}, got {v}")
        out.append(v)
    return tuple(out)


def placement_extras(args: argparse.Namespace) -> dict[str, Any]:
    """``overrides`` and ``kv_offload`` for the PlacementRequest, ``op_offload`` and ``fit`` for ModelParams.

    Order as llama.cpp's: ``-ot`` items, then ``--cpu-moe``, then ``--n-cpu-moe`` (the first matching pattern wins).
    """
    from ggml_core.models.plan.bufts import moe_overrides, parse_overrides

    overrides = []
    for text in getattr(args, "override_tensor", None) or []:
        overrides += parse_overrides(text)
    if getattr(args, "cpu_moe", False):
        overrides += moe_overrides(None)
    n_cpu_moe = getattr(args, "n_cpu_moe", None)
    if n_cpu_moe is not None:
        overrides += moe_overrides(n_cpu_moe)
    from ggml_core.models.params import FitParams

    target = getattr(args, "fit_target", None)
    fit = FitParams(
        enabled=getattr(args, "fit", "on") == "on",
        target_mib=tuple(target) if target else (DEFAULT_FIT_TARGET_MIB,),
        min_ctx=getattr(args, "fit_ctx", DEFAULT_FIT_CTX),
    )
    return {
        "fit": fit,
        "overrides": tuple(overrides),
        "kv_offload": not getattr(args, "no_kv_offload", False),
        "op_offload": not getattr(args, "no_op_offload", False),
    }


def list_devices(out: TextIO | None = None) -> int:
    """llama.cpp's ``--list-devices``: every device but the CPU, ``NAME: DESCRIPTION (TOTAL MiB, FREE MiB free)``;
    here each line also says whether the default placement uses the device."""
    from ggml_core.backend.interfaces import DeviceType
    from ggml_core.backend.registry import get_registry
    from ggml_core.models.plan.placement import default_devices

    out = out or sys.stdout
    devs = [d for d in get_registry().devices() if d.type != DeviceType.CPU]
    default = default_devices()
    out.write("Available devices:\n")
    for d in devs:
        free, total = d.memory()
        if d in default:
            note = "default"
        elif getattr(d, "host_cpu", False):
            note = "the host CPU through another API: used only when named"
        else:
            note = "used when named"
        out.write(f"  {d.name}: {d.description} ({total >> 20} MiB, {free >> 20} MiB free) [{note}]\n")
    if not devs:
        out.write("  (none: every layer runs on the CPU)\n")
    return 0
