"""The compiled one-call thunks of the decode ops (each family's ``bind_*`` in ``ggml_cpu.ops``) against the numpy path
and numpy references written from the ops' definitions.

Each case computes the same graph twice — compiled, then with the compiled kernels switched off (the numpy path,
what ``GGML_CPU_NUMBA=0`` runs) — and holds the two to the agreement ``ops/_compiled.py`` states: bit for bit for
RMS_NORM's products, ROPE, SET_ROWS; ≤ 2 ulp for RMS_NORM (sequential against pairwise double sums); a few ulp
for SOFT_MAX and SWIGLU (libm's exp against numpy's); the float32 dot-product bound for f16 products. The
references in float64 check both. Each case also asserts the compiled thunk was bound (so a silent fallback to
numpy cannot pass as the compiled path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

import ggml_core as gc
from ggml_core import ComputeError, GGMLOp, Tensor, ops
from ggml_cpu.ops import _compiled, attention, glu, matmul, movement, norm

pytest.importorskip("numba")

U = 2.0**-24  # float32 unit roundoff


@pytest.fixture(autouse=True)
def _needs_kernels() -> None:
    if _compiled.kernel("RMS_NORM_SPEC", module="_norm_kernels") is None:
        pytest.skip("compiled kernels unavailable here (numba off or failed to build)")


@pytest.fixture
def numpy_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    """Call to switch the compiled kernels off for graphs planned afterwards."""

    def off() -> None:
        monkeypatch.setattr(_compiled, "load_module", lambda name, what: None)

    yield off


def _both(
    build: Callable[[CpuGraph], Tensor], numpy_path: Callable[[], None], binder: Callable[[Tensor], object]
) -> tuple[np.ndarray, np.ndarray]:
    """``build``'s graph computed compiled, then on the numpy path (fresh graphs, so fresh plans); asserts that
    ``binder`` binds a compiled thunk for the output node (no silent fallback)."""
    g = CpuGraph()
    out = build(g)
    got = g.compute(out).copy()
    assert binder(out) is not None, f"no compiled thunk for {out.op_desc}"
    numpy_path()
    g2 = CpuGraph()
    ref = g2.compute(build(g2)).copy()
    return got, ref


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in float32 units in the last place (finite values of equal sign)."""
    ia, ib = a.astype(np.float32).view(np.int32).astype(np.int64), b.astype(np.float32).view(np.int32).astype(np.int64)
    return int(np.abs(ia - ib).max()) if a.size else 0


# ------------------------------------------------------------------------------------------------ RMS_NORM + MUL


def test_rms_norm_fused_with_mul(numpy_path: Callable[[], None]) -> None:
    x = (rng(1).standard_normal((2, 3, 5, 64)) * 3 + 0.5).astype(np.float32)
    w = rng(2).standard_normal(64).astype(np.float32)
    nodes: list[Tensor] = []

    def build(g: CpuGraph) -> Tensor:
        n = ops.rms_norm(g.tensor(x), 1e-5)
        nodes.append(n)
        return ops.mul(n, g.tensor(w))

    got, ref = _both(build, numpy_path, lambda out: norm.bind_rms_norm(nodes[0], out))
    x64 = x.astype(np.float64)
    exact = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(got, exact, rtol=8 * U * 4, atol=1e-6)
    assert _ulps(got, ref) <= 2


def test_rms_norm_and_mul_are_one_step_of_the_plan() -> None:
    x = rng(3).standard_normal((1, 1, 4, 32)).astype(np.float32)
    g = CpuGraph()
    n = ops.rms_norm(g.tensor(x), 1e-6)
    out = ops.mul(n, g.tensor(np.full(32, 2.0, np.float32)))
    got = g.compute(out, n)  # the norm's own output is written too
    backend = gc.init_backend("CPU")
    graph = gc.build_graph([out, n])
    plan = backend.engine.plan(graph)  # type: ignore[attr-defined]
    assert [node.op for node, _ in plan.steps] == [GGMLOp.RMS_NORM]
    backend.graph_compute(graph)
    np.testing.assert_array_equal(out.to_numpy(), got)
    np.testing.assert_array_equal(n.to_numpy() * np.float32(2.0), got)


