"""Text from plugins, peers and files is printed as data: terminal controls escaped, lengths bounded."""

from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import ggml_core.cli.devices as devices_cli
from ggml_core import GGUFError
from ggml_core._text import TEXT_LIMIT, safe_text, text_repr
from ggml_core.cli import main
from ggml_core.models import read_header

#: what a hostile peer puts in a name: set the title, clear the screen, a C1 CSI, DEL, a forged line, a bidi override
HOSTILE = "GPU\x1b]0;pwned\x07\x1b[2J\x1b[H\x9b31m\x7f\r\n  CPU: forged device line\u202eexe.txt"
CONTROLS = ("\x1b", "\x07", "\x9b", "\x7f", "\r", "\u202e")


def test_safe_text_escapes_every_control_readably() -> None:
    got = safe_text(HOSTILE)
    assert not any(c in got for c in CONTROLS) and "\n" not in got
    assert got == ("GPU\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x9b31m\\x7f\\r\\n  CPU: forged device line\\u202eexe.txt")
    assert safe_text("Ünïcödé 中文 ✓ tab-free") == "Ünïcödé 中文 ✓ tab-free"  # printable text is unchanged
    assert safe_text("\ud800x") == "\\ud800x"  # a lone surrogate would make print() raise


def test_safe_text_bounds_length_and_states_it() -> None:
    got = safe_text("x" * 1_000_000)
    assert got.startswith("x" * TEXT_LIMIT) and got.endswith("… (1,000,000 characters in all)")
    assert len(got) < TEXT_LIMIT + 40
    assert len(safe_text("\x1b" * 10_000)) < 6 * TEXT_LIMIT
    assert text_repr("a\x1bb") == repr("a\x1bb")
    assert text_repr("k" * 5000).endswith("… (5,000 characters in all)") and len(text_repr("k" * 5000)) < 260


class _FakeRegistry:
    """A registry with one device whose every string is hostile (what an RPC server may report)."""

    def __init__(self, text: str) -> None:
        self.reg = SimpleNamespace(name="RPC" + text, plugin="ggml-rpc", unavailable_reason=None)
        caps = SimpleNamespace(asynchronous=False, host_buffer=False, buffer_from_host_ptr=False, events=False)
        props = SimpleNamespace(
            name="RPC0" + text, description=text * 20_000, type=SimpleNamespace(name="GPU"), device_id=text,
            memory_free=2**30, memory_total=2**31, caps=caps, extra={},
        )  # fmt: skip
        buft = SimpleNamespace(name="RPC0_buf" + text, alignment=32, max_size=2**40, is_host=False)
        self.dev = SimpleNamespace(
            name="RPC0" + text, reg=self.reg, props=lambda: props, all_buffer_types=lambda: [buft]
        )
        self.regs = [self.reg]
        self.plugins: list[Any] = []

    def devices(self) -> list[Any]:
        return [self.dev]

    def same_hardware(self) -> list[Any]:
        return []

    def problems(self) -> list[Any]:
        return []


def test_devices_prints_peer_text_as_data(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(devices_cli, "get_registry", lambda: _FakeRegistry(HOSTILE))
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in CONTROLS)
    lines = out.splitlines()
    assert len(lines) == 4, lines  # registry, device, type/memory, buffer types: no forged line
    assert not any(line.lstrip().startswith("CPU:") for line in lines)
    assert max(len(line) for line in lines) < 1000  # a 1.5 MB description is cut
    assert "characters in all)" in lines[1]


def _gguf_with_duplicate_key(path: Path, key: str) -> Path:
    def string(s: str) -> bytes:
        raw = s.encode()
        return struct.pack("<Q", len(raw)) + raw

    entry = string(key) + struct.pack("<I", 8) + string("v")  # type 8: a string value
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + entry + entry)
    return path


def test_gguf_errors_quote_file_strings_bounded(tmp_path: Path) -> None:
    key = "k\x1b[2J" + "x" * 4000
    with pytest.raises(GGUFError, match="appears twice") as err:
        read_header(_gguf_with_duplicate_key(tmp_path / "dup.gguf", key))
    msg = str(err.value)
    assert "\x1b" not in msg and "\n" not in msg
    assert len(msg) < 600 and "characters in all)" in msg


def test_tokenizer_errors_quote_file_strings_bounded(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    from ggml_core.models import open_gguf
    from ggml_core.models.tokenizer import load_tokenizer

    path = tmp_path / "odd.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("tokenizer.ggml.model", "\x1b]0;title\x07" + "w" * 100_000)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(GGUFError, match="is not supported") as err:
        load_tokenizer(open_gguf(path))
    msg = str(err.value)
    assert "\x1b" not in msg and "\x07" not in msg and len(msg) < 600 and "characters in all)" in msg


def test_gguf_error_paths_and_plugin_text_are_escaped() -> None:
    from ggml_core.backend._validate import safe_str

    err = GGUFError("m\x1b[2Jodel.gguf", "metadata 'x'", "is missing")
    assert "\x1b" not in str(err) and "\\x1b" in str(err)
    assert err.path == "m\x1b[2Jodel.gguf"  # the attribute keeps the real path
    said = safe_str("plugin says \x1b]0;owned\x07 hello\n" + "z" * 5000)
    assert "\x1b" not in said and "\x07" not in said and "\n" not in said and len(said) < 400


def test_unknown_architecture_name_is_escaped_and_bounded(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    from ggml_core.models import open_gguf
    from ggml_core.models.arch import read_hparams

    path = tmp_path / "arch.gguf"
    writer = GGUFWriter(str(path), "\x1b[31mfake" + "a" * 10_000)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    with pytest.raises(GGUFError, match="is not supported") as err:
        read_hparams(open_gguf(path))
    msg = str(err.value)
    assert "\x1b" not in msg and "characters in all)" in msg and len(msg) < 1000


def test_tokenize_prints_vocabulary_pieces_as_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A vocabulary piece holding an ESC sequence is printed escaped, in both the plain and the JSON output."""
    from gguf import GGUFWriter

    path = tmp_path / "hostile.gguf"
    word = "\u2581a\x1b[2J"  # SentencePiece reaches it by merging pairs: every prefix is a piece
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "\x1b", "[", "2", "J"]
    tokens += [word[:n] for n in range(2, len(word) + 1)]
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.scores", [0.0] * 9 + [float(n) for n in range(len(tokens) - 9)])
    writer.add_array("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    assert main(["tokenize", str(path), "a\x1b[2J", "--no-bos"]) == 0
    plain = capsys.readouterr().out
    assert main(["tokenize", str(path), "a\x1b[2J", "--no-bos", "--json"]) == 0
    js = capsys.readouterr().out
    assert "\x1b" not in plain and "\\x1b" in plain, plain
    assert "\x1b" not in js and "\\u001b" in js, js
