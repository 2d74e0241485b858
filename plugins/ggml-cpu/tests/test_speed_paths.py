"""The CPU plugin's fast paths against numpy references and the slow reference path (correctness only, no timing).

* activation quantizers (compiled) give exactly ggml-cpu's x86 ``from_float`` bytes for Q8_0 / Q8_1 / Q8_K (written
  here from ``arch/x86/quants.c``: ``127/amax`` and round half to even for Q8_0 / Q8_1, the reference for Q8_K);
* tile dequantizers give exactly ``ggml_core.quants.dequantize``'s floats;
* the block kernels and the tile route of ``qmatmul`` agree with a float64 reference written from ggml's
  definition (activations rounded to the dot type, then the product) to ~1e-6 relative;
* MUL_MAT through a graph (all routes: f32, f16, bf16, quantized, broadcasting, non-contiguous operands, read-only
  weights, the opt-in weights cache) agrees with ``mul_mat_reference``, the plugin's straightforward numpy path;
* the engine re-plans exactly when a graph's operands or memory change, honours the abort callback and threads;
* without numba the plugin still computes (numpy fallback).

Compiled kernels are built on first use (about a second each, cached on disk afterwards).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

import ggml_core as gc
from ggml_core import BufferUsage, ComputeError, Context, GGMLType, ops
from ggml_core.quants import dequantize, quantize
from ggml_cpu import quant
from ggml_cpu.ops.matmul import WeightsCache, expert_product, mul_mat_reference

QUANT_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]
MIN_TYPES = {GGMLType.Q4_1, GGMLType.Q5_1}


def _rows(r: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Rows of very different magnitudes, one all-zero block, one block of exact rounding ties."""
    x = (r.standard_normal((n, k)) * r.uniform(1e-3, 1e3, size=(n, 1))).astype(np.float32)
    x[0, :32] = 0.0
    if k >= 256:
        # amax = 127 → d = 1 (Q8_0/Q8_1) and max = -127 → iscale = 1 (Q8_K): ±62.5 are ties, roundf ≠ rint
        x[-1, 256 - 32 : 256] = np.float32(62.5) * np.where(np.arange(32) % 2, 1, -1)
        x[-1, 256 - 32] = np.float32(-127.0)
    if k >= 512 and n >= 3:
        x[1, 256:512] = np.where(np.arange(256) % 3, 0.0, -0.0)  # a whole Q8_K block of zeros, some negative
        # Q8_K keeps the first value of largest magnitude (its sign sets iscale's): -m before +m, then +m before -m
        m = np.float32(np.abs(x[2, :512]).max() * 2)
        x[2, 40], x[2, 200], x[2, 256 + 9], x[2, 256 + 77] = -m, m, m, -m
    return x


# ------------------------------------------------------------------------------------------------ activations


def _x86_q8_32(x: np.ndarray, dot: GGMLType) -> np.ndarray:
    """ggml-cpu's x86 ``quantize_row_q8_0`` / ``quantize_row_q8_1`` for finite rows, block by block in float32."""
    out = []
    for row in x:
        blocks = []
        for blk in row.reshape(-1, 32):
            amax = np.float32(np.abs(blk).max())
            d = np.float32(amax / np.float32(127))
            inv = np.float32(np.float32(127) / amax) if amax else np.float32(0)
            q = np.rint(blk * inv).astype(np.int8)  # _mm256_round_ps(_MM_ROUND_NEAREST): half to even
            head = np.float16(d).tobytes()
            if dot == GGMLType.Q8_1:
                head += np.float16(d * np.float32(q.astype(np.int32).sum())).tobytes()
            blocks.append(np.frombuffer(head + q.tobytes(), np.uint8))
        out.append(np.concatenate(blocks))
    return np.array(out)


@pytest.mark.parametrize("dot", [GGMLType.Q8_0, GGMLType.Q8_1])
def test_from_float_is_ggml_cpus_x86_quantizer_not_the_reference(dot: GGMLType) -> None:
    x = _rows(rng(1), 5, 512)
    np.testing.assert_array_equal(quant.from_float(x, dot), _x86_q8_32(x, dot))
    # the row of exact ties (±62.5 with amax 127) is where it departs from the reference's roundf
    assert (quant.from_float(x[-1:], dot) != quantize(x[-1:], dot)).any()


