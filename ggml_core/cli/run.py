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

from ggml_core.cli._llama_args import (
    add_chat_args,
    add_sampling_args,
    check_combination,
    decoder,
    print_verbose,
    process_escapes,
    sampler_from_args,
    text_file,
)
from ggml_core.cli._model_args import (
    add_model_args,
    list_devices_if_asked,
    model_params,
    one_line_errors,
    resolve_model_path,
)
from ggml_core.cli.args import INT32_MAX, int_in, int_list, output_file, utf8_text
from ggml_core.cli.chat import run as run_chat

__all__ = ["add_parser", "run", "speed_text"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="run a GGUF model (no file: the embedded default model)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--prompt", "-p", type=utf8_text, help="prompt text (needs the file's tokenizer; special tokens are parsed)"
    )
    src.add_argument("--file", "-f", dest="prompt", type=text_file, help="the prompt, from a UTF-8 file")
    src.add_argument("--tokens", type=int_list(0, INT32_MAX, "token id"), help="prompt as token ids, e.g. 1,2,3")
    p.add_argument(
        "--n-predict",
        "-n",
        type=int_in(0, INT32_MAX),
        help="tokens to generate (default 32; with --chat the most per reply, default 256)",
    )
    p.add_argument("--predict", dest="n_predict", type=int_in(0, INT32_MAX), help=argparse.SUPPRESS)  # llama.cpp's
    cnv = p.add_mutually_exclusive_group()
    cnv.add_argument(
        "--chat",
        "--conversation",
        "-cnv",
        action="store_true",
        help="interactive chat through the file's chat template, one user message per stdin line ('ggml-core chat')",
    )
    cnv.add_argument(
        "--no-conversation", "-no-cnv", dest="chat", action="store_false", help="no chat: complete the prompt (default)"
    )
    add_chat_args(p)
    add_sampling_args(p)
    p.add_argument(
        "--logits-out", type=output_file, help="save the logits of every prompt position to FILE (float32 .npy)"
    )
    p.add_argument("--no-progress", action="store_true", help="no upload progress bar")
    p.add_argument(
        "--no-warmup",
        action="store_true",
        help="skip the warm-up batch that compiles kernels before timing (then the first phase includes it)",
    )
    p.set_defaults(func=run)


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def run(args: argparse.Namespace) -> int:
    """Load, run, report (``--chat``: the chat loop of ``ggml-core chat``)."""
    problem = check_combination(args)
    if problem is None and args.chat:
        given = {"--tokens": args.tokens, "--json": args.json or None, "--logits-out": args.logits_out}
        clash = [flag for flag, value in given.items() if value is not None]
        problem = f"--chat reads the conversation from stdin; {clash[0]} does not apply" if clash else None
    if problem is None and not args.chat:
        chat_only = {"--system-prompt": args.system, "--chat-template": args.chat_template}
        chat_only["--chat-template-file"] = args.chat_template_file
        given_chat = [flag for flag, value in chat_only.items() if value is not None]
        problem = f"{given_chat[0]} needs --chat (-cnv)" if given_chat else None
    if problem is not None:
        print(f"ggml-core run: error: {problem}", file=sys.stderr)
        return 2
    if args.chat:
        args.n_predict = 256 if args.n_predict is None else args.n_predict
        return run_chat(args)
    args.n_predict = 32 if args.n_predict is None else args.n_predict
    return one_line_errors("run", _run, args)


