"""The recurrent kernels' per-item code (kernels/recurrent.cuh), run on the host over every item by
tests/recurrent_harness.cu, against ggml-core's numpy references: SSM_CONV, SSM_SCAN (Mamba-1, Mamba-2 with grouped
B/C, x/B/C as strided views of one tensor, permuted state rows, snapshots), GATED_DELTA_NET (repeated value heads,
fewer q/k sequences, permuted q/k/v, per-row gates, snapshots) and RWKV_WKV7; a bad state row is reported.

It checks the arithmetic, the operand addressing through the descriptors and the result layout the GPU threads
write; not the launch geometry (one thread per item, grid-stride), which a GPU run checks. Needs nvcc; skips,
saying so, without it.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import build_host_program

from ggml_core.testing.reference import recurrent as ref


@pytest.fixture(scope="module")
def harness(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recurrent harness, built once per module with nvcc."""
    return build_host_program(nvcc, "recurrent_harness", tmp_path_factory.mktemp("recurrent_harness"))


def _operand(a: np.ndarray) -> bytes:
    """A 4-d f32/i32 array (numpy order, possibly a strided view of a contiguous base) as the harness reads it."""
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    offset = a.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    ne, nb = list(reversed(a.shape)), list(reversed(a.strides))
    return struct.pack("<10q", *ne, *nb, offset, base.nbytes) + base.tobytes()


def _run(
    harness: Path,
    op: str,
    n_items: int,
    operands: list[np.ndarray],
    out_ne: tuple[int, ...],
    k: int = 1,
    scale: float = 0.0,
) -> tuple[int, np.ndarray]:
    """(exit status, flat f32 result, contiguous with ggml shape ``out_ne``) of ``op`` over ``operands``."""
    ne = [*out_ne, 1, 1, 1][:4]
    nb = [4 * int(np.prod(ne[:d])) for d in range(4)]
    data = struct.pack("<q", len(operands)) + b"".join(_operand(a) for a in operands)
    data += struct.pack("<9q", *ne, *nb, 4 * int(np.prod(ne)))
    args = [str(harness), op, str(n_items), str(k), repr(scale)]
    res = subprocess.run(args, input=data, capture_output=True, timeout=120, check=False)
    assert res.returncode in (0, 3), res.stderr.decode()
    return res.returncode, np.frombuffer(res.stdout, np.float32)


def _f32(rng: np.random.Generator, shape: tuple[int, ...], lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    return rng.uniform(lo, hi, shape).astype(np.float32)


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.uniform(-1.0, 1.0, shape)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("d_conv", "d_inner", "n_t", "n_s"), [(4, 96, 5, 3), (3, 64, 1, 2)])
def test_ssm_conv(harness: Path, d_conv: int, d_inner: int, n_t: int, n_s: int) -> None:
    rng = np.random.default_rng(d_inner + n_t)
    sx = _f32(rng, (1, n_s, d_inner, d_conv - 1 + n_t))
    c = _f32(rng, (1, 1, d_inner, d_conv))
    want = ref.ssm_conv(sx, c).reshape(-1)
    status, got = _run(harness, "ssm_conv", want.size, [sx, c], (d_inner, n_t, n_s))
    assert status == 0
    _close(got, want)


@pytest.mark.parametrize(
    ("d_state", "head_dim", "n_head", "n_group", "n_t", "n_s", "k", "overlap"),
    [
        (16, 1, 32, 1, 6, 2, 1, False),  # Mamba-1: A per state
        (32, 8, 8, 2, 7, 3, 3, False),  # Mamba-2, grouped B/C, snapshots
        (16, 16, 4, 4, 5, 2, 1, True),  # x, B and C views of one xBC tensor
    ],
)
def test_ssm_scan(
    harness: Path, d_state: int, head_dim: int, n_head: int, n_group: int, n_t: int, n_s: int, k: int, overlap: bool
) -> None:
    rng = np.random.default_rng(d_state * n_t)
    s = _f32(rng, (n_s, n_head, head_dim, d_state))
    dt = _f32(rng, (1, n_s, n_t, n_head), -3.0, 1.0)
    a = _f32(rng, (1, 1, n_head, d_state if head_dim == 1 else 1), -1.0, -0.5)
    if overlap:  # rows of xBC: [x (head_dim per head) | B | C] per token, as a model's fused projection
        xbc = _f32(rng, (n_s, n_t, n_head * head_dim + 2 * n_group * d_state))
        x = xbc[..., : n_head * head_dim].reshape(n_s, n_t, n_head, head_dim)
        b = xbc[..., n_head * head_dim : n_head * head_dim + n_group * d_state].reshape(n_s, n_t, n_group, d_state)
        c = xbc[..., n_head * head_dim + n_group * d_state :].reshape(n_s, n_t, n_group, d_state)
        assert not x.flags.c_contiguous and x.base is not None
    else:
        x = _f32(rng, (n_s, n_t, n_head, head_dim))
        b, c = _f32(rng, (n_s, n_t, n_group, d_state)), _f32(rng, (n_s, n_t, n_group, d_state))
    ids = rng.permutation(n_s).astype(np.int32).reshape(1, 1, 1, n_s)
    want = ref.ssm_scan(s, x, dt, a, b, c, ids, k)
    status, got = _run(harness, "ssm_scan", head_dim * n_head * n_s, [s, x, dt, a, b, c, ids], (want.size,), k)
    assert status == 0
    _close(got, want)