def test_rms_norm_strided_rows(numpy_path: Callable[[], None]) -> None:
    x = rng(4).standard_normal((1, 3, 8, 24)).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        t = ops.permute(g.tensor(x), 0, 2, 1, 3)  # rows contiguous, dims 1/2 swapped
        return ops.rms_norm(t, 1e-5)

    got, ref = _both(build, numpy_path, norm.bind_rms_norm)
    assert _ulps(got, ref) <= 2


# ------------------------------------------------------------------------------------------------ SOFT_MAX


def _soft_max_def(x: np.ndarray, mask: np.ndarray | None, scale: float, slopes: np.ndarray, sinks: np.ndarray | None
                  ) -> np.ndarray:  # fmt: skip
    w = x.astype(np.float64) * scale
    if mask is not None:
        w = w + slopes.reshape(1, -1, 1, 1) * np.tile(mask[:, :, : x.shape[2]], (1, x.shape[1] // mask.shape[1], 1, 1))
    mx = w.max(axis=-1, keepdims=True)
    if sinks is not None:
        mx = np.maximum(mx, sinks.reshape(1, -1, 1, 1))
    e = np.exp(w - mx)
    total = e.sum(axis=-1, keepdims=True)
    if sinks is not None:
        total = total + np.exp(sinks.reshape(1, -1, 1, 1) - mx)
    return e / total


@pytest.mark.parametrize("with_sinks", [False, True])
@pytest.mark.parametrize("max_bias", [0.0, 8.0])
def test_soft_max_ext(numpy_path: Callable[[], None], max_bias: float, with_sinks: bool) -> None:
    r = rng(5)
    x = (r.standard_normal((1, 8, 3, 256)) * 4).astype(np.float32)
    mask = r.standard_normal((1, 1, 4, 256)).astype(np.float32)
    mask[..., 100:] = -np.inf  # unused KV cells
    sinks = r.standard_normal(8).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        out = ops.soft_max_ext(g.tensor(x), g.tensor(mask), 0.125, max_bias)
        if with_sinks:
            ops.soft_max_add_sinks(out, g.tensor(sinks))
        return out

    got, ref = _both(build, numpy_path, lambda out: attention.bind_soft_max(out, np.ones(8, np.float32)))
    from ggml_cpu.ops.attention import alibi_slopes

    exact = _soft_max_def(x, mask, 0.125, alibi_slopes(8, max_bias).astype(np.float64), sinks if with_sinks else None)
    # float32 rounding of w (2 operations), exp (≤ 1 ulp each side) and the final product: a few ulp relative
    np.testing.assert_allclose(got, exact, rtol=64 * U, atol=1e-30)
    np.testing.assert_allclose(got, ref, rtol=8 * U, atol=1e-30)
    assert np.all(got[..., 100:] == 0.0)


def test_soft_max_nan_row_stays_nan(numpy_path: Callable[[], None]) -> None:
    x = rng(6).standard_normal((1, 1, 2, 16)).astype(np.float32)
    x[0, 0, 1, 3] = np.nan
    got, ref = _both(lambda g: ops.soft_max_ext(g.tensor(x), None, 1.0), numpy_path,
                     lambda out: attention.bind_soft_max(out, np.ones(1, np.float32)))  # fmt: skip
    assert np.isnan(got[0, 0, 1]).all() and np.isnan(ref[0, 0, 1]).all()
    assert np.isfinite(got[0, 0, 0]).all()


# ------------------------------------------------------------------------------------------------ ROPE


_YARN = (1000, 10000.0, 0.25, 1.0, 1.0, 32.0, 1.0)  # n_ctx_orig, base, freq_scale, ext_factor, attn, beta_f, beta_s
_PLAIN = (1000, 10000.0, 1.0, 0.0, 1.0, 32.0, 1.0)


@pytest.mark.parametrize("n_tok", [1, 3, 9])  # ≤ 4 tokens: angles in the kernel; more: the shared numpy table
@pytest.mark.parametrize(
    ("mode", "n_dims", "sections", "args"),
    [
        (0, 64, None, _PLAIN),
        (0, 32, None, _PLAIN),
        (2, 64, None, _PLAIN),
        (2, 48, None, _PLAIN),
        (0, 64, None, _YARN),
        (2, 64, None, _YARN),
        (8, 64, (8, 12, 12, 0), _PLAIN),
        (40, 64, (8, 12, 12, 0), _PLAIN),
        (24, 32, (8, 8, 0, 0), _PLAIN),
    ],
)
def test_rope_equals_numpy_path(
    numpy_path: Callable[[], None], mode: int, n_dims: int, sections: tuple | None, args: tuple, n_tok: int
) -> None:
    r = rng(7)
    x = r.standard_normal((1, n_tok, 4, 64)).astype(np.float32)
    pos = r.integers(0, 40000, n_tok * (4 if sections else 1)).astype(np.int32)  # far positions: float32 drift

    def build(g: CpuGraph) -> Tensor:
        if sections is None:
            return ops.rope_ext(g.tensor(x), g.tensor(pos, "i32"), None, n_dims, mode, *args)
        return ops.rope_multi(g.tensor(x), g.tensor(pos, "i32"), None, n_dims, sections, mode, *args)

    inline = sections is None and n_tok <= attention.ROPE_INLINE_TOKENS

    def bound(out: Tensor) -> object:
        if inline:
            return attention.bind_rope_positions(out, (1.0,) * 6, n_dims // 2, 0, 2, 1)
        return attention.bind_rope(out, 0, 1, 1)

    got, ref = _both(build, numpy_path, bound)
    if not inline:  # the same numpy tables: the rotation's float32 operations are the numpy path's
        np.testing.assert_array_equal(got, ref)
        return
    # angles in the kernel: libm's float64 cos / sin against numpy's, each rounded to float32 — equal here, but a
    # value within ~1e-16 of a rounding boundary may round the other way elsewhere (1 ulp of cos, ≲ 2 of a result)
    np.testing.assert_allclose(got, ref, rtol=4 * U, atol=4 * U * float(np.abs(x).max()))
    assert np.count_nonzero(got != ref) <= max(2, got.size // 1000)


def test_rope_normal_against_the_definition() -> None:
    r = rng(8)
    x = r.standard_normal((1, 2, 3, 16)).astype(np.float32)
    pos = np.array([5, 77], np.int32)
    g = CpuGraph()
    got = g.compute(ops.rope_ext(g.tensor(x), g.tensor(pos, "i32"), None, 16, 0, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0))
    theta = pos[:, None].astype(np.float64) * 10000.0 ** (-2.0 * np.arange(8) / 16)  # (tokens, pairs)
    c, s = np.cos(theta)[None, :, None, :], np.sin(theta)[None, :, None, :]
    x0, x1 = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    exact = np.empty(x.shape)
    exact[..., 0::2], exact[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-4 * np.abs(x).max())  # theta powers drift in float32


# ------------------------------------------------------------------------------------------------ SET_ROWS


@pytest.mark.parametrize("idx_type", ["i32", "i64"])
@pytest.mark.parametrize("dst_type", ["f32", "f16"])
def test_set_rows(numpy_path: Callable[[], None], dst_type: str, idx_type: str) -> None:
    r = rng(9)
    dst = r.standard_normal((2, 3, 10, 16)).astype(np.float32)
    src = (r.standard_normal((2, 3, 4, 16)) * 1000).astype(np.float32)  # some values round to f16 ties / overflow
    src[0, 0, 0, :3] = [70000.0, -np.inf, 2.0**-20]
    idx = r.permutation(10)[:4].reshape(1, 1, 4).repeat(3, axis=1)  # (c.ne[2]=1, c.ne[1]=3, 4) tiled over dim 3
    idx[0, 1] = [9, 0, 5, 2]

    def build(g: CpuGraph) -> Tensor:
        d = g.tensor(dst.astype(np.float16) if dst_type == "f16" else dst, dst_type)
        return ops.set_rows(d, g.tensor(src), g.tensor(idx, idx_type))

    got, ref = _both(build, numpy_path, movement.bind_set_rows)
    np.testing.assert_array_equal(got, ref)
    want = (dst.astype(np.float16) if dst_type == "f16" else dst).astype(np.float32)
    for i3 in range(2):
        for i2 in range(3):
            with np.errstate(over="ignore"):  # 70000 → inf in f16, as ggml
                want[i3, i2, idx[0, i2]] = src[i3, i2].astype(np.float16) if dst_type == "f16" else src[i3, i2]
    np.testing.assert_array_equal(got, want)


def test_set_rows_into_a_transposed_cache(numpy_path: Callable[[], None]) -> None:
    """llama's V cache without flash attention: each value is a row of one element, at stride n_kv."""
    n_kv, d = 16, 8
    cache = np.zeros((1, 1, n_kv * d, 1), np.float16)
    v = rng(10).standard_normal((1, 1, 2, d)).astype(np.float32)  # two tokens
    cells = np.array([3, 11])
    idx = (np.arange(d)[None, :] * n_kv + cells[:, None]).reshape(1, 1, -1)  # element i of token t → d_i·n_kv + cell

    def build(g: CpuGraph) -> Tensor:
        c = g.tensor(cache, "f16")
        vt = ops.reshape_2d(g.tensor(v), 1, 2 * d)
        return ops.set_rows(c, vt, g.tensor(idx, "i64"))

    got, ref = _both(build, numpy_path, movement.bind_set_rows)
    np.testing.assert_array_equal(got, ref)
    want = np.zeros((d, n_kv), np.float32)
    want[:, cells] = v[0, 0].T.astype(np.float16)
    np.testing.assert_array_equal(got.reshape(d, n_kv), want)


@pytest.mark.parametrize("d", [40, 64])
def test_set_rows_into_a_transposed_cache_by_channel_blocks(numpy_path: Callable[[], None], d: int) -> None:
    """A batch's V (``d`` channels a token, enough one-value rows for the channel-block order, ``d`` = 40 ending in
    a partial block) into a transposed cache at scattered cells: the numpy path's bits and the definition's."""
    n_kv, n_tok = 64, 7
    cache = rng(12).standard_normal((1, 1, n_kv * d, 1)).astype(np.float16)
    v = rng(13).standard_normal((1, 1, n_tok, d)).astype(np.float32)
    cells = np.array([5, 6, 7, 40, 2, 63, 0])
    idx = (np.arange(d)[None, :] * n_kv + cells[:, None]).reshape(1, 1, -1)

    def build(g: CpuGraph) -> Tensor:
        vt = ops.reshape_2d(g.tensor(v), 1, n_tok * d)
        return ops.set_rows(g.tensor(cache, "f16"), vt, g.tensor(idx, "i32"))

    assert movement._token_width(build(CpuGraph()).src[0]) == d  # the channel-block order is the one tested
    got, ref = _both(build, numpy_path, movement.bind_set_rows)
    np.testing.assert_array_equal(got, ref)
    want = cache.reshape(d, n_kv).astype(np.float32)
    want[:, cells] = v[0, 0].T.astype(np.float16)
    np.testing.assert_array_equal(got.reshape(d, n_kv), want)


def test_set_rows_by_channel_blocks_bad_index_is_an_error_naming_the_node() -> None:
    g = CpuGraph()
    idx = np.arange(4 * 32)
    idx[77] = 4 * 32  # one past the cache
    vt = ops.reshape_2d(g.tensor(np.ones((4, 32), np.float32)), 1, 4 * 32)
    out = ops.set_rows(g.tensor(np.zeros((4 * 32, 1), np.float32)), vt, g.tensor(idx, "i64"))
    with pytest.raises(ComputeError, match=r"destination row index 128 is outside 0\.\.127"):
        g.compute(out)


def test_set_rows_bad_index_is_an_error_naming_the_node() -> None:
    g = CpuGraph()
    out = ops.set_rows(g.tensor(np.zeros((4, 8), np.float32)), g.tensor(np.ones((2, 8), np.float32)),
                       g.tensor(np.array([1, 4]), "i64"))  # fmt: skip
    with pytest.raises(ComputeError, match=r"destination row index 4 is outside 0\.\.3"):
        g.compute(out)


# ------------------------------------------------------------------------------------------------ SWIGLU


@pytest.mark.parametrize("form", ["split", "fused", "swapped"])
def test_swiglu(numpy_path: Callable[[], None], form: str) -> None:
    r = rng(11)
    x = (r.standard_normal((1, 2, 3, 96)) * 6).astype(np.float32)
    g_ = r.standard_normal((1, 2, 3, 96)).astype(np.float32)
    both = np.concatenate([x, g_], axis=-1)

    def build(g: CpuGraph) -> Tensor:
        if form == "split":
            return ops.swiglu_split(g.tensor(x), g.tensor(g_))
        rows = np.concatenate([g_, x], -1) if form == "swapped" else both
        return ops.swiglu(g.tensor(rows), swapped=form == "swapped")

    got, ref = _both(build, numpy_path, glu.bind_glu)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, x64 / (1 + np.exp(-x64)) * g_, rtol=8 * U, atol=1e-30)
    assert _ulps(got, ref) <= 1


@pytest.mark.parametrize("form", ["split", "fused", "swapped"])
@pytest.mark.parametrize("n", [96, 2048])  # the numpy path's GELU: the f16 lookup below 4,096 values, compiled above
def test_geglu_gives_the_numpy_paths_bits(numpy_path: Callable[[], None], form: str, n: int) -> None:
    """ggml's CPU GEGLU: the f16 GELU table at f16(x), 0 at or below −10, x at or above 10, times the gate."""
    r = rng(12)
    x = (r.standard_normal((1, 2, 3, n)) * 6).astype(np.float32)
    x[0, 0, 0, :6] = [-10.0, 10.0, np.nextafter(np.float32(-10), np.float32(0)), 12.0, -11.0, np.nan]
    g_ = r.standard_normal((1, 2, 3, n)).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        if form == "split":
            return ops.geglu_split(g.tensor(x), g.tensor(g_))
        rows = np.concatenate([g_, x], -1) if form == "swapped" else np.concatenate([x, g_], -1)
        return ops.geglu(g.tensor(rows), swapped=form == "swapped")

    got, ref = _both(build, numpy_path, glu.bind_glu)
    np.testing.assert_array_equal(got, ref)  # NaN where x is NaN on both
    x64 = x.astype(np.float64)
    tanh_gelu = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))
    want = np.where(x64 <= -10, 0.0, np.where(x64 >= 10, x64, tanh_gelu)) * g_
    ok = np.isfinite(x)
    # the table is read at f16(x): |Δx| ≤ 2⁻¹¹|x|, and GELU's slope is at most ~1.13
    assert np.all(np.abs(got - want)[ok] <= (6e-4 * (np.abs(x64) + 1) * np.abs(g_))[ok] + 1e-6)
    assert got[0, 0, 0, 0] == 0.0 and got[0, 0, 0, 1] == np.float32(10.0) * g_[0, 0, 0, 1]


# ------------------------------------------------------------------------------------------------ f16 products


@pytest.mark.parametrize("case", ["kq", "kqv", "gqa"])
def test_half_product_reads_f16_within_the_dot_bound(numpy_path: Callable[[], None], case: str) -> None:
    """KV-cache products: activations rounded to f16 (ggml's dot type), f16 weights, float32 sums."""
    r = rng(12)
    heads, kv_heads, d, n_kv, n_tok = 8, (4 if case == "gqa" else 8), 64, 96, 2
    k, m = (n_kv, d) if case == "kqv" else (d, n_kv)
    w = r.standard_normal((1, kv_heads, m, k)).astype(np.float16)
    x = r.standard_normal((1, heads, n_tok, k)).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        wt = g.tensor(w, "f16")
        xt = ops.permute(g.tensor(x.transpose(0, 2, 1, 3).copy()), 0, 2, 1, 3)  # (tokens, heads) → heads outer
        return ops.mul_mat(wt, xt)

    got, ref = _both(build, numpy_path, lambda out: matmul.bind_half_product(out.src[0], out.src[1], out))
    xh = x.astype(np.float16).astype(np.float64)
    wf = np.repeat(w.astype(np.float64), heads // kv_heads, axis=1)
    exact = xh @ wf.swapaxes(-1, -2)
    bound = k * U * (np.abs(xh) @ np.abs(wf).swapaxes(-1, -2))  # f16 × f16 products are exact in float32
    assert np.all(np.abs(got - exact) <= bound)
    assert np.all(np.abs(ref - exact) <= bound)


def test_half_product_is_bound_for_decode_shapes() -> None:
    g = CpuGraph()
    w = g.tensor(np.zeros((1, 2, 8, 32), np.float16), "f16")
    out = ops.mul_mat(w, g.tensor(np.zeros((1, 2, 1, 32), np.float32)))
    g.compute(out)
    a, b = out.src[0], out.src[1]
    assert a is not None and b is not None
    assert matmul.bind_half_product(a, b, out) is not None


# ------------------------------------------------------------------------------------------------ GET_ROWS


@pytest.mark.parametrize("wtype", ["q8_0", "q4_0", "q5_0", "q4_k", "q6_k"])
def test_get_rows_of_quantized_rows_equals_the_reference_dequantizer(wtype: str) -> None:
    from ggml_core.quants import dequantize, quantize

    w = rng(13).standard_normal((12, 256)).astype(np.float32)
    q = quantize(w, wtype)
    idx = np.array([3, 0, 11, 3], np.int32)
    g = CpuGraph()
    out = ops.get_rows(g.tensor(w, wtype), g.tensor(idx, "i32"))  # set_data quantizes w with the reference
    got = g.compute(out)
    a, b = out.src[0], out.src[1]
    assert a is not None and b is not None
    from ggml_cpu.ops.movement import _bind_get_rows_dequantized

    assert _bind_get_rows_dequantized(out, a, b) is not None
    np.testing.assert_array_equal(got.reshape(4, 256), dequantize(q, wtype)[idx])


def test_get_rows_bad_index_is_an_error_naming_the_node() -> None:
    g = CpuGraph()
    out = ops.get_rows(g.tensor(np.zeros((4, 64), np.float32), "q8_0"), g.tensor(np.array([1, 7]), "i32"))
    with pytest.raises(ComputeError, match=r"row index 7 is outside 0\.\.3"):
        g.compute(out)


# ------------------------------------------------------------------------------------------------ attention pair


def _attention(g: CpuGraph, k: np.ndarray, q: np.ndarray, mask: np.ndarray) -> tuple[Tensor, Tensor]:
    kq = ops.mul_mat(g.tensor(k, "f16"), g.tensor(q))
    return kq, ops.soft_max_ext(kq, g.tensor(mask), 0.125, 0.0)


def _attention_inputs(n_tok: int, used: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = rng(14)
    n_kv = 64
    k = r.standard_normal((1, 4, n_kv, 32)).astype(np.float16)
    q = r.standard_normal((1, 4, n_tok, 32)).astype(np.float32)
    mask = np.zeros((1, 1, n_tok, n_kv), np.float32)
    for t in range(n_tok):  # causal over the used cells
        mask[0, 0, t, used - n_tok + t + 1 :] = -np.inf
    return k, q, mask


@pytest.mark.parametrize("n_tok", [1, 8, 40])
def test_kq_soft_max_pair_skips_masked_cells(numpy_path: Callable[[], None], n_tok: int) -> None:
    k, q, mask = _attention_inputs(n_tok, used=45)

    def build(g: CpuGraph) -> Tensor:
        return _attention(g, k, q, mask)[1]

    g = CpuGraph()
    _kq, out = _attention(g, k, q, mask)
    got = g.compute(out).copy()
    plan = gc.init_backend("CPU").engine.plan(gc.build_graph([out]))  # type: ignore[attr-defined]
    assert [n.op for n, _ in plan.steps] == [GGMLOp.MUL_MAT], "the product and its softmax are one step"
    numpy_path()
    g2 = CpuGraph()
    ref = g2.compute(build(g2))
    s = q.astype(np.float16).astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * 0.125 + mask
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    exact = e / e.sum(axis=-1, keepdims=True)
    # the scores within the f16 dot bound (32 terms), then softmax's float32 steps: a relative few 1e-6
    np.testing.assert_allclose(got, exact, rtol=3e-6, atol=1e-7)
    np.testing.assert_allclose(got, ref, rtol=3e-6, atol=1e-7)
    assert np.all(got[np.broadcast_to(mask, got.shape) == -np.inf] == 0.0)


def test_kq_soft_max_pair_ignores_garbage_in_masked_cells() -> None:
    """Unused cache cells holding NaN do not poison the row (llama.cpp's flash attention skips them too)."""
    k, q, mask = _attention_inputs(2, used=10)
    k[:, :, 20:] = np.nan
    g = CpuGraph()
    got = g.compute(_attention(g, k, q, mask)[1])
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("n_tok", [1, 3])
def test_kq_soft_max_pair_trailing_masked_columns_give_the_full_walks_bits(n_tok: int) -> None:
    """The fused pair's softmax does not walk a row's trailing −inf mask columns (a decode step's cache window):
    its results are the unfused softmax's bit for bit, which walks every column of the full scores; a row with a
    NaN score stays NaN in every column, trailing ones included, as the full walk gives."""
    k, q, mask = _attention_inputs(n_tok, used=12)  # 64 cells, the last 52 − n_tok + 1 masked in every row
    q[0, 2, 0, 5] = np.nan  # one head's first row: NaN scores

    g = CpuGraph()
    fused = _attention(g, k, q, mask)[1]
    got = g.compute(fused).copy()
    plan = gc.init_backend("CPU").engine.plan(gc.build_graph([fused]))  # type: ignore[attr-defined]
    assert [n.op for n, _ in plan.steps] == [GGMLOp.MUL_MAT], "the product and its softmax are one step"
    g2 = CpuGraph()
    kq, out = _attention(g2, k, q, mask)
    kq.set_output()  # not fused: every score computed, the softmax walks every column
    g2.compute(out, kq)
    ref = out.to_numpy()
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert np.isnan(got[0, 2, 0]).all() and np.isfinite(np.delete(got, 2, axis=1)).all()
    masked = np.broadcast_to(mask, got.shape) == -np.inf
    assert (got[masked & np.isfinite(got)] == 0).all()


def test_product_read_elsewhere_is_not_fused() -> None:
    k, q, mask = _attention_inputs(2, used=10)
    g = CpuGraph()
    kq, out = _attention(g, k, q, mask)
    kq.set_output()  # an output: it must hold every score
    g.compute(out, kq)
    plan = gc.init_backend("CPU").engine.plan(gc.build_graph([out, kq]))  # type: ignore[attr-defined]
    assert [n.op for n, _ in plan.steps] == [GGMLOp.MUL_MAT, GGMLOp.SOFT_MAX]
    exact = q.astype(np.float16).astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2)
    np.testing.assert_allclose(kq.to_numpy(), exact, rtol=0, atol=32 * U * 32 * 16)


def test_half_product_trailing_zero_activations_and_threads() -> None:
    """Rows of softmax weights ending in zeros (unused cells) read only up to their last non-zero; the threaded
    and the serial kernels give the same bits."""
    r = rng(15)
    w = r.standard_normal((1, 4, 16, 128)).astype(np.float16)  # V transposed: (heads, d, cells)
    x = r.random((1, 4, 3, 128)).astype(np.float32)
    x[..., 50:] = 0.0
    w[..., 60:] = np.inf  # never read: their activations are zero
    g = CpuGraph()
    out = ops.mul_mat(g.tensor(w, "f16"), g.tensor(x))
    got = g.compute(out).copy()
    exact = x.astype(np.float16).astype(np.float64)[..., :50] @ w.astype(np.float64)[..., :50].swapaxes(-1, -2)
    bound = 50 * U * (np.abs(x[..., :50]).astype(np.float64) @ np.abs(w[..., :50].astype(np.float64)).swapaxes(-1, -2))
    assert np.all(np.abs(got - exact) <= bound)
    a, b = out.src[0], out.src[1]
    assert a is not None and b is not None
    wv, xv, ov = _compiled.flat(a), _compiled.flat(b), _compiled.flat(out)
    assert wv is not None and xv is not None and ov is not None
    outs = []
    for variant in (0, 1):
        fn = _compiled.kernel("HALF_DOT_SPECS", variant, module="_matmul_kernels")
        assert fn is not None
        o = np.full_like(ov[0], np.nan)
        p = np.array([128, 16, 3, 4, 1, 1, 1, *wv[1][1:], *xv[1][1:], *ov[1][1:], 0, 0, 0, 0, 1, 1], np.int64)
        fn(wv[0], xv[0], o, p, np.empty(128 * 4, np.float32), np.zeros(1, np.float32))
        outs.append(o)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0].reshape(got.shape), got)


