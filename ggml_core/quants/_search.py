"""ggml's scale searches for the K-quants, vectorised over sub-blocks.

``make_qx_quants``, ``make_q3_quants`` and ``make_qkx2_quants`` of ggml-quants.c, in float32 with the C code's
order of operations. All arrays here are *transposed*: shape ``(n, B)`` holds ``B`` sub-blocks of ``n`` values
each, so that a loop over the (at most 32) positions of a sub-block is a handful of vector operations over all
sub-blocks at once, and sums over a sub-block can run strictly left to right like the C loops.
"""

from __future__ import annotations

import numpy as np

from ._common import (
    F32,
    GROUP_MAX_EPS,
    F32Array,
    I32Array,
    first_absmax,
    first_min_max,
    nearest_int,
    seq_sum,
    seq_sum_from_first,
)


def _clip(v: I32Array, lo: int, hi: int) -> I32Array:
    """``MAX(lo, MIN(hi, v))``, in place."""
    return np.clip(v, np.int32(lo), np.int32(hi), out=v)


def make_qx_quants_rmse1(x: F32Array, nmax: int) -> tuple[I32Array, F32Array]:
    """``make_qx_quants(n, nmax, x, L, rmse_type=1, qw=NULL)``: symmetric quants with a ±0.9 scale search.

    Returns ``L`` (``0..2*nmax-1``, or 0 for all-zero sub-blocks) and the scale of each sub-block.
    """
    amax, vmax = first_absmax(x, axis=0)
    zero = amax < GROUP_MAX_EPS
    fnmax = F32(nmax)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = x * x
        wx = w * x
        iscale = -fnmax / vmax
        lq = _clip(nearest_int(iscale * x), -nmax, nmax - 1)
        lf = lq.astype(np.float32)
        sumlx = seq_sum(wx * lf)
        suml2 = seq_sum((w * lf) * lf)
        nz = suml2 != 0
        scale = np.where(nz, sumlx / np.where(nz, suml2, F32(1.0)), F32(0.0)).astype(np.float32)
        best = scale * sumlx
        big_l = lq + nmax
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = -(fnmax + F32(0.1) * F32(step)) / vmax
            lq = _clip(nearest_int(iscale * x), -nmax, nmax - 1)
            lf = lq.astype(np.float32)
            sumlx = seq_sum(wx * lf)
            suml2 = seq_sum((w * lf) * lf)
            upd = (suml2 > 0) & (sumlx * sumlx > best * suml2)
            big_l = np.where(upd, lq + nmax, big_l)
            scale = np.where(upd, sumlx / np.where(upd, suml2, F32(1.0)), scale).astype(np.float32)
            best = np.where(upd, scale * sumlx, best).astype(np.float32)
    big_l = np.where(zero, 0, big_l)
    scale = np.where(zero, F32(0.0), scale).astype(np.float32)
    return big_l.astype(np.int32), scale


def make_q3_quants_rmse(x: F32Array, nmax: int) -> tuple[I32Array, F32Array]:
    """``make_q3_quants(n, nmax, x, L, do_rmse=true)``: start from ``-nmax/max`` then 5 passes of coordinate descent.

    Each pass visits the positions in order and updates the running sums in place, exactly as the C code does;
    a sub-block that stops changing stays fixed, so running all 5 passes equals the C ``break``.
    """
    amax, vmax = first_absmax(x, axis=0)
    zero = amax < GROUP_MAX_EPS
    n = x.shape[0]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = -F32(nmax) / vmax
        lq = _clip(nearest_int(iscale * x), -nmax, nmax - 1)
        w = x * x
        wx = w * x
        lf = lq.astype(np.float32)
        sumlx = seq_sum(wx * lf)
        suml2 = seq_sum((w * lf) * lf)
        for _ in range(5):
            for i in range(n):
                wi = w[i]
                wxi = wx[i]
                li = lq[i]
                lfi = li.astype(np.float32)
                slx = sumlx - wxi * lfi
                sl2 = suml2 - (wi * lfi) * lfi
                new_l = _clip(nearest_int((x[i] * sl2) / slx), -nmax, nmax - 1)
                nlf = new_l.astype(np.float32)
                slx2 = slx + wxi * nlf
                sl22 = sl2 + (wi * nlf) * nlf
                upd = (slx > 0) & (new_l != li) & (sl22 > 0) & ((slx2 * slx2) * suml2 > (sumlx * sumlx) * sl22)
                lq[i] = np.where(upd, new_l, li)
                sumlx = np.where(upd, slx2, sumlx)
                suml2 = np.where(upd, sl22, suml2)
        pos = suml2 > 0
        scale = np.where(pos, sumlx / np.where(pos, suml2, F32(1.0)), F32(0.0)).astype(np.float32)
    big_l = np.where(zero, 0, lq + nmax)
    scale = np.where(zero, F32(0.0), scale).astype(np.float32)
    return big_l.astype(np.int32), scale


def make_qkx2_quants(
    x: F32Array,
    weights: F32Array,
    nmax: int,
    rmin: float,
    rdelta: float,
    nstep: int,
    use_mad: bool,
) -> tuple[I32Array, F32Array, F32Array]:
    """``make_qkx2_quants``: asymmetric quants ``L*scale - the_min`` with a weighted least-squares scale search.

    Returns ``L`` (``0..nmax``), ``scale`` and ``the_min`` (``-min``, never negative) per sub-block.
    """
    xmin, xmax = first_min_max(x, axis=0, sentinel=False)
    sum_w = seq_sum_from_first(weights)
    sum_x = seq_sum_from_first(weights * x)
    xmin = np.where(xmin > 0, F32(0.0), xmin).astype(np.float32)
    degenerate = xmax == xmin
    fnmax = F32(nmax)
    frmin = F32(rmin)
    frdelta = F32(rdelta)

    def err_terms(diff: F32Array) -> F32Array:
        return weights * (np.abs(diff) if use_mad else diff * diff)

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        iscale = fnmax / (xmax - xmin)
        scale = F32(1.0) / iscale
        lq = _clip(nearest_int(iscale * (x - xmin)), 0, nmax)
        best_error = seq_sum(err_terms((scale * lq.astype(np.float32) + xmin) - x))
        cur_min = xmin
        for step in range(nstep + 1):
            iscale = (frmin + frdelta * F32(step) + fnmax) / (xmax - cur_min)
            laux = _clip(nearest_int(iscale * (x - cur_min)), 0, nmax)
            lf = laux.astype(np.float32)
            wl = weights * lf
            sum_l = seq_sum(wl)
            sum_l2 = seq_sum(wl * lf)
            sum_xl = seq_sum(wl * x)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            pos = this_min > 0
            this_min = np.where(pos, F32(0.0), this_min).astype(np.float32)
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale).astype(np.float32)
            cur_error = seq_sum(err_terms(((this_scale * lf + this_min) - x).astype(np.float32, copy=False)))
            upd = (det > 0) & (cur_error < best_error)
            lq = np.where(upd, laux, lq)
            best_error = np.where(upd, cur_error, best_error).astype(np.float32)
            scale = np.where(upd, this_scale, scale).astype(np.float32)
            cur_min = np.where(upd, this_min, cur_min).astype(np.float32)
    lq = np.where(degenerate, 0, lq)
    scale = np.where(degenerate, F32(0.0), scale).astype(np.float32)
    the_min = (-np.where(degenerate, xmin, cur_min)).astype(np.float32)
    return lq.astype(np.int32), scale, the_min