def test_ssm_scan_bad_state_row_is_reported(harness: Path) -> None:
    rng = np.random.default_rng(5)
    s, x = _f32(rng, (2, 2, 4, 8)), _f32(rng, (2, 3, 2, 4))
    dt, a, bc = _f32(rng, (1, 2, 3, 2)), np.full((1, 1, 2, 1), -0.5, np.float32), _f32(rng, (2, 3, 1, 8))
    ids = np.array([1, 2], np.int32).reshape(1, 1, 1, 2)
    status, _ = _run(harness, "ssm_scan", 16, [s, x, dt, a, bc, bc, ids], (x.size + s.size,))
    assert status == 3


@pytest.mark.parametrize(
    ("heads", "size", "n_t", "n_s", "repeat", "n_s_k", "perm", "kda", "k"),
    [
        (4, 16, 12, 2, 1, 2, False, False, 1),
        (2, 32, 5, 2, 2, 1, False, False, 1),  # value heads repeat q/k heads; one q/k sequence for two
        (4, 16, 6, 1, 1, 1, True, False, 1),  # q, k, v with heads and tokens swapped in memory
        (2, 16, 4, 2, 1, 2, False, True, 1),  # a gate per key row (KDA)
        (2, 16, 6, 2, 1, 2, False, False, 3),  # snapshots
    ],
)
def test_gated_delta_net(
    harness: Path, heads: int, size: int, n_t: int, n_s: int, repeat: int, n_s_k: int, perm: bool, kda: bool, k: int
) -> None:
    rng = np.random.default_rng(heads * size + n_t)
    hv = heads * repeat

    def rows(n_seq: int, n_head: int, unit: bool) -> np.ndarray:
        shape = (n_seq, n_head, n_t, size) if perm else (n_seq, n_t, n_head, size)
        t = _unit(rng, shape) if unit else _f32(rng, shape, -0.3, 5.0)
        return t.transpose(0, 2, 1, 3) if perm else t

    q, kk, v = rows(n_s_k, heads, True), rows(n_s_k, heads, True), rows(n_s, hv, False)
    g = _f32(rng, (n_s, n_t, hv, size if kda else 1), -20.0, -1e-4)
    beta = _f32(rng, (n_s, n_t, hv, 1), 0.0, 1.0)
    state = _f32(rng, (n_s, hv, size, size))
    want = ref.gated_delta_net(q, kk, v, g, beta, state, k)
    scale = float(np.float32(1.0) / np.sqrt(np.float32(size)))
    status, got = _run(harness, "gated_delta_net", size * hv * n_s, [q, kk, v, g, beta, state], (want.size,), k, scale)
    assert status == 0
    _close(got, want)


@pytest.mark.parametrize(("heads", "size", "n_t", "n_s"), [(2, 64, 1, 4), (2, 32, 6, 2), (3, 16, 9, 1)])
def test_rwkv_wkv7(harness: Path, heads: int, size: int, n_t: int, n_s: int) -> None:
    rng = np.random.default_rng(heads * size + n_t)
    shape = (1, n_t * n_s, heads, size)
    r, k, v = _f32(rng, shape), _f32(rng, shape), _f32(rng, shape)
    w, a, b = _f32(rng, shape, 0.5, 1.0), _unit(rng, shape), _unit(rng, shape)
    state = _f32(rng, (1, 1, n_s, size * size * heads))
    want = ref.rwkv_wkv7(r, w, k, v, a, b, state)
    status, got = _run(harness, "rwkv_wkv7", size * heads * n_s, [r, w, k, v, a, b, state], (want.size,))
    assert status == 0
    _close(got, want)
