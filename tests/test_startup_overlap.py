"""Start-up work that overlaps (issue 14): the tokenizer built in the background by ``Model.load`` and
``ggml-core run``, and the registries enumerating their devices at once. What overlaps must give exactly what the
one-after-the-other path gives: the same tokenizer, the same error for a file without one, the same devices in the
same order, and a registry whose enumeration hangs is still recorded as hung (its deadline counted from its start).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core._errors import GGUFError
from ggml_core.backend import _deadline
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf
from ggml_core.models.tokenizer import PendingTokenizer, load_tokenizer

PARAMS = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=32, progress=False)


def _model(tmp_path: Path, vocab: bool) -> Path:
    cfg = TinyConfig()
    return write_model(tmp_path / f"tiny-{vocab}.gguf", cfg, random_weights(cfg), vocab=vocab)


def _same(a: object, b: object) -> None:
    for attr in ("kind", "tokens", "scores", "types", "merges", "bos_id", "eos_id", "unk_id", "add_bos"):
        assert getattr(a, attr) == getattr(b, attr), attr


def test_background_tokenizer_is_the_lazy_one(tmp_path: Path) -> None:
    path = _model(tmp_path, vocab=True)
    eager = load_tokenizer(open_gguf(path))
    with Model.load(path, PARAMS) as m:  # default: built in the background
        _same(m.tokenizer, eager)
        assert m.tokenizer is m.tokenizer
        assert m.tokenizer.encode("t5t7") == eager.encode("t5t7")
    with Model.load(path, PARAMS, tokenizer=False) as m:
        _same(m.tokenizer, eager)
    with Model.load(path, PARAMS, tokenizer=eager) as m:
        assert m.tokenizer is eager


def test_background_tokenizer_failure_is_the_lazy_error(tmp_path: Path) -> None:
    path = _model(tmp_path, vocab=False)
    with pytest.raises(GGUFError) as lazy:
        load_tokenizer(open_gguf(path))
    with pytest.raises(GGUFError) as pending:
        PendingTokenizer(open_gguf(path)).result()
    assert str(pending.value) == str(lazy.value)
    # loading does not fail; the first use does, with the same message
    with Model.load(path, PARAMS) as m, pytest.raises(GGUFError) as used:
        _ = m.tokenizer
    assert str(used.value) == str(lazy.value)


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
