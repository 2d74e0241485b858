"""Attention building blocks: SOFT_MAX (scale, mask, ALiBi, sinks), ROPE (NORMAL, NEOX, MROPE, IMROPE, VISION;
YaRN), DIAG_MASK_INF/ZERO.

ROPE follows ggml's ``ggml_rope_cache_init``: theta advances by ``theta *= powf(base, -2/n_dims)`` in float32
(the drift against float64 is visible at large positions), YaRN mixes interpolated and extrapolated theta with a
ramp over the pair index, and ``mscale`` grows by ``0.1·ln(1/freq_scale)`` when ``ext_factor != 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_core.ops import rope_yarn_corr_dims as yarn_corr_dims
from ggml_cpu.jit import _jit
from ggml_cpu.ops._base import KERNELS, Thunk, arr, f32, store
from ggml_cpu.ops._compiled import (
    SPLIT_ELEMENTS,
    flat,
    kernel,
    load_module,
    params,
    row_split_parts,
    rows_of,
)
from ggml_cpu.ops.matmul import used_columns

__all__ = ["alibi_slopes", "rope_cos_sin", "rope_mscale", "theta_powers", "yarn_corr_dims"]

_F32 = np.float32


def alibi_slopes(n_head: int, max_bias: float) -> np.ndarray:
    """ggml's ALiBi slope per head (float32); all ones when ``max_bias`` is 0."""
    if max_bias <= 0.0:
        return np.ones(n_head, np.float32)
    n_head_log2 = 1 << math.floor(math.log2(n_head))
    m0 = _F32(2.0) ** (_F32(-max_bias) / _F32(n_head_log2))
    m1 = _F32(2.0) ** (_F32(-max_bias / 2.0) / _F32(n_head_log2))
    h = np.arange(n_head)
    return np.where(
        h < n_head_log2, m0 ** (h + 1).astype(np.float32), m1 ** (2 * (h - n_head_log2) + 1).astype(np.float32)
    ).astype(np.float32)


# ------------------------------------------------------------------------------------------------ SOFT_MAX


def _soft_max_ok(node: Tensor) -> bool:
    a, m = node.src[0], node.src[1]
    assert a is not None
    mask_ok = m is None or m.type in (GGMLType.F32, GGMLType.F16)
    sinks = node.src[2]
    return (
        a.type == GGMLType.F32
        and node.type == GGMLType.F32
        and mask_ok
        and (sinks is None or sinks.type == GGMLType.F32)
    )


