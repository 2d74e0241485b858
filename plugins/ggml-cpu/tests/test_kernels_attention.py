"""SOFT_MAX, ROPE, FLASH_ATTN_EXT and DIAG_MASK_* on the CPU plugin against numpy written from the definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kernel_harness import CpuGraph, rng

import ggml_core as gc
from ggml_core import OpError, ops

# ================================================================================================ SOFT_MAX


def _alibi(n_head: int, max_bias: float) -> np.ndarray:
    """ALiBi slopes from the paper's recipe as ggml applies it (base 2^(-max_bias/n) for the first power of two)."""
    if max_bias <= 0:
        return np.ones(n_head)
    n2 = 2 ** math.floor(math.log2(n_head))
    m0, m1 = 2.0 ** (-max_bias / n2), 2.0 ** (-max_bias / 2 / n2)
    return np.array([m0 ** (h + 1) if h < n2 else m1 ** (2 * (h - n2) + 1) for h in range(n_head)])


def _softmax_ref(x: np.ndarray, mask: np.ndarray | None, scale: float, max_bias: float, sinks: np.ndarray | None):
    x = x.astype(np.float64) * scale
    n3, n2, n1, _ = x.shape
    if mask is not None:
        m = mask.astype(np.float64)
        slopes = _alibi(n2, max_bias)
        for i3 in range(n3):
            for i2 in range(n2):
                x[i3, i2] += slopes[i2] * m[i3 % m.shape[0], i2 % m.shape[1], :n1]
    mx = x.max(axis=-1, keepdims=True)
    if sinks is not None:
        mx = np.maximum(mx, sinks.reshape(1, -1, 1, 1))
    e = np.exp(x - mx)
    total = e.sum(axis=-1, keepdims=True)
    if sinks is not None:
        total = total + np.exp(sinks.reshape(1, -1, 1, 1) - mx)
    return e / total


_SOFT_MAX_CASES = [
    (mask_type, max_bias, sinks)
    for mask_type in (None, "f32", "f16")
    for max_bias in (0.0, 8.0)
    for sinks in (False, True)
    if mask_type is not None or max_bias == 0.0  # ALiBi needs a mask (test_soft_max_checks)
]


@pytest.mark.parametrize(("mask_type", "max_bias", "with_sinks"), _SOFT_MAX_CASES)
def test_soft_max_ext(mask_type: str | None, max_bias: float, with_sinks: bool) -> None:
    r = rng(1)
    x = r.standard_normal((2, 6, 5, 33)).astype(np.float32) * 3
    mask = r.standard_normal((1, 3, 8, 33)).astype(np.float32)  # more rows than x; broadcast over heads
    mask[..., ::5] = -np.inf
    sinks = r.standard_normal(6).astype(np.float32)
    g = CpuGraph()
    m = None if mask_type is None else g.tensor(mask.astype(np.float16) if mask_type == "f16" else mask, mask_type)
    out = ops.soft_max_ext(g.tensor(x), m, 0.3, max_bias)
    if with_sinks:
        ops.soft_max_add_sinks(out, g.tensor(sinks))
    got = g.compute(out)
    ref_mask = None if mask_type is None else (mask.astype(np.float16) if mask_type == "f16" else mask)
    ref = _softmax_ref(x, ref_mask, 0.3, max_bias, sinks if with_sinks else None)
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=2e-7)
    if with_sinks:  # the sink takes part of the mass: rows sum to less than one
        assert np.all(got.sum(axis=-1) < 1.0)


def test_soft_max_plain_rows_sum_to_one() -> None:
    x = rng(2).standard_normal((1, 1, 4, 100)).astype(np.float32) * 10
    g = CpuGraph()
    got = g.compute(ops.soft_max(g.tensor(x)))
    np.testing.assert_allclose(got, _softmax_ref(x, None, 1.0, 0.0, None), rtol=2e-6, atol=1e-8)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=1e-6)


def test_soft_max_checks() -> None:
    g = CpuGraph()
    a = g.tensor(np.zeros((2, 3, 8), np.float32))
    with pytest.raises(OpError, match=r"SOFT_MAX.*contiguous"):
        ops.soft_max(ops.transpose(a))
    with pytest.raises(OpError, match=r"SOFT_MAX.*ne\[0\]"):
        ops.soft_max_ext(a, g.tensor(np.zeros((3, 7), np.float32)), 1.0)
    with pytest.raises(OpError, match="ALiBi"):
        ops.soft_max_ext(a, None, 1.0, 8.0)
    with pytest.raises(OpError, match="sink"):
        ops.soft_max_add_sinks(ops.soft_max(a), g.tensor(np.zeros(5, np.float32)))


