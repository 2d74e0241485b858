"""The repacked-weight route of quantized prompt products (``quant/repack.py``) against float64 references.

The reference is written from ggml's definition: the weights dequantized by ``ggml_core.quants.dequantize`` and the
activations quantized to the weight type's dot type (``quant.from_float``, ggml's x86 ``from_float``) and
dequantized, multiplied in float64. The route sums each sub-block's integer products exactly and accumulates the
scaled sub-block sums in float32, so it may differ from the reference by float rounding only; the bound used here,
``(sub-blocks + 4) · 2⁻²³ · 64 · Σ|w·x|`` per output, is far below what any wrong quant, scale or offset gives
(an error of the order of ``Σ|w·x|`` itself). Results must not depend on the thread count (bit for bit), nor on
VNNI (``GGML_CPU_VNNI=0``: the portable integer sums), and the numpy path (``GGML_CPU_NUMBA=0``) must agree within
the bound.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

import numpy as np
import pytest
from kernel_harness import rng

from ggml_core import GGMLType
from ggml_core.quants import dequantize, quantize
from ggml_cpu import quant
from ggml_cpu.quant import _packed_split, repack

TYPES = [GGMLType.Q4_0, GGMLType.Q5_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K]
#: (weight rows M, activation rows N, K in units of the type's block): M not a multiple of 16, N across 8 / 4 / 1
SHAPES = [(37, 13, 3), (16, 8, 1), (5, 1, 2), (64, 21, 2), (17, 4, 1)]


def _case(t: GGMLType, m: int, n: int, blocks: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    k = blocks * t.block_size
    w = quantize((rng(seed).standard_normal((m, k)) * 0.3).astype(np.float32), t)
    x = (rng(seed + 1).standard_normal((n, k)) * 2).astype(np.float32)
    x[0, : t.block_size] = 0.0  # a zero activation block (d = 0)
    if n > 1:
        x[-1, -32:] = 50.0  # a constant block: every quant at +127
    return np.ascontiguousarray(w.reshape(m, -1)), x


def _reference(w: np.ndarray, t: GGMLType, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float64 product of ggml's operands, the per-output bound on float rounding)."""
    dot = quant.DOT_TYPE[t]
    wf = dequantize(w, t).reshape(w.shape[0], -1).astype(np.float64)
    xf = dequantize(quant.from_float(x, dot), dot).reshape(x.shape).astype(np.float64)
    n_sub = x.shape[1] // 16
    bound = (n_sub + 4) * 2.0**-23 * 64 * (np.abs(xf) @ np.abs(wf).T) + 1e-30
    return xf @ wf.T, bound


def _ready(t: GGMLType) -> None:
    if not repack.packed_ready(t):
        pytest.skip(f"no repacked kernels here (numba and 512-bit VNNI or AVX2 needed): {quant.disabled_reason()}")


def _packed(w: np.ndarray, t: GGMLType, x: np.ndarray, threads: int) -> np.ndarray:
    p = repack.pack(w, t)
    assert p is not None
    out = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    _packed_split.packed_product(p, quant.quantize_activations(x, quant.DOT_TYPE[t]), out, threads)
    return out


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize(("m", "n", "blocks"), SHAPES)
def test_packed_route_matches_the_float64_definition(t: GGMLType, m: int, n: int, blocks: int) -> None:
    _ready(t)
    w, x = _case(t, m, n, blocks)
    ref, bound = _reference(w, t, x)
    out = _packed(w, t, x, 1)
    err = np.abs(out - ref)
    assert (err <= bound).all(), f"{t.name}: error {err.max():.3g} above the bound {bound[err > bound].min():.3g}"


#: byte ranges of each type's block holding its quants (set to all ones: every quant at its largest value, Q8_0's
#: at −128 with 0x80), so the integer sums are as large as the type allows
_QUANT_BYTES: Final = {
    GGMLType.Q4_0: (2, 18, 0xFF), GGMLType.Q5_0: (2, 22, 0xFF), GGMLType.Q8_0: (2, 34, 0x80),
    GGMLType.Q4_K: (16, 144, 0xFF), GGMLType.Q5_K: (16, 176, 0xFF), GGMLType.Q6_K: (0, 192, 0xFF),
}  # fmt: skip


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_the_largest_quants_do_not_overflow(t: GGMLType) -> None:
    """Every quant at its extreme against activations at ±127: the partial sums that AVX2's lane tiles keep in int16
    (``vpmaddubsw`` pairs summed over up to 8 steps) are at their largest, and must still be exact."""
    _ready(t)
    w, x = _case(t, 32, 4, 2, seed=3)
    blocks = w.reshape(w.shape[0], -1, t.type_size)
    lo, hi, value = _QUANT_BYTES[t]
    blocks[:, :, lo:hi] = value
    x[0], x[1] = 50.0, -50.0  # all quants +127, all −127
    x[2, 0::2], x[2, 1::2] = 50.0, -50.0
    ref, bound = _reference(w, t, x)
    out = _packed(w, t, x, 1)
    err = np.abs(out - ref)
    assert (err <= bound).all(), f"{t.name}: error {err.max():.3g} above the bound {bound[err > bound].min():.3g}"


