"""The command line's answer to bad input: exit status 2 and one line on stderr, never a traceback."""

from __future__ import annotations

import pytest

from ggml_core.cli import main


def cli_error(capsys: pytest.CaptureFixture[str], argv: list[str], *, at_parse: bool = False) -> str:
    """Run the CLI on ``argv`` expecting exit status 2 and one line on stderr without a traceback; returns that line.

    ``at_parse``: the error must come from parsing (argparse exits, ``SystemExit``); otherwise the command may also
    return the status itself.
    """
    if at_parse:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        rc = exit_info.value.code
    else:
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code  # type: ignore[assignment]
    out = capsys.readouterr()
    assert rc == 2, out
    assert out.err.count("\n") == 1 and "Traceback" not in out.err, out.err
    return out.err
