"""``ggml-core plan [MODEL.gguf]``: the placement and the scheduler's split plan of a model, without running it.

The weights are placed and their buffers allocated (no data is uploaded to accelerators), the graph of one batch is
built and handed to the scheduler's ``reserve``; the plan is printed as text, drawn as SVG (``--svg``) or DOT
(``--dot``), or given as JSON (``--json``: ``n_splits`` and ``splits`` with backend, nodes and inputs copied).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ggml_core.cli._model_args import (
    add_model_args,
    list_devices_if_asked,
    model_params,
    one_line_errors,
    resolve_model_path,
)
from ggml_core.cli.args import INT32_MAX, int_in, output_file

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="show a model's placement and split plan without running it",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    p.add_argument(
        "--n-tokens",
        type=int_in(1, INT32_MAX),
        help="tokens in the planned batch (default: --batch-size, at most n_ctx)",
    )
    p.add_argument("--svg", type=output_file, help="draw the split plan as SVG into FILE")
    p.add_argument("--dot", type=output_file, help="write the split plan as Graphviz DOT into FILE")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Plan and report."""
    return one_line_errors("plan", _run, args)


def _run(args: argparse.Namespace) -> int:
    from ggml_core.models import Model
    from ggml_core.models.plan.bufts import describe_weights

    listed = list_devices_if_asked(args)
    if listed is not None:
        return listed
    from ggml_core.sched import render_dot, render_svg, render_text

    n_ctx = args.ctx_size or 512
    n_tokens = args.n_tokens or min(args.batch_size, n_ctx)
    if not 0 < n_tokens <= n_ctx:  # checked before anything loads
        raise ValueError(f"--n-tokens must be in 1..{n_ctx} (the context size), got {n_tokens}")
    path, is_default = resolve_model_path(args)
    params = model_params(args, n_ctx, default_model=is_default)
    with Model.load(path, params, upload=False) as model:
        if not model.executor.uses_scheduler:
            raise RuntimeError("the scheduler (ggml_core.sched) is not available: there is no split plan to show")
        bg = model.graph(n_tokens, model.n_kv_for(n_tokens), True)
        model.executor.reserve(bg)
        plan = model.executor.plan()
        assert plan is not None
        placement = model.placement
        devices = placement.as_dict()
        tp = model.executor.tensor_parallel  # -sm tensor: the shards and all-reduces
        if args.svg is not None:
            args.svg.write_text(render_svg(plan, bg.graph), encoding="utf-8")
        if args.dot is not None:
            args.dot.write_text(render_dot(plan, bg.graph), encoding="utf-8")
        if args.json:
            out = {
                "model": str(path),
                "default_model": is_default,
                "hparams": model.hp.describe(),
                "n_ctx": n_ctx,
                "n_tokens": n_tokens,
                "devices": devices,
                "weights": [
                    {
                        "name": c.name,
                        "slot": c.slot,
                        "buffer_type": c.buft_name,
                        "device": c.device.name,
                        "MB": round(c.nbytes / 2**20, 4),
                        "reason": c.reason,
                    }
                    for c in placement.weights.values()
                ],
                "notes": list(placement.notes),
                "n_splits": plan.n_splits,
                "n_input_copies": plan.n_copies,
                "bytes_copied": plan.bytes_copied,
                "buffer_sizes": dict(plan.buffer_sizes),
                "splits": [
                    {
                        "index": s.index,
                        "backend": s.backend,
                        "n_nodes": len(s.nodes),
                        "nodes": list(s.nodes),
                        "inputs": [
                            {"name": c.name, "from": c.from_backend, "to": c.to_backend, "bytes": c.nbytes}
                            for c in s.inputs
                        ],
                    }
                    for s in plan.splits
                ],
                "tensor_parallel": tp.as_dict(bg) if tp is not None else None,
                "svg": str(args.svg) if args.svg else None,
                "dot": str(args.dot) if args.dot else None,
            }
            print(json.dumps(out, indent=2))
            return 0
        print(f"{'embedded default model' if is_default else 'model'}: {path}\n  {model.hp.describe()}")
        print(f"placement ({placement.split_mode} split), batch of {n_tokens} tokens over {n_ctx} cells:")
        for d in devices:
            sizes = f"{d['MB']:9.2f} MiB (weights {d['weights_MB']:.2f}, KV {d['kv_MB']:.2f})"
            print(f"  {d['name']:<10} {d['layer_range']:<28} {sizes}")
        for note in placement.notes:
            print(f"  note: {note}")
        print("weights (buffer type and why):")
        for line in describe_weights(list(placement.weights.values())):
            print(f"  {line}")
        print(render_text(plan))
        if tp is not None:
            print(tp.describe(bg))
        for what, target in (("SVG", args.svg), ("DOT", args.dot)):
            if target is not None:
                print(f"{what} written to {target}")
    return 0
