"""The decode route's prepared products (``quant.BlockProduct``): activation quantization fused into the block kernels.

The fused kernel must give exactly — bit for bit — what the separate steps give: the activations quantized by
``quantize_activations`` (whose bytes the speed-path tests hold equal to ``ggml_core.quants.quantize``) and then the
same block kernel on those quants. Checked here directly, through a bound MUL_MAT graph, and for rows holding NaN /
infinity (those are quantized by the numpy reference). Also: the compiled float32 → f16 rounding the fused
quantizer uses equals numpy's ``astype(float16)`` on normal, subnormal, tie and overflowing values.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import rng

import ggml_core as gc
from ggml_core import Context, GGMLType, ops
from ggml_core.quants import quantize
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.ops.matmul import bind_mul_mat
from ggml_cpu.quant import product
from ggml_cpu.threads import Faster

pytest.importorskip("numba")
if quant.disabled_reason() is not None:  # GGML_CPU_NUMBA=0: these tests are about the compiled kernels
    pytest.skip(f"compiled kernels off: {quant.disabled_reason()}", allow_module_level=True)

QUANT_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"]


def _separate(w: np.ndarray, t: GGMLType, x: np.ndarray, threads: str = "serial") -> np.ndarray:
    """The unfused steps: quantize the activations, then the block kernel on the given quants."""
    acts = quant.quantize_activations(x, quant.DOT_TYPE[t])
    specs = product._kernels()[0][t]
    fn = _jit.get(specs[1 if threads == "serial" else 0])
    assert fn is not None
    xs = acts.s.reshape(acts.d.shape) if acts.s.size else np.zeros_like(acts.d)
    out = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    assert fn(x, False, w, w.view(np.int8), acts.q, acts.d, acts.sums, xs, F16_VALUES, out) == 0
    return out


def _rows(r: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Rows of very different magnitudes (scales that round to f16 subnormals and overflow f16), zeros, ties."""
    x = (r.standard_normal((n, k)) * r.choice([1e-9, 1e-5, 1.0, 1e3, 1e7], size=(n, 1))).astype(np.float32)
    x[0, :32] = 0.0
    x[-1, 32:64] = np.float32(62.5) * np.where(np.arange(32) % 2, 1, -1)
    x[-1, 32] = np.float32(-127.0)
    return x


@pytest.mark.parametrize("name", QUANT_TYPES)
@pytest.mark.parametrize("n", [1, 3, 6])
def test_fused_product_is_bit_identical_to_the_separate_steps(name: str, n: int) -> None:
    t = gc.as_type(name)
    r = rng(11)
    w = quantize(r.standard_normal((40, 512)).astype(np.float32), t)
    x = _rows(r, n, 512)
    out = np.full((n, 40), np.nan, np.float32)
    bound = quant.block_product(w, t, x, out)
    assert bound is not None
    bound()
    assert np.array_equal(out, _separate(w, t, x), equal_nan=True), name  # f16-overflowing scales give inf / NaN
    x[:] = _rows(rng(12), n, 512)  # the same product sees new activations written in place
    bound()
    assert np.array_equal(out, _separate(w, t, x), equal_nan=True), name


@pytest.mark.parametrize("name", ["q4_1", "q8_0", "q4_k"])
def test_non_finite_rows_take_the_numpy_quantizer(name: str) -> None:
    t = gc.as_type(name)
    r = rng(13)
    w = quantize(r.standard_normal((16, 256)).astype(np.float32), t)
    x = r.standard_normal((3, 256)).astype(np.float32)
    x[1, 5], x[2, 200] = np.nan, np.inf
    out = np.empty((3, 16), np.float32)
    bound = quant.block_product(w, t, x, out)
    assert bound is not None
    bound()
    acts = quant.quantize_activations_numpy(x, quant.DOT_TYPE[t])
    ref = np.empty_like(out)
    fn = _jit.get(product._kernels()[0][t][1])
    assert fn is not None
    xs = acts.s.reshape(acts.d.shape) if acts.s.size else np.zeros_like(acts.d)
    fn(x, False, w, w.view(np.int8), acts.q, acts.d, acts.sums, xs, F16_VALUES, ref)
    assert np.array_equal(out, ref, equal_nan=True)


