"""MUL_MAT paths the conformance cases reach only partly: the packed GEMM (N > 16) for every weight type, odd
sizes, broadcasting, non-contiguous and f16 activations, weights packed in row chunks; all against the CPU plugin.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLType, ops
from ggml_core.testing import Built, Case, Check, Status, run_case
from ggml_core.testing.reference import matmul as ref
from ggml_opencl import OpenCLDevice
from ggml_opencl.ops import QUANT_TYPES
from ggml_opencl.ops import matmul as ops_matmul

T = GGMLType
WEIGHTS = [T.F32, T.F16, T.BF16, *sorted(QUANT_TYPES)]


def _case(
    w: GGMLType,
    m: int,
    n: int,
    k: int,
    *,
    btype: GGMLType = T.F32,
    bs: Sequence[int] = (1, 1),
    nr: Sequence[int] = (1, 1),
    permute_b: bool = False,
) -> Case:
    ne_b = [k, n, bs[0] * nr[0], bs[1] * nr[1]]

    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor(w, [k, m, bs[0], bs[1]], "a")
        if permute_b:  # b stored as [k, b2, n, b3] and viewed as [k, n, b2, b3]
            base = ctx.new_tensor(btype, [k, ne_b[2], n, ne_b[3]], "b")
            b = ops.permute(base, 0, 2, 1, 3)
        else:
            b = ctx.new_tensor(btype, ne_b, "b")
        return Built(ops.mul_mat(a, b), [a, b])

    params = {"type_a": w, "type_b": btype, "m": m, "n": n, "k": k, "bs": list(bs), "nr": list(nr), "perm": permute_b}
    return Case("MUL_MAT", params, build, lambda a, b: ref.mul_mat(a, b, w), Check.nmse(5e-4))


def _check(case: Case, ocl: OpenCLDevice, cpu: g.Device, tight: float | None = None) -> float:
    r = run_case(case, ocl, reference=cpu)
    assert r.status == Status.OK, f"{case.name}: {r.status.value} {r.message}"
    assert r.error is not None
    if tight is not None:
        assert r.error <= tight, f"{case.name}: NMSE {r.error:.2e} > {tight:.1e}"
    return r.error


@pytest.mark.parametrize("w", WEIGHTS, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 7, 40])
def test_every_weight_type_on_both_paths(w: GGMLType, n: int, ocl: OpenCLDevice, cpu: g.Device) -> None:
    """N ≤ 16 takes the matrix-vector kernel, larger N the packed GEMM; M = 40 leaves a partial tile."""
    k = 512 if w.block_size > 32 else 96
    # activations rounded like ggml's dot type: agreement to float rounding, except Q4_1/Q5_1, whose
    # ggml dot product adds the block minimum times an f16-rounded activation sum
    tight = 1e-6 if w in (T.Q4_1, T.Q5_1) else 1e-10
    _check(_case(w, 40, n, k), ocl, cpu, tight)


@pytest.mark.parametrize("m,n,k", [(33, 17, 50), (1, 9, 3), (17, 100, 7), (100, 33, 130)])
def test_odd_sizes(m: int, n: int, k: int, ocl: OpenCLDevice, cpu: g.Device) -> None:
    _check(_case(T.F32, m, n, k), ocl, cpu, 1e-10)
    _check(_case(T.F16, m, n, k), ocl, cpu, 1e-10)


@pytest.mark.parametrize("w", [T.F32, T.F16, T.Q4_0, T.Q4_K], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [3, 20])
def test_broadcast_permuted_and_f16_activations(w: GGMLType, n: int, ocl: OpenCLDevice, cpu: g.Device) -> None:
    k = 256 if w == T.Q4_K else 64
    _check(_case(w, 24, n, k, bs=(2, 3), nr=(2, 2)), ocl, cpu)
    _check(_case(w, 24, n, k, bs=(3, 2), permute_b=True), ocl, cpu)
    _check(_case(w, 24, n, k, btype=T.F16, bs=(2, 1), nr=(1, 2)), ocl, cpu)


def test_weights_packed_in_row_chunks(ocl: OpenCLDevice, cpu: g.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    """A weight matrix larger than the packing limit is multiplied chunk by chunk of rows."""
    monkeypatch.setattr(ops_matmul, "PACK_LIMIT", 64 * 32 * 4 * 2)  # two matrices of 32 rows × 64 per chunk
    _check(_case(T.F32, 100, 20, 64, bs=(2, 1)), ocl, cpu, 1e-10)
    _check(_case(T.Q8_0, 100, 20, 64, bs=(2, 1)), ocl, cpu, 1e-10)


def test_matches_numpy_on_a_large_product(ocl: OpenCLDevice) -> None:
    """The register-blocked GEMM on a 256 × 300 × 520 product against float64 numpy."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((256, 520)).astype(np.float32)
    b = rng.standard_normal((300, 520)).astype(np.float32)
    ctx = g.Context("big")
    ta, tb = ctx.new_tensor_2d("f32", 520, 256, "a"), ctx.new_tensor_2d("f32", 520, 300, "b")
    out = ops.mul_mat(ta, tb)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    ta.set_data(a)
    tb.set_data(b)
    be = ocl.init_backend()
    be.graph_compute(graph)
    want = b.astype(np.float64) @ a.T.astype(np.float64)
    got = out.to_numpy().reshape(300, 256)
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
    buf.free()


