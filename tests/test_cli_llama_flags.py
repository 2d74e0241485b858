"""llama.cpp's flags on the ggml-core command line: no prefix matching, llama-cli's option names and defaults."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from ggml_core.cli import build_parser, main


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
