"""llama-cli's sampling, prompt and chat flags, shared by ``run`` and ``chat``: the same names and defaults as
llama.cpp's ``common/arg.cpp`` (docs/models.md lists each llama-cli option and what it does here).

Values are checked by argparse before anything loads; what one flag cannot check alone (``-ctk`` against ``-ctv``,
a built-in template name) is checked by :func:`check_combination` and :func:`chat_template` with a one-line error.
"""

from __future__ import annotations

import argparse
import difflib
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, Final

from ggml_core.cli.args import INT32_MAX, float_in, int_in, utf8_text

__all__ = [
    "BUILTIN_TEMPLATES",
    "KV_TYPES",
    "add_chat_args",
    "add_sampling_args",
    "cache_type",
    "chat_template",
    "check_combination",
    "decoder",
    "kv_types",
    "print_verbose",
    "process_escapes",
    "sampler_from_args",
    "text_file",
]

#: llama.cpp's cache types (``-ctk``, ``-ctv``); ggml_core.models.kvcache.KV_TYPES, named here without importing
#: the models package
KV_TYPES: Final = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

#: llama.cpp's built-in chat templates (``src/llama-chat.cpp``) that ``--chat-template NAME`` selects, as Jinja
BUILTIN_TEMPLATES: Final = {
    "chatml": (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    ),
    "gemma": (
        "{% set ns = namespace(system='') %}{% for m in messages %}"
        "{% if m['role'] == 'system' %}{% set ns.system = ns.system + (m['content'] | trim) %}{% else %}"
        "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}<start_of_turn>{{ role }}\n"
        "{% if ns.system and role != 'model' %}{{ ns.system }}\n\n{% set ns.system = '' %}{% endif %}"
        "{{ m['content'] | trim }}<end_of_turn>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
    ),
    "llama3": (
        "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}"
        "<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
        "{% endif %}"
    ),
    "phi3": (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    ),
    "phi4": (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}<|im_sep|>{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif %}"
    ),
}

#: the most bytes a prompt or template file may have
MAX_TEXT_FILE: Final = 64 << 20


def text_file(path: str) -> str:
    """``-f FILE`` / ``-sysf FILE``: a UTF-8 text file's content, one trailing newline removed (as llama.cpp)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise argparse.ArgumentTypeError(f"{path!r} is not a regular file")
        if st.st_size > MAX_TEXT_FILE:
            raise argparse.ArgumentTypeError(f"{path!r} has {st.st_size >> 20} MiB; the limit is 64 MiB")
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TEXT_FILE + 1)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{path!r} is not UTF-8 text (byte {exc.start})") from None
    return text[:-1] if text.endswith("\n") else text


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """llama.cpp's default sampler chain and its defaults: penalties, top-k, top-p, min-p, temperature."""
    s = p.add_argument_group("sampling (llama.cpp's chain: penalties, top-k, top-p, min-p, temperature)")
    temp = float_in(0.0, None)
    s.add_argument("--temp", type=temp, default=0.8, help="temperature; 0 = greedy (default 0.8)")
    s.add_argument("--temperature", dest="temp", type=temp, help=argparse.SUPPRESS)  # llama.cpp's other name
    s.add_argument("--top-k", type=int_in(0, INT32_MAX), default=40, help="top-k, 0 = off (default 40)")
    s.add_argument("--top-p", type=float_in(0.0, 1.0, lo_open=True), default=0.95, help="top-p, 1 = off (default 0.95)")
    s.add_argument("--min-p", type=float_in(0.0, 1.0), default=0.05, help="min-p, 0 = off (default 0.05)")
    s.add_argument(
        "--repeat-last-n",
        type=int_in(0, INT32_MAX),
        default=64,
        help="how many of the last tokens the penalties look at, 0 = off (default 64)",
    )
    s.add_argument(
        "--repeat-penalty",
        type=float_in(0.0, None, lo_open=True),
        default=1.0,
        help="divide a repeated token's logit by this (multiply when negative), 1 = off (default 1.0)",
    )
    s.add_argument(
        "--presence-penalty", type=float_in(None, None), default=0.0, help="subtract from a repeated token's logit "
        "once (default 0.0 = off)"
    )  # fmt: skip
    s.add_argument(
        "--frequency-penalty", type=float_in(None, None), default=0.0, help="subtract per earlier occurrence "
        "(default 0.0 = off)"
    )  # fmt: skip
    seed = int_in(-1, 2**32 - 1, " (-1 = random)")
    s.add_argument("--seed", type=seed, default=-1, help="sampling seed (default -1: random; llama.cpp's -s too)")
    s.add_argument("-s", dest="seed", type=seed, help=argparse.SUPPRESS)
    s.add_argument("--ignore-eos", action="store_true", help="keep generating after an end-of-sequence token")


