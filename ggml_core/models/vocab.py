"""Text → id lookup over a GGUF string array without decoding it: a sorted table of hashes, built with numpy.

A 262,144-token vocabulary (Gemma 3) took 0.25-0.35 s to become a ``dict``: decoding every string and inserting
each into the dict, all Python work, for a prompt that looks up a few hundred pieces. :class:`VocabIndex` instead
hashes every string's bytes in place in the memory map (a handful of numpy passes over the array's bytes) and sorts
the hashes; a lookup hashes the query, finds it by binary search and compares the bytes. Answers are those of the
dict ``{text: id for id, text in enumerate(tokens)}`` exactly: the hash only narrows the search, the bytes decide,
and a text that appears twice maps to its last id (as llama.cpp's ``token_to_id``). Answers are memoised; a caller
that asks very many distinct texts gets the plain dict (built then, once).

The hash is simple tabulation hashing over the *whole* string: the XOR of a random 64-bit word per (position, byte)
and one per length, drawn from the operating system's randomness when the module loads. It is 3-independent and
its table is unknown to whoever wrote the file, so a crafted vocabulary cannot make many strings share a hash (a
key from the length and the first and last eight bytes let one: thousands of entries to compare per lookup).

UTF-8 is checked for the whole array in one decode of its bytes: with every string under 128 bytes, the 8-byte
lengths between them are ASCII, so a string that is not valid UTF-8 on its own (or starts inside a character) makes
the decode fail. Longer strings, or a failure, take the dict path, whose decoding names the culprit.
"""

from __future__ import annotations

import codecs
import secrets
from typing import Final

import numpy as np

from ggml_core.models.gguf_file import StringArray

__all__ = ["VocabIndex"]

#: distinct lookups memoised before the index gives way to a plain dict
_MEMO_MAX: Final = 50_000
#: strings must be shorter than this for the index (their length bytes are then ASCII); else the dict
_MAX_LEN: Final = 128
#: the tabulation hash's random words: one per (position, byte value), and one per length
_TABLE: Final = np.frombuffer(secrets.token_bytes(8 * _MAX_LEN * 256), dtype=np.uint64).reshape(_MAX_LEN, 256)
_BY_LENGTH: Final = np.frombuffer(secrets.token_bytes(8 * (_MAX_LEN + 1)), dtype=np.uint64)
_TABLE_ROWS: Final[list[list[int]]] = _TABLE.tolist()
_BY_LENGTH_LIST: Final[list[int]] = _BY_LENGTH.tolist()


def _hash(raw: bytes) -> int:
    """The hash of one string's bytes (shorter than ``_MAX_LEN``), as :func:`_hash_all` computes them."""
    h = _BY_LENGTH_LIST[len(raw)]
    for row, b in zip(_TABLE_ROWS, raw, strict=False):
        h ^= row[b]
    return h


def _hash_all(region: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The hash of every string: ``lens[i]`` bytes at ``starts[i]`` of ``region`` (each under ``_MAX_LEN``).

    Position by position over the strings sorted longest first, so that the strings still that long are a prefix.
    """
    order = np.argsort(-lens, kind="stable")
    at, n = starts[order], lens[order]
    hashes = _BY_LENGTH[n]
    longer = np.searchsorted(-n, -np.arange(int(n.max(initial=0))), side="left")  # strings over p bytes
    at = at.astype(np.intp)
    for p, count in enumerate(longer.tolist()):
        cut = at[:count]
        cut += 1 if p else 0  # the strings' p-th bytes (their starts, moved on in place)
        hashes[:count] ^= _TABLE[p].take(region.take(cut))
    out = np.empty_like(hashes)
    out[order] = hashes
    return out


class VocabIndex:
    """``get(text) -> id | None`` over a :class:`StringArray`, as the dict of its texts would answer.

    :raises GGUFError: a string is not valid UTF-8 (naming it, as :meth:`StringArray.tolist` does)
    """

    def __init__(self, strings: StringArray) -> None:
        self._strings = strings
        self._memo: dict[str, int | None] = {}
        self._dict: dict[str, int] | None = None
        offs = np.asarray(strings.offsets, dtype=np.int64)
        lens = offs[1:] - offs[:-1] - 8
        if len(lens) == 0 or int(lens.max()) >= _MAX_LEN or not self._utf8(strings):
            self._use_dict()
            return
        region = np.asarray(strings.region(), dtype=np.uint8)
        hashes = _hash_all(region, offs[:-1] - int(offs[0]) + 8, lens)
        self._order = np.argsort(hashes, kind="stable")
        self._keys = hashes[self._order]

    @staticmethod
    def _utf8(strings: StringArray) -> bool:
        """Whether every string is valid UTF-8 (strings under 128 bytes: their lengths between them are ASCII)."""
        try:
            codecs.utf_8_decode(strings.region().data, "strict", True)
        except UnicodeDecodeError:
            return False
        return True

    def _use_dict(self) -> None:
        """The plain dict (decoding every string: GGUFError naming the first that is not valid UTF-8)."""
        self._dict = {t: i for i, t in enumerate(self._strings.tolist())}
        self._memo = {}

    def get(self, text: str) -> int | None:
        """The id of the (last) token whose text is ``text``, or None."""
        if self._dict is not None:
            return self._dict.get(text)
        memo = self._memo
        if text in memo:
            return memo[text]
        if len(memo) >= _MEMO_MAX:
            self._use_dict()
            return self.get(text)
        raw = text.encode("utf-8")
        if len(raw) >= _MAX_LEN:  # every string in the index is shorter
            memo[text] = None
            return None
        key = np.uint64(_hash(raw))  # a Python int against uint64 would compare as float64
        keys = self._keys
        lo, hi = int(np.searchsorted(keys, key)), int(np.searchsorted(keys, key, side="right"))
        found: int | None = None
        for i in range(hi - 1, lo - 1, -1):  # ids ascend within a run (a stable sort): the last one first
            tid = int(self._order[i])
            if self._strings.raw(tid) == raw:
                found = tid  # a text that appears twice (any number of times): its last id, found first
                break
        memo[text] = found
        return found
