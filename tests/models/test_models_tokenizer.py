"""Tokenizers from a GGUF's own vocabulary: SentencePiece-style ("llama") and byte-level BPE ("gpt2"), checked on
hand-made vocabularies whose right answers follow from the algorithms' definitions, and by round trips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import TinyConfig, random_weights, write_and_close, write_model

from ggml_core import GGUFError
from ggml_core.models import open_gguf
from ggml_core.models.default_model import default_vocab, write_default_model
from ggml_core.models.tokenizer import TOKEN_TYPE, Tokenizer, bytes_to_unicode, load_tokenizer

S = "\u2581"


def _spm(pieces: dict[str, float], *, byte_tokens: bool = True) -> Tokenizer:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [TOKEN_TYPE["unknown"], TOKEN_TYPE["control"], TOKEN_TYPE["control"]]
    scores = [0.0, 0.0, 0.0]
    if byte_tokens:
        tokens += [f"<0x{b:02X}>" for b in range(256)]
        types += [TOKEN_TYPE["byte"]] * 256
        scores += [0.0] * 256
    for p, s in pieces.items():
        tokens.append(p)
        types.append(TOKEN_TYPE["normal"])
        scores.append(s)
    return Tokenizer("llama", tokens, scores, types, bos_id=1, eos_id=2, unk_id=0, add_bos=True)


def _pieces(tok: Tokenizer, ids: list[int]) -> list[str]:
    return [tok.tokens[i] for i in ids]


# ------------------------------------------------------------------------------------------------ SentencePiece


def test_spm_merges_best_scoring_pair_first() -> None:
    chars = {c: -10.0 for c in f"{S}helowrd"}
    tok = _spm({**chars, f"{S}h": 1, f"{S}he": 2, "ll": 3, "llo": 4, f"{S}hello": 5, f"{S}w": 1, "or": 2, "ld": 1})
    ids = tok.encode("hello world")
    assert ids[0] == 1  # BOS
    # ▁ h e l l o: ll (3) first, then llo (4), ▁h (1), ▁he (2), and ▁he + llo = ▁hello (5);
    # ▁ w o r l d: or (2), then ▁w (1) and ld (1) — equal scores, the left one first; nothing joins them further
    assert _pieces(tok, ids[1:]) == [f"{S}hello", f"{S}w", "or", "ld"]
    assert tok.decode(ids) == "hello world"


def test_spm_ties_merge_leftmost_and_scores_decide() -> None:
    tok = _spm({"a": -1, "aa": 1, "b": -1, "c": -1, "ab": 1, "bc": 2}, byte_tokens=False)
    tok.add_space_prefix = False
    assert _pieces(tok, tok.encode("aaa", add_bos=False)) == ["aa", "a"]
    assert _pieces(tok, tok.encode("abc", add_bos=False)) == ["a", "bc"]


def test_spm_byte_fallback_and_unknown() -> None:
    tok = _spm({S: -1, "a": -1})
    ids = tok.encode("a é", add_bos=False)
    assert _pieces(tok, ids) == [S, "a", S, "<0xC3>", "<0xA9>"]
    assert tok.decode(ids) == "a é"
    no_bytes = _spm({S: -1, "a": -1}, byte_tokens=False)
    assert _pieces(no_bytes, no_bytes.encode("é", add_bos=False)) == [S, "<unk>", "<unk>"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters=S, blacklist_categories=("Cs",)), max_size=40))
def test_spm_round_trip_with_the_default_vocabulary(text: str) -> None:
    tokens, scores, types = default_vocab()
    tok = Tokenizer("llama", tokens, scores, types, bos_id=1, eos_id=2, unk_id=0, add_bos=True)
    ids = tok.encode(text)
    assert ids[0] == 1
    assert tok.decode(ids) == text


# ------------------------------------------------------------------------------------------------ byte-level BPE


def _bpe(merges: list[tuple[str, str]], extra: list[str] = ()) -> Tokenizer:  # type: ignore[assignment]
    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)] + [a + b for a, b in merges] + list(extra)
    return Tokenizer("gpt2", tokens, merges={m: r for r, m in enumerate(merges)}, add_space_prefix=False)


def test_gpt2_byte_table() -> None:
    table = bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord("A")] == "A" and table[ord(" ")] == "\u0120" and table[ord("\n")] == "\u010a"


def test_gpt2_pre_tokenizer_pieces() -> None:
    from ggml_core.models.pretokenize import split

    pieces = split("Hello, world! I'm 123  x\n", "gpt2")
    assert pieces == ["Hello", ",", " world", "!", " I", "'m", " 123", " ", " x", "\n"]


def test_gpt2_merges_by_rank_not_position() -> None:
    tok = _bpe([("b", "a"), ("a", "b")])
    assert _pieces(tok, tok.encode("abab")) == ["a", "ba", "b"]
    hello = _bpe([("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w")])
    assert _pieces(hello, hello.encode("hello world")) == ["hello", "\u0120w", "o", "r", "l", "d"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_gpt2_round_trip(text: str) -> None:
    tok = _bpe([("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("i", "n")])
    assert tok.decode(tok.encode(text)) == text


# ------------------------------------------------------------------------------------------------ from GGUF files


def test_default_model_tokenizer(tmp_path: Path) -> None:
    tok = load_tokenizer(open_gguf(write_default_model(tmp_path / "d.gguf")))
    assert tok.kind == "llama" and tok.add_bos and tok.bos_id == 1 and tok.eos_id == 2
    assert _pieces(tok, tok.encode("hello world")[1:]) == [f"{S}hello", f"{S}world"]


def _with_tokenizer(path: Path, kind: str, tokens: list[str], merges: list[str] | None = None) -> Path:
    cfg = TinyConfig(n_vocab=len(tokens))
    w = random_weights(cfg, 0)
    src = write_model(path.with_suffix(".src.gguf"), cfg, w)
    f = open_gguf(src)
    writer = GGUFWriter(str(path), "llama")
    for key in f.keys:
        if key != "general.architecture":
            v = f.get(key)
            (writer.add_float32 if isinstance(v, float) else writer.add_uint32)(key, v)
    writer.add_string("tokenizer.ggml.model", kind)
    writer.add_array("tokenizer.ggml.tokens", tokens)
    if merges is not None:
        writer.add_array("tokenizer.ggml.merges", merges)
    writer.add_uint32("tokenizer.ggml.eos_token_id", len(tokens) - 1)
    for name, arr in w.items():
        writer.add_tensor(name, arr)
    write_and_close(writer)
    return path


def test_gpt2_tokenizer_from_a_gguf(tmp_path: Path) -> None:
    table = bytes_to_unicode()
    tokens = [table[b] for b in range(256)] + ["he", "ll", "hell", "hello", "<|end|>"]
    path = _with_tokenizer(tmp_path / "g.gguf", "gpt2", tokens, ["h e", "l l", "he ll", "hell o"])
    tok = load_tokenizer(open_gguf(path))
    assert tok.kind == "gpt2" and not tok.add_bos and tok.eos_id == len(tokens) - 1
    assert _pieces(tok, tok.encode("hello")) == ["hello"]


def test_tokenizer_metadata_errors(tmp_path: Path) -> None:
    plain = write_model(tmp_path / "p.gguf", TinyConfig(), random_weights(TinyConfig(), 0))
    with pytest.raises(GGUFError, match=r"tokenizer\.ggml\.model.*no tokenizer"):
        load_tokenizer(open_gguf(plain))
    bad = _with_tokenizer(tmp_path / "b.gguf", "gpt2", [chr(65 + i) for i in range(10)], None)
    with pytest.raises(GGUFError, match=r"tokenizer\.ggml\.merges.*missing"):
        load_tokenizer(open_gguf(bad))
    odd = _with_tokenizer(tmp_path / "o.gguf", "wordpiece", ["a", "b"])
    with pytest.raises(GGUFError, match="'wordpiece' is not supported"):
        load_tokenizer(open_gguf(odd))


def test_numbers_round_trip_through_numpy_ids() -> None:
    tok = _bpe([])
    ids = tok.encode("x" * 5)
    assert np.array_equal(np.asarray(ids), np.full(5, ord("x")))
