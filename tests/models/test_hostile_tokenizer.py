"""Tokenizer work stays near-linear in the input, whatever the vocabulary: a crafted vocabulary whose texts share
length and first and last eight bytes, one 20,000-letter word through byte-level BPE, 12,000 special tokens over
120 KB. Answers are checked against the algorithms' definitions written here (the plain dict lookup, the merge loop
that rescans the word, llama.cpp's partition one special token at a time); the time budgets are generous (seconds
for what llama.cpp does in milliseconds) and only there to tell linear from quadratic."""

from __future__ import annotations

import itertools
import random
import struct
import time

import numpy as np
import pytest

from ggml_core import VocabularyError
from ggml_core.models.gguf_file import StringArray
from ggml_core.models.tokenizer import TOKEN_TYPE, Tokenizer, bytes_to_unicode

S = "\u2581"
BUDGET_S = 8.0


def _string_array(texts: list[str]) -> StringArray:
    """The texts laid out as a GGUF file holds a string array (what load_tokenizer passes the tokenizer)."""
    blob, offsets = bytearray(b"HEAD"), []
    for t in texts:
        raw = t.encode()
        offsets.append(len(blob))
        blob += struct.pack("<Q", len(raw)) + raw
    offsets.append(len(blob))
    return StringArray("mem.gguf", "tokenizer.ggml.tokens", np.frombuffer(bytes(blob), np.uint8), np.array(offsets))


def _spm(texts: list[str], types: list[int] | None = None, *, file_backed: bool = False) -> Tokenizer:
    base = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    kinds = [TOKEN_TYPE["unknown"], TOKEN_TYPE["control"], TOKEN_TYPE["control"]] + [TOKEN_TYPE["byte"]] * 256
    kinds += types or [TOKEN_TYPE["normal"]] * len(texts)
    tokens = base + texts
    scores = [0.0] * len(base) + [float(len(t)) for t in texts]
    return Tokenizer(
        "llama", _string_array(tokens) if file_backed else tokens, scores, kinds, bos_id=1, eos_id=2, unk_id=0
    )


# ------------------------------------------------------------------------------------------------ vocabulary lookup


def test_crafted_vocabulary_keeps_lookups_fast_and_exact() -> None:
    """20,000 texts of one length with the same first and last eight bytes; 300 words looked up (and 300 misses of
    the same shape), then encoded."""
    rng = random.Random(1)
    crafted = [f"{S}aaaaaaa{i:05d}bbbbbbbb" for i in range(20_000)]
    tok = _spm(crafted, file_backed=True)
    reference = {t: i + 259 for i, t in enumerate(crafted)}  # the plain dict lookup
    words = [crafted[rng.randrange(len(crafted))] for _ in range(300)]
    words += [f"{S}aaaaaaa{rng.randrange(20_000, 10**5):05d}bbbbbbbb" for _ in range(300)]  # not in it
    start = time.perf_counter()
    got = [tok.token_id(w) for w in words]
    text = " ".join(w[1:] for w in words[:300])
    ids = tok.encode(text)
    took = time.perf_counter() - start
    assert got == [reference.get(w) for w in words]
    assert ids == _spm(crafted).encode(text)
    assert took < BUDGET_S, f"{took:.1f} s for 600 lookups and 300 words"


def test_a_text_repeated_many_times_maps_to_its_last_id() -> None:
    tok = _spm(["x"] * 30_000 + ["y"], file_backed=True)
    start = time.perf_counter()
    assert all(tok.token_id("x") == 259 + 29_999 for _ in range(3))
    assert (
        tok.encode("x" * 2000, add_bos=False) == [3 + 0xE2, 3 + 0x96, 3 + 0x81] + [259 + 29_999] * 2000
    )  # '▁' as bytes
    assert time.perf_counter() - start < BUDGET_S


# ------------------------------------------------------------------------------------------------ byte-level BPE


def _bpe_tokenizer(rng: random.Random, n_merges: int) -> Tokenizer:
    """A byte-level BPE over 'abc': merges of random pairs of what earlier merges built."""
    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)]
    merges: dict[tuple[str, str], int] = {}
    made = list("abc")
    while len(merges) < n_merges:
        pair = (rng.choice(made), rng.choice(made))
        if pair not in merges and len(pair[0] + pair[1]) <= 12:
            merges[pair] = len(merges)
            made.append(pair[0] + pair[1])
            tokens.append(pair[0] + pair[1])
    return Tokenizer("gpt2", tokens, merges=merges, pre="gpt2")


