"""Cases for the recurrent ops: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7.

Shapes follow test-backend-ops' (Mamba-1 and -2 scans, grouped B/C, x/B/C as views of one tensor, snapshots, several
sequences read from permuted state rows; delta nets with repeated value heads, permuted q/k/v and per-row gates).
Inputs are drawn as the models produce them: negative A, keys of unit length, gates below zero, beta in [0, 1].
"""

from __future__ import annotations

import numpy as np

from ggml_core._context import Context
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.testing._case import Built, Case, Check, Init, builder
from ggml_core.testing._inputs import uniform, unique_indices
from ggml_core.testing.cases._util import leaf, permuted
from ggml_core.testing.reference import recurrent as ref

__all__ = ["cases"]

F32 = GGMLType.F32
I32 = GGMLType.I32


def unit_rows(rng: np.random.Generator, t: Tensor) -> np.ndarray:
    """Rows of length one (the L2-normalised keys and queries the models feed these ops)."""
    x = rng.uniform(-1.0, 1.0, (t.ne[3], t.ne[2], t.ne[1], t.ne[0]))
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _ssm_conv(d_conv: int, d_inner: int, n_t: int, n_s: int) -> Case:
    def build(ctx: Context) -> Built:
        sx = leaf(ctx, F32, [d_conv - 1 + n_t, d_inner, n_s], "sx")
        c = leaf(ctx, F32, [d_conv, d_inner], "c")
        return Built(builder("ssm_conv")(sx, c), [sx, c])

    params = {"type": F32, "d_conv": d_conv, "d_inner": d_inner, "n_t": n_t, "n_s": n_s}
    return Case("SSM_CONV", params, build, ref.ssm_conv)


def _ssm_scan(
    d_state: int, head_dim: int, n_head: int, n_group: int, n_t: int, n_s: int, overlap: bool = False, k: int = 1
) -> Case:
    def build(ctx: Context) -> Built:
        s = leaf(ctx, F32, [d_state, head_dim, n_head, n_s], "s")
        dt = leaf(ctx, F32, [n_head, n_t, n_s], "dt")
        a = leaf(ctx, F32, [1 if head_dim > 1 else d_state, n_head], "A")
        if overlap:  # x, B and C read from one tensor, as a model's fused xBC projection
            xbc = leaf(ctx, F32, [d_state, n_head, n_t, 2 * n_s], "xBC")
            view = builder("view_4d")
            x = view(xbc, head_dim, n_head, n_t, n_s, xbc.nb[1], xbc.nb[2], xbc.nb[3], xbc.nb[3])
            b = view(xbc, d_state, n_group, n_t, n_s, xbc.nb[1], xbc.nb[2], xbc.nb[3], 0)
            c = view(xbc, d_state, n_group, n_t, n_s, xbc.nb[1], xbc.nb[2], xbc.nb[3], 2 * xbc.nb[3])
        else:
            x = leaf(ctx, F32, [head_dim, n_head, n_t, n_s], "x")
            b = leaf(ctx, F32, [d_state, n_group, n_t, n_s], "B")
            c = leaf(ctx, F32, [d_state, n_group, n_t, n_s], "C")
        ids = leaf(ctx, I32, [n_s], "ids")
        out = builder("ssm_scan")(s, x, dt, a, b, c, ids, k)
        return Built(out, [s, x, dt, a, b, c, ids], {a: uniform(-1.0, -0.5), ids: unique_indices(n_s)})

    params = {"type": F32, "d_state": d_state, "head_dim": head_dim, "n_head": n_head, "n_group": n_group,
              "n_t": n_t, "n_s": n_s, "overlap": overlap, "K": k}  # fmt: skip
    return Case("SSM_SCAN", params, build, lambda s, x, dt, a, b, c, ids: ref.ssm_scan(s, x, dt, a, b, c, ids, k))


