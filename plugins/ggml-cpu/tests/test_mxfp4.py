"""MXFP4 weights (ggml type 39, gpt-oss's experts) in MUL_MAT and MUL_MAT_ID against ggml's definition of
``ggml_vec_dot_mxfp4_q8_0``: the activations rounded to Q8_0 blocks, then per block of 32 the integer sum
``Σ kvalues_mxfp4[q_w]·q_x`` times ``E8M0_half(e)·d_x``, summed over the blocks (float64 here).

The weights are raw random blocks (every nibble, exponents 0..1 with their subnormal scales and 110..140),
decoded by gguf-py, an independent implementation of the format. Bound: the CPU sums exact products in float32
(dequantized tiles and SGEMM), so it agrees to float32 rounding, 1e-5 of the largest result.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GQ
from gguf import quants as gquants
from kernel_harness import _backend, rng
from test_kernels_matmul_id import _q8_blocks

import ggml_core as gc
from ggml_core import ops

#: ggml-common.h's kvalues_mxfp4: twice the E2M1 values
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float64)


def _raw_blocks(seed: int, rows: int, k: int) -> np.ndarray:
    """Rows of random MXFP4 blocks: byte 0 the E8M0 exponent, 16 bytes of nibbles."""
    r = rng(seed)
    nb = k // 32
    e = r.integers(110, 141, (rows, nb, 1)).astype(np.uint8)
    e[0, 0], e[-1, -1] = 0, 1  # the subnormal scales 2^-128·2^-... of E8M0_half(0) and (1)
    qs = r.integers(0, 256, (rows, nb, 16)).astype(np.uint8)
    return np.concatenate([e, qs], axis=2).reshape(rows, nb * 17)


def _decode(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kvalues of every weight (M, nb, 32), E8M0_half scale of every block (M, nb)) of rows of blocks."""
    blocks = raw.reshape(raw.shape[0], -1, 17)
    e = blocks[..., 0].astype(np.uint32)
    half = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32).view(np.float32)
    lo, hi = blocks[..., 1:] & 0x0F, blocks[..., 1:] >> 4
    return np.concatenate([KVALUES[lo], KVALUES[hi]], axis=-1), half


def _definition(raw: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_mxfp4_q8_0 of every weight row (raw, (M, bytes)) with every activation row (x (n, K))."""
    qw, half = _decode(raw)
    d_x, q_x, _ = _q8_blocks(x)  # (n, nb), (n, nb, 32)
    sums = np.einsum("mbj,nbj->nmb", qw, q_x)  # exact integers
    return np.einsum("nmb,mb,nb->nm", sums, half.astype(np.float64), d_x)


def _compute(w_raw: np.ndarray, w_ne: list[int], build: object, *inputs: tuple[np.ndarray, str]) -> np.ndarray:
    with gc.Context("mxfp4") as ctx:
        w = ctx.new_tensor("mxfp4", w_ne, "w")
        ts = [ctx.new_tensor(t, list(v.shape[::-1]), f"in{i}") for i, (v, t) in enumerate(inputs)]
        out = build(w, *ts)  # type: ignore[operator]
    backend = _backend()
    gc.alloc_ctx_tensors(ctx, backend)
    w.set_bytes(np.ascontiguousarray(w_raw).tobytes())
    for t, (v, _) in zip(ts, inputs, strict=True):
        t.set_data(v)
    backend.graph_compute(gc.build_graph([out]))
    return out.to_numpy()


def test_gguf_py_decodes_the_blocks_as_the_definition() -> None:
    raw = _raw_blocks(0, 4, 64)
    qw, half = _decode(raw)
    mine = (qw * half[..., None].astype(np.float64)).reshape(4, 64)
    np.testing.assert_array_equal(mine, gquants.dequantize(raw, GQ.MXFP4).astype(np.float64))


@pytest.mark.parametrize("n", [1, 7, 40])
def test_mul_mat_mxfp4(n: int) -> None:
    m, k = 24, 256
    raw = _raw_blocks(1, m, k)
    x = rng(2).standard_normal((n, k)).astype(np.float32)
    got = _compute(raw, [k, m], ops.mul_mat, (x, "f32"))[0, 0]
    want = _definition(raw, x)
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-5 * scale
    # the Q8_0 rounding of the activations is in play: without it the product is measurably elsewhere
    plain = x.astype(np.float64) @ gquants.dequantize(raw, GQ.MXFP4).astype(np.float64).T
    assert np.abs(plain - want).max() > 100 * np.abs(got - want).max()


def test_mul_mat_id_mxfp4() -> None:
    n_expert, m, k, n_tokens, n_used = 4, 16, 128, 5, 2
    raw = _raw_blocks(3, n_expert * m, k)
    x = rng(4).standard_normal((n_tokens, n_used, k)).astype(np.float32)
    ids = np.stack([rng(5 + t).permutation(n_expert)[:n_used] for t in range(n_tokens)]).astype(np.int32)
    got = _compute(raw, [k, m, n_expert], ops.mul_mat_id, (x, "f32"), (ids, "i32"))[0]
    per_expert = raw.reshape(n_expert, m, -1)
    want = np.stack(
        [
            np.stack([_definition(per_expert[ids[t, s]], x[t, s][None])[0] for s in range(n_used)])
            for t in range(n_tokens)
        ]
    )
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_tile_dequantizer_is_bit_exact_for_every_exponent() -> None:
    """The compiled tile dequantizer (numpy's where numba is off) against ggml-core's dequantize, bit for bit,
    over all 256 exponents (subnormal scales and 2^127·12 = inf included) and every nibble."""
    from ggml_core import GGMLType
    from ggml_core.quants import dequantize
    from ggml_cpu.quant import dequantize_rows

    e = np.repeat(np.arange(256, dtype=np.uint8), 2).reshape(16, 32, 1)
    qs = rng(6).integers(0, 256, (16, 32, 16)).astype(np.uint8)
    w = np.concatenate([e, qs], axis=2).reshape(16, 32 * 17)
    out, mins = np.empty((16, 1024), np.float32), np.empty((16, 32), np.float32)
    with np.errstate(over="ignore"):
        dequantize_rows(w, GGMLType.MXFP4, 0, 16, out, mins)
        want = dequantize(w, GGMLType.MXFP4).reshape(16, 1024)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
