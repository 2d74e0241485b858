"""The conformance case list: every family's cases, in a fixed order, and filters over them.

The list is deterministic (same order and names in every process), which lets ``-j`` workers address cases by
index and lets every device see the same inputs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import cache

from ggml_core.ops import GGMLOp, GluOp, UnaryOp
from ggml_core.testing._case import Case
from ggml_core.testing.cases import attention, copy, elementwise, layout, matmul, norm, recurrent, reduce, vision

__all__ = ["GROUPS", "all_cases", "all_op_names", "select"]

_FAMILIES = (elementwise, reduce, norm, matmul, copy, layout, attention, vision, recurrent)


@cache
def _cases() -> tuple[Case, ...]:
    out: list[Case] = []
    for family in _FAMILIES:
        out.extend(family.cases())
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise AssertionError(f"duplicate case names: {dup[:5]}")
    return tuple(out)


def all_cases(*, perf: bool = False) -> list[Case]:
    """Every case in order; ``perf`` adds the perf-only cases (large shapes)."""
    return [c for c in _cases() if perf or not c.perf_only]


def all_op_names() -> list[str]:
    """Every op name ggml knows: the 101 ``GGMLOp`` names, then every UNARY and GLU sub-op."""
    return [op.name for op in GGMLOp] + [u.name for u in UnaryOp] + [g.name for g in GluOp]


def _split_ops(ops: str | Iterable[str] | None) -> list[str] | None:
    """``"ADD,MUL_MAT(type_a=f16,...)"`` → ["ADD", "MUL_MAT(type_a=f16,...)"]: commas inside brackets stay."""
    if ops is None:
        return None
    if not isinstance(ops, str):
        return [o.strip() for o in ops if o.strip()]
    items, depth, cur = [], 0, ""
    for ch in ops:
        depth += ch in "(["
        depth -= ch in ")]"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [o.strip() for o in items if o.strip()]


#: group names a filter may use: ggml's generic ops, whose cases are named after their sub-ops
GROUPS: dict[str, tuple[str, ...]] = {
    "UNARY": tuple(u.name for u in UnaryOp),
    "GLU": tuple(g.name for g in GluOp),
}


def _op_names(wanted: list[str]) -> set[str]:
    """The op names a filter's plain (bracket-free) items stand for: group names expanded; an item that is neither
    an op nor a group is an OpFilterError naming the closest op."""
    import difflib

    from ggml_core._errors import OpFilterError

    known = set(all_op_names()) | set(GROUPS)
    out: set[str] = set()
    for w in wanted:
        name = w.upper()
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = (
                f"did you mean {', '.join(close)}? " if close else ""
            ) + "('ggml-core test-ops --list-ops' lists them)"
            raise OpFilterError(w, f"is not a ggml op or group (UNARY, GLU); {hint}", sorted(known))
        out |= set(GROUPS.get(name, (name,)))
    return out


def select(
    cases: Sequence[Case] | None = None,
    ops: str | Iterable[str] | None = None,
    pattern: str | None = None,
    *,
    perf: bool = False,
) -> list[Case]:
    """Cases whose op is in ``ops`` (names, group names ``UNARY`` and ``GLU`` for all their sub-ops, or full
    ``OP(params)`` strings as test-backend-ops' ``-o``) and whose full name matches the regular expression
    ``pattern`` (searched, not anchored).

    :raises OpFilterError: ``ops`` names something that is not an op or group, or ``ops``/``pattern`` select no case
    """
    pool = list(cases) if cases is not None else all_cases(perf=perf)
    wanted = _split_ops(ops)
    if wanted is not None:
        names = _op_names([w for w in wanted if "(" not in w])
        full = {w for w in wanted if "(" in w}
        pool = [c for c in pool if c.op in names or c.name in full]
    if pattern:
        rx = re.compile(pattern)
        pool = [c for c in pool if rx.search(c.name)]
    if not pool and (wanted or pattern):
        from ggml_core._errors import OpFilterError

        given = ",".join(wanted or []) + (f" with pattern {pattern!r}" if pattern else "")
        with_cases = sorted({c.op for c in all_cases(perf=perf)})
        raise OpFilterError(given, f"selects no case; the ops with cases are {', '.join(with_cases)}", with_cases)
    return pool