def test_bound_mul_mat_equals_qmatmul_and_reads_inputs_in_place() -> None:
    """A MUL_MAT bound once (the engine's plan) gives qmatmul's exact numbers, also after new activations."""
    r = rng(14)
    backend = gc.init_backend("CPU")
    wctx, xctx = Context("weights"), Context("acts")
    a = wctx.new_tensor("q4_0", [512, 96])
    b = xctx.new_tensor("f32", [512, 2])
    gc.alloc_ctx_tensors(wctx, backend)
    gc.alloc_ctx_tensors(xctx, backend)
    out = ops.mul_mat(a, b)
    gc.alloc_ctx_tensors([out], backend)
    wf = r.standard_normal((96, 512)).astype(np.float32)
    a.set_data(wf)
    thunk = bind_mul_mat(out)
    for seed in (1, 2):
        x = rng(seed).standard_normal((2, 512)).astype(np.float32)
        b.set_data(x)
        thunk()
        ref = np.empty((2, 96), np.float32)
        quant.qmatmul(quantize(wf, GGMLType.Q4_0), GGMLType.Q4_0, x, ref)
        assert np.array_equal(out.to_numpy().reshape(2, 96), ref)


def test_f16_rounding_equals_numpy() -> None:
    import numba

    from ggml_cpu.jit._blocks import f16_bits

    @numba.njit(cache=False)
    def bits(v: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        for i in range(v.size):
            out[i] = f16_bits(v[i])

    r = rng(15)
    # every float32 exponent from deep f16 underflow to past f16 overflow, random mantissas, both signs
    mags = np.ldexp(r.uniform(1.0, 2.0, 1 << 18), r.integers(-30, 18, 1 << 18)).astype(np.float32)
    v = mags * r.choice(np.array([-1, 1], np.float32), mags.size)
    # exact ties and their neighbours around normal, subnormal and overflow results
    codes = np.arange(0, 0x7BFF, 3, dtype=np.uint16)
    lo, hi = (c.view(np.float16).astype(np.float64) for c in (codes, codes + 1))
    mid = ((lo + hi) / 2).astype(np.float32)  # exact: f16 values have 11 significant bits
    ties = np.concatenate([mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(1e9))])
    v = np.concatenate([v, ties, -ties, np.float32([0.0, -0.0, 65504.0, 65519.99, 65520.0, 3e38])])
    got = np.empty(v.size, np.uint16)
    bits(v, got)
    with np.errstate(over="ignore"):
        want = v.astype(np.float16).view(np.uint16)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ["q4_0", "q5_1", "q8_0", "q4_k", "q6_k"])
def test_threaded_and_serial_kernels_give_the_same_bits(name: str) -> None:
    """The product may switch between its threaded and serial kernel by measured speed: that must change nothing."""
    t = gc.as_type(name)
    r = rng(16)
    w = quantize(r.standard_normal((700, 1024)).astype(np.float32), t)  # ≥ 2²⁰ weight × row operations
    x = r.standard_normal((2, 1024)).astype(np.float32)
    assert np.array_equal(_separate(w, t, x, "serial"), _separate(w, t, x, "threaded"))
    out = np.empty((2, 700), np.float32)
    bound = quant.block_product(w, t, x, out)
    assert bound is not None
    quant.set_threads(2)
    try:
        for _ in range(2 * Faster.PROBES + 2):  # both variants probed, then the chosen one
            out.fill(np.nan)
            bound()
            assert np.array_equal(out, _separate(w, t, x)), name
    finally:
        quant.set_threads(quant.max_threads())


def test_faster_never_switches_to_a_variant_with_other_bits() -> None:
    out = np.zeros(3, np.float32)
    calls = {"first": 0, "second": 0}

    def first() -> None:
        calls["first"] += 1
        out[:] = 1.0

    def second() -> None:
        calls["second"] += 1
        out[:] = np.nextafter(np.float32(1.0), np.float32(2.0))  # one ulp away: not the same bits

    chooser = Faster(first, second, out)
    for _ in range(3 * Faster.PERIOD):
        chooser()
        assert (out == 1.0).all()
    assert calls["second"] == 1  # only the comparison on the first call
