"""Per-device tuning of the MUL_MAT kernels: every candidate configuration computes the right product, and the
tuner's cache, modes and settings behave. Nothing here depends on which candidate is fastest.

Correctness: each candidate (the device's own and a GPU's, run on this device) multiplies odd shapes — M, N, K
not multiples of any tile, vector width or unroll, activation batches of 1, 2, 7 and 33 columns — and is compared
with float64 numpy within the worst-case bound of a float32 dot product in any summation order,
|error| ≤ γ_K · Σ_k |a_k b_k| with γ_K = K u / (1 − K u), u = 2⁻²⁴ (Higham, Accuracy and Stability, 3.1);
quantized and 16-bit weights are compared with the CPU plugin (the activations rounded as ggml rounds them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLType, ops
from ggml_core.testing import Built, Case, Check, Status, run_case
from ggml_core.testing.reference import matmul as ref
from ggml_opencl import OpenCLDevice, OpenCLReg
from ggml_opencl import _tuning as tuning
from ggml_opencl import _tuning_configs as configs

T = GGMLType
U = 2.0**-24


@pytest.fixture(scope="module", params=["own", "gpu"])
def device(request: pytest.FixtureRequest, ocl: OpenCLDevice) -> OpenCLDevice:
    """This device with its own default shapes, and a second handle on it with a GPU's (work-group reductions)."""
    if request.param == "own":
        return ocl
    dev = OpenCLReg(environ={"GGML_OPENCL_DEVICES": str(ocl.info.index)}).devices[0]
    assert isinstance(dev, OpenCLDevice)
    dev.info = dataclasses.replace(dev.info, gemm_tm=4, gemm_tn=4, gemm_ls=(8, 8), mv_ls=32)
    return dev