def _mul_mat_id_case(w: GGMLType, n_expert: int, n_used: int, b_one: bool, m: int, n_tok: int, k: int) -> Case:
    from ggml_core.testing._inputs import unique_indices

    def build(ctx: g.Context) -> Built:
        as_ = ctx.new_tensor(w, [k, m, n_expert], "as")
        b = ctx.new_tensor(T.F32, [k, 1 if b_one else n_used, n_tok], "b")
        ids = ctx.new_tensor(T.I32, [n_used, n_tok], "ids")
        return Built(ops.mul_mat_id(as_, b, ids), [as_, b, ids], {ids: unique_indices(n_expert)})

    params = {"type_a": w, "n_mats": n_expert, "n_used": n_used, "b": b_one, "m": m, "n": n_tok, "k": k}
    return Case("MUL_MAT_ID", params, build, lambda a, b, i: ref.mul_mat_id(a, b, i, w), Check.nmse(5e-4))


@pytest.mark.parametrize("w", [T.F32, T.F16, T.Q4_0, T.Q8_0, T.Q4_K], ids=lambda t: t.name)
@pytest.mark.parametrize("b_one", [False, True])
def test_mul_mat_id_grouped_by_expert(w: GGMLType, b_one: bool, ocl: OpenCLDevice, cpu: g.Device) -> None:
    """From GROUPED_MIN_ROWS token-slot pairs on, the rows are grouped per expert and multiplied by the GEMM."""
    n_tok = ops_matmul.GROUPED_MIN_ROWS  # 2 slots each: twice the threshold
    _check(_mul_mat_id_case(w, 6, 2, b_one, 40, n_tok, 256), ocl, cpu, 1e-10)
    _check(_mul_mat_id_case(w, 6, 2, b_one, 40, 3, 256), ocl, cpu, 1e-10)  # the per-row dot kernel


@pytest.mark.parametrize("n_tok", [3, 40])
def test_mul_mat_id_bad_expert_is_reported(n_tok: int, ocl: OpenCLDevice) -> None:
    ctx = g.Context("moe")
    as_ = ctx.new_tensor(T.F32, [32, 8, 4], "experts")
    b = ctx.new_tensor(T.F32, [32, 2, n_tok], "b")
    ids = ctx.new_tensor(T.I32, [2, n_tok], "ids")
    out = ops.mul_mat_id(as_, b, ids)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
    as_.set_data(np.ones((4, 8, 32), np.float32))
    b.set_data(np.ones((n_tok, 2, 32), np.float32))
    bad = np.tile(np.array([[0, 1]], np.int32), (n_tok, 1))
    bad[-1, 1] = 4
    ids.set_data(bad)
    be = ocl.init_backend()
    with pytest.raises(g.ComputeError, match=r"out of range|outside"):
        be.graph_compute(graph)
    buf.free()
