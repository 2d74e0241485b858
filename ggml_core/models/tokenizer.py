"""Text ↔ token ids from a GGUF file's own vocabulary: "llama" (SentencePiece-style) and "gpt2" (byte-level BPE).

**llama** (``tokenizer.ggml.model == "llama"``): spaces become ``▁`` (one is prepended unless
``tokenizer.ggml.add_space_prefix`` is false); the text starts as single characters, and the adjacent pair whose
concatenation is a vocabulary token with the highest score is merged first (ties: leftmost), until no pair merges.
A piece still not in the vocabulary is written as its UTF-8 bytes (``<0xXX>`` tokens), or ``<unk>`` without them.

**gpt2** (byte-level BPE): the text is split by the pre-tokenizer's pattern, each piece's bytes are mapped to
printable characters (GPT-2's byte-to-unicode table), and ``tokenizer.ggml.merges`` are applied lowest rank first.

The pre-tokenizers (llama.cpp's patterns, with Unicode classes through the ``regex`` package) are in
:mod:`ggml_core.models.pretokenize`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, Protocol, cast

import numpy as np

from ggml_core._errors import GGUFError, VocabularyError
from ggml_core._text import text_repr
from ggml_core.models.gguf_file import GGUFFile, StringArray
from ggml_core.models.gguf_header import ValueType
from ggml_core.models.pretokenize import IGNORE_MERGES, pre_type, split
from ggml_core.models.specials import SpecialMatcher

__all__ = ["TOKEN_TYPE", "Tokenizer", "bytes_to_unicode", "load_tokenizer"]

#: ``llama_token_type`` values in ``tokenizer.ggml.token_type``
TOKEN_TYPE: Final = {"normal": 1, "unknown": 2, "control": 3, "user_defined": 4, "unused": 5, "byte": 6}

_SPACE: Final = "\u2581"


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: printable bytes map to themselves, the others to code points from 256 up."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


class _Lookup(Protocol):
    def get(self, text: str, /) -> int | None: ...


@dataclass
class Tokenizer:
    """A vocabulary and the algorithm of its kind (``"llama"`` or ``"gpt2"``).

    ``tokens`` is a list, or the file's :class:`StringArray` as :func:`load_tokenizer` passes it: then the strings
    are decoded when asked for and the text → id lookup is a :class:`~ggml_core.models.vocab.VocabIndex` (the
    same answers as a dict, without building one for 262k tokens at load).
    """

    kind: str
    tokens: Sequence[str]
    scores: list[float] = field(default_factory=list)
    types: list[int] = field(default_factory=list)
    merges: dict[tuple[str, str], int] = field(default_factory=dict)
    bos_id: int | None = None
    eos_id: int | None = None
    unk_id: int | None = None
    add_bos: bool = False
    add_space_prefix: bool = True
    pre: str = "default"
    #: what errors name the vocabulary by (the file, for one loaded from a GGUF)
    origin: str = "vocabulary"

    def __post_init__(self) -> None:
        # as llama.cpp's token_to_id: a text that appears twice maps to its last id
        self._ids: _Lookup
        if isinstance(self.tokens, StringArray):
            from ggml_core.models.vocab import VocabIndex

            self._ids = VocabIndex(self.tokens)
        else:
            self._ids = {t: i for i, t in enumerate(self.tokens)}
        kinds = np.asarray(self.types[: len(self.tokens)], dtype=np.int64)
        wanted = (TOKEN_TYPE["control"], TOKEN_TYPE["user_defined"], TOKEN_TYPE["unknown"])
        ids = np.flatnonzero(np.isin(kinds, wanted)).tolist()
        texts = self.tokens.take(ids) if isinstance(self.tokens, StringArray) else [self.tokens[i] for i in ids]
        special = [(t, i) for t, i in zip(texts, ids, strict=True) if t]
        special.sort(key=lambda p: -len(p[0]))  # longest first; stable: equal lengths keep id order
        self._specials_all = special
        self._specials_user = [(t, i) for t, i in special if self.types[i] == TOKEN_TYPE["user_defined"]]
        self._matchers: dict[bool, SpecialMatcher] = {}
        self._byte_ids: dict[int, int] = {}
        if self.kind == "llama":
            for b in range(256):
                bid = self._ids.get(f"<0x{b:02X}>")
                if bid is not None:
                    self._byte_ids[b] = bid
        self._pre_type = pre_type(self.pre)
        self._b2u = bytes_to_unicode()
        self._u2b = {u: b for b, u in self._b2u.items()}

    def token_id(self, text: str) -> int | None:
        """The id of the token whose text is ``text``, or None."""
        return self._ids.get(text)

    @property
    def n_vocab(self) -> int:
        """Number of tokens."""
        return len(self.tokens)

    # ------------------------------------------------------------------------------------------------ encode

    def encode(self, text: str, *, add_bos: bool | None = None, parse_special: bool = False) -> list[int]:
        """Token ids of ``text`` (with BOS first when the vocabulary asks for it, or ``add_bos``).

        As llama.cpp's ``llama_tokenize``: the text is first cut at the strings of user-defined tokens (always) and,
        with ``parse_special``, of control tokens (``<bos>``, ``<start_of_turn>``, ...), longest first; those become
        their ids and the fragments between are tokenized (SentencePiece: a space is prefixed, when the vocabulary
        asks for one, to the first fragment and to each one after a special token).
        """
        ids: list[int] = []
        if (self.add_bos if add_bos is None else add_bos) and self.bos_id is not None:
            ids.append(self.bos_id)
        prev_special = True
        for frag in self._partition(text, parse_special):
            if isinstance(frag, int):
                ids.append(frag)
                prev_special = True
            elif self.kind == "llama":
                ids += self._encode_spm(frag, prefix=self.add_space_prefix and prev_special)
                prev_special = False
            else:
                ids += self._encode_bpe(frag)
        return ids

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """``text`` cut into plain fragments (str) and special token ids (int), llama.cpp's
        ``tokenizer_st_partition`` (see :class:`~ggml_core.models.specials.SpecialMatcher`)."""
        matcher = self._matchers.get(parse_special)
        if matcher is None:
            matcher = SpecialMatcher(self._specials_all if parse_special else self._specials_user)
            self._matchers[parse_special] = matcher
        frags: list[str | int] = []
        pos = 0
        for start, end, tid in matcher.find(text):
            if start > pos:
                frags.append(text[pos:start])
            frags.append(tid)
            pos = end
        if pos < len(text):
            frags.append(text[pos:])
        return frags

    def _encode_spm(self, text: str, *, prefix: bool) -> list[int]:
        if prefix:
            text = " " + text
        syms = list(text.replace(" ", _SPACE))
        # a doubly linked list of symbols and a heap of mergeable neighbours: (-score, left position, left, right)
        prev = list(range(-1, len(syms) - 1))
        nxt = list(range(1, len(syms) + 1))
        alive = [True] * len(syms)
        heap: list[tuple[float, int, str, str]] = []

        def push(i: int) -> None:
            j = nxt[i]
            if j < len(syms):
                tid = self._ids.get(syms[i] + syms[j])
                if tid is not None:
                    score = self.scores[tid] if tid < len(self.scores) else 0.0
                    heapq.heappush(heap, (-score, i, syms[i], syms[j]))

        for i in range(len(syms) - 1):
            push(i)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i] if alive[i] else len(syms)
            if j >= len(syms) or not alive[j] or syms[i] != left or syms[j] != right:
                continue  # stale entry: one side merged since
            syms[i] = left + right
            alive[j] = False
            nxt[i] = nxt[j]
            if nxt[j] < len(syms):
                prev[nxt[j]] = i
            if prev[i] >= 0:
                push(prev[i])
            push(i)
        out: list[int] = []
        for i, s in enumerate(syms):
            if not alive[i]:
                continue
            tid = self._ids.get(s)
            if tid is not None:
                out.append(tid)
                continue
            for b in s.encode("utf-8"):
                bid = self._byte_ids.get(b)
                if bid is not None:
                    out.append(bid)
                elif self.unk_id is not None:
                    out.append(self.unk_id)
                else:
                    shown = text_repr(s.replace(_SPACE, " "), 40)
                    raise VocabularyError(
                        self.origin,
                        s,
                        f"cannot encode {shown}: its byte 0x{b:02X} has no <0x{b:02X}> token and "
                        "the vocabulary has no unknown token",
                    )
        return out

    def _encode_bpe(self, text: str) -> list[int]:
        out: list[int] = []
        ignore_merges = self._pre_type in IGNORE_MERGES
        for frag in split(text, self._pre_type):
            word = "".join(self._b2u[b] for b in frag.encode("utf-8"))
            whole = self._ids.get(word) if ignore_merges else None
            if whole is not None:  # llama.cpp's ignore_merges: a word in the vocabulary is one token
                out.append(whole)
                continue
            for piece in self._bpe(word):
                tid = self._ids.get(piece)
                if tid is not None:
                    out.append(tid)
                    continue
                for ch in piece:  # a piece the merges built but the vocabulary lacks: fall back to its characters
                    cid = self._ids.get(ch)
                    if cid is None:
                        if self.unk_id is None:
                            raise self._unencodable(frag)
                        cid = self.unk_id
                    out.append(cid)
        return out

    def _unencodable(self, frag: str) -> VocabularyError:
        """The error for a pre-token with a byte the vocabulary has no token for (naming its first such character)."""
        culprit = next((c for c in frag if any(self._ids.get(self._b2u[b]) is None for b in c.encode("utf-8"))), frag)
        return VocabularyError(
            self.origin,
            culprit,
            f"cannot encode {text_repr(culprit, 40)} (in {text_repr(frag, 40)}): the vocabulary has no token for "
            "its bytes and no unknown token",
        )

    def _bpe(self, word: str) -> list[str]:
        """``word`` merged by rank, lowest first (ties: leftmost), as llama.cpp's ``llm_tokenizer_bpe``: a linked
        list of symbols and a heap of adjacent pairs, so a word of n characters takes O(n log n), not O(n²)."""
        syms = list(word)
        n = len(syms)
        if n < 2:
            return syms
        merges = self.merges
        nxt = list(range(1, n + 1))
        prev = list(range(-1, n - 1))
        heap: list[tuple[int, int, str, str]] = []  # (rank, left position, left text, right text)

        def push(i: int) -> None:
            j = nxt[i]
            if j < n:
                rank = merges.get((syms[i], syms[j]))
                if rank is not None:
                    heapq.heappush(heap, (rank, i, syms[i], syms[j]))

        for i in range(n - 1):
            push(i)
        while heap:
            _, i, left, right = heapq.heappop(heap)
            j = nxt[i]
            if j >= n or syms[i] != left or syms[j] != right:
                continue  # stale: a side merged since (a merged-away left symbol's text is cleared)
            syms[i] = left + right
            syms[j] = ""
            nxt[i] = nxt[j]
            if nxt[j] < n:
                prev[nxt[j]] = i
            if prev[i] >= 0:
                push(prev[i])
            push(i)
        return [s for s in syms if s]

    # ------------------------------------------------------------------------------------------------ decode

    def token_bytes(self, tid: int) -> bytes:
        """The bytes a token stands for (control tokens: none)."""
        if not 0 <= tid < len(self.tokens):
            raise ValueError(f"token id {tid} is outside the vocabulary 0..{len(self.tokens) - 1}")
        ttype = self.types[tid] if tid < len(self.types) else TOKEN_TYPE["normal"]
        text = self.tokens[tid]
        if ttype == TOKEN_TYPE["control"]:
            return b""
        if self.kind == "llama":
            if ttype == TOKEN_TYPE["byte"] or (len(text) == 6 and text.startswith("<0x") and text.endswith(">")):
                try:
                    return bytes([int(text[3:5], 16)])
                except ValueError:
                    pass
            return text.replace(_SPACE, " ").encode("utf-8")
        if ttype == TOKEN_TYPE["user_defined"]:
            return text.encode("utf-8")
        return bytes(self._u2b[c] if c in self._u2b else ord(c) & 0xFF for c in text)

    def piece(self, tid: int) -> str:
        """The text of one token for display (control tokens as their name, as llama-tokenize shows them)."""
        if 0 <= tid < len(self.types) and self.types[tid] == TOKEN_TYPE["control"]:
            return self.tokens[tid]
        return self.token_bytes(tid).decode("utf-8", errors="replace")

    def decode(self, ids: list[int], *, strip_prefix_space: bool = True) -> str:
        """The text of ``ids`` (invalid UTF-8 replaced); the prefix space the llama encoder adds is removed."""
        raw = b"".join(self.token_bytes(int(i)) for i in ids)
        text = raw.decode("utf-8", errors="replace")
        if strip_prefix_space and self.kind == "llama" and self.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text


def load_tokenizer(f: GGUFFile) -> Tokenizer:
    """The tokenizer described by the file's ``tokenizer.ggml.*`` metadata; GGUFError when it has none usable."""
    model = f.get_str("tokenizer.ggml.model", "")
    if not model:
        raise GGUFError(
            f.path, "metadata 'tokenizer.ggml.model'", "is missing: this file has no tokenizer (use --tokens)"
        )
    if model not in ("llama", "gpt2"):
        raise GGUFError(f.path, "metadata 'tokenizer.ggml.model'", f"{text_repr(model)} is not supported (llama, gpt2)")
    tokens = f.get_string_array("tokenizer.ggml.tokens")  # decoded on demand (checked by the lookup's index)
    n = len(tokens)

    def _ids(key: str) -> int | None:
        if not f.has(key):
            return None
        v = f.get_int(key)
        if not 0 <= v < n:
            raise GGUFError(f.path, f"metadata {key!r}", f"token id {v} is outside the vocabulary 0..{n - 1}")
        return v

    def _list(key: str, kinds: list[ValueType]) -> list[float | int]:
        if not f.has(key):
            return []
        values = f.get_numbers(key, kinds).tolist()
        if len(values) != n:
            raise GGUFError(f.path, f"metadata {key!r}", f"has {len(values)} entries for {n} tokens")
        return values

    # numpy's tolist() gives Python floats and ints already
    scores = cast(list[float], _list(key="tokenizer.ggml.scores", kinds=[ValueType.FLOAT32, ValueType.FLOAT64]))
    types = cast(list[int], _list("tokenizer.ggml.token_type", [ValueType.INT32, ValueType.UINT32]))
    merges: dict[tuple[str, str], int] = {}
    if model == "gpt2":
        if not f.has("tokenizer.ggml.merges"):
            raise GGUFError(
                f.path, "metadata 'tokenizer.ggml.merges'", "is missing (a gpt2 tokenizer needs its merges)"
            )
        for rank, m in enumerate(f.get_strings("tokenizer.ggml.merges")):
            a, sep, b = m.partition(" ")
            if not sep:
                raise GGUFError(
                    f.path, f"metadata 'tokenizer.ggml.merges'[{rank}]", f"{text_repr(m)} is not 'left right'"
                )
            merges.setdefault((a, b), rank)
    return Tokenizer(
        kind=model,
        tokens=tokens,
        scores=scores,
        types=types,
        merges=merges,
        bos_id=_ids("tokenizer.ggml.bos_token_id"),
        eos_id=_ids("tokenizer.ggml.eos_token_id"),
        unk_id=_ids("tokenizer.ggml.unknown_token_id"),
        add_bos=f.get_bool("tokenizer.ggml.add_bos_token", model == "llama"),
        add_space_prefix=f.get_bool("tokenizer.ggml.add_space_prefix", model == "llama"),
        pre=f.get_str("tokenizer.ggml.pre", "default"),
        origin=f"{f.path}: vocabulary",
    )
