"""llama.cpp's flags on the ggml-core command line: no prefix matching, llama-cli's option names and defaults."""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import re
import subprocess
import sys
import tarfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_errors import cli_error
from gguf import GGUFWriter
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core.cli import build_parser, main
from ggml_core.models import open_gguf
from ggml_core.models.tokenizer import load_tokenizer


def _parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_parser_matches_prefixes() -> None:
    """Every parser and subparser, plugin commands included, reads an option only by its full name."""
    seen = dict(_parsers(build_parser()))
    assert {"ggml-core run", "ggml-core chat", "ggml-core test-ops", "ggml-core devices"} <= set(seen)
    assert [prog for prog, p in seen.items() if p.allow_abbrev] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["devices", "--chec"],  # once read as --check
        ["run", "--n-pred=3"],  # once read as --n-predict
        ["tokenize", "m.gguf", "hi", "--no-bo"],  # once read as --no-bos
    ],
)
def test_a_prefix_is_an_unknown_option(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and f"'{argv[-1]}'" in err


# a SentencePiece vocabulary that encodes any text: control tokens, letters, and the 256 byte tokens
SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"]
LETTERS = ["\u2581"] + [chr(c) for c in range(97, 123)]
CFG = TinyConfig(n_vocab=len(SPECIALS) + len(LETTERS) + 256)
GEMMA_LIKE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
    "{% endfor %}<start_of_turn>model\n"
)


