"""``--split-mode auto`` driven by injected device speeds to known optimal answers (no timed assertions).

The optimum is found here independently, by enumerating every contiguous assignment of the slots to the devices in
order and pricing it with the cost model written out again from the module's docstring: per slot its device's
layer time (the output layer scaled), per device change the activations out of one device and into the next (with
the next one's inputs), the logits back to the host; ``ceil(P/B)`` prompt batches plus ``G`` decode steps.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from test_placement_fit import CFG, OPS
from tiny_models import random_weights, reference_logits, write_model

import ggml_core.models.plan.autosplit as auto
from ggml_core.backend.interfaces import Device
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf, read_hparams, scheduler_available
from ggml_core.models.arch import weight_specs
from ggml_core.models.params import FitParams, Workload
from ggml_core.models.plan.autosplit import DeviceSpeed, choose_split

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")


class _Dev:
    def __init__(self, name: str) -> None:
        self.name = name


def _price(counts, speeds, n_slots, out_scale, work, n_embd, n_vocab) -> float:  # type: ignore[no-untyped-def]
    """The cost model, independently: sum over the prompt batches and decode steps of one pass's time."""
    total = 0.0
    for n, weight in ((work.batch, math.ceil(work.n_prompt / work.batch)), (1, work.n_gen)):
        t, prev, slot = 0.0, None, 0
        for j, c in enumerate(counts):
            if not c:
                continue
            sp = speeds[j]
            act, own = n_embd * n * 4, work.n_kv * n * 4 + n * 16
            if prev is not None:
                t += 0.0 if prev.latency_s == 0 else prev.latency_s + act / prev.bytes_per_s
            t += 0.0 if sp.latency_s == 0 else sp.latency_s + (act + own) / sp.bytes_per_s
            per = sp.prompt_s if n > 1 else sp.decode_s
            for s in range(slot, slot + c):
                t += per * (out_scale if s == n_slots - 1 else 1.0)
            prev, slot = sp, slot + c
        assert prev is not None
        t += 0.0 if prev.latency_s == 0 else prev.latency_s + n_vocab * 4 / prev.bytes_per_s
        total += weight * t
    return total


def _brute(speeds, n_slots, out_scale, work, caps, n_embd=64, n_vocab=100):  # type: ignore[no-untyped-def]
    best = None
    nd = len(speeds)
    for cuts in itertools.combinations_with_replacement(range(n_slots + 1), nd - 1):
        bounds = [0, *cuts, n_slots]
        counts = [bounds[i + 1] - bounds[i] for i in range(nd)]
        ok = all(
            j not in caps or sum(caps[j][1][bounds[j] : bounds[j + 1]]) <= caps[j][0] for j in range(nd) if counts[j]
        )
        if not ok:
            continue
        cost = _price(counts, speeds, n_slots, out_scale, work, n_embd, n_vocab)
        if best is None or cost < best[0] - 1e-12:
            best = (cost, counts)
    return best


def _speed(name: str, pp: float, tg: float, lat: float = 0.0, bw: float = math.inf) -> DeviceSpeed:
    return DeviceSpeed(name, pp, tg, lat, bw)