# ================================================================================================ ROPE


def _theta_f32(pos: np.ndarray, n_pairs: int, n_dims: int, base: float) -> np.ndarray:
    """theta[p, i] = pos[p]·base^(-2i/n_dims), advanced by one float32 multiplication per pair (as ggml does)."""
    step = np.float32(base) ** np.float32(-2.0 / n_dims)
    out = np.zeros((len(pos), n_pairs), np.float32)
    for p, position in enumerate(pos):
        t = np.float32(position)
        for i in range(n_pairs):
            out[p, i] = t
            t = np.float32(t * step)
    return out


def _rope_ref(
    x: np.ndarray,
    pos: np.ndarray,
    n_dims: int,
    neox: bool,
    base: float = 10000.0,
    freq_scale: float = 1.0,
    ext_factor: float = 0.0,
    attn_factor: float = 1.0,
    beta_fast: float = 0.0,
    beta_slow: float = 0.0,
    n_ctx_orig: int = 0,
    factors: np.ndarray | None = None,
    theta_in_f64: bool = False,
) -> np.ndarray:
    """x (n3, tokens, heads, d) rotated; YaRN as in the YaRN paper's ggml formulation."""
    n_pairs = n_dims // 2
    if theta_in_f64:
        extrap = pos[:, None].astype(np.float64) * base ** (-2.0 * np.arange(n_pairs) / n_dims)
    else:
        extrap = _theta_f32(pos, n_pairs, n_dims, base).astype(np.float64)
    if factors is not None:
        extrap = extrap / factors[:n_pairs]
    interp = freq_scale * extrap
    mscale = attn_factor
    theta = interp
    if ext_factor:

        def corr(n_rot: float) -> float:
            return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))

        low, high = max(0.0, math.floor(corr(beta_fast))), min(n_dims - 1.0, math.ceil(corr(beta_slow)))
        y = (np.arange(n_pairs) - low) / max(0.001, high - low)
        ramp = (1 - np.clip(y, 0, 1)) * ext_factor
        theta = interp * (1 - ramp) + extrap * ramp
        mscale *= 1 + 0.1 * math.log(1 / freq_scale)
    cos, sin = np.cos(theta)[None, :, None] * mscale, np.sin(theta)[None, :, None] * mscale
    out = x.astype(np.float64).copy()
    if neox:
        i0, i1 = np.arange(n_pairs), np.arange(n_pairs) + n_pairs
    else:
        i0, i1 = np.arange(0, n_dims, 2), np.arange(1, n_dims, 2)
    a, b = x[..., i0].astype(np.float64), x[..., i1].astype(np.float64)
    out[..., i0] = a * cos - b * sin
    out[..., i1] = a * sin + b * cos
    return out


@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("n_dims", [32, 20])
def test_rope_basic_and_partial_dims(mode: int, n_dims: int) -> None:
    r = rng(3)
    x = r.standard_normal((2, 5, 3, 32)).astype(np.float32)
    pos = np.array([0, 1, 7, 30, 123], np.int32)
    g = CpuGraph()
    got = g.compute(ops.rope_ext(g.tensor(x), g.tensor(pos, "i32"), None, n_dims, mode, 0, 10000.0, 1, 0, 1, 0, 0))
    np.testing.assert_allclose(got, _rope_ref(x, pos, n_dims, mode == 2), atol=2e-6)
    np.testing.assert_array_equal(got[..., n_dims:], x[..., n_dims:])  # channels past n_dims are copied


def test_rope_theta_advances_in_float32() -> None:
    """At position 9000 the float32 recurrence drifts ~1e-4 from float64 theta; ggml (and we) follow float32."""
    x = rng(4).standard_normal((1, 3, 2, 64)).astype(np.float32)
    pos = np.array([1000, 5000, 9000], np.int32)
    g = CpuGraph()
    got = g.compute(ops.rope(g.tensor(x), g.tensor(pos, "i32"), 64, 0))
    ref32 = _rope_ref(x, pos, 64, False)
    ref64 = _rope_ref(x, pos, 64, False, theta_in_f64=True)
    np.testing.assert_allclose(got, ref32, atol=1e-5)
    assert np.abs(ref64 - ref32).max() > 1e-4  # the test tells the two apart


