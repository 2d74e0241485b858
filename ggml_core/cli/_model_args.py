"""The model, placement and context flags of every command that loads a model (``run``, ``chat``, ``plan``,
``perplexity``), the :class:`~ggml_core.models.ModelParams` they make, and the model file they name (the embedded
default model when none is given)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ggml_core.cli._llama_args import KV_TYPES, cache_type, kv_types
from ggml_core.cli._placement_args import (
    SPLIT_MODE_CHOICES,
    SPLIT_MODE_HELP,
    add_placement_args,
    n_gpu_layers,
    placement_extras,
)
from ggml_core.cli.args import INT32_MAX, MAX_THREADS, endpoints, input_file, int_in, names, shares

if TYPE_CHECKING:
    from ggml_core.models.params import ModelParams

__all__ = ["add_model_args", "list_devices_if_asked", "model_params", "one_line_errors", "resolve_model_path"]


def _model_file(text: str) -> Any:
    """The positional model file (argparse hands an absent one's SUPPRESS default through ``type`` too)."""
    return text if text == argparse.SUPPRESS else input_file(text)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model, placement and context flags of every command that loads a model."""
    # the positional and -m share one destination; SUPPRESS keeps an absent positional from erasing -m's value
    p.add_argument(
        "model", nargs="?", type=_model_file, default=argparse.SUPPRESS, help="GGUF file (default: the embedded "
        "default model)"
    )  # fmt: skip
    p.add_argument("--model", "-m", dest="model", type=input_file, default=None, help="the GGUF file (as llama.cpp)")
    g = p.add_argument_group("placement (as llama.cpp)")
    g.add_argument("--device", "-dev", type=names, help="devices to place layers on, e.g. CPU,OpenCL0")
    g.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=n_gpu_layers,
        help="layers (counting the output layer) to offload to the devices, 'all' (or -1) or 'auto'; default auto: "
        "every layer unless --fit or --split-mode auto choose fewer",
    )
    g.add_argument("--gpu-layers", dest="n_gpu_layers", type=n_gpu_layers, help=argparse.SUPPRESS)  # llama.cpp's
    g.add_argument(
        "--split-mode",
        "-sm",
        choices=SPLIT_MODE_CHOICES,
        help=SPLIT_MODE_HELP,
    )
    g.add_argument("--tensor-split", "-ts", type=shares, help="share per device, e.g. 3,1")
    g.add_argument(
        "--main-gpu",
        "-mg",
        type=int_in(-(2**31), INT32_MAX, " (< 0 with -sm none: no offload)"),
        default=0,
        help="device index for --split-mode none",
    )
    g.add_argument(
        "--no-mmap", dest="mmap", action="store_false", help="read the CPU's weights into memory of their own instead "
        "of using them in place from the memory-mapped file"
    )  # fmt: skip
    g.add_argument("--mmap", dest="mmap", action="store_true", help=argparse.SUPPRESS)  # the default, spelled out
    g.add_argument("--rpc", type=endpoints, help="RPC servers HOST:PORT,... whose devices join (needs ggml-rpc)")
    add_placement_args(g)  # -ot, --cpu-moe, --n-cpu-moe, --no-op-offload, --no-kv-offload, --list-devices
    c = p.add_argument_group("context")
    c.add_argument(
        "--ctx-size",
        "-c",
        type=int_in(0, INT32_MAX, " (0 = default)"),
        help="KV cache cells (default: what prompt and generation need)",
    )
    c.add_argument("--batch-size", "-b", type=int_in(1, INT32_MAX), default=512, help="prompt tokens per batch")
    c.add_argument("--kv-type", type=cache_type, default="f16", help="K and V cache type (default f16)")
    c.add_argument("--cache-type-k", "-ctk", type=cache_type, help=f"K cache type ({', '.join(KV_TYPES)})")
    c.add_argument("--cache-type-v", "-ctv", type=cache_type, help="V cache type (quantized: needs -fa on)")
    c.add_argument(
        "--flash-attn",
        "-fa",
        nargs="?",
        const="on",
        default="off",
        choices=["on", "off", "auto"],
        help="FLASH_ATTN_EXT attention: on, off (default) or auto (llama.cpp's default: on where every layer's "
        "device runs it); a bare -fa is on",
    )
    c.add_argument("--threads", "-t", type=int_in(1, MAX_THREADS), help="CPU threads")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def model_params(
    args: argparse.Namespace, n_ctx: int | None, *, default_model: bool, n_prompt: int | None = None
) -> ModelParams:
    """ModelParams from the shared flags. The embedded default model is placed like any model (llama.cpp's default
    device list: GPUs and RPC devices, the CPU as the host); ``--device A,B`` spreads it over devices by name."""
    from ggml_core.cli._rpc_option import use_rpc_servers
    from ggml_core.models.params import ModelParams, PlacementRequest, Workload

    use_rpc_servers(getattr(args, "rpc", None))  # before any device is enumerated
    extras = placement_extras(args)
    devices, split = args.device, args.tensor_split
    mode = args.split_mode
    if mode is None:  # auto unless the placement was chosen by hand (devices or servers named, -ts, -ngl)
        hand = devices is not None or split is not None or args.n_gpu_layers is not None or getattr(args, "rpc", None)
        mode = "layer" if hand else "auto"
    req = PlacementRequest(
        devices=devices,
        n_gpu_layers=args.n_gpu_layers,
        split_mode=mode,
        tensor_split=split,
        main_device=args.main_gpu,
        overrides=extras["overrides"],
        kv_offload=extras["kv_offload"],
        mmap=getattr(args, "mmap", True),
    )
    return ModelParams(
        placement=req,
        n_ctx=n_ctx,
        kv_type=args.kv_type,
        type_k=kv_types(args)[0],
        type_v=kv_types(args)[1],
        flash_attn={"on": True, "off": False}.get(args.flash_attn),
        batch_size=args.batch_size,
        n_threads=args.threads,
        progress=not (getattr(args, "no_progress", False) or args.json),
        op_offload=extras["op_offload"],
        # without -c the context is sized from the prompt and -n: that is what to lower when it does not fit
        fit=extras["fit"]
        if getattr(args, "ctx_size", None) or n_ctx is None
        else replace(extras["fit"], ctx_flag="-n (the context holds the prompt and -n)"),
        workload=Workload(
            n_prompt=n_prompt if n_prompt is not None else args.batch_size,
            n_gen=getattr(args, "n_predict", 0),
            n_batch=args.batch_size,
        ),
    )


def resolve_model_path(args: argparse.Namespace) -> tuple[Path, bool]:
    """The model file, writing the embedded default model when none was given; (path, is_default)."""
    if args.model:
        return Path(args.model), False
    from ggml_core.models.default_model import write_default_model

    return write_default_model(), True


def one_line_errors(command: str, body: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a model command's ``body``: the project's errors (ValueErrors) and the system's are one line naming the
    command, exit code 2; a closed pipe is left to the CLI's main, which ends quietly."""
    try:
        return body(args)
    except BrokenPipeError:
        raise
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"ggml-core {command}: error: {exc}", file=sys.stderr)
        return 2


def list_devices_if_asked(args: argparse.Namespace) -> int | None:
    """``--list-devices`` (with ``--rpc`` servers added first): print the devices and give the exit code; None when
    the flag is not given."""
    if not args.list_devices:
        return None
    from ggml_core.cli._placement_args import list_devices
    from ggml_core.cli._rpc_option import use_rpc_servers

    use_rpc_servers(args.rpc)
    return list_devices()