@pytest.mark.parametrize("dot", [GGMLType.Q8_0, GGMLType.Q8_1, GGMLType.Q8_K])
@pytest.mark.parametrize("shape", [(1, 256), (5, 512), (24, 4096)])  # the last one takes the parallel kernel
def test_activation_quantizer_bytes_equal_from_float(dot: GGMLType, shape: tuple[int, int]) -> None:
    x = _rows(rng(1), *shape)
    acts = quant.quantize_activations(x, dot)
    np.testing.assert_array_equal(acts.to_bytes(), quant.from_float(x, dot))
    np.testing.assert_array_equal(acts.dequantized(), dequantize(quant.from_float(x, dot), dot))
    if dot == GGMLType.Q8_K:  # x86's quantize_row_q8_K is the reference
        np.testing.assert_array_equal(acts.to_bytes(), quantize(x, dot))


@pytest.mark.parametrize("dot", [GGMLType.Q8_0, GGMLType.Q8_1, GGMLType.Q8_K])
def test_activation_quantizer_non_finite_rows(dot: GGMLType) -> None:
    x = _rows(rng(2), 3, 512)
    x[1, 7] = np.nan
    x[2, 300] = np.inf
    got = quant.quantize_activations(x, dot).to_bytes()
    np.testing.assert_array_equal(got, quant.from_float(x, dot))
    if dot != GGMLType.Q8_K:  # the finite blocks as x86 quantizes them; NaN lanes become -128 (cvtps2dq + packs)
        size = dot.type_size
        blocks = got.reshape(3, -1, size)
        np.testing.assert_array_equal(blocks[0], _x86_q8_32(x[:1], dot).reshape(-1, size))
        assert blocks[1, 0, size - 32 + 7].view(np.int8) == -128


# ------------------------------------------------------------------------------------------------ tiles