def test_kq_soft_max_pair_with_sinks_and_grouped_heads(numpy_path: Callable[[], None]) -> None:
    """GQA (4 KV heads for 8 query heads) and attention sinks through the fused pair, against the numpy path."""
    r = rng(16)
    k = r.standard_normal((1, 4, 48, 32)).astype(np.float16)
    q = r.standard_normal((1, 8, 5, 32)).astype(np.float32)
    mask = np.zeros((1, 1, 5, 48), np.float32)
    mask[..., 30:] = -np.inf
    sinks = r.standard_normal(8).astype(np.float32)

    def build(g: CpuGraph) -> Tensor:
        kq = ops.mul_mat(g.tensor(k, "f16"), g.tensor(q))
        out = ops.soft_max_ext(kq, g.tensor(mask), 0.2, 0.0)
        ops.soft_max_add_sinks(out, g.tensor(sinks))
        return out

    g = CpuGraph()
    out = build(g)
    got = g.compute(out).copy()
    plan = gc.init_backend("CPU").engine.plan(gc.build_graph([out]))  # type: ignore[attr-defined]
    assert [n.op for n, _ in plan.steps] == [GGMLOp.MUL_MAT]
    numpy_path()
    g2 = CpuGraph()
    ref = g2.compute(build(g2))
    np.testing.assert_allclose(got, ref, rtol=3e-6, atol=1e-7)
    assert np.all(got[..., 30:] == 0.0) and np.all(got.sum(axis=-1) < 1.0)  # the sinks take part of the mass


def test_compiled_exp_is_float64_exp_rounded_once() -> None:
    """The branch-free exp of SOFT_MAX / SWIGLU: float64 exp rounded once to float32, over the whole float32 range
    where exp is neither 0 nor inf and beyond, and for the special values."""
    import numba

    from ggml_cpu.jit import _row_math

    exp_f32 = _row_math.exp_f32

    @numba.njit(cache=False)
    def run(x: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i] = exp_f32(x[i])

    r = rng(17)
    x = np.concatenate([r.uniform(-110, 95, 200_000), r.uniform(-1, 1, 50_000), r.uniform(-1e-6, 1e-6, 1000)])
    x = np.concatenate([x, [np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 89.0, -103.9, -104.0, -1e30]]).astype(np.float32)
    got = np.empty_like(x)
    run(x, got)
    with np.errstate(all="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    # equal on this machine for every sample; numpy's own float64 exp is not correctly rounded everywhere, so a
    # value within ~1e-16 of a float32 rounding boundary may land on the other side: allow a rare 1-ulp case
    d = np.abs(got[~nan].view(np.int32).astype(np.int64) - want[~nan].view(np.int32).astype(np.int64))
    assert d.max() <= 1 and np.count_nonzero(d) <= 2
