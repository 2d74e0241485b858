"""Outcomes that must not look like success when they are not: op filters that select nothing, group names, the
notes and advice ``run`` prints."""

from __future__ import annotations

import pytest

from ggml_core import OpFilterError
from ggml_core.cli import main
from ggml_core.ops import GluOp, UnaryOp
from ggml_core.testing import conformance_suite
from ggml_core.testing.cases import all_cases, select


@pytest.mark.parametrize("argv", [["-o", "FOO"], ["-o", "ADD,FOO"], ["-o", "ADD", "-p", "no such case"]])
def test_test_ops_filter_matching_nothing_is_an_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "-b", "CPU", *argv]) == 2
    out = capsys.readouterr()
    assert "passed" not in out.out and "OK" not in out.out
    err = out.err.strip()
    assert err.startswith("ggml-core test-ops: error: op filter") and "\n" not in err
    assert ("FLOOR" in err) if "FOO" in argv[1] else ("the ops with cases are" in err and "MUL_MAT" in err)


@pytest.mark.parametrize(("group", "members"), [("UNARY", UnaryOp), ("GLU", GluOp)])
def test_group_names_select_every_case_of_their_sub_ops(group: str, members: type) -> None:
    want = [c for c in all_cases() if c.op in {m.name for m in members}]
    assert want and select(ops=group) == want
    assert select(ops=f"ADD,{group.lower()}") == [c for c in all_cases() if c.op == "ADD" or c in want]


def test_conformance_suite_expands_groups_and_refuses_unknown_names() -> None:
    suite = conformance_suite("CPU", ops="ADD,MUL,UNARY")
    params = {n for m in suite.pytestmark for n in m.args[1]}  # type: ignore[attr-defined]
    assert any(n.startswith("SILU(") for n in params) and any(n.startswith("ADD(") for n in params)
    with pytest.raises(OpFilterError, match=r"'UNARI'.*did you mean UNARY"):
        conformance_suite("CPU", ops="ADD,UNARI")