def _product(dev: OpenCLDevice, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MUL_MAT of f32 weights a [M, K] and activations b [N, K] on ``dev``: [N, M]."""
    (m, k), n = a.shape, b.shape[0]
    ctx = g.Context("tune")
    ta, tb = ctx.new_tensor_2d("f32", k, m, "a"), ctx.new_tensor_2d("f32", k, n, "b")
    out = ops.mul_mat(ta, tb)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    try:
        ta.set_data(a)
        tb.set_data(b)
        be = dev.init_backend()
        be.graph_compute(graph)
        be.synchronize()
        return out.to_numpy().reshape(n, m).copy()
    finally:
        buf.free()


def _assert_within_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray, what: str) -> None:
    k = a.shape[1]
    want = b.astype(np.float64) @ a.T.astype(np.float64)
    gamma = k * U / (1 - k * U)
    bound = gamma * (np.abs(b).astype(np.float64) @ np.abs(a).T.astype(np.float64))
    excess = np.abs(got - want) - bound
    assert excess.max() <= 0, f"{what}: error exceeds the float32 bound by {excess.max():.3g}"


SHAPES = [(67, 33, 50), (33, 70, 129), (100, 17, 37), (17, 33, 3)]  # (M, N, K): no tile or vector multiple


def test_every_gemm_candidate_matches_numpy(device: OpenCLDevice) -> None:
    rng = np.random.default_rng(1)
    cands = configs.gemm_candidates(device.info)
    assert len(cands) >= 4 and cands[0].ls == tuple(device.info.gemm_ls)
    for cfg in cands:
        with configs.forced(gemm=cfg):
            for m, n, k in SHAPES:
                a = rng.standard_normal((m, k)).astype(np.float32)
                b = rng.standard_normal((n, k)).astype(np.float32)
                _assert_within_bound(_product(device, a, b), a, b, f"{cfg.label()} M={m} N={n} K={k}")


@pytest.mark.parametrize("n", [1, 2, 7, 13])  # 13: passes of 4 or 8 columns with a partial last one
def test_every_mv_candidate_matches_numpy(device: OpenCLDevice, n: int) -> None:
    rng = np.random.default_rng(2)
    cands = configs.mv_candidates(device.info, n)
    assert len(cands) >= 4 and cands[0].ls == device.info.mv_ls
    for cfg in cands:
        with configs.forced(mv=cfg):
            for m, k in ((67, 50), (5, 129), (33, 3)):  # M not a multiple of the rows, K of 32 or 16
                a = rng.standard_normal((m, k)).astype(np.float32)
                b = rng.standard_normal((n, k)).astype(np.float32)
                _assert_within_bound(_product(device, a, b), a, b, f"{cfg.label()} M={m} N={n} K={k}")


def _case(w: GGMLType, m: int, n: int, k: int) -> Case:
    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor(w, [k, m, 2, 1], "a")
        b = ctx.new_tensor(T.F32, [k, n, 2, 3], "b")  # broadcast over dims 2 and 3
        return Built(ops.mul_mat(a, b), [a, b])

    params = {"type_a": w, "m": m, "n": n, "k": k}
    return Case("MUL_MAT", params, build, lambda a, b: ref.mul_mat(a, b, w), Check.nmse(5e-4))


# the types k_mv decodes with vector code, and two that go through dq32 (Q3_K, IQ4_NL)
VECTOR_DECODED = [T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.Q3_K, T.IQ4_NL]


@pytest.mark.parametrize("w", VECTOR_DECODED, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_weight_types_under_several_candidates_match_the_cpu(
    device: OpenCLDevice, cpu: g.Device, w: GGMLType, n: int
) -> None:
    """The default and the widest candidates (most rows, items, row blocks and columns per group; the narrowest
    accumulators) against the CPU plugin."""
    k = 512 if w.block_size > 32 else 96
    tight = 1e-6 if w == T.Q4_1 else 1e-10  # ggml's Q4_1 dot adds the block minimum times a rounded sum
    if n <= configs.MV_MAX_COLUMNS:
        cands = configs.mv_candidates(device.info, n)
        picks = [
            cands[0],
            max(cands, key=lambda c: (c.r * c.ls, c.nc)),
            max(cands, key=lambda c: (c.ls, c.r)),
            max(cands, key=lambda c: (c.rows_per_group, -c.vw, c.r)),
            min(cands, key=lambda c: (c.vw, -c.r)),
        ]
        forced = [{"mv": c} for c in dict.fromkeys(picks)]
    else:
        cands = configs.gemm_candidates(device.info)
        forced = [{"gemm": cands[0]}, {"gemm": max(cands, key=lambda c: (c.tm * c.tn, c.ku))}]
    for cfg in forced:
        with configs.forced(**cfg):
            r = run_case(_case(w, 37 if n > 1 else 70, n, k), device, reference=cpu)  # 70: 3 groups of 32 rows
        assert r.status == Status.OK, f"{w.name} n={n} {cfg}: {r.status.value} {r.message}"
        assert r.error is not None and r.error <= tight, f"{w.name} n={n} {cfg}: NMSE {r.error:.2e}"


# ------------------------------------------------------------------------------------------------ the tuner


@pytest.fixture()
def fresh(ocl: OpenCLDevice, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuning.Tuner]:
    """A tuner of this device with its own cache folder, tuning on, a short budget."""
    monkeypatch.setenv(configs.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(configs.ENV_MODE, "1")
    monkeypatch.setattr(tuning, "BUDGET_S", 0.05)
    yield tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)


def test_tuning_picks_a_candidate_and_caches_it(fresh: tuning.Tuner, ocl: OpenCLDevice) -> None:
    cfg, kernel = fresh.mv(T.Q8_0, 1)
    assert cfg in configs.mv_candidates(ocl.info, 1)
    assert kernel.function_name == "k_mv"
    data = json.loads(fresh.cache_file.read_text())
    assert ocl.info.name in data["device"] and str(ocl.cl_device.driver_version).strip() in data["device"]
    ((key, entry),) = data["entries"].items()
    assert key.startswith("mv/Q8_0/n=1/") and configs.SOURCE_DIGEST in key
    assert set(entry["medians_ms"]) <= {c.label() for c in configs.mv_candidates(ocl.info, 1)}
    assert entry["label"] == cfg.label()
    # another process (a new tuner) reads the choice back instead of timing again
    again = tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)
    assert again.mv(T.Q8_0, 1)[0] == cfg and again.timings == {}


def test_cached_choice_is_used_and_force_retunes(
    fresh: tuning.Tuner, ocl: OpenCLDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh.gemm(100)
    data = json.loads(fresh.cache_file.read_text())
    ((key, entry),) = data["entries"].items()
    assert key.startswith("gemm/n>64/")
    pick = configs.gemm_candidates(ocl.info)[-1]  # a cache entry written by hand is obeyed
    entry["config"] = dataclasses.asdict(pick)
    fresh.cache_file.write_text(json.dumps(data))
    assert tuning.Tuner(ocl.context, ocl.cl_device, ocl.info).gemm(100)[0] == pick
    monkeypatch.setenv(configs.ENV_MODE, "force")
    forced_tuner = tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)
    forced_tuner.gemm(100)
    assert set(forced_tuner.timings) == {"gemm/n>64"}  # timed again despite the entry


def test_off_uses_the_default_and_writes_nothing(
    fresh: tuning.Tuner, ocl: OpenCLDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(configs.ENV_MODE, "0")
    assert fresh.gemm(3)[0] == configs.gemm_candidates(ocl.info)[0]
    assert fresh.mv(T.F32, 1)[0] == configs.mv_candidates(ocl.info, 1)[0]
    assert not fresh.cache_file.exists()


def test_stale_or_corrupt_cache_entries_are_tuned_anew(fresh: tuning.Tuner, ocl: OpenCLDevice) -> None:
    fresh.cache_file.parent.mkdir(parents=True, exist_ok=True)
    fresh.cache_file.write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable OpenCL tuning cache"):
        cfg = fresh.mv(T.F32, 1)[0]
    assert cfg in configs.mv_candidates(ocl.info, 1)
    data = json.loads(fresh.cache_file.read_text())  # rewritten whole
    (entry,) = data["entries"].values()
    entry["config"] = {"r": 3, "nc": 1, "ls": 1}  # not a candidate (an older kernel's): ignored
    fresh.cache_file.write_text(json.dumps(data))
    other = tuning.Tuner(ocl.context, ocl.cl_device, ocl.info)
    assert other.mv(T.F32, 1)[0] in configs.mv_candidates(ocl.info, 1) and other.timings


def test_a_bad_mode_is_named(fresh: tuning.Tuner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(configs.ENV_MODE, "fastest")
    with pytest.raises(configs.TuningError, match=r"GGML_OPENCL_TUNE='fastest'.*1 .*0 .*force"):
        fresh.gemm(100)


def test_cache_dir_follows_the_environment(tmp_path: object) -> None:
    assert configs.cache_dir({"GGML_OPENCL_TUNING_DIR": "/x/y"}).as_posix() == "/x/y"
    assert configs.cache_dir({"XDG_CACHE_HOME": "/c"}).as_posix() == "/c/ggml-core/opencl-tuning"
    assert configs.cache_dir({}).name == "opencl-tuning"


def test_shape_classes() -> None:
    assert configs.gemm_class(9) == configs.gemm_class(64) != configs.gemm_class(65)
    assert configs.mv_class(T.Q4_0, 1) != configs.mv_class(T.Q4_0, 2) == configs.mv_class(T.Q4_0, 16)
    assert configs.mv_class(T.Q4_0, 1) != configs.mv_class(T.Q8_0, 1)
