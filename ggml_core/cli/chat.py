"""``ggml-core chat [MODEL]``: an interactive chat with a GGUF model (without one, the embedded default model)
through its own chat template, ``--chat-template``'s, or chatml when the file has none, as llama.cpp (jinja2, as
llama.cpp's ``--jinja``). ``-p``/``-f`` is the first user message, then one per line of stdin; each reply is
streamed and stops at the model's end-of-turn tokens; end of input (or ``-st``) ends the chat. Each turn renders the
whole conversation and runs it from the start (the sliding-window cache cannot be rewound to a common prefix)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    from ggml_core.cli._llama_args import add_chat_args, add_sampling_args, text_file
    from ggml_core.cli._model_args import add_model_args
    from ggml_core.cli.args import INT32_MAX, int_in, utf8_text

    p = sub.add_parser(name, help="chat with a GGUF model through its chat template (stdin lines, streamed replies)")
    add_model_args(p)
    first = p.add_mutually_exclusive_group()
    first.add_argument("--prompt", "-p", type=utf8_text, help="the first user message (then stdin's lines)")
    first.add_argument("--file", "-f", dest="prompt", type=text_file, help="the first user message, from a file")
    p.add_argument(
        "--n-predict", "-n", type=int_in(1, INT32_MAX), default=256, help="most tokens per reply "
        "(default 256)"
    )  # fmt: skip
    p.add_argument("--predict", dest="n_predict", type=int_in(1, INT32_MAX), help=argparse.SUPPRESS)  # llama.cpp's
    p.add_argument("--single-turn", "-st", action="store_true", help="end after the first reply")
    add_chat_args(p)
    add_sampling_args(p)
    p.set_defaults(func=run, tokens=None, logits_out=None)


def run(args: argparse.Namespace) -> int:
    """The chat loop (the embedded default model when no file is given, as for ``run``)."""
    from ggml_core.cli._llama_args import check_combination
    from ggml_core.cli._model_args import list_devices_if_asked, resolve_model_path

    problem = check_combination(args)
    if problem is not None:
        print(f"ggml-core chat: error: {problem}", file=sys.stderr)
        return 2
    listed = list_devices_if_asked(args)
    if listed is not None:
        return listed
    if args.n_predict <= 0:
        print(f"ggml-core chat: error: --n-predict must be positive, got {args.n_predict}", file=sys.stderr)
        return 2
    path, is_default = resolve_model_path(args)
    try:
        return _chat(args, path, is_default)
    except (ValueError, OSError) as exc:  # the project's errors (GGMLError) are ValueErrors: main prints them
        from ggml_core._errors import GGMLError

        if isinstance(exc, (GGMLError, BrokenPipeError)):
            raise
        print(f"ggml-core chat: error: {exc}", file=sys.stderr)
        return 2


def _chat(args: argparse.Namespace, path: Any, is_default: bool) -> int:
    from ggml_core.cli._llama_args import chat_template, decoder, print_verbose, process_escapes, sampler_from_args
    from ggml_core.cli._model_args import model_params
    from ggml_core.models import Model, open_gguf
    from ggml_core.models.chat import end_of_turn_ids

    params = model_params(args, args.ctx_size, default_model=is_default)
    sampler = sampler_from_args(args)
    f = open_gguf(path)
    with Model.load(f, params) as m:
        tok = m.tokenizer
        template, note = chat_template(args, f, tok)
        if note:
            print(f"note: {note}", file=sys.stderr)
        decode = decoder(tok, args.special)
        stop = set(end_of_turn_ids(tok))
        messages = [{"role": "system", "content": args.system}] if args.system else []
        interactive = sys.stdin.isatty()
        first = process_escapes(args.prompt) if args.prompt is not None and args.escape else args.prompt
        while True:
            if first is not None:
                line, first = first, None
            else:
                if interactive:
                    print("> ", end="", file=sys.stderr, flush=True)
                line = _read_line()
                if line is None:
                    return 0
            messages.append({"role": "user", "content": line})
            text = template.render(messages)
            bos_in_text = bool(template.bos_token) and text.startswith(template.bos_token)
            ids = tok.encode(text, add_bos=False if bos_in_text else None, parse_special=True)
            if len(ids) + args.n_predict > m.n_ctx:
                print(f"ggml-core chat: error: the conversation ({len(ids)} tokens) + a reply of {args.n_predict} "
                      f"do not fit the {m.n_ctx}-cell context (use a larger --ctx-size)", file=sys.stderr)  # fmt: skip
                return 2
            print_verbose(args, sampler, tok, ids)
            m.reset()
            sampler.reset()
            sampler.accept(ids)  # the conversation so far is the penalties' history, as in llama-cli
            out = _Stream(decode, stop)
            m.generate(ids, args.n_predict, sampler, eos_ids=sorted(stop), on_token=out)
            print(flush=True)
            messages.append({"role": "assistant", "content": decode(out.ids, strip_prefix_space=False)})
            if getattr(args, "single_turn", False):
                return 0


def _read_line() -> str | None:
    """One line of stdin without its newline; None at the end. Bytes that are not UTF-8 become U+FFFD (a chat
    message is text; the replacement shows where the input was damaged)."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream (tests, embedding)
        text = sys.stdin.readline()
        return text.rstrip("\n") if text else None
    raw = buffer.readline()
    return raw.decode("utf-8", errors="replace").rstrip("\r\n") if raw else None


class _Stream:
    """Prints a reply as it comes, never half a UTF-8 character; the end-of-turn token is not printed."""

    def __init__(self, decode: Any, stop: set[int]) -> None:
        self.decode, self.stop, self.ids, self.printed = decode, stop, list[int](), 0

    def text(self) -> str:
        return str(self.decode(self.ids, strip_prefix_space=False))

    def __call__(self, t: int) -> None:
        if t in self.stop:
            return
        self.ids.append(t)
        out = self.text()
        if not out.endswith("\ufffd"):  # wait for the rest of a split UTF-8 character
            print(out[self.printed :], end="", flush=True)
            self.printed = len(out)