@pytest.mark.parametrize(
    ("sub", "caps", "want"),
    [
        (_speed("Sub0", 1e-3, 1e-4, 1e-6, 1e10), {}, [0, 5]),  # 4x faster, cheap transfers: everything offloaded
        (_speed("Sub0", 1e-3, 1e-4, 1.0, 1e10), {}, [5, 0]),  # a second of latency per copy: the device is left out
        (_speed("Sub0", 1e-3, 1e-4, 1e-6, 1e10), {1: (200, [100] * 5)}, [3, 2]),  # room for two slots: the last two
        (_speed("Sub0", 8e-3, 8e-4, 0.0, math.inf), {}, [5, 0]),  # slower than the CPU
    ],
)
def test_one_device_known_answers(sub: DeviceSpeed, caps: dict, want: list[int]) -> None:
    cpu = _speed("CPU", 4e-3, 4e-4)
    work = Workload(n_prompt=512, n_gen=128, n_batch=512, n_kv=640)
    got = choose_split([_Dev("CPU"), _Dev("Sub0")], [cpu, sub], 5, 1.0, work, 64, 100, caps)  # type: ignore[list-item]
    assert got.counts == want
    assert _brute([cpu, sub], 5, 1.0, work, caps)[1] == want  # type: ignore[index]
    # the prediction is the priced choice: B / T(B) and 1 / T(1)
    t_pp = _price(want, [cpu, sub], 5, 1.0, Workload(512, 0, 512, 640), 64, 100)
    assert got.pp_tok_s == pytest.approx(512 / t_pp, rel=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_dynamic_programme_equals_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nd, n_slots = 4, 7
    speeds = [_speed("CPU", float(rng.uniform(1, 5)) * 1e-3, float(rng.uniform(1, 5)) * 1e-4)]
    for j in range(1, nd):
        speeds.append(
            _speed(
                f"D{j}",
                float(rng.uniform(0.2, 5)) * 1e-3,
                float(rng.uniform(0.2, 5)) * 1e-4,
                float(rng.choice([0.0, 1e-5, 1e-3])) or 1e-7,
                float(rng.uniform(1e8, 1e10)),
            )
        )
    caps = {
        j: (int(rng.integers(0, 6)) * 100, [100] * (n_slots - 1) + [250]) for j in range(1, nd) if rng.random() < 0.6
    }
    work = Workload(n_prompt=int(rng.integers(1, 2000)), n_gen=int(rng.integers(0, 300)), n_batch=512, n_kv=1024)
    out_scale = float(rng.uniform(0.5, 3))
    devs = [_Dev(s.name) for s in speeds]
    got = choose_split(devs, speeds, n_slots, out_scale, work, 64, 100, caps)  # type: ignore[arg-type]
    best = _brute(speeds, n_slots, out_scale, work, caps)
    assert best is not None
    mine = _price(got.counts, speeds, n_slots, out_scale, work, 64, 100)
    assert mine == pytest.approx(best[0], rel=1e-9), (got.counts, best)


# ------------------------------------------------------------------------------------------------ end to end


@pytest.fixture()
def sub0() -> Iterator[SubsetDevice]:
    reset_registry()
    d = SubsetDevice("Sub0", OPS)
    get_registry().register_plugin(SubsetPlugin([d]), "sub-auto")
    yield d
    reset_registry()


def _inject(monkeypatch: pytest.MonkeyPatch, table: dict[str, DeviceSpeed]) -> list[str]:
    asked: list[str] = []

    def fake(*_a: object) -> Callable[[Device, Workload], DeviceSpeed]:
        def speed(dev: Device, work: Workload) -> DeviceSpeed:
            asked.append(dev.name)
            return table[dev.name]

        return speed

    monkeypatch.setattr(auto, "measured_speeds", fake)
    return asked


@pytest.mark.parametrize(("sub_pp", "sub_lat", "want_on_sub"), [(1e-4, 1e-7, 4), (1e-2, 1e-7, 0), (1e-4, 10.0, 0)])
def test_model_load_follows_the_prediction(
    sub0: SubsetDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sub_pp: float, sub_lat: float, want_on_sub: int
) -> None:
    w = random_weights(CFG, 31)
    path = write_model(tmp_path / "m.gguf", CFG, w, "f32")
    asked = _inject(
        monkeypatch, {"CPU": _speed("CPU", 1e-3, 1e-4), "Sub0": _speed("Sub0", sub_pp, sub_pp / 10, sub_lat, 1e10)}
    )
    req = PlacementRequest(devices=["Sub0"], split_mode="auto")
    params = ModelParams(n_ctx=64, kv_type="f32", progress=False, placement=req, fit=FitParams(target_mib=(0,)))
    with Model.load(path, params) as m:
        on_sub = sum(1 for s in range(CFG.n_layer + 1) if m.placement.device_of(s) is sub0)
        assert on_sub == want_on_sub and sorted(asked) == ["CPU", "Sub0"]
        assert m.placement.split_mode == "auto" and m.placement.auto is not None
        assert m.placement.notes[0].startswith("--split-mode auto: ")
        got = m.process_prompt([1, 2, 3, 4], all_logits=True)
    ref = reference_logits(CFG, w, [1, 2, 3, 4], "f32", "f32")
    assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-5


def test_auto_respects_memory(sub0: SubsetDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sub0 much faster but with room for two slots: the last two go there (the same answer as --fit's)."""
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 32), "f32")
    _inject(monkeypatch, {"CPU": _speed("CPU", 1e-3, 1e-4), "Sub0": _speed("Sub0", 1e-5, 1e-6, 1e-9, 1e12)})
    base = ModelParams(n_ctx=64, kv_type="f32", progress=False, fit=FitParams(target_mib=(0,)))
    reset_registry()
    big = SubsetDevice("Sub0", OPS)
    get_registry().register_plugin(SubsetPlugin([big]), "sub-auto")
    from dataclasses import replace

    two = replace(base, placement=PlacementRequest(devices=["Sub0"], n_gpu_layers=2), fit=FitParams(enabled=False))
    with Model.load(path, two):
        need = big.allocated
    reset_registry()
    small = SubsetDevice("Sub0", OPS, capacity=need + 1000)
    get_registry().register_plugin(SubsetPlugin([small]), "sub-auto")
    with Model.load(path, replace(base, placement=PlacementRequest(devices=["Sub0"], split_mode="auto"))) as m:
        assert [s for s in range(CFG.n_layer + 1) if m.placement.device_of(s) is small] == [2, 3]
    with pytest.raises(ValueError, match="--split-mode auto chooses -ngl and -ts itself"):
        Model.load(path, replace(base, placement=PlacementRequest(devices=["Sub0"], split_mode="auto", n_gpu_layers=1)))


def test_timing_cache_reused_and_a_corrupt_one_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real timer on the CPU (a tiny layer): the second source reads the cache; garbage is ignored with a
    warning and replaced."""
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))
    reset_registry()
    path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 33), "f32")
    f = open_gguf(path)
    hp = read_hparams(f)
    specs = weight_specs(f, hp)
    params = ModelParams(n_ctx=64, kv_type="f32", progress=False)
    cpu = get_registry().get_device("CPU")
    work = Workload(n_prompt=8, n_gen=4, n_batch=8, n_kv=64)
    cache = auto.timing_cache_path()
    cache.parent.mkdir(parents=True)
    for garbage in ("{not json", json.dumps({"version": 1, "layers": {"k": [-1, "x"]}, "xfer": {}})):
        cache.write_text(garbage)
        first = auto.measured_speeds(f, hp, specs, params, [cpu])(cpu, work)
        assert "ignoring the timing cache" in capsys.readouterr().err
        assert first.measured and first.prompt_s > 0 and first.decode_s > 0
        again = auto.measured_speeds(f, hp, specs, params, [cpu])(cpu, work)
        assert not again.measured and (again.prompt_s, again.decode_s) == (first.prompt_s, first.decode_s)
        assert capsys.readouterr().err == ""
        assert json.loads(cache.read_text())["version"] == 1
    reset_registry()


def test_a_device_that_fails_the_timing_is_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))
    reset_registry()
    bad = SubsetDevice("Sub0", OPS, fail_on={"attn_norm-0"})  # its kernel for that node raises
    get_registry().register_plugin(SubsetPlugin([bad]), "sub-auto")
    try:
        path = write_model(tmp_path / "m.gguf", CFG, random_weights(CFG, 34), "f32")
        req = PlacementRequest(devices=["Sub0"], split_mode="auto")
        params = ModelParams(n_ctx=64, kv_type="f32", progress=False, placement=req, fit=FitParams(target_mib=(0,)))
        with Model.load(path, params) as m:
            assert {m.placement.device_of(s).name for s in range(CFG.n_layer + 1)} == {"CPU"}
            assert "inf ms" in m.placement.notes[0]
        assert "Sub0 could not run a layer" in capsys.readouterr().err
        assert "Sub0" not in auto.timing_cache_path().read_text()  # a failure is not cached
    finally:
        reset_registry()
