"""The kernels' block-format code, run on the host: dequantization, quantizers, quantized dot products and ggml's
activation rounding, compared with ggml-core's bit-exact numpy quants (an independent reference).

tests/host_harness.cu includes the kernel sources and calls the helpers the GPU kernels call (they are
``__host__ __device__``), so this checks their arithmetic and bit layouts without a GPU. It does not check the
kernels' parallel structure (warp reductions, shared-memory staging, launch geometry): that needs a GPU run.
Needs nvcc (and its host compiler); skips, saying so, without it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import build_host_program

from ggml_core import GGMLType
from ggml_core.quants import dequantize, quantize
from ggml_cuda.ops.matmul import K_QUANTS, MMVQ_TYPES
from ggml_cuda.ops.movement import DEQUANT_TYPES, QUANTIZE_TYPES


@pytest.fixture(scope="session")
def harness(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host harness, built once per session with nvcc."""
    return build_host_program(nvcc, "host_harness", tmp_path_factory.mktemp("host_harness"))


def _run(harness: Path, *args: object, data: bytes) -> bytes:
    res = subprocess.run([str(harness), *map(str, args)], input=data, capture_output=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout


def _rows(rng: np.random.Generator, n: int, width: int) -> np.ndarray:
    """Rows of varied magnitude and sign, with edge rows (zeros, constants, tiny values, one spike)."""
    x = rng.standard_normal((n, width)).astype(np.float32) * rng.uniform(0.01, 50, (n, 1)).astype(np.float32)
    x[0] = 0.0
    x[1] = 0.5
    x[2] = 1e-8 * np.sign(rng.standard_normal(width))
    x[3] = 0.0
    x[3, 5] = -7.0
    x[4] = np.abs(x[4])
    return x


@pytest.mark.parametrize("qtype", sorted(DEQUANT_TYPES, key=int), ids=lambda t: t.name)
def test_dequantization_equals_ggmls_bit_for_bit(harness: Path, qtype: GGMLType) -> None:
    rng = np.random.default_rng(int(qtype))
    qk = qtype.block_size
    if qtype == GGMLType.IQ4_NL:  # no quantizer in ggml-core: random nibbles with a finite f16 scale
        blocks = rng.integers(0, 256, (24, qtype.type_size), dtype=np.uint8)
        blocks[:, 0:2] = np.float16(0.03).reshape(1).view(np.uint8)
    else:
        blocks = quantize(_rows(rng, 24, qk), qtype).reshape(24, qtype.type_size)
    got = np.frombuffer(_run(harness, "dequant", int(qtype), 24, data=blocks.tobytes()), np.float32)
    want = dequantize(blocks, qtype).reshape(-1)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("qtype", sorted(QUANTIZE_TYPES, key=int), ids=lambda t: t.name)
def test_quantizers_equal_ggmls_reference_bytes(harness: Path, qtype: GGMLType) -> None:
    x = _rows(np.random.default_rng(100 + int(qtype)), 64, 32)
    got = np.frombuffer(_run(harness, "quant", int(qtype), 64, data=x.tobytes()), np.uint8).reshape(64, -1)
    want = quantize(x, qtype).reshape(64, -1)
    np.testing.assert_array_equal(got, want)


def test_activation_rounding_q8_0_and_q8_1(harness: Path) -> None:
    """As ggml-cpu's x86 quantize_row_q8_0/q8_1: q = rint(x·(127/amax)) (half to even), d and s = d·Σq in f16."""
    x = _rows(np.random.default_rng(5), 40, 32)
    x[-1] = np.float32(62.5) * np.where(np.arange(32) % 2, 1, -1)  # amax 127 below: ±62.5 are exact ties
    x[-1, 0] = np.float32(-127.0)
    out = _run(harness, "act32", 40, data=x.tobytes())
    rec = np.frombuffer(out, dtype=np.dtype([("q", np.int8, 32), ("d", "<f4"), ("s", "<f4")]))
    amax = np.abs(x).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(x * inv).astype(np.int8)
    d = (amax[:, 0] / np.float32(127.0)).astype(np.float32)
    np.testing.assert_array_equal(rec["q"], q)
    assert rec["q"][-1, 1] == 62  # half to even, where the reference quantizer's roundf gives 63
    np.testing.assert_array_equal(rec["d"], d.astype(np.float16).astype(np.float32))
    s = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(rec["s"], s)


def test_activation_rounding_q8_k(harness: Path) -> None:
    x = _rows(np.random.default_rng(6), 12, 256)
    x[5, 10], x[5, 20] = 3.0, -3.0  # a tie in magnitude: the first one wins
    x[5, :10] = 0.0
    x[5, 11:20] = 0.0
    x[5, 21:] = 0.0
    out = _run(harness, "act256", 12, data=x.tobytes())
    rec = np.frombuffer(out, dtype=np.dtype([("q", np.int8, 256), ("d", "<f4")]))
    qk = quantize(x, GGMLType.Q8_K).reshape(12, 292)
    np.testing.assert_array_equal(rec["d"], qk[:, 0:4].copy().view("<f4")[:, 0])
    np.testing.assert_array_equal(rec["q"], qk[:, 4:260].view(np.int8))


@pytest.mark.parametrize("qtype", sorted(MMVQ_TYPES, key=int), ids=lambda t: t.name)
def test_quantized_dot_units(harness: Path, qtype: GGMLType) -> None:
    """dot_unit (the inner loop of k_mv_q) against Σ dequant(w)·x·dx (+ m·sx) in float64."""
    rng = np.random.default_rng(200 + int(qtype))
    n_blocks = 16
    blocks = quantize(_rows(rng, n_blocks, qtype.block_size), qtype).reshape(n_blocks, qtype.type_size)
    w = dequantize(blocks, qtype).reshape(n_blocks, -1).astype(np.float64)
    units = 8 if qtype in K_QUANTS else 1
    records, want = [], []
    for b in range(n_blocks):
        for s in range(units):
            xq = rng.integers(-127, 128, 32, dtype=np.int8)
            dx, sx = np.float32(rng.uniform(0.001, 0.1)), np.float32(0.0)
            ws = w[b, 32 * s : 32 * s + 32]
            if qtype in (GGMLType.Q4_1, GGMLType.Q5_1):
                # w = d*q + m: the kernel adds m*sx for the m part, with sx = dx*sum(xq) (Q8_1's s)
                sx = np.float32(float(dx) * int(xq.astype(np.int64).sum()))
            records.append(blocks[b].tobytes() + np.int32(s).tobytes() + xq.tobytes() + dx.tobytes() + sx.tobytes())
            want.append(float((ws * xq.astype(np.float64)).sum() * float(dx)))
    got = np.frombuffer(_run(harness, "dot", int(qtype), len(records), data=b"".join(records)), np.float32)
    want_arr = np.asarray(want)
    scale = np.abs(w).max() * 127 * 32 * 0.1
    np.testing.assert_allclose(got, want_arr, rtol=1e-5, atol=scale * 1e-6)
