"""A prompt batch's attention with an f16 KV cache: ``SOFT_MAX(MUL_MAT(K, Q), mask)``
(``attention.bind_batch_attention``) and ``MUL_MAT(V, P)`` (``matmul._bind_half_batch``) against float64
references written from ggml's definition.

ggml rounds the f32 activations of an f16 product to f16 (the f16 weights' dot type), multiplies f16 × f16 (exact
in float32) and sums in float32; SOFT_MAX is ``exp(x·scale + mask − max) / Σ`` per row. The references take the same
roundings in float64; the routes sum in another order (BLAS), so they are held to a float-rounding bound: for a
product, ``(K + 2) · 2⁻²³ · Σ|a·b|`` per output, carried through the softmax as ``2·P·scale·err``. Cells past the
mask's last finite column are never read: they hold NaN here and must not reach the results. Also: grouped-query
heads (H = 2·H_kv), odd token counts, 1 and 2 threads (bit for bit), and the numpy path (``GGML_CPU_NUMBA=0``).
Also the batch's other fast paths: the compiled GELU (GEGLU) and f16 rounding against numpy's definitions, bit for
bit, and SCALE on a strided view.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ggml_core as gc
from ggml_core import ops
from ggml_cpu.jit.halves import round_f16

#: (tokens T, cache cells n_kv, query heads H, K/V heads H_kv, head size D, cells in use)
CASES = [(13, 64, 4, 2, 32, 40), (8, 32, 2, 2, 64, 8), (21, 96, 6, 3, 16, 96), (9, 64, 2, 1, 32, 33)]


def _graph(t: int, n_kv: int, h: int, h_kv: int, d: int, used: int, threads: int) -> dict[str, np.ndarray]:
    ctx = gc.Context("attn")
    k = ctx.new_tensor("f16", [d, n_kv, h_kv])
    q = ctx.new_tensor("f32", [d, t, h])
    v = ctx.new_tensor("f16", [n_kv, d, h_kv])
    mask = ctx.new_tensor("f32", [n_kv, t + 3])  # padded rows, as llama.cpp pads its mask
    p = ops.soft_max_ext(ops.mul_mat(k, q), mask, 0.125)
    kqv = ops.mul_mat(v, p)
    be = gc.init_backend("CPU")
    be.set_n_threads(threads)
    gc.alloc_ctx_tensors(ctx, be)
    r = np.random.default_rng(0)
    kd = r.standard_normal((h_kv, n_kv, d)).astype(np.float16)
    vd = r.standard_normal((h_kv, d, n_kv)).astype(np.float16)
    kd[:, used:], vd[:, :, used:] = np.nan, np.nan  # unused cells: never read
    qd = (r.standard_normal((h, t, d)) * 2).astype(np.float32)
    md = np.full((t + 3, n_kv), -np.inf, np.float32)
    for i in range(t):  # causal: token i sees the cells up to used − t + i
        md[i, : used - t + i + 1] = 0.0
        if i < t // 2 and used - t + i >= 1:
            md[i, 0] = -np.inf  # some rows also mask their first cell (never a whole row: ggml gives NaN there)
    k.set_data(kd), v.set_data(vd), q.set_data(qd), mask.set_data(md)
    be.graph_compute(gc.build_graph(kqv))
    return {"k": kd, "v": vd, "q": qd, "mask": md[:t], "p": p.to_numpy().copy(), "kqv": kqv.to_numpy().copy()}


def _check(case: tuple[int, ...], threads: int = 1) -> dict[str, np.ndarray]:
    _, _, h, h_kv, d, used = case
    res = _graph(*case, threads=threads)
    r = h // h_kv
    kf = np.nan_to_num(res["k"].astype(np.float64)[:, :used])  # (H_kv, used, D)
    q16 = res["q"].astype(np.float16).astype(np.float64)  # (H, T, D)
    kq = np.stack([q16[i] @ kf[i // r].T for i in range(h)])  # (H, T, used)
    mag = np.stack([np.abs(q16[i]) @ np.abs(kf[i // r]).T for i in range(h)])
    w = kq * 0.125 + res["mask"][:, :used]
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    p_ref = e / e.sum(axis=-1, keepdims=True)
    err_w = (d + 2) * 2.0**-23 * 0.125 * mag.max(axis=-1, keepdims=True)
    p = res["p"][0]  # (H, T, n_kv)
    assert np.isfinite(p).all() and (p[..., used:] == 0).all()
    bound = 2 * p_ref * 4 * err_w + 4e-7 * (p_ref + 1e-3)
    assert (np.abs(p[..., :used] - p_ref) <= bound).all(), np.abs(p[..., :used] - p_ref).max()
    # KQV from the route's own P (rounded to f16, the dot type) and the used V cells
    p16 = p[..., :used].astype(np.float16).astype(np.float64)
    vf = np.nan_to_num(res["v"].astype(np.float64)[:, :, :used])  # (H_kv, D, used)
    ref = np.stack([p16[i] @ vf[i // r].T for i in range(h)])  # (H, T, D)
    mag = np.stack([np.abs(p16[i]) @ np.abs(vf[i // r]).T for i in range(h)])
    out = res["kqv"][0]
    assert (np.abs(out - ref) <= (used + 2) * 2.0**-23 * mag + 1e-30).all(), np.abs(out - ref).max()
    return res


@pytest.mark.parametrize("case", CASES, ids=str)
def test_batch_attention_matches_the_float64_definition(case: tuple[int, ...]) -> None:
    _check(case)


def test_a_wrong_softmax_is_outside_the_bound() -> None:
    """The bound can fail: a scale off by one part in 10⁴ is caught."""
    h, used = CASES[0][2], CASES[0][5]
    res = _graph(*CASES[0], threads=1)
    q16 = res["q"].astype(np.float16).astype(np.float64)
    kf = res["k"].astype(np.float64)[:, :used]
    w = np.stack([q16[i] @ kf[i // 2].T for i in range(h)]) * 0.125 * (1 + 1e-4) + res["mask"][:, :used]
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    assert np.abs(res["p"][0][..., :used] - e / e.sum(axis=-1, keepdims=True)).max() > 1e-5


def test_threads_give_the_same_bits() -> None:
    one, two = _graph(*CASES[2], threads=1), _graph(*CASES[2], threads=2)
    for key in ("p", "kqv"):
        np.testing.assert_array_equal(one[key].view(np.uint32), two[key].view(np.uint32))


def test_round_f16_equals_numpy() -> None:
    r = np.random.default_rng(3)
    x = np.concatenate([r.standard_normal(5000).astype(np.float32) * s for s in (1e-8, 3e-5, 1.0, 7e4)])
    x = np.concatenate([x, np.float32([65504, 65519.99, 65520, 2**-24 * 1.5, 2**-25, -0.0, np.inf, -np.inf])])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(round_f16(x).view(np.uint32), want.view(np.uint32))
    strided = x.reshape(-1, 2)[:, 0]
    np.testing.assert_array_equal(round_f16(strided).view(np.uint32), want.reshape(-1, 2)[:, 0].view(np.uint32))


_NUMPY = """
import sys
sys.path.insert(0, sys.argv[1])
from ggml_cpu import quant
import test_prompt_batch as tb
assert quant.disabled_reason() is not None
for case in tb.CASES:
    tb._check(case)
