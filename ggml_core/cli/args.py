"""Argument types for the commands: every value is parsed and range-checked by argparse, before anything loads.

Each factory returns a ``type=`` callable raising ``argparse.ArgumentTypeError``, which the CLI's parser turns into
its one-line ``ggml-core CMD: error: argument --X: ...`` message with exit code 2.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = [
    "INT32_MAX",
    "MAX_THREADS",
    "directory",
    "endpoints",
    "float_in",
    "input_file",
    "int_in",
    "int_list",
    "names",
    "output_file",
    "regex",
    "shares",
    "utf8_text",
]

#: llama.cpp keeps counts, sizes and token ids in int32
INT32_MAX: Final = 2**31 - 1
#: --threads above this is a typo, not a machine
MAX_THREADS: Final = 1024


def _int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _bounds(lo: float | None, hi: float | None, lo_open: bool = False) -> str:
    left = "(" if lo_open else "["
    return f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"


def int_in(lo: int, hi: int, note: str = "") -> Callable[[str], int]:
    """An integer in ``lo..hi`` (``note`` explains special values, e.g. ``-1 = all``)."""

    def parse(text: str) -> int:
        value = _int(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be an integer in {lo}..{hi}{note}, got {value}")
        return value

    return parse


def float_in(lo: float | None, hi: float | None, *, lo_open: bool = False) -> Callable[[str], float]:
    """A finite float in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``); None: unbounded on that side."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        below = lo is not None and (value <= lo if lo_open else value < lo)
        if not math.isfinite(value) or below or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be a finite number in {_bounds(lo, hi, lo_open)}, got {text}")
        return value

    return parse


def int_list(lo: int, hi: int, what: str) -> Callable[[str], list[int]]:
    """Comma-separated integers, each in ``lo..hi``; at least one."""

    def parse(text: str) -> list[int]:
        items = [x for x in text.replace(" ", "").split(",") if x]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}")
        try:
            values = [int(x) for x in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
        for i, v in enumerate(values):
            if not lo <= v <= hi:
                raise argparse.ArgumentTypeError(f"{what} #{i + 1} is {v}, outside {lo}..{hi}")
        return values

    return parse


def shares(text: str) -> list[float]:
    """``--tensor-split``: finite non-negative shares with a positive sum, e.g. ``3,1``."""
    items = [x for x in text.replace(" ", "").split(",") if x]
    try:
        values = [float(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    bad = [x for x, v in zip(items, values, strict=True) if not math.isfinite(v) or v < 0]
    if bad:
        raise argparse.ArgumentTypeError(f"shares must be finite and >= 0, got {bad[0]} in {text!r}")
    if not values or sum(values) <= 0:
        raise argparse.ArgumentTypeError(f"the shares must have a positive sum, got {text!r}")
    return values


def utf8_text(text: str) -> str:
    """Text from the command line that is valid UTF-8 (Python hands undecodable bytes of ``argv`` over as lone
    surrogates, which no tokenizer or template can take)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        what = f"byte 0x{code - 0xDC00:02X}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
        raise argparse.ArgumentTypeError(f"is not valid UTF-8: {what} at character {exc.start}") from None
    return text


def names(text: str) -> list[str]:
    """Comma-separated names (devices, ops); at least one."""
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return out


def endpoints(text: str) -> list[str]:
    """``--rpc``: ``HOST:PORT,...`` with ports in 1..65535."""
    out = names(text)
    for e in out:
        host, sep, port = e.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port in 1..65535, got {e!r}")
    return out


def regex(text: str) -> str:
    """A regular expression that compiles."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression {text!r}: {exc}") from None
    return text


def input_file(text: str) -> Path:
    """An existing regular file (a FIFO, device or directory would hang or fail the memory map)."""
    try:
        st = os.stat(text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot open {text!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise argparse.ArgumentTypeError(f"{text!r} is {kind}; give a GGUF file")
    return Path(text)


def output_file(text: str) -> Path:
    """A file to write: not a directory, in an existing writable directory. Written at exactly this path."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name, e.g. {str(path / 'out')!r}")
    if path.exists() and not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a regular file (a FIFO, socket or device)")
    parent = path.parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"the directory {str(parent)!r} of {text!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(f"the directory {str(parent)!r} of {text!r} is not writable")
    return path


def directory(text: str) -> Path:
    """A directory: an existing one, or a new one whose parent exists."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    if not path.exists() and not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"neither {text!r} nor its parent directory exists")
    return path