def test_a_wrong_quant_is_outside_the_bound() -> None:
    """The bound is tight enough to catch one flipped quant (the test above can fail)."""
    t = GGMLType.Q4_0
    _ready(t)
    w, x = _case(t, 16, 8, 2)
    ref, bound = _reference(w, t, x)
    bad = w.copy()
    bad[3, 5] ^= 0x0F  # one byte of row 3's quants: two weights change
    out = _packed(bad, t, x, 1)
    assert (np.abs(out[:, 3] - ref[:, 3]) > bound[:, 3]).any()


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_threads_give_the_same_bits(t: GGMLType) -> None:
    _ready(t)
    w, x = _case(t, 70, 19, 2, seed=3)
    one, two = _packed(w, t, x, 1), _packed(w, t, x, 2)
    np.testing.assert_array_equal(one.view(np.uint32), two.view(np.uint32))


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_qmatmul_takes_the_packed_route_above_the_block_limit(t: GGMLType) -> None:
    """``qmatmul`` (auto) above ``vec_rows_limit`` gives the packed route's bits, within the bound of the reference."""
    _ready(t)
    n = quant.vec_rows_limit(t) + 5
    w, x = _case(t, 33, n, 2, seed=4)
    out = np.empty((n, 33), np.float32)
    quant.qmatmul(w, t, x, out)
    np.testing.assert_array_equal(out.view(np.uint32), _packed(w, t, x, 1).view(np.uint32))
    ref, bound = _reference(w, t, x)
    assert (np.abs(out - ref) <= bound).all()


def test_weights_written_in_place_are_repacked() -> None:
    t = GGMLType.Q4_K
    _ready(t)
    w, x = _case(t, 32, 12, 1, seed=5)
    out = np.empty((12, 32), np.float32)
    quant.qmatmul(w, t, x, out)
    w[:] = _case(t, 32, 12, 1, seed=9)[0]  # same memory, new weights
    quant.qmatmul(w, t, x, out)
    ref, bound = _reference(w, t, x)
    assert (np.abs(out - ref) <= bound).all()


