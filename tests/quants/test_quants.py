"""Tests of ``ggml_core.quants`` against three independent references.

1. Golden SHA-256 digests of ggml's own output (``tests/quant_vectors/golden.json``, made by
   ``tests/quant_vectors/regen.py`` with ggml 0.15.3 through ggml-python 0.0.45) on the deterministic rows of
   ``tests/quant_vectors/inputs.py``: checks every byte of every type without ggml installed.
2. ggml itself through ggml-python, when importable: bytes of all 12 quantizers on edge, random and non-finite
   rows, and dequantization of random bytes.
3. ``gguf.quants`` (a dependency): legacy quantizer bytes and dequantization of every type both support; plus
   plain numpy error bounds and the edge-row facts of ggml's quantizers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ggml_core._types import GGMLType
from ggml_core.quants import (
    can_dequantize,
    can_quantize,
    dequantize,
    dequantize_rows_into,
    quantizable_types,
    quantize,
    quantize_rows_into,
)
from ggml_core.quants._common import c_roundf, nearest_int

VECTORS = Path(__file__).resolve().parents[1] / "quant_vectors"
#: hypothesis examples compared with ggml (raise it locally for a deeper search, e.g. 4000)
GGML_EXAMPLES = int(os.environ.get("QUANT_HYPOTHESIS_EXAMPLES", "60"))


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"quant_vectors_{name}", VECTORS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


inputs = _load("inputs")
ggml_ref = _load("ggml_ref")
GOLDEN: dict[str, Any] = json.loads((VECTORS / "golden.json").read_text())

T = GGMLType
QUANT_TYPES = [GGMLType[n] for n in ggml_ref.QUANT_TYPES]
LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q8_1]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K]
GGUF_QUANTIZES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]

#: byte offsets of the f16 fields of each block (random bytes get finite values there)
F16_FIELDS: dict[GGMLType, tuple[int, ...]] = {
    T.Q4_0: (0,),
    T.Q4_1: (0, 2),
    T.Q5_0: (0,),
    T.Q5_1: (0, 2),
    T.Q8_0: (0,),
    T.Q8_1: (0, 2),
    T.Q2_K: (80, 82),
    T.Q3_K: (108,),
    T.Q4_K: (0, 2),
    T.Q5_K: (0, 2),
    T.Q6_K: (208,),
    T.Q8_K: (),
    T.IQ4_NL: (0,),
    T.IQ4_XS: (0,),
    T.MXFP4: (),
    T.NVFP4: (),
    T.TQ1_0: (52,),
    T.TQ2_0: (64,),
    T.Q1_0: (0,),
}


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def random_blocks(t: GGMLType, n_blocks: int, seed: int) -> np.ndarray:
    """Random bytes for ``n_blocks`` blocks of ``t`` with finite f16 (and f32) scale fields."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(n_blocks, t.type_size), dtype=np.uint8)
    for off in F16_FIELDS[t]:
        sign = rng.integers(0, 2, n_blocks, dtype=np.uint16) << 15
        h = rng.integers(0, 0x7C00, size=n_blocks, dtype=np.uint16) | sign
        b[:, off : off + 2] = h.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    if t == T.Q8_K:
        d = np.ldexp(rng.uniform(-1, 1, n_blocks), rng.integers(-40, 40, n_blocks)).astype("<f4")
        b[:, 0:4] = d.view(np.uint8).reshape(n_blocks, 4)
    return b


def _zero_sign_cleared(q: np.ndarray, t: GGMLType) -> np.ndarray:
    """Copy of quantized rows with every f16 field equal to -0.0 (0x8000) set to +0.0."""
    blocks = q.reshape(-1, t.type_size).copy()
    for off in F16_FIELDS[t]:
        field = blocks[:, off : off + 2]
        neg_zero = (field[:, 0] == 0) & (field[:, 1] == 0x80)
        field[neg_zero, 1] = 0
    return blocks.reshape(q.shape)


