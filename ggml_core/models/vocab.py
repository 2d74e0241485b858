"""Text → id lookup over a GGUF string array without decoding it: a sorted table of keys, built with numpy.

A 262,144-token vocabulary (Gemma 3) took 0.25-0.35 s to become a ``dict``: decoding every string and inserting
each into the dict, all Python work, for a prompt that looks up a few hundred pieces. :class:`VocabIndex` instead
computes a 64-bit key per string from its length and its first and last eight bytes, read in place from the memory
map (a handful of numpy passes over the 262k strings, none over their bytes), and sorts the keys; a lookup computes
the query's key, finds it by binary search and compares the bytes. Answers are those of the dict
``{text: id for id, text in enumerate(tokens)}`` exactly: the key only narrows the search, the bytes decide, and a
text that appears twice maps to its last id (as llama.cpp's ``token_to_id``). Answers are memoised; a caller that
asks very many distinct texts gets the plain dict (built then, once).

UTF-8 is checked for the whole array in one decode of its bytes: with every string under 128 bytes, the 8-byte
lengths between them are ASCII, so a string that is not valid UTF-8 on its own (or starts inside a character) makes
the decode fail. Longer strings, or a failure, take the dict path, whose decoding names the culprit.
"""

from __future__ import annotations

import codecs
from typing import Final

import numpy as np

from ggml_core.models.gguf_file import StringArray

__all__ = ["VocabIndex"]

#: distinct lookups memoised before the index gives way to a plain dict
_MEMO_MAX: Final = 50_000
#: strings must be shorter than this for the index (their length bytes are then ASCII); else the dict
_MAX_LEN: Final = 128
_MASK64: Final = (1 << 64) - 1
#: odd multipliers mixing the last eight bytes and the length into the key
_K_LAST: Final = 0x9E3779B97F4A7C15
_K_LEN: Final = 0xC2B2AE3D27D4EB4F
#: the low ``8 * n`` bits, n = 0..8
_LOW: Final = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)


def _key(raw: bytes) -> int:
    """The key of one string's bytes (what :meth:`VocabIndex.__init__` computes for the whole array)."""
    n = len(raw)
    last = int.from_bytes(raw[-8:], "little") if n > 8 else 0
    return (int.from_bytes(raw[:8], "little") ^ (last * _K_LAST) ^ (n * _K_LEN)) & _MASK64


def _words_at(region: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """The little-endian 64-bit words starting at the byte positions ``pos`` of ``region`` (zeros past its end)."""
    padded = np.zeros(len(region) + 16, dtype=np.uint8)
    padded[: len(region)] = region
    windows = np.lib.stride_tricks.as_strided(padded, shape=(len(region) + 9, 8), strides=(1, 1), writeable=False)
    return np.ascontiguousarray(windows[pos]).view("<u8").ravel()


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
        base = int(offs[0])
        region = np.asarray(strings.region(), dtype=np.uint8)
        at = offs[:-1] - base + 8
        n = lens.astype(np.uint64)
        words = _words_at(region, np.concatenate([at, at + np.maximum(lens - 8, 0)]))
        first = words[: len(at)] & _LOW[np.minimum(lens, 8)]
        last = np.where(lens > 8, words[len(at) :], np.uint64(0))
        keys = first ^ (last * np.uint64(_K_LAST)) ^ (n * np.uint64(_K_LEN))  # uint64 arithmetic wraps, as _key's
        self._order = np.argsort(keys)
        self._keys = keys[self._order]

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
        key = _key(raw)
        keys = self._keys
        i = int(np.searchsorted(keys, np.uint64(key)))  # a Python int against uint64 would compare as float64
        found: int | None = None
        while i < len(keys) and int(keys[i]) == key:
            tid = int(self._order[i])
            if (found is None or tid > found) and self._strings.raw(tid) == raw:
                found = tid  # a text that appears twice: the last id
            i += 1
        memo[text] = found
        return found