print("ok")
"""


def test_the_numpy_path_agrees() -> None:
    env = {**os.environ, "GGML_CPU_NUMBA": "0"}
    cmd = [sys.executable, "-c", _NUMPY, str(Path(__file__).parent)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_compiled_gelu_equals_the_table_definition() -> None:
    """GEGLU's GELU (Gemma's feed-forward) on a batch: ggml's f16 table at f16(x), 0 at or below −10, x at or above
    10 — bit for bit, NaN and ±inf included (compiled from 4096 values; the numpy path below that)."""
    from ggml_cpu.ops.unary import gelu, gelu_f16_table

    r = np.random.default_rng(4)
    x = np.concatenate([r.standard_normal(3000).astype(np.float32) * s for s in (1e-6, 1.0, 6.0, 30.0, 1e5)])
    x[:8] = np.float32([np.nan, -np.nan, np.inf, -np.inf, -10.0, 10.0, 65520.0, -9.99])
    with np.errstate(over="ignore"):
        table = gelu_f16_table()[x.astype(np.float16).view(np.uint16)]
    want = np.where(x <= -10, np.float32(0), np.where(x >= 10, x, table)).astype(np.float32)
    for got in (gelu(x), gelu(x.reshape(-1, 2)[:, 1]), gelu(x[:100])):
        ref = want if got.size == x.size else want.reshape(-1, 2)[:, 1] if got.size == x.size // 2 else want[:100]
        np.testing.assert_array_equal(got, ref)


def test_scale_writes_a_strided_view() -> None:
    """SCALE (no bias) multiplies straight into its output: rows padded in memory (a view of 33 of 40 columns, from
    column 3), ``x · s`` exactly."""
    from kernel_harness import CpuGraph

    x = (np.random.default_rng(5).standard_normal((7, 40)) * 10).astype(np.float32)
    g = CpuGraph()
    t = g.tensor(x)
    got = g.compute(ops.scale(ops.view_2d(t, 33, 7, t.nb[1], 3 * 4), 0.37))[0, 0]
    np.testing.assert_array_equal(got, x[:, 3:36] * np.float32(0.37))


def _attn_kernels() -> object:
    from ggml_cpu.jit import _jit

    if not _jit.enabled():
        pytest.skip("compiled kernels are off")
    from ggml_cpu.ops import _attn_kernels

    return _attn_kernels


def test_fast_exp_is_within_one_ulp_of_float64() -> None:
    """The batch softmax's float32 ``exp``: every 61st float32 in [−110, 90] within 1 ulp (of the float32 result) of
    float64 ``exp``; 0 at and below −104 and at −inf, inf past float32's range and at inf, NaN kept."""
    from ggml_cpu.jit import _jit

    fn = _jit.get(_attn_kernels().EXP_SPEC)  # type: ignore[attr-defined]
    assert fn is not None
    top = int(np.float32(90).view(np.int32))
    bits = np.arange(0, top, 61, dtype=np.int64).astype(np.int32)
    neg = np.arange(0, int(np.float32(110).view(np.int32)), 61, dtype=np.int64).astype(np.int32)
    x = np.concatenate([bits.view(np.float32), -neg.view(np.float32), np.float32([-104, -103.97, 88.72, 88.73])])
    got = np.empty_like(x)
    fn(x, got)
    ref = np.exp(x.astype(np.float64))
    with np.errstate(over="ignore"):
        ref32 = ref.astype(np.float32)
    fin = np.isfinite(ref32)
    ulp = np.spacing(ref32[fin]).astype(np.float64)
    assert (np.abs(got[fin] - ref[fin]) <= ulp).all(), (np.abs(got[fin] - ref[fin]) / ulp).max()
    assert np.isinf(got[~fin]).all() and (got[x <= -104] == 0).all()
    edge = np.float32([-np.inf, np.inf, np.nan, 0.0])
    out = np.empty_like(edge)
    fn(edge, out)
    assert out[0] == 0 and out[1] == np.inf and np.isnan(out[2]) and out[3] == 1