@pytest.mark.parametrize("mode", [0, 2])
def test_rope_yarn_and_freq_factors(mode: int) -> None:
    r = rng(5)
    x = r.standard_normal((1, 6, 4, 64)).astype(np.float32)
    pos = np.array([0, 3, 17, 64, 100, 200], np.int32)
    factors = (1.0 + r.random(32)).astype(np.float32)
    params = dict(base=500000.0, freq_scale=0.25, ext_factor=1.0, attn_factor=1.1, beta_fast=32.0, beta_slow=1.0)
    g = CpuGraph()
    out = ops.rope_ext(
        g.tensor(x), g.tensor(pos, "i32"), g.tensor(factors), 64, mode, 4096, 500000.0, 0.25, 1.0, 1.1, 32.0, 1.0
    )
    got = g.compute(out)
    ref = _rope_ref(x, pos, 64, mode == 2, n_ctx_orig=4096, factors=factors, **params)  # type: ignore[arg-type]
    np.testing.assert_allclose(got, ref, atol=3e-5)


def test_rope_f16_and_strided_input() -> None:
    r = rng(6)
    big = r.standard_normal((4, 3, 40)).astype(np.float32)  # rows of 40, we rotate a 32-wide window of each
    pos = np.array([2, 9, 40, 77], np.int32)
    g = CpuGraph()
    t = g.tensor(big)
    view = ops.view_3d(t, 32, 3, 4, t.nb[1], t.nb[2], 4 * 4)  # starts at element 4, rows 40 apart
    got = g.compute(ops.rope(view, g.tensor(pos, "i32"), 32, 2))
    ref = _rope_ref(big[None, :, :, 4:36], pos, 32, True)
    np.testing.assert_allclose(got, ref, atol=2e-6)

    g16 = CpuGraph()
    x16 = r.standard_normal((1, 4, 3, 32)).astype(np.float16)
    got16 = g16.compute(ops.rope(g16.tensor(x16, "f16"), g16.tensor(pos, "i32"), 32, 0))
    assert got16.dtype == np.float16
    np.testing.assert_allclose(got16.astype(np.float32), _rope_ref(x16, pos, 32, False), atol=4e-3)


def _mrope_ref(x: np.ndarray, pos: np.ndarray, n_dims: int, sections: tuple[int, ...], mode: int) -> np.ndarray:
    """Multi-section RoPE from ggml.h's description: pair i takes the t/h/w/e position of its section
    (IMROPE: interleaved t, h, w), NEOX rotation; VISION rotates (x[i], x[i + n_dims]) over the whole row and
    restarts each section's frequencies. Angles follow the float32 recurrence theta = p; theta *= step."""
    n_tok, ne0 = x.shape[1], x.shape[-1]
    vision = mode == 24
    n_pairs = ne0 // 2 if vision else n_dims // 2
    starts = np.cumsum([0, *sections[:3]])
    out = x.astype(np.float64).copy()
    for t in range(n_tok):
        theta = np.zeros(n_pairs)
        for i in range(n_pairs):
            sec = i % sum(sections)
            if mode == 40:  # interleaved t, h, w; e for the rest
                k = next((j for j in (0, 1, 2) if sec % 3 == j and sec < 3 * sections[j]), 3)
            else:
                k = int(np.searchsorted(starts, sec, side="right")) - 1
            power = sec - starts[k] if vision else i
            p = pos[t + k * n_tok]
            theta[i] = _theta_f32(np.array([p]), power + 1, n_dims, 10000.0)[0, power]
        c, s = np.cos(theta), np.sin(theta)
        off = n_dims if vision else n_pairs
        a, b = x[:, t, :, :n_pairs].astype(np.float64), x[:, t, :, off : off + n_pairs].astype(np.float64)
        out[:, t, :, :n_pairs] = a * c - b * s
        out[:, t, :, off : off + n_pairs] = a * s + b * c
    return out


