"""``ggml-core run [MODEL.gguf]``: load a GGUF model onto the chosen devices, process a prompt, generate.

Without a model file it runs the embedded default model (a small random LLaMA generated locally) across every
available device. Prints the devices and split plan, streams the text, then prompt and generation speed; ``--json``
gives all of it machine-readable; ``--logits-out`` saves the logits of every prompt position.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ggml_core.cli._placement_args import add_placement_args, list_devices, n_gpu_layers, placement_extras

__all__ = ["add_model_args", "add_parser", "model_params", "run"]


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model, placement and context flags shared by ``run`` and ``plan``."""
    p.add_argument("model", nargs="?", help="GGUF file (default: the embedded default model)")
    g = p.add_argument_group("placement (as llama.cpp)")
    g.add_argument("--device", "-dev", type=_names, help="devices to place layers on, e.g. CPU,OpenCL0")
    g.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=n_gpu_layers,
        help="layers (counting the output layer) to offload to the devices, 'all' or 'auto'; default all",
    )
    g.add_argument("--split-mode", "-sm", choices=["none", "layer"], default="layer", help="how to share layers")
    g.add_argument("--tensor-split", "-ts", type=_float_list, help="share per device, e.g. 3,1")
    g.add_argument("--main-gpu", "-mg", type=int, default=0, help="device index for --split-mode none")
    g.add_argument("--rpc", type=_names, help="RPC servers HOST:PORT,... whose devices join (needs ggml-rpc)")
    add_placement_args(g)  # -ot, --cpu-moe, --n-cpu-moe, --no-op-offload, --no-kv-offload, --list-devices
    c = p.add_argument_group("context")
    c.add_argument("--ctx-size", "-c", type=int, help="KV cache cells (default: what prompt and generation need)")
    c.add_argument("--batch-size", "-b", type=int, default=512, help="prompt tokens per batch")
    c.add_argument("--kv-type", choices=["f16", "f32"], default="f16", help="KV cache type (default f16)")
    c.add_argument("--flash-attn", "-fa", action="store_true", help="attention with FLASH_ATTN_EXT")
    c.add_argument("--threads", "-t", type=int, help="CPU threads")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="run a GGUF model (no file: the embedded default model on every device)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", "-p", help="prompt text (needs the file's tokenizer)")
    src.add_argument("--tokens", type=_int_list, help="prompt as token ids, e.g. 1,2,3")
    p.add_argument("--n-predict", "-n", type=int, default=32, help="tokens to generate (default 32)")
    s = p.add_argument_group("sampling")
    s.add_argument("--temp", type=float, default=0.8, help="temperature; 0 = greedy (default 0.8)")
    s.add_argument("--top-k", type=int, default=40, help="top-k, 0 = off (default 40)")
    s.add_argument("--top-p", type=float, default=0.95, help="top-p (default 0.95)")
    s.add_argument("--seed", type=int, default=-1, help="sampling seed (default -1: random, printed)")
    s.add_argument("--ignore-eos", action="store_true", help="keep generating after an end-of-sequence token")
    p.add_argument("--logits-out", type=Path, help="save the logits of every prompt position (float32 .npy)")
    p.add_argument("--no-progress", action="store_true", help="no upload progress bar")
    p.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the warm-up batch that compiles kernels before timing (then the first phase includes it)",
    )
    p.set_defaults(func=run)


def model_params(args: argparse.Namespace, n_ctx: int | None, *, default_model: bool) -> Any:
    """ModelParams from the shared flags; the default model spreads over every device unless told otherwise."""
    from ggml_core.backend.registry import get_registry
    from ggml_core.cli.rpc_server import use_rpc_servers
    from ggml_core.models import ModelParams, PlacementRequest

    use_rpc_servers(getattr(args, "rpc", None))  # before any device is enumerated
    extras = placement_extras(args)
    devices, split = args.device, args.tensor_split
    if default_model and devices is None:
        devices = [d.name for d in get_registry().devices()]
        if split is None and args.split_mode == "layer":
            split = [1.0] * len(devices)
    req = PlacementRequest(
        devices=devices,
        n_gpu_layers=args.n_gpu_layers,
        split_mode=args.split_mode,
        tensor_split=split,
        main_device=args.main_gpu,
        overrides=extras["overrides"],
        kv_offload=extras["kv_offload"],
    )
    return ModelParams(
        placement=req,
        n_ctx=n_ctx,
        kv_type=args.kv_type,
        flash_attn=args.flash_attn,
        batch_size=args.batch_size,
        n_threads=args.threads,
        progress=not (getattr(args, "no_progress", False) or args.json),
        op_offload=extras["op_offload"],
    )