def first_bad_row(a: np.ndarray, b: np.ndarray) -> str:
    bad = np.nonzero((a != b).reshape(a.shape[0], -1).any(axis=1))[0]
    return f"{bad.size} rows differ, first {bad[:8].tolist()}"


def nonfinite_rows(seed: int) -> np.ndarray:
    """Rows with NaN and ±inf sprinkled in (also at the first and last position of blocks)."""
    rng = np.random.default_rng(seed)
    x = np.ldexp(rng.standard_normal((64, 512)), rng.integers(-12, 12, (64, 1))).astype(np.float32)
    x[rng.uniform(size=x.shape) < 0.004] = np.nan
    x[rng.uniform(size=x.shape) < 0.004] = np.inf
    x[rng.uniform(size=x.shape) < 0.004] = -np.inf
    x[::5, 0] = np.nan
    x[::7, 31] = np.inf
    x[::9, 255] = np.nan
    return x


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    return inputs.make_rows()


# ------------------------------------------------------------------------------------------------ golden digests


class TestGolden:
    """Bytes equal ggml's, checked through digests recorded with ggml 0.15.3 (see quant_vectors/regen.py)."""

    def test_inputs_are_the_recorded_ones(self, rows: np.ndarray) -> None:
        assert list(rows.shape) == GOLDEN["input"]["shape"]
        assert sha256(rows) == GOLDEN["input"]["sha256"], "inputs.py no longer makes the rows golden.json describes"

    @pytest.mark.parametrize("name", sorted(GOLDEN["quantize"]))
    def test_quantize_digest(self, rows: np.ndarray, name: str) -> None:
        t = GGMLType[name]
        q = quantize(rows, name)
        assert q.dtype == np.uint8 and q.shape == (rows.shape[0], rows.shape[1] // t.block_size * t.type_size)
        assert sha256(q) == GOLDEN["quantize"][name], f"{name} bytes differ from ggml {GOLDEN['ggml_version']}"

    @pytest.mark.parametrize("name", sorted(GOLDEN["dequantize"]))
    def test_dequantize_digest(self, rows: np.ndarray, name: str) -> None:
        d = dequantize(quantize(rows, name), name)
        assert d.dtype == np.float32 and d.shape == rows.shape
        assert sha256(d) == GOLDEN["dequantize"][name], f"{name} values differ from ggml {GOLDEN['ggml_version']}"


# ------------------------------------------------------------------------------------------------ ggml itself


@pytest.fixture(scope="module")
def ggml() -> Any:
    ref = ggml_ref.load()
    if ref is None:
        pytest.skip("ggml-python is not installed (pip install ggml-python): direct comparison with ggml skipped")
    return ref


class TestAgainstGGML:
    """Direct byte comparison with ggml's C reference code (skipped without ggml-python)."""

    @pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
    def test_quantize_bytes(self, ggml: Any, rows: np.ndarray, t: GGMLType) -> None:
        x = np.concatenate([rows, inputs.random_rows(seed=7, n_rows=64), nonfinite_rows(seed=3)])
        ours = quantize(x, t)
        theirs = ggml.quantize(t.name, x, t.block_size, t.type_size)
        assert np.array_equal(ours, theirs), f"{t.name}: {first_bad_row(ours, theirs)}"

    @pytest.mark.parametrize("name", ggml_ref.DEQUANT_TYPES)
    def test_dequantize_random_bytes(self, ggml: Any, name: str) -> None:
        t = GGMLType[name]
        b = random_blocks(t, 4096, seed=t.value)
        ours = dequantize(b, t)
        theirs = ggml.dequantize(name, b.reshape(1, -1), t.block_size, t.type_size).reshape(ours.shape)
        assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), f"{name} dequantization differs"

    @settings(
        max_examples=GGML_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(
        t=st.sampled_from(QUANT_TYPES),
        x=hnp.arrays(
            np.float32,
            st.tuples(st.integers(1, 2), st.just(256)),
            elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True),
        ),
        scale=st.sampled_from([1.0, 1e-30, 1e-6, 1e6]),
    )
    def test_property_quantize_matches_ggml(self, ggml: Any, t: GGMLType, x: np.ndarray, scale: float) -> None:
        with np.errstate(all="ignore"):
            x = (x * np.float32(scale)).astype(np.float32)
        ours = quantize(x, t)
        assert np.array_equal(ours, ggml.quantize(t.name, x, t.block_size, t.type_size)), t.name

    def test_f16_and_bf16_bits(self, ggml: Any) -> None:
        rng = np.random.default_rng(11)
        bits = np.concatenate(
            [
                rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32),
                np.arange(0x33000000, 0x33000000 + 70_000, dtype=np.uint32),  # f16 subnormal range
                np.arange(0x477FE000, 0x47800000 + 5000, dtype=np.uint32),  # around f16 max / overflow
                np.array([0x7F800001, 0x7FC00001, 0xFFC12345, 0x7FBFFFFF], dtype=np.uint32),  # NaNs
            ]
        )
        x = bits.view(np.float32)[None, :]
        assert np.array_equal(quantize(x, T.F16).view("<u2")[0], ggml.fp32_to_fp16(x[0]))
        assert np.array_equal(quantize(x, T.BF16).view("<u2")[0], ggml.fp32_to_bf16(x[0]))