def _bpe_by_definition(merges: dict[tuple[str, str], int], word: str) -> list[str]:
    """Merge the lowest-ranked adjacent pair (ties: leftmost) until none merges, rescanning the word each time."""
    parts = list(word)
    while len(parts) > 1:
        ranked = [(merges[p], i) for i, p in enumerate(itertools.pairwise(parts)) if p in merges]
        if not ranked:
            break
        _, i = min(ranked)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


def test_bpe_merges_as_defined() -> None:
    rng = random.Random(2)
    for _ in range(6):
        tok = _bpe_tokenizer(rng, 60)
        for n in (1, 2, 3, 7, 40, 600):
            word = "".join(rng.choice("abc") for _ in range(n))
            assert tok._bpe(word) == _bpe_by_definition(tok.merges, word), word


def test_one_20000_letter_word_is_not_quadratic() -> None:
    rng = random.Random(3)
    tok = _bpe_tokenizer(rng, 200)
    word = "".join(rng.choice("abc") for _ in range(20_000))
    start = time.perf_counter()
    ids = tok.encode(word)
    took = time.perf_counter() - start
    assert "".join(tok.tokens[i] for i in ids) == word
    assert took < BUDGET_S, f"{took:.1f} s for one word of 20,000 letters"


# ------------------------------------------------------------------------------------------------ special tokens


def _partition_by_definition(specials: list[tuple[str, int]], text: str) -> list[str | int]:
    """llama.cpp's tokenizer_st_partition: each special text in turn, longest first, cuts every text fragment."""
    frags: list[str | int] = [text] if text else []
    for piece, tid in sorted(specials, key=lambda p: -len(p[0])):
        out: list[str | int] = []
        for f in frags:
            if isinstance(f, int) or piece not in f:
                out.append(f)
                continue
            for i, part in enumerate(f.split(piece)):
                if i:
                    out.append(tid)
                if part:
                    out.append(part)
        frags = out
    return frags


@pytest.mark.parametrize("seed", range(8))
def test_special_tokens_cut_as_llama_cpp_cuts(seed: int) -> None:
    """Random special texts over a tiny alphabet: prefixes of one another, overlapping, repeating into themselves."""
    rng = random.Random(seed)
    alphabet = "ab<>" if seed % 2 else "abc"
    texts = list(dict.fromkeys("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(12)))
    tok = _spm(texts, [TOKEN_TYPE["user_defined"]] * len(texts))
    for _ in range(30):
        text = "".join(rng.choice(alphabet + "xy ") for _ in range(rng.randint(0, 60)))
        assert tok._partition(text, False) == _partition_by_definition(tok._specials_user, text), (texts, text)


def test_12000_special_tokens_over_120kb() -> None:
    rng = random.Random(4)
    texts = [f"<|tool_{i}|>" for i in range(12_000)]
    tok = _spm(texts, [TOKEN_TYPE["user_defined"]] * len(texts))
    text = "".join(rng.choice(texts) + rng.choice(["", " hi", "x"]) for _ in range(9_000))[:120_000]
    start = time.perf_counter()
    got = tok._partition(text, False)
    took = time.perf_counter() - start
    assert "".join(tok.tokens[f] if isinstance(f, int) else f for f in got) == text
    assert sum(isinstance(f, int) for f in got) >= 8_000
    assert took < BUDGET_S, f"{took:.1f} s"
    small = text[:3000]
    assert tok._partition(small, False) == _partition_by_definition(tok._specials_user, small)


def test_special_tokens_that_are_runs_of_one_letter() -> None:
    """'a', 'aa', ... 'a' * 3000 over 120 KB of 'a': every span overlaps every other, the literal order decides."""
    texts = ["a" * k for k in range(1, 3001)]
    tok = _spm(texts, [TOKEN_TYPE["user_defined"]] * len(texts))
    text = "a" * 120_000 + "b" + "a" * 4_500
    start = time.perf_counter()
    got = tok._partition(text, False)
    took = time.perf_counter() - start
    assert took < BUDGET_S, f"{took:.1f} s"
    longest = tok.token_id("a" * 3000)
    assert got == [longest] * 40 + ["b", longest, tok.token_id("a" * 1500)]


# ------------------------------------------------------------------------------------------------ text it cannot encode


def test_text_the_vocabulary_cannot_encode_is_a_vocabulary_error() -> None:
    table = bytes_to_unicode()
    bpe = Tokenizer("gpt2", [table[b] for b in range(ord("a"), ord("z") + 1)], pre="gpt2")
    with pytest.raises(VocabularyError, match=r"cannot encode '€'") as err:
        bpe.encode("ab€")
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)
    spm = Tokenizer("llama", ["<s>", "a", S], [0.0, 0.0, 0.0], [3, 1, 1], bos_id=0)
    with pytest.raises(VocabularyError, match=r"byte 0x62"):
        spm.encode("ab")