def _gated_delta_net(heads: int, size: int, n_t: int, n_s: int, repeat: int = 1, perm: bool = False,
                     kda: bool = False, k: int = 1) -> Case:  # fmt: skip
    def build(ctx: Context) -> Built:
        hv = heads * repeat
        if perm:  # rows contiguous, heads and tokens swapped in memory
            q = permuted(ctx, F32, [size, heads, n_t, n_s], [0, 2, 1, 3], "q")
            kk = permuted(ctx, F32, [size, heads, n_t, n_s], [0, 2, 1, 3], "k")
            v = permuted(ctx, F32, [size, hv, n_t, n_s], [0, 2, 1, 3], "v")
        else:
            q = leaf(ctx, F32, [size, heads, n_t, n_s], "q")
            kk = leaf(ctx, F32, [size, heads, n_t, n_s], "k")
            v = leaf(ctx, F32, [size, hv, n_t, n_s], "v")
        g = leaf(ctx, F32, [size if kda else 1, hv, n_t, n_s], "g")
        beta = leaf(ctx, F32, [1, hv, n_t, n_s], "beta")
        state = leaf(ctx, F32, [size, size, hv, n_s], "state")
        init: dict[Tensor, Init] = {g: uniform(-20.0, -1e-4), beta: uniform(0.0, 1.0), v: uniform(-0.3, 5.0)}
        for t in (q, kk):
            init[t.src[0] if perm and t.src[0] is not None else t] = unit_rows
        out = builder("gated_delta_net")(q, kk, v, g, beta, state, k)
        return Built(out, [q, kk, v, g, beta, state], init)

    params = {"type": F32, "heads": heads, "size": size, "n_t": n_t, "n_s": n_s, "repeat": repeat, "perm": perm,
              "kda": kda, "K": k}  # fmt: skip
    return Case(
        "GATED_DELTA_NET", params, build, lambda q, kk, v, g, beta, st: ref.gated_delta_net(q, kk, v, g, beta, st, k)
    )


def _rwkv_wkv7(heads: int, size: int, n_t: int, n_s: int) -> Case:
    def build(ctx: Context) -> Built:
        ops = [leaf(ctx, F32, [size, heads, n_t * n_s], name) for name in "rwkvab"]
        state = leaf(ctx, F32, [size * size * heads, n_s], "state")
        init: dict[Tensor, Init] = {ops[4]: unit_rows, ops[5]: unit_rows, ops[1]: uniform(0.5, 1.0)}
        return Built(builder("rwkv_wkv7")(*ops, state), [*ops, state], init)

    params = {"type": F32, "heads": heads, "size": size, "n_t": n_t, "n_s": n_s}
    return Case("RWKV_WKV7", params, build, ref.rwkv_wkv7, check=Check.nmse(1e-7))


def cases() -> list[Case]:
    """Every recurrent-op case."""
    out = [
        _ssm_conv(4, 1536, 1, 1),
        _ssm_conv(4, 1536, 4, 1),
        _ssm_conv(4, 1536, 1, 4),
        _ssm_conv(3, 64, 64, 2),
        _ssm_conv(4, 96, 33, 3),
    ]
    out += [
        _ssm_scan(16, 1, 256, 1, 8, 2),  # Mamba-1: A per state
        _ssm_scan(128, 16, 8, 2, 12, 3),  # Mamba-2: A per head, grouped B/C
        _ssm_scan(32, 8, 8, 1, 1, 4),  # one token, four sequences (generation)
        _ssm_scan(16, 16, 4, 4, 6, 2, overlap=True),
        _ssm_scan(32, 8, 4, 2, 4, 2, k=4),  # snapshots of the last four tokens
        _ssm_scan(32, 8, 4, 2, 8, 2, k=3),
    ]
    out += [
        _gated_delta_net(4, 16, 1, 1),
        _gated_delta_net(4, 16, 12, 2),
        _gated_delta_net(2, 32, 5, 2, repeat=2),
        _gated_delta_net(4, 16, 6, 1, perm=True),
        _gated_delta_net(2, 16, 4, 2, kda=True),
        _gated_delta_net(2, 16, 6, 2, k=3),
    ]
    out += [
        _rwkv_wkv7(4, 64, 1, 1),
        _rwkv_wkv7(2, 64, 1, 4),
        _rwkv_wkv7(2, 64, 16, 2),
        _rwkv_wkv7(3, 32, 9, 1),
    ]
    return out