@KERNELS.kernel(GGMLOp.SOFT_MAX, supports=_soft_max_ok)
def _bind_soft_max(node: Tensor) -> Thunk:
    a, mask, sinks = node.src[0], node.src[1], node.src[2]
    assert a is not None
    scale = _F32(node.op_param_f32(0))
    max_bias = node.op_param_f32(1)
    slopes = alibi_slopes(a.ne[2], max_bias).reshape(1, -1, 1, 1)
    fast = bind_soft_max(node, slopes)
    if fast is not None:
        return fast

    def run() -> None:
        with np.errstate(all="ignore"):
            w = f32(a) * scale
            if mask is not None:
                m = f32(mask)[:, :, : a.ne[1], :]  # row i01 of the mask; dims 2 and 3 repeat (i % ne)
                w = w + slopes * np.tile(m, (a.ne[3] // mask.ne[3], a.ne[2] // mask.ne[2], 1, 1))
            mx = w.max(axis=-1, keepdims=True) if a.ne[0] else np.zeros((*w.shape[:-1], 1), np.float32)
            if sinks is not None:
                sk = f32(sinks).reshape(1, -1, 1, 1)
                mx = np.maximum(mx, sk)
            e = np.exp(w - mx).astype(np.float32)
            total = e.sum(axis=-1, dtype=np.float64, keepdims=True)  # ggml sums in double
            if sinks is not None:
                total = total + np.exp(sk - mx).astype(np.float64)
            store(node, e * (1.0 / total).astype(np.float32))

    return run


# ------------------------------------------------------------------------------------------------ ROPE


#: ggml's rope modes (op_params[2])
ROPE_NORMAL, ROPE_NEOX, ROPE_MROPE, ROPE_VISION, ROPE_IMROPE = 0, 2, 8, 24, 40


def theta_powers(base: np.ndarray, n_pairs: int, theta_scale: np.float32) -> np.ndarray:
    """``theta = base; theta *= theta_scale`` per pair, in float32: shape (len(base), n_pairs)."""
    steps = np.empty((base.shape[0], n_pairs), np.float32)
    steps[:, 0] = base.astype(np.float32)
    steps[:, 1:] = theta_scale
    with np.errstate(all="ignore"):
        return np.cumprod(steps, axis=1, dtype=np.float32)


def rope_mscale(freq_scale: float, ext_factor: float, attn_factor: float) -> np.float32:
    """The factor on cos / sin: ``attn_factor``, grown by ``0.1·ln(1/freq_scale)`` when YaRN extrapolates (float32)."""
    mscale = _F32(attn_factor)
    if ext_factor != 0.0:
        with np.errstate(all="ignore"):
            mscale = mscale * (_F32(1.0) + _F32(0.1) * np.log(_F32(1.0) / _F32(freq_scale)))
    return _F32(mscale)


def rope_cos_sin(
    theta_extrap: np.ndarray,
    freq_scale: float,
    ext_factor: float,
    attn_factor: float,
    corr: tuple[float, float],
    freq_factors: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin per (position, pair) from the unscaled angles, as ``rope_yarn`` in ggml computes them."""
    n_pairs = theta_extrap.shape[1]
    with np.errstate(all="ignore"):
        if freq_factors is not None:
            theta_extrap = theta_extrap / freq_factors[:n_pairs].astype(np.float32)
        theta_interp = _F32(freq_scale) * theta_extrap
        mscale = rope_mscale(freq_scale, ext_factor, attn_factor)
        theta = theta_interp
        if ext_factor != 0.0:
            half_i0 = np.arange(n_pairs, dtype=np.float32)  # i0 / 2 for i0 = 0, 2, 4, ...
            low, high = _F32(corr[0]), _F32(corr[1])
            y = (half_i0 - low) / np.maximum(_F32(0.001), high - low)
            ramp = (_F32(1.0) - np.minimum(_F32(1.0), np.maximum(_F32(0.0), y))) * _F32(ext_factor)
            # compiled as fma(theta_interp, 1 - ramp, theta_extrap * ramp): the exact float64 product of two
            # float32 plus the float32 second term, rounded once (position 32767: 2e-5 → 2e-7 from ggml)
            second = (theta_extrap * ramp).astype(np.float32)
            theta = (theta_interp.astype(np.float64) * (_F32(1.0) - ramp) + second).astype(np.float32)
        # cosf/sinf of the float32 angle: float64 evaluation rounded once
        theta64 = theta.astype(np.float64)
        cos = np.cos(theta64).astype(np.float32) * mscale
        sin = np.sin(theta64).astype(np.float32) * mscale
        return cos.astype(np.float32), sin.astype(np.float32)


def _mrope_angles(
    pos: np.ndarray, n_tok: int, n_pairs: int, ts: np.float32, sections: list[int], mode: int
) -> np.ndarray:
    """Unscaled angles of multi-section RoPE: each pair takes the position (t, h, w or e) of its section.

    MROPE/IMROPE advance every angle by ``theta_scale`` from pair 0; VISION restarts each section's angle at its
    first pair. IMROPE interleaves the sections (t, h, w, t, h, w, ...).
    """
    sect_dims = sum(sections)
    sector = np.arange(n_pairs) % sect_dims
    sec_w, sec_e = sections[0] + sections[1], sections[0] + sections[1] + sections[2]
    if mode == ROPE_IMROPE:
        which = np.full(n_pairs, 3)
        which[(sector % 3 == 0) & (sector < 3 * sections[0])] = 0
        which[(sector % 3 == 1) & (sector < 3 * sections[1])] = 1
        which[(sector % 3 == 2) & (sector < 3 * sections[2])] = 2
    else:
        which = np.select([sector < sections[0], sector < sec_w, sector < sec_e], [0, 1, 2], default=3)
    positions = pos[: 4 * n_tok].reshape(4, n_tok)  # t, h, w, e: pos[i2 + k·ne2]
    if mode == ROPE_VISION:  # the angle restarts at each section: the power is the offset inside the section
        starts = np.array([0, sections[0], sec_w, sec_e])
        power = sector - starts[which]
        table = [theta_powers(positions[k], int(power.max()) + 1, ts) for k in range(4)]
        return np.stack([table[w][:, e] for w, e in zip(which, power, strict=True)], axis=1)
    table = [theta_powers(positions[k], n_pairs, ts) for k in range(4)]
    return np.stack([table[w][:, i] for i, w in enumerate(which)], axis=1)


#: the latest cos / sin tables per RoPE setting: ``key -> (positions' bytes, cos, sin)``. A decode step ropes Q and K
#: of every layer at the same positions with the same setting, so one node computes the tables and the others
#: reuse them (the same arrays: results are unchanged). Bounded: cleared past :data:`_ROPE_MEMO_LIMIT` settings.
_ROPE_MEMO: dict[tuple[object, ...], tuple[bytes, np.ndarray, np.ndarray]] = {}
_ROPE_MEMO_LIMIT = 64


def _rope_tables(key: tuple[object, ...], pos: np.ndarray, compute: Callable[[], tuple[np.ndarray, np.ndarray]]
                 ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """cos / sin for ``pos`` under the setting ``key``: the memo's when the positions match, else ``compute()``."""
    raw = pos.tobytes()
    hit = _ROPE_MEMO.get(key)
    if hit is not None and hit[0] == raw:
        return hit[1], hit[2]
    cos, sin = compute()
    if len(_ROPE_MEMO) >= _ROPE_MEMO_LIMIT:
        _ROPE_MEMO.clear()
    _ROPE_MEMO[key] = (raw, cos, sin)
    return cos, sin


def _rope_ok(node: Tensor) -> bool:
    a, p, ff = node.src[0], node.src[1], node.src[2]
    assert a is not None and p is not None
    mode = node.op_param_i32(2)
    n_dims, n_offs = node.op_param_i32(1), node.op_param_i32(15)
    sections = [node.op_param_i32(i) for i in range(11, 15)]
    if mode not in (ROPE_NORMAL, ROPE_NEOX, ROPE_MROPE, ROPE_VISION, ROPE_IMROPE):
        return False
    n_pairs = a.ne[0] // 2 if mode == ROPE_VISION else n_dims // 2
    if mode & ROPE_MROPE and (sum(sections) <= 0 or sum(sections) > a.ne[0] or min(sections) < 0):
        return False
    if mode == ROPE_VISION and (n_dims * 2 != a.ne[0] or n_offs != 0):
        return False
    return (
        a.type in (GGMLType.F32, GGMLType.F16)
        and node.type == a.type
        and p.type == GGMLType.I32
        and (ff is None or (ff.type == GGMLType.F32 and ff.nelements >= n_pairs))
    )


@KERNELS.kernel(GGMLOp.ROPE, supports=_rope_ok)
def _bind_rope(node: Tensor) -> Thunk:
    a, p, ff = node.src[0], node.src[1], node.src[2]
    assert a is not None and p is not None
    n_dims, mode, n_ctx_orig, n_offs = (node.op_param_i32(i) for i in (1, 2, 4, 15))
    freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow = (node.op_param_f32(i) for i in range(5, 11))
    sections = [node.op_param_i32(i) for i in range(11, 15)]
    corr = yarn_corr_dims(n_dims, n_ctx_orig, freq_base, beta_fast, beta_slow)
    theta_scale = _F32(freq_base) ** _F32(-2.0 / n_dims)
    vision = mode == ROPE_VISION
    half = n_dims // 2
    n_pairs = a.ne[0] // 2 if vision else half
    lo, hi = n_offs, n_offs + n_dims
    # the tables depend on the positions and these settings only (not on freq factors, which are data)
    memo_key = (n_pairs, float(theta_scale), freq_scale, ext_factor, attn_factor, corr)

    def tables(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if mode & ROPE_MROPE:
            angles = _mrope_angles(pos, a.ne[2], n_pairs, theta_scale, sections, mode)
        else:
            angles = theta_powers(pos[: a.ne[2]], n_pairs, theta_scale)
        factors = None if ff is None else f32(ff).reshape(-1)
        return rope_cos_sin(angles, freq_scale, ext_factor, attn_factor, corr, factors)

    def cos_sin() -> tuple[np.ndarray, np.ndarray]:
        pos = arr(p).reshape(-1)
        if mode & ROPE_MROPE or ff is not None:
            return tables(pos)
        return _rope_tables(memo_key, pos[: a.ne[2]], lambda: tables(pos))

    if mode == ROPE_NORMAL:  # the pairs' first element, the step to the next pair, the distance to the second
        first, step, delta = lo, 2, 1
    elif vision:
        first, step, delta = 0, 1, n_dims
    else:
        first, step, delta = lo, 1, half
    if not mode & ROPE_MROPE and ff is None and a.ne[2] <= ROPE_INLINE_TOKENS:
        # decode: the angles of a token or two computed inside the kernel (no numpy table per step)
        settings = (float(theta_scale), freq_scale, ext_factor, float(rope_mscale(freq_scale, ext_factor, attn_factor)),
                    float(_F32(corr[0])), float(_F32(corr[1])))  # fmt: skip
        inline = bind_rope_positions(node, settings, n_pairs, first, step, delta)
        if inline is not None:
            return inline
    rotate = bind_rope(node, first, step, delta)
    if rotate is not None:

        def run_compiled() -> None:
            cos, sin = cos_sin()
            rotate(cos, sin)

        return run_compiled

    def run() -> None:
        x = f32(a)  # (ne3, ne2 = tokens, ne1 = heads, ne0)
        cos, sin = cos_sin()
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        y = np.array(x, dtype=np.float32)
        if mode == ROPE_NORMAL:  # adjacent pairs (x[2i], x[2i+1])
            x0, x1 = x[..., lo:hi:2], x[..., lo + 1 : hi : 2]
            y[..., lo:hi:2] = x0 * c - x1 * s
            y[..., lo + 1 : hi : 2] = x0 * s + x1 * c
        elif vision:  # pairs (x[i], x[i + n_dims]) over the whole row
            x0, x1 = x[..., :n_dims], x[..., n_dims : 2 * n_dims]
            y[..., :n_dims] = x0 * c - x1 * s
            y[..., n_dims : 2 * n_dims] = x0 * s + x1 * c
        else:  # NEOX, MROPE, IMROPE: halves (x[i], x[i + n_dims/2])
            x0, x1 = x[..., lo : lo + half], x[..., lo + half : hi]
            y[..., lo : lo + half] = x0 * c - x1 * s
            y[..., lo + half : hi] = x0 * s + x1 * c
        store(node, y)  # f16: the untouched channels go f16 → f32 → f16 unchanged

    return run


# ------------------------------------------------------------------------------------------------ DIAG_MASK


def _diag_mask_ok(node: Tensor) -> bool:
    a = node.src[0]
    assert a is not None
    return a.type == GGMLType.F32 and node.type == GGMLType.F32


@KERNELS.kernel(GGMLOp.DIAG_MASK_INF, GGMLOp.DIAG_MASK_ZERO, supports=_diag_mask_ok)
def _bind_diag_mask(node: Tensor) -> Thunk:
    a = node.src[0]
    assert a is not None
    n_past = node.op_param_i32(0)
    value = _F32(-np.inf) if node.op == GGMLOp.DIAG_MASK_INF else _F32(0.0)
    # row j (dim 1), column i (dim 0): masked where i > n_past + j
    masked = np.arange(a.ne[0])[None, :] > n_past + np.arange(a.ne[1])[:, None]

    def run() -> None:
        store(node, np.where(masked, value, f32(a)))

    return run


# ------------------------------------------------------------------------------------------------ batch KQ + SOFT_MAX

#: from this many query rows (a prompt batch) the KQ product and its softmax take :func:`bind_batch_attention`; fewer
#: rows (decode) stay with the compiled row kernels, which read only the cells they need
BATCH_ROWS: Final = 8


def bind_batch_attention(kq: Tensor, soft_max: Tensor) -> Thunk | None:
    """``SOFT_MAX(MUL_MAT(K, Q), mask)`` of a prompt batch with an f16 K cache, in one thunk (None: not this case).

    ggml's numerics: Q rounded to f16 (the f16 weights' dot type), f16 × f16 products exact in float32 (summed by
    BLAS in another order than ggml's ``vec_dot_f16``: float rounding), then ``x·scale + mask``, ``exp(w − max)`` and
    ``e / Σe`` with the sum in double, per row. Columns at and past the mask's last finite column are −inf in every
    row, so their cache cells are not read and their outputs are 0 (as :func:`.matmul.bind_half_product` and
    llama.cpp's flash attention skip them; unused cells may hold anything). The KQ node's own memory is not written:
    only the softmax reads it. Query heads share K heads as ggml broadcasts them (``q head / (H / H_kv)``). All the
    K heads' cells are converted in one call and Q rounded in one; then per share of the K heads one batched
    single-threaded SGEMM (one per head) and, with numba, one nogil compiled softmax for all its rows
    (:mod:`._attn_kernels`: ``exp`` within 1 ulp in float32, Σ in double in eight fixed lanes) — numpy's
    steps otherwise (``GGML_CPU_NUMBA=0``). Where the spinning helpers run (:mod:`._row_parts`), the calling
    thread does every head's SGEMM and the softmax rows are split across it and them; elsewhere the shares run on
    the plugin's workers or all on the calling thread, whichever measures faster. Each head is the same SGEMM and
    the same row softmax on any split, so the same bits for any thread count.
    """
    a, b, mask = kq.src[0], kq.src[1], soft_max.src[1]
    if a is None or b is None or mask is None or soft_max.src[2] is not None:
        return None
    if a.type != GGMLType.F16 or b.type != GGMLType.F32 or kq.type != GGMLType.F32 or soft_max.type != GGMLType.F32:
        return None
    if mask.type != GGMLType.F32 or mask.ne[2] != 1 or mask.ne[3] != 1 or soft_max.op_param_f32(1) != 0.0:
        return None
    d, n_kv, h_kv = a.ne[0], a.ne[1], a.ne[2]
    n_tok, h = b.ne[1], b.ne[2]
    if n_tok < BATCH_ROWS or a.ne[3] != 1 or b.ne[3] != 1 or b.ne[0] != d or h % h_kv or mask.ne[0] != n_kv:
        return None
    if tuple(soft_max.ne) != (n_kv, n_tok, h, 1) or mask.ne[1] < n_tok:
        return None
    from ggml_cpu.jit.halves import f16_to_f32, round_f16
    from ggml_cpu.threads import Faster, current_threads, parallel_for, single_threaded_blas

    scale = _F32(soft_max.op_param_f32(0))
    r = h // h_kv
    soft = batch_soft_max_kernel()

    def run(most: int) -> None:
        m = f32(mask)[0, 0, :n_tok]  # (T, n_kv)
        n_used = used_columns(m)
        out = arr(soft_max)[0]  # (H, T, n_kv)
        if n_used == 0:
            out[...] = 0.0
            return
        k = arr(a)[0]  # (H_kv, n_kv, D) f16
        kf = f16_to_f32(k[:, :n_used])  # (H_kv, used, D): every head's cells in one conversion
        q = round_f16(f32(b)[0]).reshape(h_kv, r * n_tok, d)
        workers = min(most, h_kv)
        cuts = [h_kv * i // workers for i in range(workers + 1)]
        compiled_rows = soft is not None and out.flags.c_contiguous and m.flags.c_contiguous

        if most > 1 and parts is not None and compiled_rows and parts.helping(most):  # rows on the helpers
            parts.nudge(most)  # the helpers may sleep after this thread's serial steps: they spin for the softmax
            with single_threaded_blas():
                scores = np.matmul(q, kf.transpose(0, 2, 1)).reshape(h, n_tok, n_used)
            split_soft(scores, m, out, n_used, most)
            return

        def work(part: int) -> None:
            g0, g1 = cuts[part], cuts[part + 1]
            w = np.matmul(q[g0:g1], kf[g0:g1].transpose(0, 2, 1))  # (G, r·T, used): one SGEMM per K head
            heads = w.reshape((g1 - g0) * r, n_tok, n_used)
            if compiled_rows and soft is not None:  # one nogil call for all these heads' rows
                soft(heads, m, out[g0 * r : g1 * r], n_used, float(scale), 0, heads.shape[0])
                return
            o = out[g0 * r : g1 * r]
            o[..., n_used:] = 0.0
            with np.errstate(all="ignore"):  # in place: no new pages per step
                np.multiply(heads, scale, out=heads)
                np.add(heads, m[:, :n_used], out=heads)
                np.subtract(heads, heads.max(axis=-1, keepdims=True), out=heads)
                np.exp(heads, out=heads)
                total = heads.sum(axis=-1, dtype=np.float64, keepdims=True)
                np.multiply(heads, (1.0 / total).astype(np.float32), out=o[..., :n_used])

        with single_threaded_blas():
            parallel_for(work, workers)

    parts = row_split_parts() if soft is not None and h * n_tok >= 2 else None
    jobs: dict[int, Any] = {}
    sp = np.zeros(6, np.int64)  # the softmax job's shapes: heads, tokens, score width, n_kv, mask rows, used
    now: list[Any] = []  # this call's (scores, mask, out, used), for the job's fallback on this thread

    def split_soft(scores: np.ndarray, m: np.ndarray, out: np.ndarray, n_used: int, threads: int) -> None:
        sp[:] = (h, n_tok, scores.shape[2], out.shape[2], m.shape[0], n_used)
        now[:] = (scores, m, out, n_used)
        job = jobs.get(threads)
        if job is None:
            assert parts is not None and soft is not None  # split_soft runs only with both
            serial = lambda: soft(now[0], now[1], now[2], now[3], float(scale), 0, h)  # noqa: E731
            job = jobs[threads] = parts.RowJob(parts.SOFT_MAX, (scores, m, out), sp, (float(scale),), h * n_tok,
                                               threads, serial)  # fmt: skip
        else:
            job.bind((scores, m, out))
        job()

    # without the helpers, the heads split across the workers or all on the calling thread, whichever measures
    # faster (the same bits either way: each K head is the same SGEMM and the same per-row softmax on any split)
    key = ("batch-attention", tuple(a.ne), tuple(b.ne))
    faster = Faster(lambda: run(current_threads()), lambda: run(1), key=key)
    if parts is None:
        return lambda: faster()  # a closure: the engine's profilers label it (an attribute Faster has no slot for)

    def pooled() -> None:
        threads = current_threads()
        if threads > 1 and parts.helping(threads):  # the helpers back off to one thread by themselves on a stall
            run(threads)
        else:
            faster()

    return pooled


# ------------------------------------------------------------------------------------- the compiled path


def batch_soft_max_kernel() -> Callable[..., Any] | None:
    """The compiled softmax of a prompt batch's attention scores (:mod:`._attn_kernels`), or None when compiled
    kernels are off or it failed to build."""
    mod = load_module("_attn_kernels", "compiled attention kernels")
    return _jit.get(mod.BATCH_SOFT_MAX_SPEC) if mod is not None else None


def bind_soft_max(node: Tensor, slopes: np.ndarray, *, zero_under_mask: bool = False) -> Thunk | None:
    """SOFT_MAX (ext) of f32 rows with an optional f32 mask, ``slopes`` (ALiBi, per head) and f32 sinks.
    ``zero_under_mask``: the input is 0 wherever the mask is −inf and the slopes are 1 (the scores of
    :func:`bind_half_product` with this node): each row's trailing masked columns are then not walked."""
    a, mask, sinks = node.src[0], node.src[1], node.src[2]
    fn = kernel("SOFT_MAX_SPEC", module="_attn_kernels")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    mv, mp = np.zeros(1, np.float32), (0, 1, 1, 0, 0, 0, 0)
    if mask is not None:
        fm = flat(mask)
        if fm is None or mask.type != GGMLType.F32:
            return None
        mv, mp = fm[0], (1, mask.ne[2], mask.ne[3], 0, *fm[1][1:])
    sv, has_sinks = np.zeros(1, np.float32), 0
    if sinks is not None:
        fs = flat(sinks)
        if fs is None or sinks.type != GGMLType.F32 or sinks.ne[0] < a.ne[2]:
            return None
        sv, has_sinks = fs[0], 1
    sl = np.ascontiguousarray(slopes.reshape(-1), dtype=np.float32)
    scale = float(node.op_param_f32(0))
    trim = int(zero_under_mask and mask is not None and bool((sl == 1.0).all()) and math.isfinite(scale))
    p = params(*a.ne, *x[1][1:], *out[1][1:], *mp, has_sinks, trim)
    xv, ov = x[0], out[0]

    def run() -> None:
        fn(xv, ov, mv, sv, sl, p, scale)

    return run


def bind_rope(node: Tensor, first: int, step: int, delta: int) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """ROPE's rotation of f32 rows: ``rotate(cos, sin)`` with the (tokens, pairs) tables turns the pairs
    ``(first + i·step, first + i·step + delta)`` and copies the other channels."""
    a = node.src[0]
    fn = kernel("ROPE_SPEC", module="_attn_kernels")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    p = params(*a.ne, *x[1][1:], *out[1][1:], first, step, delta)
    xv, ov = x[0], out[0]

    def rotate(cos: np.ndarray, sin: np.ndarray) -> None:
        fn(xv, ov, cos, sin, p)

    parts = row_split_parts() if a.nelements >= SPLIT_ELEMENTS else None
    if parts is None:
        return rotate
    rows, tables = rows_of(p), [xv, xv]  # tables: this call's (cos, sin), for the job's fallback
    jobs: dict[int, Any] = {}

    def rotate_split(cos: np.ndarray, sin: np.ndarray) -> None:
        threads = _jit.current_threads()
        contiguous = cos.flags.c_contiguous and sin.flags.c_contiguous
        if threads <= 1 or cos.shape[1] == 0 or not contiguous or not parts.helping(threads):
            fn(xv, ov, cos, sin, p)
            return
        tables[:] = (cos, sin)
        job = jobs.get(threads)
        if job is None:
            serial = lambda: fn(xv, ov, tables[0], tables[1], p)  # noqa: E731
            job = jobs[threads] = parts.RowJob(parts.ROPE, (xv, ov, cos, sin), p, (), rows, threads, serial,
                                               cos.shape[1])  # fmt: skip
        else:
            job.bind((xv, ov, cos, sin))
        job()

    return rotate_split


#: up to this many tokens ROPE computes its angles inside the kernel (decode); above, one numpy table shared by the
#: nodes of a step (cheaper for a prompt's many positions)
ROPE_INLINE_TOKENS = 4


def bind_rope_positions(
    node: Tensor, settings: tuple[float, ...], n_pairs: int, first: int, step: int, delta: int
) -> Thunk | None:
    """ROPE of f32 rows with the angles computed in the kernel from the positions (modes without sections, no
    frequency factors): ``settings`` = (theta_scale, freq_scale, ext_factor, mscale, corr_low, corr_high), each a
    float32 value, as :func:`ggml_cpu.ops.attention.rope_cos_sin` uses them."""
    a, pos = node.src[0], node.src[1]
    fn = kernel("ROPE_POS_SPEC", module="_attn_kernels")
    if fn is None or a is None or pos is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out, fp = flat(a), flat(node), flat(pos)
    if x is None or out is None or fp is None or pos.type != GGMLType.I32:
        return None
    p = params(*a.ne, *x[1][1:], *out[1][1:], first, step, delta, n_pairs)
    f = np.array(settings, np.float64)
    cs = np.empty(2 * max(n_pairs, 1), np.float32)
    xv, ov, pv = x[0], out[0], fp[0]

    def run() -> None:
        fn(xv, ov, pv, p, f, cs)

    return run