def sampler_from_args(args: argparse.Namespace) -> Any:
    """The Sampler the sampling flags describe."""
    from ggml_core.models import Sampler, SamplerParams

    return Sampler(
        SamplerParams(
            args.temp,
            args.top_k,
            args.top_p,
            None if args.seed < 0 else args.seed,
            min_p=args.min_p,
            penalty_last_n=args.repeat_last_n,
            penalty_repeat=args.repeat_penalty,
            penalty_freq=args.frequency_penalty,
            penalty_present=args.presence_penalty,
        )
    )


def add_chat_args(p: argparse.ArgumentParser) -> None:
    """The system prompt, the chat template and how text is shown."""
    c = p.add_argument_group("chat (as llama-cli)")
    sysg = c.add_mutually_exclusive_group()
    sysg.add_argument(
        "--system-prompt", "-sys", "--system", dest="system", type=utf8_text, help="a system message first"
    )
    sysg.add_argument("--system-prompt-file", "-sysf", dest="system", type=text_file, help="the system message, "
                      "from a file")  # fmt: skip
    tmpl = c.add_mutually_exclusive_group()
    tmpl.add_argument(
        "--chat-template",
        type=utf8_text,
        metavar="NAME|JINJA",
        help=f"the chat template instead of the file's: a built-in name ({', '.join(sorted(BUILTIN_TEMPLATES))}), "
        "Jinja text, or a Jinja file",
    )
    tmpl.add_argument("--chat-template-file", metavar="FILE", type=text_file, help="the chat template, from a file")
    esc = c.add_mutually_exclusive_group()
    esc.add_argument(
        "--escape", "-e", dest="escape", action="store_true", default=True, help="read \\n, \\t, \\xHH, ... in "
        "the prompt as llama.cpp does (default)"
    )  # fmt: skip
    esc.add_argument(
        "--no-escape", dest="escape", action="store_false", help="take the prompt's backslashes as they are"
    )
    c.add_argument(
        "--special", "-sp", action="store_true", help="print special (control) tokens such as <end_of_turn> as text"
    )
    c.add_argument("--verbose", "-v", action="store_true", help="print the sampler chain and the prompt's tokens")
    c.add_argument("--log-verbose", dest="verbose", action="store_true", help=argparse.SUPPRESS)


_ESCAPES: Final = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"', ord("\\"): b"\\"}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


def process_escapes(text: str) -> str:
    """llama.cpp's escapes in a prompt (``-e``, its default): ``\\n \\r \\t \\' \\" \\\\`` and ``\\xHH`` (a byte; bytes
    that do not form UTF-8 become U+FFFD); any other backslash stays as it is."""
    raw = text.encode("utf-8")
    out = bytearray()
    i = 0
    while i < len(raw):
        c = raw[i]
        if c != 0x5C or i + 1 >= len(raw):
            out.append(c)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt in _ESCAPES:
            out += _ESCAPES[nxt]
            i += 2
        elif nxt == ord("x") and i + 3 < len(raw) and raw[i + 2] in _HEX and raw[i + 3] in _HEX:
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        else:
            out += raw[i : i + 2]
            i += 2
    return out.decode("utf-8", errors="replace")


def cache_type(text: str) -> str:
    """An argparse type: one of llama.cpp's cache types (its spellings, case as given)."""
    if text not in KV_TYPES:
        raise argparse.ArgumentTypeError(f"unsupported cache type {text!r} (one of {', '.join(KV_TYPES)})")
    return text


def kv_types(args: argparse.Namespace) -> tuple[str, str]:
    """The K and V cache types: llama.cpp's ``-ctk``/``-ctv``, each defaulting to ``--kv-type`` (both)."""
    k, v = getattr(args, "cache_type_k", None), getattr(args, "cache_type_v", None)
    return str(k or args.kv_type), str(v or args.kv_type)