def _vocab(template: str | None) -> Callable[[GGUFWriter], None]:
    tokens = SPECIALS + LETTERS + [f"<0x{b:02X}>" for b in range(256)]
    types = [2] + [3] * (len(SPECIALS) - 1) + [1] * len(LETTERS) + [6] * 256

    def add(w: GGUFWriter) -> None:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", types)
        w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
        w.add_uint32("tokenizer.ggml.bos_token_id", 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
        if template is not None:
            w.add_string("tokenizer.chat_template", template)

    return add


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model whose file has no chat template."""
    path = tmp_path_factory.mktemp("flags") / "plain.gguf"
    return write_model(path, CFG, random_weights(CFG, 1), "f32", extra=_vocab(None))


@pytest.fixture(scope="module")
def templated_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flags") / "templated.gguf"
    return write_model(path, CFG, random_weights(CFG, 1), "f32", extra=_vocab(GEMMA_LIKE))


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    rc = main(list(argv))
    out = capsys.readouterr()
    assert rc == 0, out.err
    return dict(json.loads(out.out))


RUN = ["--device", "CPU", "--temp", "0", "-n", "3", "--ignore-eos", "--json"]


@pytest.mark.parametrize("form", [["-m"], ["--model"], []])
def test_model_flag_and_positional_are_the_same(
    plain_model: Path, form: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    info = _json(capsys, "run", *form, str(plain_model), "-no-cnv", "-p", "abc", *RUN)
    assert info["model"] == str(plain_model) and len(info["tokens"]) == 3


def test_prompt_special_tokens_are_parsed_as_llama_cli_does(
    plain_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = open_gguf(plain_model)
    tok = load_tokenizer(f)
    info = _json(capsys, "run", str(plain_model), "-p", "<start_of_turn>ab", *RUN)
    assert info["prompt_tokens"] == tok.encode("<start_of_turn>ab", parse_special=True)
    assert 5 in info["prompt_tokens"]  # one token, not the letters of its name


def test_file_prompt_drops_one_trailing_newline(
    plain_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "p.txt").write_text("abc\n")
    from_file = _json(capsys, "run", str(plain_model), "-f", str(tmp_path / "p.txt"), *RUN)
    given = _json(capsys, "run", str(plain_model), "-p", "abc", *RUN)
    assert from_file["prompt_tokens"] == given["prompt_tokens"] and from_file["tokens"] == given["tokens"]
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    with pytest.raises(SystemExit):
        main(["run", str(plain_model), "-f", str(tmp_path / "bad.txt")])
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_cache_types(plain_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _json(capsys, "run", str(plain_model), "-p", "ab", "-ctk", "f32", "-ctv", "f32", *RUN)["kv_type"] == "f32"
    both = _json(capsys, "run", str(plain_model), "-p", "ab", "-ctk", "f32", "-ctv", "f16", *RUN)
    assert (both["type_k"], both["type_v"]) == ("f32", "f16")
    half = _json(capsys, "run", str(plain_model), "-p", "ab", "--kv-type", "f32", "-ctv", "f16", *RUN)
    assert (half["type_k"], half["type_v"]) == ("f32", "f16")  # -ctk/-ctv override --kv-type's half


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["-ctv", "q4_0"], "V cache quantization requires flash_attn: -ctv q4_0 needs -fa on"),
        (["--kv-type", "q8_0", "-fa", "off"], "V cache quantization requires flash_attn: -ctv q8_0 needs -fa on"),
        (["-ctk", "q4_2"], "argument --cache-type-k/-ctk: unsupported cache type 'q4_2' (one of f32, f16, bf16,"),
        (["-ctk", "q8_0"], "--cache-type-k q8_0: its block of 32 values does not divide n_embd_head_k=16"),
    ],
)
def test_cache_type_refusals(
    plain_model: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    try:
        rc = main(["run", str(plain_model), "-p", "ab", *flags, *RUN])
    except SystemExit as exc:  # argparse's own type check
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc != 0 and message in err, err
    assert len([line for line in err.splitlines() if "error" in line]) == 1, err


def test_penalties_change_greedy_output_as_the_definition_says(
    plain_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Greedy with the penalties: each step's token is the argmax of that step's logits (from a --logits-out run of
    the sequence so far) penalized over the prompt and the tokens generated before it."""
    base = ["--device", "CPU", "--temp", "0", "--ignore-eos", "--json"]
    prompt = [1, *range(40, 250, 2)]  # the unpenalized greedy picks 72 first: inside the window, so penalized
    flags = ["--repeat-penalty", "3", "--presence-penalty", "5", "--frequency-penalty", "0.25"]
    flags += ["--repeat-last-n", "256"]
    ids = ",".join(map(str, prompt))
    info = _json(capsys, "run", str(plain_model), "--tokens", ids, "-n", "4", *flags, *base)
    seq = list(prompt)
    out = tmp_path / "l.npy"
    for t in info["tokens"]:
        step = ",".join(map(str, seq))
        _json(capsys, "run", str(plain_model), "--tokens", step, "-n", "1", "--logits-out", str(out), *base)
        x = np.load(out)[-1].astype(np.float64)
        for tid, c in Counter(seq[-256:]).items():
            x[tid] = (x[tid] / 3 if x[tid] > 0 else x[tid] * 3) - 0.25 * c - 5
        assert t == int(np.argmax(x))
        seq.append(t)
    unpenalized = _json(capsys, "run", str(plain_model), "--tokens", ids, "-n", "4", *base)
    assert unpenalized["tokens"] != info["tokens"]  # the penalties changed the choice: the check is not vacuous


def test_special_prints_control_tokens(plain_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", str(plain_model), "-p", "<start_of_turn>ab", "--device", "CPU", "--temp", "0", "-n", "1"]
    assert main([*argv, "-sp"]) == 0
    assert "<start_of_turn>" in capsys.readouterr().out
    assert main(argv) == 0
    assert "<start_of_turn>" not in capsys.readouterr().out


def test_json_text_with_tokens_is_the_decoded_text(plain_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = _json(capsys, "run", str(plain_model), "--tokens", "1,9,10", *RUN)
    tok = load_tokenizer(open_gguf(plain_model))
    assert info["text"] is not None and info["text"] == tok.decode(info["tokens"], strip_prefix_space=False)


def _chat(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, stdin: bytes, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    rc = main(["chat", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


CHAT = ["--device", "CPU", "--temp", "0", "-n", "2", "--ctx-size", "256", "-v"]


def _prompt_ids(err: str) -> list[int]:
    """The prompt's token ids from -v's listing."""
    return [int(line.split("->")[0]) for line in err.splitlines() if "->" in line]


def test_chat_without_a_template_falls_back_to_chatml(
    plain_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _out, err = _chat(capsys, monkeypatch, b"ab\n", str(plain_model), *CHAT)
    assert rc == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "chatml" in notes[0] and "no chat template" in notes[0]
    tok = load_tokenizer(open_gguf(plain_model))
    want = "<|im_start|>user\nab<|im_end|>\n<|im_start|>assistant\n"  # llama.cpp's chatml, written out
    assert _prompt_ids(err) == tok.encode(want, parse_special=True)


LLAMA3_AB = "<|start_header_id|>user<|end_header_id|>\n\nab<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


@pytest.mark.parametrize(
    ("flag", "want"),
    [
        (["--chat-template", "llama3"], LLAMA3_AB),
        (["--chat-template", "gemma"], "<start_of_turn>user\nab<end_of_turn>\n<start_of_turn>model\n"),
        (["--chat-template", "[{{ messages[0]['content'] }}]"], "[ab]"),
    ],
)
def test_chat_template_flag(
    templated_model: Path,
    flag: list[str],
    want: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rc, _out, err = _chat(capsys, monkeypatch, b"ab\n", str(templated_model), *CHAT, *flag)
    assert rc == 0, err
    tok = load_tokenizer(open_gguf(templated_model))
    assert _prompt_ids(err) == tok.encode(want, parse_special=True)


def test_chat_template_file_and_system_prompt(
    templated_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "t.jinja").write_text("{% for m in messages %}{{ m['role'][0] }}{{ m['content'] }}{% endfor %}")
    for flag in (["--chat-template-file"], ["--chat-template"]):
        rc, _out, err = _chat(
            capsys, monkeypatch, b"ab\n", str(templated_model), *CHAT, *flag, str(tmp_path / "t.jinja"), "-sys", "cd"
        )
        assert rc == 0, err
        tok = load_tokenizer(open_gguf(templated_model))
        assert _prompt_ids(err) == tok.encode("scduab", parse_special=True)


def test_unknown_template_name_is_one_line(
    templated_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _out, err = _chat(capsys, monkeypatch, b"ab\n", str(templated_model), *CHAT, "--chat-template", "chatm")
    assert rc == 2 and "did you mean 'chatml'" in err and err.strip().count("\n") == 0


def test_chat_without_a_model_uses_the_embedded_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, err = _chat(capsys, monkeypatch, b"hello\n", "--temp", "0", "-n", "2")
    assert rc == 0, err
    assert len(out.splitlines()) == 1 and "using chatml" in err


def test_chat_prompt_is_the_first_message_and_single_turn_ends(
    templated_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, out, err = _chat(capsys, monkeypatch, b"cd\nef\n", str(templated_model), *CHAT, "-p", "ab", "-st")
    assert rc == 0, err
    tok = load_tokenizer(open_gguf(templated_model))
    want = "<s><start_of_turn>user\nab<end_of_turn>\n<start_of_turn>model"  # jinja drops a template's last newline
    assert _prompt_ids(err) == tok.encode(want, add_bos=False, parse_special=True)
    assert len(out.splitlines()) == 1


def _option_rows() -> list[tuple[list[str], str]]:
    """(the code spans of the first cell, the second cell) of docs/models.md's llama-cli table."""
    text = (Path(__file__).parents[2] / "docs" / "models.md").read_text()
    section = text.split("### llama-cli's options", 1)[1].split("\n\n", 2)[2]
    rows = []
    for line in section.split("\n\n", 1)[0].splitlines()[2:]:
        cells = line.strip("|").split(" | ")
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return rows


def test_every_option_the_table_says_is_taken_is_taken() -> None:
    parser = build_parser(plugin_commands=False)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = {o for cmd in ("run", "chat") for a in sub.choices[cmd]._actions for o in a.option_strings}
    taken = [o for spans, here in _option_rows() if here.startswith("taken") for o in spans]
    assert len(taken) > 60 and [o for o in taken if o not in known] == []


def test_the_table_lists_every_llama_cli_option() -> None:
    """Each option in llama-cli's own list (llama.cpp 0c1e570's tools/cli/README.md, from the sdist the llama.cpp
    harness downloads) appears in the table, by name or by a ``--spec-*`` pattern."""
    from ggml_core.testing.llama_cpp import SDIST_FILE, cache_dir

    sdist = cache_dir() / SDIST_FILE
    if not sdist.is_file():
        pytest.skip(f"llama.cpp's sources are not cached here ({sdist}); the llama.cpp harness downloads them")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("vendor/llama.cpp/tools/cli/README.md"))
        readme = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    theirs = set()
    for line in readme.splitlines():
        if line.startswith("| `"):
            first = line.split("`")[1]
            theirs |= {w.split(" ")[0] for w in first.split(", ") if w.startswith("-")}
    assert len(theirs) > 250
    ours = [o for spans, _ in _option_rows() for span in spans for o in span.split(", ")]
    missing = sorted(o for o in theirs if not any(fnmatch.fnmatchcase(o, pat) for pat in ours))
    assert missing == []


# no traceback from the command line: bad text, bad values, a closed pipe


def test_invalid_utf8_in_an_argument_is_one_line(plain_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = b"\xff\xfeab".decode("utf-8", "surrogateescape")  # what Python makes of such bytes in argv
    for argv in (["tokenize", str(plain_model), bad], ["run", str(plain_model), "-p", bad], ["chat", "-sys", bad]):
        assert "is not valid UTF-8: byte 0xFF at character 0" in cli_error(capsys, argv, at_parse=True)


def test_invalid_utf8_on_chat_stdin_is_replaced(
    plain_model: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, _out, err = _chat(capsys, monkeypatch, b"\xffab\n", str(plain_model), *CHAT)
    assert rc == 0, err
    tok = load_tokenizer(open_gguf(plain_model))
    want = "<|im_start|>user\n\ufffdab<|im_end|>\n<|im_start|>assistant\n"
    assert _prompt_ids(err) == tok.encode(want, parse_special=True)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--temp", "nan"], "argument --temp: must be a finite number"),
        (["--top-p", "2"], "argument --top-p: must be a finite number in (0.0, 1.0], got 2"),
        (["--top-k", "-5"], "argument --top-k: must be an integer in 0..2147483647, got -5"),
        (["--min-p", "1.5"], "argument --min-p: must be a finite number in [0.0, 1.0], got 1.5"),
        (["--repeat-penalty", "0"], "argument --repeat-penalty: must be a finite number in (0.0, inf], got 0"),
        (["--presence-penalty", "inf"], "argument --presence-penalty: must be a finite number"),
        (["--repeat-last-n", "-1"], "argument --repeat-last-n: must be an integer in 0..2147483647, got -1"),
    ],
)
def test_chat_checks_sampling_values_when_parsing(
    flag: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in cli_error(capsys, ["chat", *flag], at_parse=True)


def test_text_the_vocabulary_cannot_encode_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = ["<s>", "</s>", "\u2581", "a", "b"] + [f"x{i}" for i in range(59)]  # no byte tokens, no <unk>

    def vocab(w: GGUFWriter) -> None:
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        w.add_array("tokenizer.ggml.token_type", [3, 3] + [1] * (len(tokens) - 2))
        w.add_uint32("tokenizer.ggml.bos_token_id", 0)
        w.add_uint32("tokenizer.ggml.eos_token_id", 1)

    cfg = TinyConfig(n_vocab=len(tokens))
    path = write_model(tmp_path / "nobytes.gguf", cfg, random_weights(cfg, 0), "f32", extra=vocab)
    assert main(["tokenize", str(path), "\u00df"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ggml-core tokenize: error:") and "cannot encode" in err and "\n" not in err


@pytest.mark.parametrize("command", ["tokenize", "devices"])
def test_a_closed_pipe_ends_quietly(plain_model: Path, command: str) -> None:
    """``ggml-core tokenize ... | head``: the reader goes away; no BrokenPipeError traceback."""
    argv = ["tokenize", str(plain_model), "ab " * 20000] if command == "tokenize" else ["devices"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ggml_core.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


@pytest.mark.parametrize(
    ("typed", "read"),
    [
        ("a\\nb\\rc\\td", "a\nb\rc\td"),
        ("\\'q\\' \\\"q\\\" \\\\", "'q' \"q\" \\"),
        ("\\x41\\x62", "Ab"),
        ("\\xc3\\xa9", "\u00e9"),  # bytes that form UTF-8
        ("\\xff", "\ufffd"),  # a byte that does not
        ("\\x4", "\\x4"),  # too short: kept
        ("\\x4g", "\\x4g"),  # not hex: kept
        ("\\q \\", "\\q \\"),  # unknown escapes and a last backslash: kept
    ],
)
def test_prompt_escapes_as_llama_cpp(typed: str, read: str) -> None:
    """llama.cpp's string_process_escapes, case by case."""
    from ggml_core.cli._llama_args import process_escapes

    assert process_escapes(typed) == read


def test_run_reads_escapes_unless_told_not_to(plain_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = load_tokenizer(open_gguf(plain_model))
    escaped = _json(capsys, "run", str(plain_model), "-p", "ab\\nab", *RUN)
    assert escaped["prompt_tokens"] == tok.encode("ab\nab", parse_special=True)
    kept = _json(capsys, "run", str(plain_model), "-p", "ab\\nab", "--no-escape", *RUN)
    assert kept["prompt_tokens"] == tok.encode("ab\\nab", parse_special=True)


def test_chat_list_devices_lists_them(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """As run's: the devices, then exit (not a chat on stdin)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\n"))
    assert main(["chat", "--list-devices"]) == 0
    assert capsys.readouterr().out.startswith("Available devices:\n")


def test_no_mmap_copies_the_weights_and_computes_the_same(
    plain_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["run", str(plain_model), "--device", "CPU", "--tokens", "1,9,10,11", "-n", "1", "--json"]
    runs = {}
    for flag in ("--mmap", "--no-mmap"):
        out = tmp_path / f"{flag}.npy"
        info = _json(capsys, *base, flag, "--logits-out", str(out))
        (cpu,) = info["devices"]
        runs[flag] = (cpu, np.load(out))
    assert runs["--mmap"][0]["weights_mapped"] and not runs["--no-mmap"][0]["weights_mapped"]
    assert runs["--mmap"][0]["weights_MB"] == runs["--no-mmap"][0]["weights_MB"]
    np.testing.assert_array_equal(runs["--mmap"][1], runs["--no-mmap"][1])
