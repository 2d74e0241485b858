"""``ggml-core tokenize MODEL TEXT``: the token ids of a text under a GGUF file's own tokenizer, as llama.cpp's
``llama-tokenize`` prints them (one ``id -> 'piece'`` line per token), or ``--ids`` / ``--json``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ggml_core._text import safe_text
from ggml_core.cli.args import utf8_text

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(name, help="print the token ids of a text (as llama-tokenize)")
    p.add_argument("model", help="GGUF file whose tokenizer to use")
    p.add_argument("text", type=utf8_text, help="the text to tokenize")
    p.add_argument("--no-bos", action="store_true", help="do not add the BOS token the vocabulary asks for")
    p.add_argument("--parse-special", action="store_true", help="read control tokens such as <bos> in the text")
    p.add_argument("--ids", action="store_true", help="print only the ids, as a list")
    p.add_argument("--json", action="store_true", help="machine-readable: ids and pieces")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Tokenize and print."""
    from ggml_core.models.gguf_file import open_gguf
    from ggml_core.models.tokenizer import load_tokenizer

    tok = load_tokenizer(open_gguf(args.model))
    ids = tok.encode(args.text, add_bos=False if args.no_bos else None, parse_special=args.parse_special)
    pieces = [tok.piece(i) for i in ids]
    if args.json:
        print(json.dumps({"ids": ids, "pieces": pieces, "n_tokens": len(ids)}))  # \u escapes: no raw controls
    elif args.ids:
        print(ids)
    else:
        for i, piece in zip(ids, pieces, strict=True):
            print(f"{i:6d} -> '{safe_text(piece, 1000)}'")  # a vocabulary's pieces are file data
    return 0