def check_combination(args: argparse.Namespace) -> str | None:
    """What the flags cannot be together, in one line; None when they can."""
    _, v = kv_types(args)
    if v not in ("f32", "f16", "bf16") and getattr(args, "flash_attn", "on") == "off":
        return f"V cache quantization requires flash_attn: -ctv {v} needs -fa on (or auto)"
    return None


def chat_template(args: argparse.Namespace, f: Any, tok: Any) -> tuple[Any, str | None]:
    """(ChatTemplate, note): ``--chat-template``/``--chat-template-file``, else the file's own, else chatml (as
    llama.cpp) with a note saying so."""
    from ggml_core._errors import ChatTemplateError
    from ggml_core.models.chat import ChatTemplate

    bos = tok.tokens[tok.bos_id] if tok.bos_id is not None else ""
    eos = tok.tokens[tok.eos_id] if tok.eos_id is not None else ""
    if args.chat_template_file is not None:
        return ChatTemplate(args.chat_template_file, bos, eos, "--chat-template-file"), None
    given = args.chat_template
    if given is not None:
        if given in BUILTIN_TEMPLATES:
            return ChatTemplate(BUILTIN_TEMPLATES[given], bos, eos, f"--chat-template {given}"), None
        if "{{" in given or "{%" in given:
            return ChatTemplate(given, bos, eos, "--chat-template"), None
        if os.path.isfile(given):
            try:
                source = text_file(given)
            except argparse.ArgumentTypeError as exc:
                raise ChatTemplateError(given, "--chat-template", str(exc)) from None
            return ChatTemplate(source, bos, eos, given), None
        close = difflib.get_close_matches(given, list(BUILTIN_TEMPLATES), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ChatTemplateError(
            "--chat-template",
            repr(given)[:80],
            f"is neither a built-in name ({', '.join(sorted(BUILTIN_TEMPLATES))}), Jinja text, nor a file; {hint}"
            "or give --chat-template-file FILE",
        )
    from ggml_core.models.chat import KEY

    if f.has(KEY):
        return ChatTemplate.from_gguf(f, tok), None
    note = f"{f.path} has no chat template ({KEY}); using chatml, as llama.cpp does (--chat-template NAME to choose)"
    return ChatTemplate(BUILTIN_TEMPLATES["chatml"], bos, eos, "chatml"), note


def decoder(tok: Any, special: bool) -> Callable[..., str]:
    """``decode(ids, strip_prefix_space=True) -> text``: the tokenizer's decode, or with ``special`` one that shows
    control tokens as their text (llama.cpp's ``-sp``)."""
    if not special:
        return lambda ids, strip_prefix_space=True: str(tok.decode(ids, strip_prefix_space=strip_prefix_space))

    def decode(ids: list[int], strip_prefix_space: bool = True) -> str:
        raw = b"".join(tok.token_bytes(int(i)) or tok.piece(int(i)).encode("utf-8") for i in ids)
        text = raw.decode("utf-8", errors="replace")
        if strip_prefix_space and tok.kind == "llama" and tok.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text

    return decode


def print_verbose(args: argparse.Namespace, sampler: Any, tok: Any, ids: list[int]) -> None:
    """``-v``: the sampler chain with its parameters and the prompt's tokens, on stderr (as llama.cpp logs them)."""
    if not getattr(args, "verbose", False):
        return
    p = sampler.params
    chain = "greedy" if p.greedy else "penalties -> top-k -> top-p -> min-p -> temp -> dist"
    print(
        f"sampler: {chain}; repeat_last_n = {p.penalty_last_n}, repeat_penalty = {p.penalty_repeat:.3f}, "
        f"frequency_penalty = {p.penalty_freq:.3f}, presence_penalty = {p.penalty_present:.3f}, top_k = {p.top_k}, "
        f"top_p = {p.top_p:.3f}, min_p = {p.min_p:.3f}, temp = {p.temperature:.3f}, seed = {sampler.seed}",
        file=sys.stderr,
    )
    print(f"prompt: {len(ids)} tokens", file=sys.stderr)
    for i in ids:
        print(f"{i:6d} -> {tok.piece(i)!r}" if tok is not None else f"{i:6d}", file=sys.stderr)