def test_compiled_softmax_rows_match_float64_and_any_split() -> None:
    """The compiled softmax on scores with −inf mask columns (NaN past ``n_used``: never read) against float64 from
    the definition, zeros from ``n_used`` on; heads split in two calls on two threads give the same bits."""
    import threading

    from ggml_cpu.jit import _jit

    fn = _jit.get(_attn_kernels().BATCH_SOFT_MAX_SPEC)  # type: ignore[attr-defined]
    assert fn is not None
    h, t, n_kv, used = 6, 19, 48, 37
    r = np.random.default_rng(7)
    s = (r.standard_normal((h, t, n_kv)) * 30).astype(np.float32)
    s[..., used:] = np.nan
    mask = np.zeros((t, n_kv), np.float32)
    mask[:, used:] = -np.inf
    mask[r.random((t, n_kv)) < 0.3] = -np.inf
    mask[:, 0] = 0.0  # no row fully masked
    w = s[..., :used].astype(np.float64) * np.float32(0.2) + mask[:, :used]
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    one = np.full((h, t, n_kv), 7.0, np.float32)
    fn(s.copy(), mask, one, used, 0.2, 0, h)
    assert (one[..., used:] == 0).all() and np.isfinite(one).all()
    # the scores x·scale + mask in float32 (≤ ½ ulp each: 2·2⁻²⁴·|w|), exp ≤ 1 ulp, the normalisation a few ulp
    big = np.where(np.isfinite(w), np.abs(w), 0).max(axis=-1, keepdims=True)
    err = 4 * 2.0**-24 * big + 6 * 2.0**-24
    assert (np.abs(one[..., :used] - ref) <= err * ref + 1e-30).all()
    two = np.full_like(one, 7.0)
    scores = s.copy()
    worker = threading.Thread(target=fn, args=(scores[:2], mask, two[:2], used, 0.2, 0, 2))
    worker.start()
    fn(scores[2:], mask, two[2:], used, 0.2, 0, h - 2)
    worker.join()
    np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))