# ------------------------------------------------------------------------------------------------ gguf.quants

gguf: Any
gguf_quants: Any
try:
    import gguf
    from gguf import quants as gguf_quants
except ImportError:  # gguf is a dependency; without it only this class is skipped
    gguf = gguf_quants = None

#: types gguf-py dequantizes (Q8_1, Q8_K and Q1_0 it does not)
GGUF_DEQUANT = [t for t in F16_FIELDS if t not in (T.Q8_1, T.Q8_K, T.Q1_0)]


def _gguf_type(t: GGMLType) -> Any:
    return gguf.GGMLQuantizationType[t.name]


@pytest.mark.skipif(gguf is None, reason="gguf is not installed")
class TestAgainstGGUF:
    """``gguf.quants`` quantizes the legacy types the same way and dequantizes everything."""

    @pytest.mark.parametrize("t", GGUF_QUANTIZES, ids=lambda t: t.name)
    def test_legacy_quantize_matches_gguf(self, rows: np.ndarray, t: GGMLType) -> None:
        x = np.concatenate([rows, inputs.random_rows(seed=5, n_rows=32)])
        ours = quantize(x, t)
        with np.errstate(all="ignore"):
            theirs = gguf_quants.quantize(x, _gguf_type(t))
        # gguf-py and ggml disagree only on the sign of a zero scale: ggml's d of an all-zero Q4_0/Q5_0 block is
        # max/-8 with max starting at +0 (so -0.0), and its Q4_1/Q5_1 min is the first zero met (either sign)
        n_diff = int((ours != theirs).sum())
        ours, theirs = _zero_sign_cleared(ours, t), _zero_sign_cleared(theirs, t)
        assert np.array_equal(ours, theirs), f"{t.name}: {first_bad_row(ours, theirs)}"
        if t in (T.Q4_0, T.Q5_0):
            assert n_diff > 0  # the edge rows include all-zero blocks, where the -0.0 shows

    def test_bf16_matches_gguf(self, rows: np.ndarray) -> None:
        x = np.concatenate([rows, np.array([[np.nan, -np.inf, np.inf, 3e38] * 128], dtype=np.float32)])
        ours = quantize(x, T.BF16)
        theirs = gguf_quants.quantize(x, gguf.GGMLQuantizationType.BF16)
        assert np.array_equal(ours.view("<u2"), np.asarray(theirs).view("<u2"))

    @pytest.mark.parametrize("t", GGUF_DEQUANT, ids=lambda t: t.name)
    def test_dequantize_matches_gguf(self, rows: np.ndarray, t: GGMLType) -> None:
        blocks = random_blocks(t, 2048, seed=100 + t.value)
        with np.errstate(all="ignore"):
            theirs = gguf_quants.dequantize(blocks.reshape(-1), _gguf_type(t)).astype(np.float32)
        assert np.array_equal(dequantize(blocks.reshape(-1), t), theirs.reshape(-1), equal_nan=True)
        if can_quantize(t):
            q = quantize(rows, t)  # the huge edge rows give inf scales and NaN values in both
            with np.errstate(all="ignore"):
                theirs = gguf_quants.dequantize(q, _gguf_type(t)).astype(np.float32)
            assert np.array_equal(dequantize(q, t), theirs, equal_nan=True)

    @settings(
        max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(
        t=st.sampled_from(GGUF_QUANTIZES),
        x=hnp.arrays(
            np.float32,
            st.tuples(st.integers(1, 3), st.sampled_from([32, 64, 96])),
            elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=True),
        ),
    )
    def test_property_legacy_matches_gguf(self, t: GGMLType, x: np.ndarray) -> None:
        with np.errstate(all="ignore"):
            theirs = gguf_quants.quantize(x, _gguf_type(t))
        assert np.array_equal(_zero_sign_cleared(quantize(x, t), t), _zero_sign_cleared(theirs, t))


