"""``ggml-core chat MODEL``: an interactive chat with a GGUF model through its own chat template (jinja2, as
llama.cpp's ``--jinja``). Reads one user message per line from stdin, streams the reply, stops at the model's
end-of-turn tokens; end of input ends the chat. Each turn renders the whole conversation and runs it from the start
(the sliding-window cache cannot be rewound to a common prefix)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    from ggml_core.cli.run import add_model_args

    p = sub.add_parser(name, help="chat with a GGUF model through its chat template (stdin lines, streamed replies)")
    add_model_args(p)
    p.add_argument("--system", help="a system message first")
    p.add_argument("--n-predict", "-n", type=int, default=256, help="most tokens per reply (default 256)")
    p.add_argument("--temp", type=float, default=0.8, help="temperature; 0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=40, help="top-k, 0 = off (default 40)")
    p.add_argument("--top-p", type=float, default=0.95, help="top-p (default 0.95)")
    p.add_argument("--seed", type=int, default=-1, help="sampling seed (default -1: random)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The chat loop."""
    from ggml_core.cli.run import model_params
    from ggml_core.models import Model, Sampler, SamplerParams
    from ggml_core.models.chat import ChatTemplate, end_of_turn_ids

    if not args.model:
        print("ggml-core chat: error: a GGUF model file is required", file=sys.stderr)
        return 2
    if args.n_predict <= 0:
        print(f"ggml-core chat: error: --n-predict must be positive, got {args.n_predict}", file=sys.stderr)
        return 2
    params = model_params(args, args.ctx_size, default_model=False)
    sampler = Sampler(SamplerParams(args.temp, args.top_k, args.top_p, None if args.seed < 0 else args.seed))
    with Model.load(args.model, params) as m:
        tok = m.tokenizer
        template = ChatTemplate.from_gguf(m.file, tok)
        stop = set(end_of_turn_ids(tok))
        messages = [{"role": "system", "content": args.system}] if args.system else []
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            line = sys.stdin.readline()
            if not line:
                return 0
            messages.append({"role": "user", "content": line.rstrip("\n")})
            text = template.render(messages)
            bos_in_text = bool(template.bos_token) and text.startswith(template.bos_token)
            ids = tok.encode(text, add_bos=False if bos_in_text else None, parse_special=True)
            if len(ids) + args.n_predict > m.n_ctx:
                print(f"ggml-core chat: error: the conversation ({len(ids)} tokens) + a reply of {args.n_predict} "
                      f"do not fit the {m.n_ctx}-cell context (use a larger --ctx-size)", file=sys.stderr)  # fmt: skip
                return 2
            m.reset()
            out = _Stream(tok, stop)
            m.generate(ids, args.n_predict, sampler, eos_ids=sorted(stop), on_token=out)
            print(flush=True)
            messages.append({"role": "assistant", "content": out.text()})


class _Stream:
    """Prints a reply as it comes, never half a UTF-8 character; the end-of-turn token is not printed."""

    def __init__(self, tok: Any, stop: set[int]) -> None:
        self.tok, self.stop, self.ids, self.printed = tok, stop, list[int](), 0

    def text(self) -> str:
        return str(self.tok.decode(self.ids, strip_prefix_space=False))

    def __call__(self, t: int) -> None:
        if t in self.stop:
            return
        self.ids.append(t)
        out = self.text()
        if not out.endswith("\ufffd"):  # wait for the rest of a split UTF-8 character
            print(out[self.printed :], end="", flush=True)
            self.printed = len(out)