@pytest.mark.parametrize(
    ("mode", "ne0", "n_dims", "sections"),
    [
        (8, 64, 64, (12, 10, 10, 0)),
        (8, 80, 48, (8, 8, 4, 4)),
        (40, 64, 64, (12, 10, 10, 0)),
        (24, 64, 32, (8, 8, 0, 0)),
    ],
)
def test_rope_multi_sections(mode: int, ne0: int, n_dims: int, sections: tuple[int, int, int, int]) -> None:
    r = rng(13)
    x = r.standard_normal((1, 5, 3, ne0)).astype(np.float32)
    pos = r.integers(0, 300, 20).astype(np.int32)
    g = CpuGraph()
    out = ops.rope_multi(g.tensor(x), g.tensor(pos, "i32"), None, n_dims, sections, mode, 0, 10000.0, 1, 0, 1, 0, 0)
    np.testing.assert_allclose(g.compute(out), _mrope_ref(x, pos, n_dims, sections, mode), atol=3e-6)


def test_rope_checks() -> None:
    g = CpuGraph()
    a = g.tensor(np.zeros((4, 2, 16), np.float32))
    with pytest.raises(OpError, match=r"ROPE.*positions"):
        ops.rope(a, g.tensor(np.zeros(3, np.int32), "i32"), 16, 0)
    with pytest.raises(OpError, match=r"ROPE.*i32"):
        ops.rope(a, g.tensor(np.zeros(4, np.float32)), 16, 0)
    with pytest.raises(OpError, match=r"ROPE.*mode"):
        ops.rope(a, g.tensor(np.zeros(4, np.int32), "i32"), 16, 1)


# ================================================================================================ FLASH_ATTN_EXT