# ------------------------------------------------------------------------------------------------ numerics

#: RMS error of dequantize(quantize(x)) for standard-normal x (measured ~0.8 of these)
RMSE_BOUND = {
    T.Q4_0: 0.10,
    T.Q4_1: 0.09,
    T.Q5_0: 0.05,
    T.Q5_1: 0.045,
    T.Q8_0: 0.0065,
    T.Q8_1: 0.0065,
    T.Q2_K: 0.34,
    T.Q3_K: 0.175,
    T.Q4_K: 0.083,
    T.Q5_K: 0.042,
    T.Q6_K: 0.021,
    T.Q8_K: 0.0082,
}


def block_max_error_bound(t: GGMLType, x: np.ndarray) -> np.ndarray:
    """Worst-case |x - dequant| per 32-block for the legacy types (f16 scale rounding included)."""
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1)
    rng_ = b.max(axis=1) - b.min(axis=1)
    f16 = 2.0**-11  # relative rounding of an f16 scale
    bound = {
        T.Q4_0: amax / 8 + amax * f16,  # the clamp at +7 costs a full step on one side
        T.Q5_0: amax / 16 + amax * f16,
        T.Q4_1: rng_ / 30 + (rng_ + amax) * f16,
        T.Q5_1: rng_ / 62 + (rng_ + amax) * f16,
        T.Q8_0: amax / 254 + amax * f16,
        T.Q8_1: amax / 254 + amax * f16,
    }[t]
    return (bound + amax * 1e-6).repeat(32)  # + float32 rounding of the products


