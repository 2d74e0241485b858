"""The vocabulary index (ggml_core/models/vocab.py) answers exactly as the dict of the texts would.

The reference is the plain ``{text: id for id, text in enumerate(tokens)}`` (the last id of a repeated text, as
llama.cpp's ``token_to_id``), over arrays laid out as GGUF stores them (an 8-byte length before each string).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
import pytest

from ggml_core._errors import GGUFError
from ggml_core.models import vocab
from ggml_core.models.gguf_file import StringArray
from ggml_core.models.vocab import VocabIndex

GEMMA = Path.home() / ".cache" / "ggml-core" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"


def _array(items: list[bytes], lead: bytes = b"HEAD") -> StringArray:
    """A string array as a GGUF file holds one (after ``lead`` bytes of something else)."""
    blob, offsets = bytearray(lead), []
    for raw in items:
        offsets.append(len(blob))
        blob += struct.pack("<Q", len(raw)) + raw
    offsets.append(len(blob))
    blob += b"TAIL"
    return StringArray("mem.gguf", "tokenizer.ggml.tokens", np.frombuffer(bytes(blob), np.uint8), np.array(offsets))


def _reference(texts: list[str]) -> dict[str, int]:
    return {t: i for i, t in enumerate(texts)}


def _vocabulary(rng: random.Random) -> list[str]:
    alphabet = "ab▁é中😀\x00 xyz"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(3000)]
    texts += ["", "a", "ab", "abcdefgh", "abcdefghi", "abcdefghijklmnop", "abcdefghijklmnopq"]
    # same length, same first and last eight bytes: the same key, told apart by the bytes
    texts += ["aaaaaaaaXbbbbbbbb", "aaaaaaaaYbbbbbbbb", "aaaaaaaa" + "é" + "bbbbbbbb"]
    texts += ["▁the", "x", "▁the", "x", ""]  # repeated texts: the last id wins
    return texts


def test_every_text_and_non_texts_answer_as_the_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vocab, "_MEMO_MAX", 10**9)
    rng = random.Random(7)
    texts = _vocabulary(rng)
    index, ref = VocabIndex(_array([t.encode() for t in texts])), _reference(texts)
    assert index._dict is None  # the table, not the fallback
    for t in texts:
        assert index.get(t) == ref[t], t
    others = ["".join(rng.choice("ab▁é中q") for _ in range(rng.randint(0, 24))) for _ in range(3000)]
    others += ["aaaaaaaaZbbbbbbbb", "abcdefghX", "HEAD", "TAIL", "\x00"]
    for t in others:
        assert index.get(t) == ref.get(t), t
        assert index.get(t) == ref.get(t), t  # memoised: the same again


def test_many_distinct_lookups_switch_to_the_dict_with_the_same_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vocab, "_MEMO_MAX", 50)
    texts = _vocabulary(random.Random(3))
    index, ref = VocabIndex(_array([t.encode() for t in texts])), _reference(texts)
    answers = [index.get(t) for t in texts] + [index.get(t + "?") for t in texts[:100]]
    assert index._dict is not None
    assert answers == [ref[t] for t in texts] + [ref.get(t + "?") for t in texts[:100]]


def test_long_strings_take_the_dict_path() -> None:
    texts = ["x" * 200, "short", "y" * 128]
    index = VocabIndex(_array([t.encode() for t in texts]))
    assert index._dict is not None
    assert [index.get(t) for t in [*texts, "z"]] == [0, 1, 2, None]


@pytest.mark.parametrize(
    ("items", "bad"),
    [
        ([b"ok", b"\xff", b"fine"], 1),  # not UTF-8 at all
        ([b"ok", b"\xe4\xb8", b"\xad", b"fine"], 1),  # a character split across two strings: each invalid alone
        ([b"ok", b"fine", b"ab\xc3"], 2),  # truncated at the end of the array
    ],
)
def test_invalid_utf8_is_an_error_naming_the_string(items: list[bytes], bad: int) -> None:
    with pytest.raises(GGUFError, match=rf"tokenizer\.ggml\.tokens'\[{bad}\].*not valid UTF-8"):
        VocabIndex(_array(items))


def test_take_decodes_only_the_strings_asked_for() -> None:
    arr = _array([b"zero", "één".encode(), b"", b"three", b"\xff"])
    assert arr.take([3, 0, 1, 2]) == ["three", "zero", "één", ""]
    assert arr.take([]) == []
    with pytest.raises(GGUFError, match=r"\[4\]"):
        arr.take([4])


@pytest.mark.skipif(
    not GEMMA.is_file(), reason="the Gemma 3 model is fetched by tests/models/test_models_gemma3_real.py"
)
def test_gemma3_vocabulary_answers_as_the_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggml_core.models import open_gguf

    monkeypatch.setattr(vocab, "_MEMO_MAX", 10**9)
    arr = open_gguf(GEMMA).get_string_array("tokenizer.ggml.tokens")
    texts = arr.tolist()
    index, ref = VocabIndex(arr), _reference(texts)
    assert index._dict is None and len(texts) == 262144
    assert [index.get(t) for t in texts] == [ref[t] for t in texts]
    assert all(index.get(t + "\x01") == ref.get(t + "\x01") for t in texts[::97])
