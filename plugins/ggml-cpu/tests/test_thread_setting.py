"""``_jit.set_threads``: numba's per-thread setting follows every change, and is not asked again when unchanged
(its ``get_num_threads`` takes a lock and checks its pool: the engine applies its count once per graph)."""

from __future__ import annotations

import threading

import pytest

from ggml_cpu.jit import _jit


def _numba() -> object:
    if not _jit.enabled():
        pytest.skip(f"numba is off here: {_jit.disabled_reason()}")
    import numba

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here")
    return numba


def test_changes_reach_numba_and_repeats_do_not_ask_it(monkeypatch: pytest.MonkeyPatch) -> None:
    numba = _numba()
    old = _jit.current_threads()
    try:
        for n in (2, 1, 2):
            _jit.set_threads(n)
            assert numba.get_num_threads() == n == _jit.current_threads()
        calls = []
        real = numba.get_num_threads
        monkeypatch.setattr(numba, "get_num_threads", lambda: calls.append(1) or real())
        for _ in range(5):
            _jit.set_threads(2)
        assert calls == []  # unchanged: numba not asked
        _jit.set_threads(1)
        assert calls == [1] and real() == 1
    finally:
        monkeypatch.undo()
        _jit.set_threads(old)


def test_each_thread_applies_its_own_count() -> None:
    numba = _numba()
    _jit.set_threads(2)
    seen: list[int] = []

    def other() -> None:  # a new thread: its numba setting is numba's default until it sets its own
        _jit.set_threads(1)
        seen.append(numba.get_num_threads())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [1] and numba.get_num_threads() == 2
