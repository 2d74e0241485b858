"""``--fit`` (llama.cpp's ``llama_params_fit``) on the tests' partial device with a small memory.

``Sub0``/``Sub1`` (tests/sched_plugin) allocate from a ``capacity``; their ``memory()`` reports what is left. The
optimal answers are found independently, by really loading the model with ``--fit off`` at every candidate (the
device's allocator either grants the memory or raises), and --fit, which allocates nothing while it measures, must
choose the best of them: the most offloaded layers, the largest context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import AllocationError, GGMLOp
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf, read_hparams, scheduler_available
from ggml_core.models.arch import weight_specs
from ggml_core.models.params import FitParams
from ggml_core.models.plan.fit import measure
from ggml_core.models.plan.planner import plan_once

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

TOKENS = [1, 5, 9, 3, 7, 2]
CFG = TinyConfig(n_layer=3)
OPS = (GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM, GGMLOp.SET_ROWS)
NO_MARGIN = FitParams(target_mib=(0,))


@pytest.fixture()
def devices() -> Iterator[Callable[..., list[SubsetDevice]]]:
    """``devices(cap0, cap1, ...)``: a fresh registry with Sub0, Sub1... of those capacities (None: 1 GiB)."""

    def make(*caps: int | None) -> list[SubsetDevice]:
        reset_registry()
        devs = [SubsetDevice(f"Sub{i}", OPS, capacity=c) for i, c in enumerate(caps)]
        get_registry().register_plugin(SubsetPlugin(devs, "small-memory test devices"), "sub-fit")
        return devs

    reset_registry()
    yield make
    reset_registry()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    w = random_weights(CFG, 7)
    return write_model(tmp_path_factory.mktemp("fit") / "m.gguf", CFG, w, "f32"), w


def _params(**kw: object) -> ModelParams:
    base = {"n_ctx": 64, "kv_type": "f32", "progress": False, "fit": NO_MARGIN}
    base.update(kw)
    return ModelParams(**base)  # type: ignore[arg-type]


def _allocated_by_load(path: Path, params: ModelParams, devs: list[SubsetDevice]) -> list[int] | None:
    """Bytes each device really allocated for a load with --fit off (None: some allocation was refused)."""
    try:
        with Model.load(path, replace(params, fit=FitParams(enabled=False), check_fit=False)):
            return [d.allocated for d in devs]
    except AllocationError:
        return None


def test_measured_needs_equal_what_a_load_allocates(devices: Callable[..., list[SubsetDevice]], model: tuple) -> None:
    path, _ = model
    (dev,) = devices(None)
    for ngl in range(CFG.n_layer + 2):
        params = _params(placement=PlacementRequest(devices=["Sub0"], n_gpu_layers=ngl))
        f = open_gguf(path)
        hp = read_hparams(f)
        specs = weight_specs(f, hp)
        m = measure(f, hp, specs, plan_once(f, hp, specs, params), params)
        assert dev.allocated == 0  # measuring allocated nothing
        real = _allocated_by_load(path, params, [dev])
        assert real is not None
        predicted = m.need.get("Sub0", (0, 0))[0]
        assert predicted == real[0], (ngl, predicted, real)
        assert dev.allocated == 0


def test_fit_offloads_the_most_layers_that_fit(devices: Callable[..., list[SubsetDevice]], model: tuple) -> None:
    path, w = model
    (dev,) = devices(None)
    need = [_allocated_by_load(path, _params(placement=PlacementRequest(n_gpu_layers=k)), [dev]) for k in range(5)]
    sizes = [n[0] for n in need if n is not None]
    assert len(sizes) == 5 and sizes == sorted(sizes) and sizes[0] == 0 and len(set(sizes)) == 5
    for best in (1, 2, 3, 4):
        cap = sizes[best] + (sizes[best + 1] - sizes[best]) // 2 if best < 4 else sizes[4]
        (dev,) = devices(cap)
        with Model.load(path, _params()) as m:
            offloaded = [s for s in range(-1, CFG.n_layer + 1) if m.placement.device_of(s) is dev]
            assert len(offloaded) == best, (best, cap, m.placement.notes)
            assert offloaded == list(range(CFG.n_layer + 1 - best, CFG.n_layer + 1))  # the last slots, as -ngl
            assert any(n.startswith("--fit: ") for n in m.placement.notes)
            got = m.process_prompt(TOKENS, all_logits=True)
            assert dev.allocated <= cap
        ref = reference_logits(CFG, w, TOKENS, "f32", "f32")
        assert float(np.abs(got - ref).max() / np.abs(ref).max()) < 1e-5


def test_a_given_ngl_that_does_not_fit_is_refused_saying_what_would(
    devices: Callable[..., list[SubsetDevice]], model: tuple
) -> None:
    path, _ = model
    (dev,) = devices(None)
    sizes = [_allocated_by_load(path, _params(placement=PlacementRequest(n_gpu_layers=k)), [dev]) for k in (2, 3)]
    assert sizes[0] is not None and sizes[1] is not None
    (dev,) = devices(sizes[0][0] + 1)
    with pytest.raises(AllocationError, match=r"--fit: the model does not fit.*-ngl 2 would fit"):
        Model.load(path, _params(placement=PlacementRequest(n_gpu_layers=3)))
    assert dev.allocated == 0
    with Model.load(path, _params(placement=PlacementRequest(n_gpu_layers=2))) as m:
        assert m.placement.device_of(CFG.n_layer) is dev


def test_fit_target_keeps_the_margin_free(devices: Callable[..., list[SubsetDevice]], model: tuple) -> None:
    path, _ = model
    (dev,) = devices(None)
    full = _allocated_by_load(path, _params(), [dev])
    assert full is not None
    (dev,) = devices(full[0] + 2**20 - 1)  # everything fits with no margin, not with 1 MiB kept free
    with Model.load(path, _params()) as m:
        assert m.placement.device_of(0) is dev
    with Model.load(path, _params(fit=FitParams(target_mib=(1,)))) as m:
        assert m.placement.device_of(0) is not dev
        assert dev.allocated <= full[0]
    with pytest.raises(ValueError, match="--fit-target has 2 values for 1 offload devices"):
        Model.load(path, _params(fit=FitParams(target_mib=(1, 2))))


def test_two_devices_take_the_most_layers_of_any_split(
    devices: Callable[..., list[SubsetDevice]], model: tuple
) -> None:
    path, _ = model
    devs = devices(None, None)
    one = _allocated_by_load(path, _params(placement=PlacementRequest(devices=["Sub0"], n_gpu_layers=2)), devs[:1])
    assert one is not None
    caps = (one[0] + 4096, one[0] // 2 + 4096)  # room for about two slots on Sub0, one on Sub1
    feasible = {}
    for c0 in range(5):
        for c1 in range(5 - c0):
            devs = devices(*caps)
            ts = [float(c0), float(c1)] if c0 + c1 else None
            req = PlacementRequest(n_gpu_layers=c0 + c1, tensor_split=ts)
            feasible[(c0, c1)] = _allocated_by_load(path, _params(placement=req), devs) is not None
    best = max(c0 + c1 for (c0, c1), ok in feasible.items() if ok)
    assert 0 < best < 4
    devs = devices(*caps)
    with Model.load(path, _params()) as m:
        counts = tuple(sum(1 for s in range(CFG.n_layer + 1) if m.placement.device_of(s) is d) for d in devs)
        assert sum(counts) == best and feasible[counts], (counts, feasible, m.placement.notes)


def test_fit_shrinks_an_unset_context_to_the_largest_that_fits(
    devices: Callable[..., list[SubsetDevice]], tmp_path: Path
) -> None:
    cfg = replace(CFG, n_ctx=2048)
    path = write_model(tmp_path / "c.gguf", cfg, random_weights(cfg, 3), "f32")
    (dev,) = devices(None)
    sizes = {c: _allocated_by_load(path, _params(n_ctx=c), [dev]) for c in range(256, 2049, 256)}
    assert all(v is not None for v in sizes.values())
    need = {c: v[0] for c, v in sizes.items() if v is not None}
    assert need[2048] > need[1024] > need[256]  # the caches are on the device
    (dev,) = devices(need[1280] + (need[1536] - need[1280]) // 2)
    with Model.load(path, _params(n_ctx=None, fit=FitParams(target_mib=(0,), min_ctx=256))) as m:
        assert m.n_ctx == 1280, m.placement.notes
        assert all(m.placement.device_of(s) is dev for s in range(cfg.n_layer + 1))
        assert any("context 2048 -> 1280 cells" in n for n in m.placement.notes)
    # --fit-ctx above what fits: the context stops there and layers go back to the host instead
    with Model.load(path, _params(n_ctx=None, fit=FitParams(target_mib=(0,), min_ctx=1792))) as m:
        assert m.n_ctx == 1792
        assert any(m.placement.device_of(s) is not dev for s in range(cfg.n_layer + 1))
    # a context the user gave is never changed
    with Model.load(path, _params(n_ctx=2048)) as m:
        assert m.n_ctx == 2048


def test_cli_defaults_are_the_library_defaults() -> None:
    from ggml_core.cli import _placement_args as cli
    from ggml_core.models import params

    assert (cli.DEFAULT_FIT_TARGET_MIB, cli.DEFAULT_FIT_CTX) == (params.DEFAULT_FIT_TARGET_MIB, params.DEFAULT_FIT_CTX)
    assert FitParams() == FitParams(True, (1024,), 4096)  # llama.cpp: --fit on, -fitt 1024, -fitc 4096


def test_cli_fit_flags(devices: Callable[..., list[SubsetDevice]], model: tuple, capsys: pytest.CaptureFixture) -> None:
    """--fit/-fitt/-fitc as llama.cpp spells them; bad values are one line and exit code 2 before anything loads."""
    from ggml_core.cli import main

    path, _ = model
    (dev,) = devices(None)
    full = _allocated_by_load(path, _params(), [dev])
    assert full is not None
    (dev,) = devices(full[0] + 2**20 - 1)  # fits with no margin, not with the 1 MiB -fitt keeps
    base = ["plan", str(path), "--device", "Sub0", "--ctx-size", "64", "--kv-type", "f32", "--json"]
    for extra, on_dev in ((["-fitt", "0"], 4), (["--fit-target", "1"], 3), (["--fit", "off"], 4)):
        capsys.readouterr()
        assert main([*base, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        got = next((d["layers"] + ("output" in d["layer_range"]) for d in out["devices"] if d["name"] == "Sub0"), 0)
        assert got == on_dev, (extra, out["devices"], out["notes"])
        assert any(n.startswith("--fit: ") for n in out["notes"]) == (extra[-1] != "off")
    for bad, why in (
        (["-fitt", "a"], "expected MiB values"),
        (["-fitt", "-1"], "MiB values must be"),
        (["-fitc", "0"], "--fit-ctx"),
        (["--fit", "maybe"], "unknown choice"),
    ):
        with pytest.raises(SystemExit) as exc:
            main([*base, *bad])
        assert exc.value.code == 2 and why in capsys.readouterr().err
    assert main([*base, "-fitt", "1,2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--fit-target has 2 values for 1 offload devices (Sub0)" in err
    assert main([*base[:-1], "-ngl", "4", "-fitt", "1"]) == 2  # -ngl given: refused, saying what would fit
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-ngl 3 would fit" in err
