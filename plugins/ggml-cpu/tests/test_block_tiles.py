"""The Q4_0 / Q5_0 / Q8_0 block kernels (4×4 tiles of weight × activation rows, ``jit/_simd.offset_tile``) against
numpy, bit for bit, on shapes that reach every tile edge.

The expected result is written here from ggml's definition of the products and the kernels' documented float
order: per 32-element block the exact integer sums ``Σ (q − c)·x`` over each group of four elements (8 lanes), as
float32, times the float32 ``d_w·d_x``, added lane by lane to a float32 accumulator block after block, then the 8
lanes summed in order. The integer sums are exact in any order, so the kernels' unsigned-quant offset trick
(``vpdpbusd`` on ``q + c`` starting from ``−c·Σx``) must give these bits exactly; so must the threaded variant, and
the portable partial sums without VNNI (``GGML_CPU_VNNI=0``, checked in a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kernel_harness import rng

from ggml_core import GGMLType
from ggml_core.quants import quantize
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import F16_VALUES
from ggml_cpu.quant import product

TYPES = [GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0]


def _f16(raw: np.ndarray) -> np.ndarray:
    """The little-endian f16 in the last axis' two bytes, as float32."""
    return np.ascontiguousarray(raw).view("<f2")[..., 0].astype(np.float32)


def _weight_quants(w: np.ndarray, t: GGMLType) -> tuple[np.ndarray, np.ndarray]:
    """(signed quants (M, K) as int64, scales (M, K/32) float32) from ggml's block layouts."""
    blocks = w.reshape(w.shape[0], -1, t.type_size)
    d = _f16(blocks[..., 0:2])
    if t == GGMLType.Q8_0:
        return blocks[..., 2:].view(np.int8).astype(np.int64).reshape(w.shape[0], -1), d
    qs = blocks[..., -16:].astype(np.int64)
    q = np.concatenate([qs & 15, qs >> 4], axis=-1)  # elements 0-15: low nibbles, 16-31: high
    if t == GGMLType.Q5_0:
        qh = np.ascontiguousarray(blocks[..., 2:6]).view("<u4")[..., 0].astype(np.int64)
        q |= ((qh[..., None] >> np.arange(32)) & 1) << 4
        return (q - 16).reshape(w.shape[0], -1), d
    return (q - 8).reshape(w.shape[0], -1), d


def _expected(w: np.ndarray, t: GGMLType, x: np.ndarray) -> np.ndarray:
    wq, wd = _weight_quants(w, t)
    blocks = quant.from_float(x, GGMLType.Q8_0).reshape(x.shape[0], -1, 34)
    xd = _f16(blocks[..., 0:2])
    xq = blocks[..., 2:].view(np.int8).astype(np.int64).reshape(x.shape[0], -1)
    n, m, nb = x.shape[0], w.shape[0], x.shape[1] // 32
    acc = np.zeros((n, m, 8), np.float32)
    for b in range(nb):
        cols = slice(32 * b, 32 * b + 32)
        prod = xq[:, None, cols] * wq[None, :, cols]  # (N, M, 32), exact
        lanes = prod.reshape(n, m, 8, 4).sum(axis=-1).astype(np.float32)
        scale = (wd[None, :, b] * xd[:, None, b]).astype(np.float32)  # d_w · d_x in float32
        acc = acc + lanes * scale[..., None]
    out = np.zeros((n, m), np.float32)
    for lane in range(8):  # the horizontal sum in lane order
        out = out + acc[..., lane]
    return out


def _activations(n: int, k: int) -> np.ndarray:
    x = (rng(11).standard_normal((n, k)) * 3).astype(np.float32)
    x[0, :32] = 0.0  # a zero block (d = 0)
    x[-1, -32:] = 127.0  # every activation at +127: the largest lane sums the offsets take off
    return x


SHAPES = [(13, 9, 160), (7, 4, 32), (1, 1, 96), (6, 5, 64), (4, 2, 32), (9, 1, 64), (8, 3, 96)]