def _attn_ref(q, k, v, mask, scale, max_bias=0.0, softcap=0.0, sinks=None):
    """float64 softmax(softcap(q·kᵀ·scale) + slope·mask)·v per head, K/V heads shared by groups of query heads."""
    q3, n_head, n_q, _ = q.shape
    out = np.zeros((q3, n_head, n_q, v.shape[-1]))
    slopes = _alibi(n_head, max_bias)
    for i3 in range(q3):
        for h in range(n_head):
            kh = k[i3 // (q3 // k.shape[0]), h // (n_head // k.shape[1])].astype(np.float64)
            vh = v[i3 // (q3 // v.shape[0]), h // (n_head // v.shape[1])].astype(np.float64)
            s = q[i3, h].astype(np.float64) @ kh.T * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if mask is not None:
                s = s + slopes[h] * mask[i3 % mask.shape[0], h % mask.shape[1], :n_q, : k.shape[2]]
            mx = s.max(axis=-1, keepdims=True)
            if sinks is not None:
                mx = np.maximum(mx, sinks[h])
            mx = np.where(np.isfinite(mx), mx, 0.0)
            p = np.exp(s - mx)
            total = p.sum(axis=-1, keepdims=True) + (0 if sinks is None else np.exp(sinks[h] - mx))
            out[i3, h] = np.where(total > 0, p @ vh / np.where(total > 0, total, 1), 0.0)
    return out.transpose(0, 2, 1, 3)  # ggml's permuted result: (ne3, n_batch, n_head, Dv)


def _attn_inputs(seed: int, q3=1, n_head=4, n_head_kv=2, n_q=3, n_kv=20, dk=32, dv=32):
    r = rng(seed)
    q = r.standard_normal((q3, n_head, n_q, dk)).astype(np.float32)
    k = r.standard_normal((q3, n_head_kv, n_kv, dk)).astype(np.float32)
    v = r.standard_normal((q3, n_head_kv, n_kv, dv)).astype(np.float32)
    mask = np.zeros((1, 1, n_q + 2, n_kv), np.float32)
    mask[..., 1::4] = -np.inf
    mask[..., 2] = -0.75
    return q, k, v, mask.astype(np.float16), r.standard_normal(n_head).astype(np.float32)


def _flash(q, k, v, mask, kv_type, scale, max_bias=0.0, softcap=0.0, sinks=None):
    g = CpuGraph()
    kq = k.astype(np.float16) if kv_type == "f16" else k
    vq = v.astype(np.float16) if kv_type == "f16" else v
    m = None if mask is None else g.tensor(mask, "f16")
    out = ops.flash_attn_ext(g.tensor(q), g.tensor(kq, kv_type), g.tensor(vq, kv_type), m, scale, max_bias, softcap)
    if sinks is not None:
        ops.flash_attn_ext_add_sinks(out, g.tensor(sinks))
    assert out.ne == (v.shape[-1], q.shape[1], q.shape[2], q.shape[0])  # permuted
    return g.compute(out)


@pytest.mark.parametrize("case", ["plain", "no_mask", "alibi", "softcap", "sinks", "gqa_batch", "dv_differs"])
def test_flash_attn_ext_f32(case: str) -> None:
    kw = {"gqa_batch": dict(q3=2, n_head=6, n_head_kv=3), "dv_differs": dict(dv=16)}.get(case, {})
    q, k, v, mask, sinks = _attn_inputs(7, **kw)  # type: ignore[arg-type]
    args = dict(
        max_bias=8.0 if case == "alibi" else 0.0,
        softcap=20.0 if case == "softcap" else 0.0,
        sinks=sinks if case == "sinks" else None,
    )
    m = None if case == "no_mask" else mask
    got = _flash(q, k, v, m, "f32", 0.2, **args)
    ref = _attn_ref(q, k, v, None if m is None else m.astype(np.float64), 0.2, **args)
    np.testing.assert_allclose(got, ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("with_sinks", [False, True])
def test_flash_attn_ext_f16_kv(with_sinks: bool) -> None:
    """f16 K/V: q rounded to f16 and an f16 V accumulator; within f16 rounding of the exact attention."""
    q, k, v, mask, sinks = _attn_inputs(8, n_q=5, n_kv=64, dk=64, dv=64)
    got = _flash(q, k, v, mask, "f16", 0.125, sinks=sinks if with_sinks else None)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    ref = _attn_ref(q.astype(np.float16), k16, v16, mask.astype(np.float64), 0.125, sinks=sinks if with_sinks else None)
    err = np.abs(got - ref).max()
    assert err < 4e-3, err


def _online_f16_row(s: np.ndarray, v16: np.ndarray) -> np.ndarray:
    """ggml's documented online softmax for one query row, with the V sum kept in float16 (scalar loop)."""
    acc = np.zeros(v16.shape[1], np.float16)
    m_run, s_run = -np.inf, 0.0
    for i, si in enumerate(s.astype(np.float32)):
        if si == -np.inf:
            continue
        ms, vs = np.float32(1.0), np.float32(1.0)
        if si > m_run:
            ms = np.float32(np.exp(np.float32(m_run - si))) if m_run != -np.inf else np.float32(0.0)
            m_run = si
            acc = (acc.astype(np.float32) * ms).astype(np.float16)
        else:
            vs = np.float32(np.exp(np.float32(si - m_run)))
        fused = v16[i].astype(np.float64) * np.float64(vs) + acc.astype(np.float64)
        acc = fused.astype(np.float32).astype(np.float16)
        s_run = np.float32(s_run * ms + vs)
    return acc.astype(np.float32) / np.float32(s_run)


def test_flash_attn_ext_f16_accumulator_matches_online_loop() -> None:
    """The f16 accumulator's rounding is visible; a scalar loop of ggml's recipe reproduces our result closely."""
    q, k, v, mask, _ = _attn_inputs(9, q3=1, n_head=1, n_head_kv=1, n_q=2, n_kv=48, dk=16, dv=16)
    v = v * 37.0  # large values make the f16 rounding of the running sum large
    got = _flash(q, k, v, mask, "f16", 0.5)
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    for i in range(2):
        s = (q[0, 0, i].astype(np.float16).astype(np.float32) @ k16[0, 0].astype(np.float32).T) * np.float32(0.5)
        s = s + mask[0, 0, i].astype(np.float32)
        ref_row = _online_f16_row(s, v16[0, 0])
        np.testing.assert_allclose(got[0, i, 0], ref_row, atol=2e-4)
    exact = _attn_ref(q.astype(np.float16), k16, v16, mask.astype(np.float64), 0.5)
    assert np.abs(got - exact).max() > 1e-2  # f16 accumulation is visibly not f32


def test_flash_attn_ext_quantized_kv_and_fully_masked_row() -> None:
    q, k, v, mask, _ = _attn_inputs(10, n_q=3, n_kv=32, dk=32, dv=32)
    mask[0, 0, 1, :] = -np.inf  # query 1 sees nothing: ggml returns zeros
    got = _flash(q, k, v, mask, "q8_0", 0.2)
    assert np.all(got[0, 1] == 0)
    ref = _attn_ref(q, k, v, mask.astype(np.float64), 0.2)
    assert np.abs(got - ref).max() < 0.03  # Q8_0 K/V and Q8_0-rounded q


def test_flash_attn_ext_permuted_views() -> None:
    """q/k/v given as permuted views of [Dk, heads, tokens] tensors (the usual llama.cpp layout)."""
    q, k, v, mask, _ = _attn_inputs(11, n_q=4, n_kv=12)
    g = CpuGraph()
    tq = g.tensor(np.ascontiguousarray(q.transpose(0, 2, 1, 3)))  # [D, heads, tokens]
    tk = g.tensor(np.ascontiguousarray(k.transpose(0, 2, 1, 3)))
    tv = g.tensor(np.ascontiguousarray(v.transpose(0, 2, 1, 3)))
    pq, pk, pv = (ops.permute(t, 0, 2, 1, 3) for t in (tq, tk, tv))
    out = ops.flash_attn_ext(pq, pk, pv, g.tensor(mask, "f16"), 0.3)
    np.testing.assert_allclose(g.compute(out), _attn_ref(q, k, v, mask.astype(np.float64), 0.3), atol=2e-6)


def test_flash_attn_ext_checks() -> None:
    g = CpuGraph()
    q = g.tensor(np.zeros((4, 3, 32), np.float32))
    k = g.tensor(np.zeros((2, 10, 32), np.float32))
    with pytest.raises(OpError, match=r"FLASH_ATTN_EXT.*head sizes"):
        ops.flash_attn_ext(q, g.tensor(np.zeros((2, 10, 16), np.float32)), k, None, 1.0)
    with pytest.raises(OpError, match=r"FLASH_ATTN_EXT.*mask must be f16"):
        ops.flash_attn_ext(q, k, k, g.tensor(np.zeros((3, 10), np.float32)), 1.0)
    with pytest.raises(OpError, match=r"FLASH_ATTN_EXT.*cover"):
        ops.flash_attn_ext(q, k, k, g.tensor(np.zeros((3, 8), np.float16), "f16"), 1.0)
    with pytest.raises(OpError, match=r"FLASH_ATTN_EXT.*positions"):
        ops.flash_attn_ext(q, k, g.tensor(np.zeros((2, 9, 32), np.float32)), None, 1.0)
    with pytest.raises(OpError, match="ALiBi"):
        ops.flash_attn_ext(q, k, k, None, 1.0, 8.0)


# ================================================================================================ DIAG_MASK


@pytest.mark.parametrize("n_past", [0, 2])
def test_diag_mask(n_past: int) -> None:
    x = rng(12).standard_normal((2, 4, 6)).astype(np.float32)
    cols, rows = np.arange(6)[None, :], np.arange(4)[:, None]
    hidden = cols > rows + n_past
    g = CpuGraph()
    t = g.tensor(x)
    got_inf = g.compute(ops.diag_mask_inf(t, n_past), ops.diag_mask_zero(t, n_past))
    np.testing.assert_array_equal(got_inf[0], np.where(hidden, -np.inf, x))
    g2 = CpuGraph()
    got_zero = g2.compute(ops.diag_mask_zero(g2.tensor(x), n_past))
    np.testing.assert_array_equal(got_zero[0], np.where(hidden, 0.0, x))


def test_rope_nodes_sharing_a_setting_follow_their_own_positions() -> None:
    """ROPE nodes of one setting share cos / sin tables per positions (a decode step): each node must still use
    its own positions, also when they change between computes of the same plan."""
    r = rng(5)
    backend = gc.init_backend("CPU")
    ctx = gc.Context("rope-memo")
    x = ctx.new_tensor("f32", [32, 2, 3])
    p1, p2 = ctx.new_tensor("i32", [3]), ctx.new_tensor("i32", [3])
    outs = [ops.rope(x, p, 32, 0) for p in (p1, p2, p1)]
    gc.alloc_ctx_tensors(ctx, backend)
    gc.alloc_ctx_tensors(outs, backend)
    xv = r.standard_normal((3, 2, 32)).astype(np.float32)
    x.set_data(xv)
    graph = gc.build_graph(outs)
    for a, b in (([0, 1, 2], [5, 9, 40]), ([7, 8, 9], [0, 1, 2])):
        p1.set_data(np.array(a, np.int32))
        p2.set_data(np.array(b, np.int32))
        backend.graph_compute(graph)
        for out, pos in zip(outs, (a, b, a), strict=True):
            ref = _rope_ref(xv[None], np.array(pos, np.int32), 32, False)
            np.testing.assert_allclose(out.to_numpy(), ref, atol=2e-6)