class TestNumerics:
    @pytest.mark.parametrize("t", QUANT_TYPES, ids=lambda t: t.name)
    def test_rmse_on_gaussian_rows(self, t: GGMLType) -> None:
        x = np.random.default_rng(1).standard_normal((32, 512)).astype(np.float32)
        err = dequantize(quantize(x, t), t) - x
        rmse = float(np.sqrt(np.mean(err.astype(np.float64) ** 2)))
        assert 0 < rmse < RMSE_BOUND[t]

    def test_more_bits_less_error(self) -> None:
        x = np.random.default_rng(2).standard_normal((16, 512)).astype(np.float32)

        def rmse(t: GGMLType) -> float:
            return float(np.sqrt(np.mean((dequantize(quantize(x, t), t) - x) ** 2)))

        ks = [rmse(t) for t in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K)]
        assert ks == sorted(ks, reverse=True)
        legacy = [rmse(t) for t in (T.Q4_0, T.Q5_0, T.Q8_0)]
        assert legacy == sorted(legacy, reverse=True)
        assert rmse(T.Q4_1) < rmse(T.Q4_0) and rmse(T.Q5_1) < rmse(T.Q5_0)

    @settings(max_examples=30, deadline=None, derandomize=True, database=None)
    @given(
        t=st.sampled_from(LEGACY),
        x=hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.just(64)), elements=st.floats(-1000, 1000, width=32)),
        scale=st.floats(0.01, 1.0),
    )
    def test_property_legacy_error_bound(self, t: GGMLType, x: np.ndarray, scale: float) -> None:
        x = (x * np.float32(scale)).astype(np.float32)
        x = np.where(np.abs(x) < 0.02, np.float32(0.0), x).astype(np.float32)  # keeps the f16 scales normal
        err = np.abs(dequantize(quantize(x, t), t) - x).reshape(-1)
        assert np.all(err <= block_max_error_bound(t, x))

    def test_q8_k_error_bound_and_bsums(self) -> None:
        x = np.random.default_rng(3).standard_normal((8, 1024)).astype(np.float32)
        q = quantize(x, T.Q8_K).reshape(-1, 292)
        blocks = x.reshape(-1, 256)
        amax = np.abs(blocks).max(axis=1, keepdims=True)
        err = np.abs(dequantize(q.reshape(8, -1), T.Q8_K).reshape(-1, 256) - blocks)
        assert np.all(err <= amax / 254 * (1 + 1e-5))
        qs = q[:, 4:260].view(np.int8).astype(np.int32)
        bsums = np.ascontiguousarray(q[:, 260:292]).view("<i2")
        assert np.array_equal(bsums, qs.reshape(-1, 16, 16).sum(axis=2))
        d = np.ascontiguousarray(q[:, 0:4]).view("<f4")[:, 0]
        np.testing.assert_allclose(np.abs(d), amax[:, 0] / 127, rtol=1e-6)

    @pytest.mark.parametrize("t", quantizable_types(), ids=lambda t: t.name)
    def test_zero_rows(self, t: GGMLType) -> None:
        q = quantize(np.zeros((2, 512), np.float32), t)
        assert not dequantize(q, t).any()
        blocks = q.reshape(-1, t.type_size)
        if t == T.Q4_0:  # d = max/-8 = -0.0 and every quant is the mid code 8 (as ggml writes it)
            assert np.all(blocks == np.array([0x00, 0x80] + [0x88] * 16, np.uint8))
        elif t == T.Q5_0:  # d = -0.0, every quant 16: low nibbles 0, all fifth bits set
            assert np.all(blocks == np.array([0x00, 0x80] + [0xFF] * 4 + [0] * 16, np.uint8))
        else:
            assert not q.any()

    @pytest.mark.parametrize("value", [0.5, 1.0, -2.5, 0.125])
    def test_constant_rows(self, value: float) -> None:
        x = np.full((1, 256), value, np.float32)
        for t in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q3_K, T.Q6_K, T.Q8_K):
            assert np.array_equal(dequantize(quantize(x, t), t), x), t.name
        for t in (T.Q8_0, T.Q2_K, T.Q4_K, T.Q5_K):
            assert not np.array_equal(dequantize(quantize(x, t), t), x), t.name
        if value == 0.5:  # the f16 scale 0.5/127 rounds down
            assert np.all(dequantize(quantize(x, T.Q8_0), T.Q8_0) == np.float32(0.49996948))

    def test_tiny_magnitudes_underflow_f16_scales(self) -> None:
        x = np.random.default_rng(4).uniform(-5e-8, 5e-8, (4, 256)).astype(np.float32)
        for t in QUANT_TYPES:
            d = dequantize(quantize(x, t), t)
            if t in (T.Q4_1, T.Q5_1):  # the f16 min rounds to the smallest subnormal
                assert set(np.unique(d).tolist()) <= {0.0, np.float32(-(2.0**-24))} and d.min() < 0, t.name
            elif t == T.Q8_K:  # float32 scale: still accurate
                assert np.max(np.abs(d - x)) < 1e-9
            else:
                assert not d.any(), t.name

    def test_nearest_int_and_roundf(self) -> None:
        v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 0.49999997, 3.7, -3.7, 4194303.0], np.float32)
        assert nearest_int(v).tolist() == [0, 2, 2, 0, -2, 0, 4, -4, 4194303]
        assert c_roundf(v).tolist() == [1, 2, 3, -1, -2, 0, 4, -4, 4194303]
        # outside ggml's asserted range the magic-number bit pattern is reproduced, not a rounded value
        assert nearest_int(np.array([2.0**24], np.float32)).tolist() == [0x200000]