def check(t: GGMLType, m: int, n: int, k: int) -> None:
    """``qmatmul``'s block route against :func:`_expected`, bit for bit, with the largest quants in the last row."""
    if not quant.block_kernels_ready(t):  # the numpy fallback (dequantize + BLAS) sums in another order
        pytest.skip(f"no compiled block kernels: {quant.disabled_reason()}")
    w = quantize(rng(5).standard_normal((m, k)).astype(np.float32), t)
    if t == GGMLType.Q8_0:
        w[-1].reshape(-1, 34)[:, 2:] = 0x80  # −128 (never written by ggml's quantizer, valid in a file)
    else:
        w[-1] = 0xFF  # all nibbles 15 (Q5_0: every fifth bit too: 31)
        w[-1].reshape(-1, t.type_size)[:, :2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)
    x = _activations(n, k)
    out = np.full((n, m), np.nan, np.float32)
    quant.qmatmul(w, t, x, out, route="block")
    np.testing.assert_array_equal(out.view(np.uint32), _expected(w, t, x).view(np.uint32), err_msg=t.name)


def check_stream(t: GGMLType, n: int) -> None:
    """A matrix of at least ``legacy._STREAM_BYTES`` (its decode rows go one at a time, not 4 side by side) against
    :func:`_expected`, bit for bit: 37 distinct rows repeated past the size, so the reference stays small."""
    from ggml_cpu.quant import legacy

    if not quant.block_kernels_ready(t):
        pytest.skip(f"no compiled block kernels: {quant.disabled_reason()}")
    k = 64
    small = quantize(rng(7).standard_normal((37, k)).astype(np.float32), t)
    reps = -(-legacy._STREAM_BYTES // small.nbytes)
    w = np.ascontiguousarray(np.tile(small, (reps, 1)))
    assert w.nbytes >= legacy._STREAM_BYTES and w.shape[0] % 4
    x = _activations(n, k)
    out = np.full((n, w.shape[0]), np.nan, np.float32)
    quant.qmatmul(w, t, x, out, route="block")
    want = np.tile(_expected(small, t, x), (1, reps))
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32), err_msg=t.name)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 2])
def test_streamed_decode_rows_give_the_same_bits(t: GGMLType, n: int) -> None:
    check_stream(t, n)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_block_kernels_equal_the_definition_bit_for_bit(t: GGMLType, m: int, n: int, k: int) -> None:
    """Every tile shape (4×4, 4×1, 1×4, 1×1) and edge: M and N not multiples of 4, odd block counts."""
    check(t, m, n, k)


_GENERIC = """
import sys
sys.path.insert(0, sys.argv[1])
from ggml_cpu.jit import _simd
from ggml_cpu.quant import block_kernels_ready
import test_block_tiles as tt
assert all(block_kernels_ready(t) for t in tt.TYPES) and not _simd.HAS_VNNI
for t in tt.TYPES:
    for shape in tt.SHAPES:
        tt.check(t, *shape)
    tt.check_stream(t, 1)
print("ok")
"""


@pytest.mark.parametrize(
    "setting", [{"GGML_CPU_VNNI": "0"}, {"NUMBA_CPU_NAME": "generic"}], ids=["no-vnni", "generic-cpu"]
)
def test_portable_partial_sums_give_the_same_bits(setting: dict[str, str]) -> None:
    """Without VNNI (``GGML_CPU_VNNI=0``: AVX2's ``vpmaddubsw`` sums where the CPU has AVX2) and for a generic
    x86-64 target (``NUMBA_CPU_NAME=generic``: the integer sums in plain vector IR) the same bits."""
    if quant.disabled_reason() is not None:
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    env = {**os.environ, **setting}
    here = str(Path(__file__).parent)
    done = subprocess.run([sys.executable, "-c", _GENERIC, here], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_threaded_variant_gives_the_same_bits(t: GGMLType) -> None:
    if not quant.block_kernels_ready(t):
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    m, n, k = 23, 6, 128
    w = quantize(rng(6).standard_normal((m, k)).astype(np.float32), t)
    x = _activations(n, k)
    parallel = _jit.get(product._kernels()[0][t][0])
    outs = []
    for threads in (1, 2):
        quant.set_threads(threads)
        out = np.full((n, m), np.nan, np.float32)
        xq, xd = np.empty((n, k), np.int8), np.empty((n, k // 32), np.float32)
        xsum, xs = np.empty((n, k // 32), np.int32), np.zeros((n, k // 32), np.float32)
        assert parallel(x, True, w, w.view(np.int8), xq, xd, xsum, xs, F16_VALUES, out) == 0
        outs.append(out)
    quant.set_threads(1)
    expected = _expected(w, t, x).view(np.uint32)
    for out in outs:
        np.testing.assert_array_equal(out.view(np.uint32), expected)