def _run(args: argparse.Namespace) -> int:
    from ggml_core.models import Model, open_gguf
    from ggml_core.models.arch import read_hparams
    from ggml_core.models.params import check_context
    from ggml_core.models.tokenizer import load_tokenizer

    listed = list_devices_if_asked(args)
    if listed is not None:
        return listed

    # everything the arguments and the file's header can refute is checked before a weight is touched
    path, is_default = resolve_model_path(args)
    f = open_gguf(path)
    hp = read_hparams(f)
    tok = None
    if args.tokens is not None:
        prompt = list(args.tokens)
        bad = [t for t in prompt if t >= hp.n_vocab]
        if bad:
            raise ValueError(f"--tokens: token id {bad[0]} is outside the vocabulary 0..{hp.n_vocab - 1} of {path}")
    else:
        tok = load_tokenizer(f)
        text = args.prompt if args.prompt is not None else ("hello world" if is_default else "")
        text = process_escapes(text) if args.escape else text
        prompt = tok.encode(text, parse_special=True)  # as llama-cli: <bos>, <start_of_turn>, ... are tokens
    if not prompt:
        raise ValueError("the prompt is empty: give --prompt TEXT or --tokens IDS")
    n_ctx = args.ctx_size or _round_up(len(prompt) + args.n_predict, 256)
    check_context(len(prompt), args.n_predict, n_ctx)
    if (args.ctx_size or len(prompt) + args.n_predict) > hp.n_ctx_train:  # llama.cpp warns (n_ctx_seq > n_ctx_train)
        print(
            f"warning: the context ({n_ctx} cells) is larger than the {hp.n_ctx_train} tokens {path.name} was "
            "trained on: text past that may degrade",
            file=sys.stderr,
        )
    sampler = sampler_from_args(args)
    sampler.accept(prompt)  # llama-cli counts the prompt in the penalties' window
    params = model_params(args, n_ctx, default_model=is_default, n_prompt=len(prompt))
    out = sys.stdout
    with Model.load(f, params) as model:
        if tok is None:  # --tokens: the text is still shown (and given in --json) when the file has a vocabulary
            try:
                tok = model.tokenizer
            except ValueError:
                tok = None
        decode = decoder(tok, args.special) if tok is not None else None
        print_verbose(args, sampler, tok, prompt)
        info = _header_info(model, path, is_default)
        if not args.json:
            _print_header(info, out)
        eos = [] if args.ignore_eos or tok is None or tok.eos_id is None else [tok.eos_id]
        streamed: list[int] = []
        shown = [""]

        def on_token(t: int) -> None:
            if args.json:
                return
            streamed.append(t)
            if decode is None:
                out.write(f"{t} ")
            else:
                text = decode(streamed)
                if not text.endswith("\ufffd"):
                    out.write(text[len(shown[0]) :])
                    shown[0] = text
            out.flush()

        warmup_s = 0.0 if args.no_warmup else model.warmup()
        if not args.json:
            shown_prompt = decode(prompt) if decode is not None else " ".join(map(str, prompt))
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
            with open(args.logits_out, "wb") as fh:  # exactly this path (np.save would append .npy to a name)
                np.save(fh, np.ascontiguousarray(res.prompt_logits, dtype=np.float32))
        info.update(
            {
                "n_splits": model.executor.n_splits,
                "prompt_tokens": res.prompt_tokens,
                "tokens": res.tokens,
                "text": decode(res.tokens, strip_prefix_space=False) if decode is not None else None,
                "n_prompt": len(res.prompt_tokens),
                "n_gen": len(res.tokens),
                "prompt_seconds": round(res.prompt_seconds, 6),
                "gen_seconds": round(res.gen_seconds, 6),
                "warmup_s": round(warmup_s, 3),
                "prompt_tokens_per_s": round(res.prompt_tokens_per_s, 3),
                # null when nothing was timed: one generated token comes from the prompt's logits, no decode step
                "gen_tokens_per_s": round(res.gen_tokens_per_s, 3) if len(res.tokens) > 1 else None,
                "stopped_at_eos": res.stopped_at_eos,
                "seed": sampler.seed,
                "logits_out": str(args.logits_out) if args.logits_out is not None else None,
            }
        )
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        if decode is not None:
            rest = decode(streamed)[len(shown[0]) :]
            out.write(rest)
        out.write("\n\n")
        pp, tg = speed_text(res)
        print(f"prompt: {pp}; generation: {tg}; seed {sampler.seed}")
        if info.get("auto_split"):
            a = info["auto_split"]
            print(
                f"--split-mode auto predicted pp {a['predicted_pp_tok_s']:.1f} tok/s, tg {a['predicted_tg_tok_s']:.1f}"
                f" tok/s; measured pp {res.prompt_tokens_per_s:.1f}, tg {res.gen_tokens_per_s:.1f}"
            )
        if args.logits_out is not None:
            n = info["n_prompt"]
            print(f"logits of {n} prompt position{'s' * (n != 1)} saved to {info['logits_out']}")
    return 0


def _tokens(n: int) -> str:
    return f"{n} token" if n == 1 else f"{n} tokens"


def _duration(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def _rate(n: int, seconds: float) -> str:
    rate = n / seconds
    return f"{rate:,.1f} tokens/s" if rate >= 10 else f"{rate:.3g} tokens/s"


def speed_text(res: Any) -> tuple[str, str]:
    """The prompt and generation parts of the speed line (grammar and units that hold for any count and time).

    The first generated token is sampled from the prompt's logits, so generation speed counts the decode steps
    after it; with one token (or none) there is no step to time and no rate is shown.
    """
    n_prompt, n_gen = len(res.prompt_tokens), len(res.tokens)
    pp = f"{_tokens(n_prompt)} in {_duration(res.prompt_seconds)}"
    if res.prompt_seconds > 0:
        pp += f" ({_rate(n_prompt, res.prompt_seconds)})"
    steps = n_gen - 1
    if steps <= 0:
        tg = _tokens(n_gen) + (" (sampled from the prompt's logits: no decode step to time)" if n_gen else "")
    else:
        tg = f"{_tokens(n_gen)} in {_duration(res.gen_seconds)}"
        if res.gen_seconds > 0:
            tg += f" ({_rate(steps, res.gen_seconds)} over {steps} decode step{'s' if steps > 1 else ''})"
    return pp, tg


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
        "auto_split": None
        if plan.auto is None
        else {
            "slots": {d.name: c for d, c in zip(plan.auto.devices, plan.auto.counts, strict=True)},
            "predicted_pp_tok_s": round(plan.auto.pp_tok_s, 3),
            "predicted_tg_tok_s": round(plan.auto.tg_tok_s, 3),
        },
        "scheduler": model.executor.uses_scheduler,
        "n_splits": model.executor.n_splits,
        "n_ctx": model.n_ctx,
        "kv_type": model.params.cache_type_k,  # K's type (V's is "type_v")
        "type_k": model.params.cache_type_k,
        "type_v": model.params.cache_type_v,
        "flash_attn": model.params.flash_attn,
        "batch_size": model.params.batch_size,
        "uploads": [
            {
                "device": u.device,
                "MiB": round(u.nbytes / 2**20, 3),
                "seconds": round(u.seconds, 4),
                "MiB_per_s": round(u.nbytes / 2**20 / max(u.seconds, 1e-9), 1),
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
            f"  {d['name']:<10} {d['layer_range']:<28} {d['MB']:9.2f} MiB: weights {d['weights_MB']:.2f}{mapped}, "
            f"KV {d['kv_MB']:.2f}\n"
        )
    for note in info["placement_notes"]:
        out.write(f"  note: {note}\n")
    attn = "flash attention" if info["flash_attn"] else "soft_max attention"
    out.write(f"context {info['n_ctx']} cells, KV {_kv_types(info)}, {attn}, batch {info['batch_size']}\n")
    out.flush()


def _kv_types(info: dict[str, Any]) -> str:
    k, v = info["type_k"], info["type_v"]
    return k if k == v else f"K {k} V {v}"