def test_a_non_finite_scale_leaves_the_product_to_the_tiles() -> None:
    t = GGMLType.Q8_0
    n = quant.vec_rows_limit(t) + 4  # a batch past the block kernels: repacked weights, else the tiles
    w, x = _case(t, 20, n, 2, seed=6)
    w[2, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # row 2, block 0: d = inf
    assert repack.pack(w, t) is None
    auto, tile = np.empty((n, 20), np.float32), np.empty((n, 20), np.float32)
    with np.errstate(invalid="ignore"):  # inf · 0 in the zero activation block
        quant.qmatmul(w, t, x, auto)
        quant.qmatmul(w, t, x, tile, route="tile")
    np.testing.assert_array_equal(auto.view(np.uint32), tile.view(np.uint32))


def test_pack_rejects_a_type_without_a_layout() -> None:
    with pytest.raises(ValueError, match="Q4_1"):
        repack.pack(np.zeros((1, 20), np.uint8), GGMLType.Q4_1)


_SUBPROCESS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import test_repacked_products as tr
from ggml_cpu import quant
from ggml_cpu.quant import _packed_split, repack
mode = sys.argv[2]
for t in tr.TYPES:
    for shape in tr.SHAPES:
        w, x = tr._case(t, *shape)
        ref, bound = tr._reference(w, t, x)
        if mode == "numpy":  # the numpy path through qmatmul (no compiled kernels at all)
            assert quant.disabled_reason() is not None
            out = np.empty((x.shape[0], w.shape[0]), np.float32)
            quant.qmatmul(w, t, x, out)
        else:  # AVX2's pair sums (no-vnni) or the portable ones (generic-cpu), the lane tiles called directly
            out = tr._packed(w, t, x, 1)
        assert (np.abs(out - ref) <= bound).all(), (t.name, shape)
        np.save(f"{sys.argv[3]}/{t.name}-{shape[0]}-{shape[1]}-{shape[2]}.npy", out)
print("ok")
"""


_SETTINGS: Final = {
    "numpy": {"GGML_CPU_NUMBA": "0"},
    "no-vnni": {"GGML_CPU_VNNI": "0"},
    "generic-cpu": {"NUMBA_CPU_NAME": "generic"},
}


@pytest.mark.parametrize("mode", list(_SETTINGS))
def test_other_paths_agree(mode: str, tmp_path: Path) -> None:
    """``GGML_CPU_NUMBA=0`` (numpy) within the bound of the reference and of the packed route; ``GGML_CPU_VNNI=0``
    (AVX2's ``vpmaddubsw`` lane tiles where the CPU has AVX2) and ``NUMBA_CPU_NAME=generic`` (the integer sums in
    plain vector IR, any x86-64) the packed route's exact bits."""
    if mode != "numpy" and quant.disabled_reason() is not None:
        pytest.skip(f"compiled kernels are off: {quant.disabled_reason()}")
    env = {**os.environ, **_SETTINGS[mode]}
    here = str(Path(__file__).parent)
    cmd = [sys.executable, "-c", _SUBPROCESS, here, mode, str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]
    for t in TYPES:
        if not repack.packed_ready(t):
            continue
        for shape in SHAPES:
            w, x = _case(t, *shape)
            theirs = np.load(tmp_path / f"{t.name}-{shape[0]}-{shape[1]}-{shape[2]}.npy")
            ours = _packed(w, t, x, 1)
            if mode != "numpy":
                np.testing.assert_array_equal(theirs.view(np.uint32), ours.view(np.uint32))
            else:
                _, bound = _reference(w, t, x)
                assert (np.abs(theirs - ours) <= 2 * bound).all(), t.name


def test_weights_mapped_read_only_are_repacked_once_per_mapping(tmp_path: Path) -> None:
    """Weights viewed from a read-only file mapping (the model loader's) keep their repack without a copy while the
    map is open; a new mapping at the same address (a new model) is repacked, never served the old one's."""
    import mmap

    t = GGMLType.Q4_0
    _ready(t)
    x = _case(t, 48, 12, 2, seed=7)[1]
    for seed in (7, 8):  # two files, mapped in turn
        w_data = _case(t, 48, 12, 2, seed=seed)[0]
        path = tmp_path / f"w{seed}.bin"
        path.write_bytes(w_data.tobytes())
        with path.open("rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        w = np.frombuffer(mm, np.uint8).reshape(w_data.shape)
        out = np.empty((12, 48), np.float32)
        quant.qmatmul(w, t, x, out)
        key = (int(w.__array_interface__["data"][0]), w.shape, t)
        assert repack._cache[key][1] is None  # no copy kept: the map cannot change
        ref, bound = _reference(w_data, t, x)
        assert (np.abs(out - ref) <= bound).all()
        quant.qmatmul(w, t, x, out)  # the cached repack
        assert (np.abs(out - ref) <= bound).all()
        del w
        mm.close()


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
def test_the_size_estimate_is_the_repacks_size(t: GGMLType) -> None:
    """The cache decides before repacking whether a matrix fits, from ``_packed_bytes``: it must be exact."""
    w = _case(t, 37, 1, 3)[0]
    p = repack.pack(w, t)
    assert p is not None and repack._packed_bytes(w, t) == p.nbytes


def test_a_full_cache_keeps_what_it_has_and_leaves_the_rest_to_the_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the cache's limit nothing is evicted (cycling repacks through a full cache would repack every matrix on
    every batch): the first matrix stays repacked, the second takes the tile route, both right."""
    t = GGMLType.Q8_0
    _ready(t)
    a, x = _case(t, 32, 12, 2, seed=11)
    b = _case(t, 32, 12, 2, seed=12)[0]
    one = repack._packed_bytes(a, t) + a.nbytes  # a writable matrix: its repack plus the copy checked on each use
    monkeypatch.setattr(repack, "_cache", type(repack._cache)())
    monkeypatch.setattr(repack, "_cache_bytes", [0])
    monkeypatch.setattr(repack, "CACHE_BYTES", one + one // 2)
    assert repack.packed(a, t) is not None
    assert repack.packed(b, t) is None  # does not fit
    assert len(repack._cache) == 1 and repack.packed(a, t) is not None  # a kept, not evicted
    for w in (a, b):
        out, tile = np.empty((12, 32), np.float32), np.empty((12, 32), np.float32)
        quant.qmatmul(w, t, x, out)
        quant.qmatmul(w, t, x, tile, route="tile")
        ref, bound = _reference(w, t, x)
        assert (np.abs(out - ref) <= bound).all() and (np.abs(tile - ref) <= bound).all()
    assert repack._cache_bytes[0] == one


def test_short_products_load_no_repack_kernel() -> None:
    """A decode step or a short prompt (the first token of a model) neither loads the repacked route's kernels nor
    changes the route limit; the first batch above the limit loads them (fresh process: nothing loaded before)."""
    code = (
        "import numpy as np\n"
        "from ggml_core import GGMLType\n"
        "from ggml_core.quants import quantize\n"
        "from ggml_cpu import quant\n"
        "from ggml_cpu.jit import _jit\n"
        "from ggml_cpu.quant import repack\n"
        "t = GGMLType.Q4_0\n"
        "w = np.ascontiguousarray(quantize(np.ones((32, 64), np.float32), t).reshape(32, -1))\n"
        "lim = quant.vec_rows_limit(t)\n"
        "for n in (1, 3, lim):\n"
        "    quant.qmatmul(w, t, np.ones((n, 64), np.float32), np.empty((n, 32), np.float32))\n"
        "loaded = lambda: sorted(k for k in _jit._compiled if k.startswith('repack.'))\n"
        "print(repack.packed_supported(t), lim, loaded())\n"
        "quant.qmatmul(w, t, np.ones((lim + 1, 64), np.float32), np.empty((lim + 1, 32), np.float32))\n"
        "print(loaded())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, after = proc.stdout.strip().splitlines()[-2:]
    if not first.startswith("True"):
        pytest.skip(f"no repacked route here (numba and 512-bit VNNI or AVX2 needed): {first}")
    assert first == "True 8 []", first
    assert "repack._lanes_32" in after, after
