"""Start-up work that overlaps (issue 14): the registries enumerate their devices at once. That must give exactly
what the one-after-the-other path gives: the same devices in the same order, the same plugin states, and a call that
hangs is still given up at its deadline, counted from its own start.
"""

from __future__ import annotations

import threading
import time

import pytest

from ggml_core.backend import _deadline


def test_started_calls_overlap_and_keep_their_own_deadlines() -> None:
    gate = threading.Event()
    t0 = time.monotonic()
    slow = _deadline.start(lambda: gate.wait(5) and "slow", "test slow")
    hung = _deadline.start(lambda: threading.Event().wait(), "test hung")
    fast = _deadline.start(lambda: "fast", "test fast")
    # waited in order: the hung one is given up 0.2 s after its start, not 0.2 s after the wait began
    assert hung.wait(0.2).hung
    assert fast.wait(0.2).value == "fast"
    gate.set()
    assert slow.wait(5).value == "slow"
    assert time.monotonic() - t0 < 4.0  # the three did not wait one after the other (the bound is 5 s each)


def test_concurrent_enumeration_keeps_the_device_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggml_core.backend import registry as reg

    def sequential(self: reg.Registry) -> list[object]:
        out = []
        for e in self._entries:
            out += [d.name for d in (e.own or [])]
        return out

    r1 = reg.Registry()
    names = [d.name for d in r1.devices()]
    # the same registry enumerated one registry at a time (each started only after the previous one finished)
    started = reg.Registry._start_enumeration

    def one_by_one(self: reg.Registry, e: object) -> _deadline.Pending:
        p = started(self, e)  # type: ignore[arg-type]
        p.wait(None)
        return p

    monkeypatch.setattr(reg.Registry, "_start_enumeration", one_by_one)
    r2 = reg.Registry()
    assert [d.name for d in r2.devices()] == names
    assert sequential(r1) == sequential(r2)
    assert [p.status for p in r1.plugins] == [p.status for p in r2.plugins]