def resolve_model_path(args: argparse.Namespace) -> tuple[Path, bool]:
    """The model file, writing the embedded default model when none was given; (path, is_default)."""
    if args.model:
        return Path(args.model), False
    from ggml_core.models.default_model import write_default_model

    return write_default_model(), True


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def run(args: argparse.Namespace) -> int:
    """Load, run, report."""
    try:
        return _run(args)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"ggml-core run: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from ggml_core.cli.rpc_server import use_rpc_servers
    from ggml_core.models import Model, Sampler, SamplerParams, open_gguf
    from ggml_core.models.tokenizer import load_tokenizer

    if args.list_devices:
        use_rpc_servers(args.rpc)
        return list_devices()

    path, is_default = resolve_model_path(args)
    f = open_gguf(path)
    tok = None
    if args.tokens is not None:
        prompt = list(args.tokens)
    else:
        tok = load_tokenizer(f)
        text = args.prompt if args.prompt is not None else ("hello world" if is_default else "")
        prompt = tok.encode(text)
    if not prompt:
        raise ValueError("the prompt is empty: give --prompt TEXT or --tokens IDS")
    if args.n_predict < 0:
        raise ValueError(f"--n-predict must be >= 0, got {args.n_predict}")
    n_ctx = args.ctx_size or _round_up(len(prompt) + args.n_predict, 256)
    params = model_params(args, n_ctx, default_model=is_default)
    out = sys.stdout
    with Model.load(f, params) as model:
        if tok is None and args.prompt is None and not args.json:
            try:
                tok = model.tokenizer
            except ValueError:
                tok = None
        info = _header_info(model, path, is_default)
        if not args.json:
            _print_header(info, out)
        sampler = Sampler(SamplerParams(args.temp, args.top_k, args.top_p, args.seed))
        eos = [] if args.ignore_eos or tok is None or tok.eos_id is None else [tok.eos_id]
        streamed: list[int] = []
        shown = [""]

        def on_token(t: int) -> None:
            if args.json:
                return
            streamed.append(t)
            if tok is None:
                out.write(f"{t} ")
            else:
                text = tok.decode(streamed)
                if not text.endswith("\ufffd"):
                    out.write(text[len(shown[0]) :])
                    shown[0] = text
            out.flush()

        warmup_s = 0.0 if args.no_warmup else model.warmup()
        if not args.json:
            shown_prompt = tok.decode(prompt) if tok is not None else " ".join(map(str, prompt))
            out.write(f"\n{shown_prompt}")
            out.flush()
        res = model.generate(
            prompt,
            args.n_predict,
            sampler,
            prompt_logits=args.logits_out is not None,
            eos_ids=eos,
            on_token=on_token,
        )
        if args.logits_out is not None:
            assert res.prompt_logits is not None
            np.save(args.logits_out, np.ascontiguousarray(res.prompt_logits, dtype=np.float32))
        info.update(
            {
                "n_splits": model.executor.n_splits,
                "prompt_tokens": res.prompt_tokens,
                "tokens": res.tokens,
                "text": tok.decode(res.tokens, strip_prefix_space=False) if tok is not None else None,
                "n_prompt": len(res.prompt_tokens),
                "n_gen": len(res.tokens),
                "prompt_seconds": round(res.prompt_seconds, 6),
                "gen_seconds": round(res.gen_seconds, 6),
                "warmup_s": round(warmup_s, 3),
                "prompt_tokens_per_s": round(res.prompt_tokens_per_s, 3),
                "gen_tokens_per_s": round(res.gen_tokens_per_s, 3),
                "stopped_at_eos": res.stopped_at_eos,
                "seed": sampler.seed,
                "logits_out": str(args.logits_out) if args.logits_out is not None else None,
            }
        )
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        if tok is not None and info["text"] is not None:
            rest = tok.decode(streamed)[len(shown[0]) :]
            out.write(rest)
        out.write("\n\n")
        pp = f"{info['n_prompt']} tokens in {res.prompt_seconds:.3f} s ({res.prompt_tokens_per_s:.1f} tokens/s)"
        tg = f"{info['n_gen']} tokens in {res.gen_seconds:.3f} s ({res.gen_tokens_per_s:.1f} tokens/s)"
        print(f"prompt: {pp}; generation: {tg}; seed {sampler.seed}")
        if args.logits_out is not None:
            print(f"logits of {info['n_prompt']} prompt positions saved to {args.logits_out}")
    return 0


def _header_info(model: Any, path: Path, is_default: bool) -> dict[str, Any]:
    plan = model.placement
    return {
        "model": str(path),
        "default_model": is_default,
        "arch": model.hp.arch,
        "hparams": model.hp.describe(),
        "devices": plan.as_dict(),
        "placement_notes": list(plan.notes),
        "split_mode": plan.split_mode,
        "scheduler": model.executor.uses_scheduler,
        "n_splits": model.executor.n_splits,
        "n_ctx": model.n_ctx,
        "kv_type": model.params.kv_type,
        "flash_attn": model.params.flash_attn,
        "batch_size": model.params.batch_size,
        "uploads": [
            {
                "device": u.device,
                "MB": round(u.nbytes / 1e6, 3),
                "seconds": round(u.seconds, 4),
                "MB_per_s": round(u.mb_per_s, 1),
            }
            for u in model.weights.uploads
        ],
    }


def _print_header(info: dict[str, Any], out: Any) -> None:
    kind = "embedded default model (random weights)" if info["default_model"] else "model"
    out.write(f"{kind}: {info['model']}\n  {info['hparams']}\n")
    out.write(f"devices ({info['split_mode']} split, {info['n_splits']} graph splits):\n")
    for d in info["devices"]:
        mapped = " (weights mapped from the file)" if d["weights_mapped"] else ""
        out.write(
            f"  {d['name']:<10} {d['layer_range']:<28} {d['MB']:9.2f} MB: weights {d['weights_MB']:.2f}{mapped}, "
            f"KV {d['kv_MB']:.2f}\n"
        )
    for note in info["placement_notes"]:
        out.write(f"  note: {note}\n")
    attn = "flash attention" if info["flash_attn"] else "soft_max attention"
    out.write(f"context {info['n_ctx']} cells, KV {info['kv_type']}, {attn}, batch {info['batch_size']}\n")
    out.flush()
