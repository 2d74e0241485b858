"""BPE pre-tokenizers: llama.cpp's regular expressions per ``tokenizer.ggml.pre``, with Unicode classes.

A pre-tokenizer is a list of patterns applied in turn, as llama.cpp's ``unicode_regex_split``: each pattern cuts
every fragment so far into its matches and the text between them (nothing is dropped). The patterns use Unicode
properties (``\\p{L}`` letters, ``\\p{N}`` numbers, ``\\p{Lu}``...), so they need the ``regex`` package: Python's
``re`` has no such classes. Names follow llama.cpp's ``llama_vocab::impl::load`` (``llama-vocab.cpp``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

__all__ = ["IGNORE_MERGES", "PRE_TYPES", "pre_type", "split"]

_CONTRACTIONS: Final = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2: Final = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"

#: pre-tokenizer type → its patterns, applied in order
PRE_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (_GPT2,),
    "llama3": (
        _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "qwen2": (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "gpt-4o": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
}
#: ``tokenizer.ggml.pre`` names → the type (llama.cpp's aliases for the ones here)
_ALIASES: Final = {
    "gpt-2": "gpt2",
    "phi-2": "gpt2",
    "llama-bpe": "llama3",
    "llama-v3": "llama3",
    "falcon3": "llama3",
    "deepseek-r1-qwen": "qwen2",
}
#: types whose words already in the vocabulary are emitted whole, before any merge (llama.cpp's ignore_merges)
IGNORE_MERGES: Final = frozenset({"llama3"})


def pre_type(name: str) -> str:
    """The pre-tokenizer type of a ``tokenizer.ggml.pre`` value (unknown names: ``default``, as llama.cpp warns)."""
    name = _ALIASES.get(name, name)
    return name if name in PRE_TYPES else "default"


@lru_cache(maxsize=8)
def _compiled(kind: str) -> tuple[Any, ...]:
    try:
        import regex
    except ImportError:
        raise ImportError(
            "byte-level BPE tokenizers need the 'regex' package for Unicode classes: pip install regex"
        ) from None
    return tuple(regex.compile(p) for p in PRE_TYPES[kind])


def split(text: str, kind: str) -> list[str]:
    """``text`` cut into pre-tokens by the patterns of ``kind`` (see the module docstring)."""
    frags = [text] if text else []
    for pattern in _compiled(kind):
        out: list[str] = []
        for frag in frags:
            pos = 0
            for m in pattern.finditer(frag):
                if m.start() > pos:
                    out.append(frag[pos : m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(frag):
                out.append(frag[pos:])
        frags = out
    return frags
