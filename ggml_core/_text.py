"""Text from files and peers, made safe to print: control characters escaped, length bounded.

A GGUF's metadata, a chat template's error, a device name an RPC server reports: each is data written by someone
else. Printed raw, an ESC sequence in it sets the terminal's title, clears the screen or moves the cursor to forge
a line; a newline forges a line outright; a 1 MB string fills the scrollback. :func:`safe_text` escapes every
character that steers a terminal instead of showing a glyph (C0 controls, DEL, C1 controls, line and paragraph
separators, bidirectional overrides, lone surrogates) as ``\\xNN`` / ``\\uNNNN``, and cuts the result at a limit,
saying how long the text was. :func:`text_repr` does the same in ``repr`` form (quotes, Python's escapes).
Both read at most ``limit`` characters of their input, so a huge text costs no more than a short one.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["TEXT_LIMIT", "safe_text", "text_repr"]

#: characters shown before a text is cut
TEXT_LIMIT: Final = 200

_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _more(text: str, limit: int) -> str:
    return f"… ({len(text):,} characters in all)" if len(text) > limit else ""


def safe_text(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` with terminal-control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``...); past ``limit``
    characters, the first ``limit`` and ``… (N characters in all)``."""
    return _UNSAFE.sub(_escape, text[:limit]) + _more(text, limit)


def text_repr(text: str, limit: int = TEXT_LIMIT) -> str:
    """``repr(text)`` (control characters escaped as Python does); past ``limit`` characters, the repr of the
    first ``limit`` and ``… (N characters in all)``."""
    return repr(text[:limit]) + _more(text, limit)
