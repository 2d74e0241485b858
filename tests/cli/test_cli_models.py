"""``ggml-core models`` (the family registry) and ``ggml-core tokenize`` (llama-tokenize's output) on a hand-made
SentencePiece vocabulary whose ids are worked out by hand below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFWriter
from tiny_models import write_and_close

from ggml_core.cli import main
from ggml_core.models import ARCHITECTURES

# id: 0 <unk> (unknown), 1 <s> (control), 2 </s> (control), 3 <turn> (control), 4 "\n\n" (user-defined),
# 5 ▁, 6 a, 7 b, 8 ▁a, 9 ab, 10 ▁ab, then the 256 byte tokens <0x00>.. from id 11
TOKENS = ["<unk>", "<s>", "</s>", "<turn>", "\n\n", "\u2581", "a", "b", "\u2581a", "ab", "\u2581ab"]
TYPES = [2, 3, 3, 3, 4, 1, 1, 1, 1, 1, 1]
SCORES = [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -1.0, -0.5]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "vocab.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", TOKENS + [f"<0x{b:02X}>" for b in range(256)])
    w.add_array("tokenizer.ggml.scores", SCORES + [0.0] * 256)
    w.add_array("tokenizer.ggml.token_type", TYPES + [6] * 256)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    write_and_close(w)
    return path


def test_models_lists_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(ARCHITECTURES)
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["rope"] for r in rows}["gemma3"] == "neox" and {r["name"] for r in rows} >= {"llama", "qwen3"}


def test_tokenize_prints_llama_tokenize_lines(vocab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # " ab a" with the prefix space: ▁ab (score -0.5 beats ▁a's -1.5 and ab's -1.0), ▁a
    assert main(["tokenize", str(vocab), "ab a"]) == 0
    assert capsys.readouterr().out.splitlines() == ["     1 -> '<s>'", "    10 -> ' ab'", "     8 -> ' a'"]


def test_tokenize_user_defined_always_control_with_parse_special(
    vocab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "\n\n" is user-defined: always its own token; the fragment after it gets the prefix space again
    assert main(["tokenize", str(vocab), "a\n\na<turn>", "--json", "--no-bos"]) == 0
    plain = json.loads(capsys.readouterr().out)
    # without --parse-special "<turn>" is text: '<', 't', ... have no tokens, so their bytes (0x3C is id 11 + 60)
    assert plain["ids"][:3] == [8, 4, 8] and plain["ids"][3:] == [11 + b for b in b"<turn>"]
    assert main(["tokenize", str(vocab), "a\n\na<turn>", "--ids", "--no-bos", "--parse-special"]) == 0
    assert capsys.readouterr().out.strip() == "[8, 4, 8, 3]"


def test_tokenize_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokenize", str(tmp_path / "missing.gguf"), "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert "missing.gguf" in err and "\n" not in err
    no_vocab = tmp_path / "novocab.gguf"
    w = GGUFWriter(str(no_vocab), "llama")
    write_and_close(w)
    assert main(["tokenize", str(no_vocab), "x"]) == 2
    assert "tokenizer.ggml.model" in capsys.readouterr().err