# ------------------------------------------------------------------------------------------------ floats


class TestFloatTypes:
    def test_f32_roundtrip_keeps_bits(self) -> None:
        bits = np.array([0, 0x80000000, 0x7F800000, 0x7FC00001, 0x00000001, 0x3F800000], dtype=np.uint32)
        x = bits.view(np.float32)[None]
        q = quantize(x, "f32")
        assert q.shape == (1, 24) and np.array_equal(dequantize(q, "F32").view(np.uint32), bits[None])

    def test_f16_rounding(self) -> None:
        x = np.array([[1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, 65519.0, 65520.0, -1e6, 2.0**-25, np.nan]], np.float32)
        h = quantize(x, T.F16).view("<u2")[0]
        assert h.tolist()[:6] == [0x3C00, 0x3C02, 0x7BFF, 0x7C00, 0xFC00, 0x0000]  # ties to even, overflow → inf
        assert h[6] == 0x7E00
        with np.errstate(over="ignore"):
            expected = x[:, :6].astype(np.float16).astype(np.float32)
        assert np.array_equal(dequantize(quantize(x, T.F16), T.F16)[:, :6], expected)

    def test_bf16_rounding(self) -> None:
        bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7FC00001, 0xFF800001, 0x00000001], np.uint32)
        h = quantize(bits.view(np.float32)[None], T.BF16).view("<u2")[0]
        assert h.tolist() == [0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x7FC0, 0xFFC0, 0x0000]
        back = dequantize(h.view(np.uint8)[None], T.BF16)[0]
        assert np.array_equal(back.view(np.uint32), h.astype(np.uint32) << 16)


# ------------------------------------------------------------------------------------------------ API