@pytest.mark.parametrize("name", QUANT_TYPES)
def test_tile_dequantize_is_bit_exact(name: str) -> None:
    t = gc.as_type(name)
    w = quantize(_rows(rng(3), 40, 512), t)
    r0, r1 = 5, 37
    out = np.full((r1 - r0 + 3, 512), np.nan, np.float32)  # a larger scratch, as the tile route passes
    mins = np.zeros((r1 - r0 + 3, 512 // 32), np.float32)
    quant.dequantize_rows(w, t, r0, r1, out, mins)
    got = out[: r1 - r0] + np.repeat(mins[: r1 - r0], 32, axis=1) if t in MIN_TYPES else out[: r1 - r0]
    np.testing.assert_array_equal(got.view(np.uint32), dequantize(w[r0:r1], t).view(np.uint32))


# ------------------------------------------------------------------------------------------------ qmatmul


def _reference(w: np.ndarray, t: GGMLType, x: np.ndarray) -> np.ndarray:
    """ggml's definition in float64: activations rounded through the dot type; Q4_1/Q5_1 add m·s (s in f16)."""
    dot = quant.DOT_TYPE[t]
    xq = quant.from_float(x, dot)
    xd = dequantize(xq, dot).astype(np.float64)
    wd = dequantize(w, t).astype(np.float64)
    if t not in MIN_TYPES:
        return xd @ wd.T
    m = np.ascontiguousarray(w.reshape(w.shape[0], -1, t.type_size)[..., 2:4]).view("<f2")[..., 0].astype(np.float64)
    s = np.ascontiguousarray(xq.reshape(x.shape[0], -1, 36)[..., 2:4]).view("<f2")[..., 0].astype(np.float64)
    return xd @ (wd - np.repeat(m, 32, axis=1)).T + s @ m.T


@pytest.mark.parametrize("name", [*QUANT_TYPES, "q2_k", "q3_k"])
@pytest.mark.parametrize("route", ["block", "tile"])
@pytest.mark.parametrize("n", [1, 3, 9])
def test_qmatmul_routes_match_reference(name: str, route: str, n: int) -> None:
    t = gc.as_type(name)
    r = rng(4)
    w = quantize(r.standard_normal((48, 512)).astype(np.float32), t)
    x = _rows(r, n, 512)
    out = np.full((n, 48), np.nan, np.float32)
    quant.qmatmul(w, t, x, out, route=route)
    ref = _reference(w, t, x)
    assert np.abs(out - ref).max() <= 2e-6 * np.abs(ref).max()


def test_block_kernels_compile_for_every_listed_type() -> None:
    pytest.importorskip("numba")
    if quant.disabled_reason() is not None:
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    assert {t for t in quant.BLOCK_KERNEL_TYPES if quant.block_kernels_ready(t)} == set(quant.BLOCK_KERNEL_TYPES)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16", "q4_0", "q4_1", "q6_k"])
def test_expert_product_helper(name: str) -> None:
    """The per-expert helper offered to MUL_MAT_ID: MUL_MAT's numerics on one expert's raw rows."""
    t = gc.as_type(name)
    r = rng(8)
    w = r.standard_normal((12, 256)).astype(np.float32)
    x = _rows(r, 6, 256)
    if t.is_quantized:
        raw, ref = quantize(w, t), _reference(quantize(w, t), t, x)
    elif t == GGMLType.BF16:
        raw = quantize(w, t).view(np.uint16)
        wv = (raw.astype(np.uint32) << 16).view(np.float32)
        xv = (quantize(x, t).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        ref = xv.astype(np.float64) @ wv.T
    else:
        raw = w.astype(t.np_dtype)
        xv = x.astype(np.float16).astype(np.float32) if t == GGMLType.F16 else x
        ref = xv.astype(np.float64) @ raw.astype(np.float64).T
    got = expert_product(raw, t, x)
    assert got.shape == (6, 12)
    assert np.abs(got - ref).max() <= 2e-6 * np.abs(ref).max()


def test_qmatmul_rejects_mismatched_shapes() -> None:
    w = quantize(np.ones((4, 64), np.float32), GGMLType.Q4_0)
    with pytest.raises(ValueError, match="disagree"):
        quant.qmatmul(w, GGMLType.Q4_0, np.ones((2, 96), np.float32), np.empty((2, 4), np.float32))


# ------------------------------------------------------------------------------------------------ MUL_MAT graphs


def _mul_mat_case(name: str, n: int, permuted_b: bool) -> tuple[CpuGraph, gc.Tensor]:
    r = rng(5)
    g = CpuGraph()
    a = g.tensor(r.standard_normal((1, 2, 24, 256)).astype(np.float32), name)  # a2 = 2 weight slices
    if permuted_b:  # activations stored (N, b2, K) and permuted to (b2, N, K): non-contiguous rows of slices
        b = ops.permute(g.tensor(_rows(r, n * 4, 256).reshape(1, n, 4, 256)), 0, 2, 1, 3)
    else:
        b = g.tensor(_rows(r, n * 4, 256).reshape(1, 4, n, 256))  # b2 = 4: each weight slice serves two
    return g, ops.mul_mat(a, b)


@pytest.mark.parametrize("name", ["f32", "f16", "bf16", *QUANT_TYPES, "q3_k"])
@pytest.mark.parametrize("n", [2, 12, 20])  # 2·n activation rows per weight slice: block kernels, then tiles
def test_mul_mat_graph_matches_reference_path(name: str, n: int) -> None:
    for permuted in (False, True):
        g, out = _mul_mat_case(name, n, permuted)
        got = g.compute(out)
        a, b = out.src[0], out.src[1]
        assert a is not None and b is not None
        ref = mul_mat_reference(a, b)
        assert got.shape == ref.shape
        assert np.abs(got - ref).max() <= 1e-5 * np.abs(ref).max(), (name, n, permuted)


def test_mul_mat_read_only_weights() -> None:
    """Weights mapped read-only from a file reach the compiled kernels as read-only arrays."""
    r = rng(6)
    backend = gc.init_backend("CPU")
    wctx, xctx = Context("weights"), Context("acts")
    a = wctx.new_tensor("q4_k", [256, 64])
    b = xctx.new_tensor("f32", [256, 3])
    wbuf = gc.alloc_ctx_tensors(wctx, backend)
    gc.alloc_ctx_tensors(xctx, backend)
    out = ops.mul_mat(a, b)
    gc.alloc_ctx_tensors([out], backend)
    a.set_data(r.standard_normal((64, 256)).astype(np.float32))
    b.set_data(r.standard_normal((3, 256)).astype(np.float32))
    mem = wbuf.host_array()
    assert mem is not None
    mem.flags.writeable = False
    backend.graph_compute(gc.build_graph(out))
    ref = mul_mat_reference(a, b)
    assert np.abs(out.to_numpy() - ref).max() <= 2e-6 * np.abs(ref).max()


def _weights_graph(backend: gc.Backend, n: int) -> tuple[gc.Tensor, gc.Tensor, gc.Tensor, gc.Graph]:
    r = rng(7)
    wctx, xctx = Context("weights"), Context("acts")
    w = wctx.new_tensor("q4_1", [256, 40])
    kv = xctx.new_tensor("q8_0", [256, 24])  # like a KV cache: quantized, but not in a weights buffer
    x = xctx.new_tensor("f32", [256, n])
    gc.alloc_ctx_tensors(wctx, backend).set_usage(BufferUsage.WEIGHTS)
    gc.alloc_ctx_tensors(xctx, backend)
    w.set_data(r.standard_normal((40, 256)).astype(np.float32))
    kv.set_data(r.standard_normal((24, 256)).astype(np.float32))
    x.set_data(r.standard_normal((n, 256)).astype(np.float32))
    y1, y2 = ops.mul_mat(w, x), ops.mul_mat(kv, x)
    gctx_graph = gc.build_graph([y1, y2])
    gc.alloc_ctx_tensors([y1, y2], backend)
    return y1, y2, x, gctx_graph


def test_weights_cache_same_results_and_only_weight_buffers() -> None:
    plain = gc.init_backend("CPU")
    y1, y2, _, graph = _weights_graph(plain, quant.vec_rows_limit(GGMLType.Q4_1) + 4)  # the cache serves the tiles
    plain.graph_compute(graph)
    ref1, ref2 = y1.to_numpy().copy(), y2.to_numpy().copy()
    cached = gc.init_backend("CPU", "weights_cache=1")
    cached.graph_compute(graph)
    cache = cached.weights_cache  # type: ignore[attr-defined]
    assert isinstance(cache, WeightsCache)
    assert len(cache) == 1 and cache.nbytes == 4 * 40 * 256  # the weights buffer only, not the "KV" tensor
    np.testing.assert_allclose(y1.to_numpy(), ref1, rtol=0, atol=1e-5 * np.abs(ref1).max())
    np.testing.assert_array_equal(y2.to_numpy(), ref2)
    limited = gc.init_backend("CPU", "weights_cache=1,weights_cache_mb=0")
    limited.graph_compute(graph)
    assert len(limited.weights_cache) == 0  # type: ignore[attr-defined]
    np.testing.assert_allclose(y1.to_numpy(), ref1, rtol=0, atol=1e-5 * np.abs(ref1).max())


# ------------------------------------------------------------------------------------------------ engine


def _adds(backend: gc.Backend) -> tuple[Context, gc.Tensor, gc.Tensor, gc.Tensor, gc.Graph]:
    ctx = Context("adds")
    a, b = ctx.new_tensor("f32", [8]), ctx.new_tensor("f32", [8])
    y = ops.add(ops.add(a, b), b)
    gc.alloc_ctx_tensors(ctx, backend)
    a.set_data(np.arange(8, dtype=np.float32))
    b.set_data(np.ones(8, np.float32))
    return ctx, a, b, y, gc.build_graph(y)


def test_plan_is_reused_until_the_graph_changes() -> None:
    backend = gc.init_backend("CPU")
    engine = backend.engine  # type: ignore[attr-defined]
    _ctx, a, b, y, graph = _adds(backend)
    backend.graph_compute(graph)
    backend.graph_compute(graph)
    assert engine.n_plans == 1
    np.testing.assert_array_equal(y.to_numpy(), np.arange(8)[None, None, None] + 2)
    # an operand moves to other memory: re-planned, and the new memory is read
    other = Context("other")
    c = other.new_tensor("f32", [8])
    gc.alloc_ctx_tensors(other, backend)
    c.set_data(np.full(8, 10, np.float32))
    b.buffer, b.data_offset = c.buffer, c.data_offset
    backend.graph_compute(graph)
    assert engine.n_plans == 2
    np.testing.assert_array_equal(y.to_numpy(), np.arange(8)[None, None, None] + 20)
    # an operand is replaced (as the scheduler rewires inputs to copies): re-planned
    inner = y.src[0]
    assert inner is not None
    y.src[0] = a
    backend.graph_compute(graph)
    assert engine.n_plans == 3
    np.testing.assert_array_equal(y.to_numpy(), np.arange(8)[None, None, None] + 10)
    y.src[0] = inner
    # the same plan again while nothing changes
    backend.graph_compute(graph)
    backend.graph_compute(graph)
    assert engine.n_plans == 4


def test_plans_do_not_keep_freed_memory_alive() -> None:
    """A plan's views hold its buffers' memory: plans go with their graph, and when a buffer they use is freed."""
    import gc as pygc

    backend = gc.init_backend("CPU")
    engine = backend.engine  # type: ignore[attr-defined]
    _, _, _, _, graph = _adds(backend)
    backend.graph_compute(graph)
    assert len(engine._plans) == 1
    del graph
    pygc.collect()
    assert len(engine._plans) == 0
    _, a, _, _, first = _adds(backend)
    backend.graph_compute(first)
    assert a.buffer is not None
    a.buffer.free()
    _, _, _, _, second = _adds(backend)
    backend.graph_compute(second)  # planning the next graph drops the plan over freed memory
    assert list(engine._plans) == [second.uid]


def test_abort_callback_and_errors_name_the_node() -> None:
    backend = gc.init_backend("CPU")
    _, _, _, y, graph = _adds(backend)
    backend.abort_callback = lambda: True
    with pytest.raises(ComputeError, match="aborted"):
        backend.graph_compute(graph)
    backend.abort_callback = None
    backend.graph_compute(graph)
    np.testing.assert_array_equal(y.to_numpy().reshape(-1), np.arange(8) + 2)
    g = CpuGraph()
    rows = ops.get_rows(g.tensor(np.ones((4, 8), np.float32)), g.tensor(np.array([0, 9]), "i32"))
    rows.name = "bad_gather"
    with pytest.raises(ComputeError, match="bad_gather"):
        g.compute(rows)


def test_threads_reach_the_compiled_kernels() -> None:
    numba = pytest.importorskip("numba")
    if quant.disabled_reason() is not None:
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    backend = gc.init_backend("CPU", "n_threads=1")
    assert backend.n_threads == 1  # type: ignore[attr-defined]
    ctx = Context("threads")
    w, x = ctx.new_tensor("q4_0", [64, 8]), ctx.new_tensor("f32", [64, 1])
    graph = gc.build_graph(ops.mul_mat(w, x))
    gc.alloc_ctx_tensors(ctx, backend)
    backend.graph_compute(graph)  # the first quantized product loads numba: the setting must still apply
    assert quant.numba_loaded() and numba.get_num_threads() == 1
    backend.set_n_threads(2)
    backend.graph_compute(graph)
    assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)


def test_backend_params_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        gc.init_backend("CPU", "threads=2")
    with pytest.raises(ValueError, match="n_threads must be positive"):
        gc.init_backend("CPU", "n_threads=0")


# ------------------------------------------------------------------------------------------------ fallbacks


_GENERIC_SIMD = """
import numpy as np
from ggml_core import GGMLType
from ggml_core.quants import quantize, dequantize
from ggml_cpu import quant
from ggml_cpu.jit import _simd
assert not _simd.HAS_VNNI
r = np.random.default_rng(0)
x = r.standard_normal((5, 512)).astype(np.float32)  # a group of four rows and one more
for t in (GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K):
    w = quantize(r.standard_normal((24, 512)).astype(np.float32), t)
    out = np.empty((5, 24), np.float32)
    quant.qmatmul(w, t, x, out, route="block")
    dot = quant.DOT_TYPE[t]
    ref = dequantize(quant.from_float(x, dot), dot).astype(np.float64) @ dequantize(w, t).T
    assert np.abs(out - ref).max() <= 2e-6 * np.abs(ref).max(), t
print("ok")
"""


def test_generic_partial_sums_without_vnni() -> None:
    """The kernels' portable partial sums (used on CPUs without VNNI) give the same results."""
    pytest.importorskip("numba")
    if quant.disabled_reason() is not None:
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    env = {**os.environ, "GGML_CPU_VNNI": "0"}
    done = subprocess.run([sys.executable, "-c", _GENERIC_SIMD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr


_FALLBACK = """
import numpy as np, ggml_core as gc
from ggml_core import ops
from ggml_cpu import quant
from ggml_cpu.ops.matmul import mul_mat_reference
assert quant.disabled_reason() == "disabled by GGML_CPU_NUMBA=0"
ctx = gc.Context("t")
a, b = ctx.new_tensor("q4_k", [256, 16]), ctx.new_tensor("f32", [256, 3])
y = ops.mul_mat(a, b)
be = gc.init_backend("CPU")
gc.alloc_ctx_tensors(ctx, be)
r = np.random.default_rng(0)
a.set_data(r.standard_normal((16, 256)).astype(np.float32))
b.set_data(r.standard_normal((3, 256)).astype(np.float32))
be.graph_compute(gc.build_graph(y))
assert np.array_equal(y.to_numpy(), mul_mat_reference(a, b).astype(np.float32)), "fallback differs"
print(be.device.reg.features()["compiled kernels"])
"""


def test_without_numba_the_plugin_computes_with_numpy() -> None:
    env = {**os.environ, "GGML_CPU_NUMBA": "0"}
    done = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "off: disabled by GGML_CPU_NUMBA=0" in done.stdout