class TestAPI:
    def test_shapes_and_type_spellings(self) -> None:
        x = np.random.default_rng(5).standard_normal((2, 3, 512)).astype(np.float32)
        q = quantize(x, "q4_k")
        assert q.shape == (2, 3, 2 * 144) and q.dtype == np.uint8
        assert np.array_equal(q, quantize(x, T.Q4_K)) and np.array_equal(q, quantize(x, 12))
        d = dequantize(q, "Q4_K")
        assert d.shape == x.shape and d.dtype == np.float32
        assert np.array_equal(q.reshape(6, -1), quantize(x.reshape(6, 512), T.Q4_K))

    def test_rows_are_independent(self) -> None:
        x = np.random.default_rng(6).standard_normal((3, 512)).astype(np.float32)
        for t in (T.Q4_0, T.Q3_K, T.Q5_K):
            whole = quantize(x, t)
            for i in range(3):
                assert np.array_equal(whole[i], quantize(x[i], t))

    def test_chunk_boundaries(self) -> None:
        x = np.random.default_rng(7).standard_normal((2, 256 * 700)).astype(np.float32)  # 1400 super-blocks
        for t in (T.Q8_0, T.Q6_K):
            whole = quantize(x, t)
            assert np.array_equal(whole, np.stack([quantize(r, t) for r in x]))
            assert np.array_equal(dequantize(whole, t), np.stack([dequantize(r, t) for r in whole]))

    def test_other_float_inputs_are_converted_to_f32(self) -> None:
        x64 = np.random.default_rng(8).standard_normal((2, 64))
        assert np.array_equal(quantize(x64, T.Q8_0), quantize(x64.astype(np.float32), T.Q8_0))
        x16 = x64.astype(np.float16)
        assert np.array_equal(quantize(x16, T.Q4_1), quantize(x16.astype(np.float32), T.Q4_1))
        assert np.array_equal(quantize(x64.tolist(), T.Q5_0), quantize(x64.astype(np.float32), T.Q5_0))

    def test_empty(self) -> None:
        assert quantize(np.zeros((0, 256), np.float32), T.Q6_K).shape == (0, 210)
        assert dequantize(np.zeros((4, 0), np.uint8), T.Q6_K).shape == (4, 0)

    def test_into_helpers(self) -> None:
        x = np.random.default_rng(9).standard_normal((4, 256)).astype(np.float32)
        out = np.empty((4, 110), np.uint8)
        assert quantize_rows_into(x, T.Q3_K, out) is out
        assert np.array_equal(out, quantize(x, T.Q3_K))
        back = np.empty((4, 256), np.float32)
        assert np.array_equal(dequantize_rows_into(out, T.Q3_K, back), dequantize(out, T.Q3_K))
        with pytest.raises(ValueError, match=r"Q3_K.*shape \(4, 110\)"):
            quantize_rows_into(x, T.Q3_K, np.empty((4, 111), np.uint8))
        with pytest.raises(ValueError, match="Q3_K"):
            dequantize_rows_into(out, T.Q3_K, np.empty((4, 255), np.float32))

    def test_can_quantize_and_dequantize(self) -> None:
        for t in [*QUANT_TYPES, T.F32, T.F16, T.BF16, T.IQ4_NL]:
            assert can_quantize(t) and can_dequantize(t), t.name
        for t in (T.IQ4_XS, T.MXFP4, T.NVFP4, T.TQ1_0, T.TQ2_0, T.Q1_0):
            assert can_dequantize(t) and not can_quantize(t), t.name
        assert not can_quantize("iq2_xxs") and not can_dequantize("IQ2_XXS")
        assert not can_quantize(T.I32)
        with pytest.raises(ValueError, match="q9_9"):
            can_quantize("q9_9")

    def test_errors_name_the_type_and_the_problem(self) -> None:
        x = np.zeros((2, 100), np.float32)
        with pytest.raises(ValueError, match=r"unknown ggml type 'q9_k'"):
            quantize(np.zeros((1, 256), np.float32), "q9_k")
        with pytest.raises(ValueError, match=r"Q4_K.*\(100\).*block size \(256\)"):
            quantize(x, "q4_k")
        with pytest.raises(ValueError, match=r"Q8_0.*\(100\).*block size \(32\)"):
            quantize(x, T.Q8_0)
        with pytest.raises(TypeError, match=r"Q4_0.*floating-point.*int32"):
            quantize(np.zeros((1, 32), np.int32), T.Q4_0)
        with pytest.raises(ValueError, match=r"cannot quantize to IQ2_XXS"):
            quantize(np.zeros((1, 256), np.float32), T.IQ2_XXS)
        with pytest.raises(ValueError, match=r"scalar"):
            quantize(np.float32(1.0), T.F16)
        with pytest.raises(ValueError, match=r"Q6_K.*\(200 bytes\).*210"):
            dequantize(np.zeros((1, 200), np.uint8), T.Q6_K)
        with pytest.raises(TypeError, match=r"Q6_K.*uint8.*float32"):
            dequantize(np.zeros((1, 210), np.float32), T.Q6_K)
        with pytest.raises(ValueError, match=r"cannot dequantize IQ1_S"):
            dequantize(np.zeros((1, 50), np.uint8), T.IQ1_S)
