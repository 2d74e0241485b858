"""ROPE variants the conformance cases do not reach: multi-section modes (MROPE, IMROPE, VISION), the channel
offset of rope_set_offset, and large positions; against the CPU plugin."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLType, ops
from ggml_core.testing import Built, Case, Check, Status, run_case
from ggml_opencl import OpenCLDevice

T = GGMLType
NORMAL, NEOX, MROPE, VISION, IMROPE = 0, 2, 8, 24, 40


def _positions(n: int, far: bool) -> object:
    def init(rng: np.random.Generator, t: g.Tensor) -> np.ndarray:
        hi = 30000 if far else 64
        return rng.integers(0, hi, size=t.ne[0]).astype(np.int32).reshape(1, 1, 1, -1)

    return init


def _case(
    mode: int,
    ne: tuple[int, int, int, int],
    n_dims: int,
    *,
    type: GGMLType = T.F32,
    sections: tuple[int, int, int, int] = (0, 0, 0, 0),
    n_offs: int = 0,
    ext: float = 0.0,
    far: bool = False,
) -> Case:
    per_token = 4 if mode & MROPE else 1

    def build(ctx: g.Context) -> Built:
        a = ctx.new_tensor(type, list(ne), "a")
        pos = ctx.new_tensor(T.I32, [ne[2] * per_token], "pos")
        fs = 0.25 if ext else 1.0
        if mode & MROPE:
            out = ops.rope_multi(a, pos, None, n_dims, sections, mode, 4096, 10000.0, fs, ext, 1.0, 32.0, 1.0)
        else:
            out = ops.rope_ext(a, pos, None, n_dims, mode, 4096, 10000.0, fs, ext, 1.0, 32.0, 1.0)
        if n_offs:
            out = ops.rope_set_offset(out, n_offs)
        return Built(out, [a, pos], {pos: _positions(pos.ne[0], far)})

    params = {
        "type": type,
        "ne": list(ne),
        "n_dims": n_dims,
        "mode": mode,
        "sections": list(sections),
        "n_offs": n_offs,
        "ef": ext,
        "far": far,
    }
    return Case("ROPE", params, build, None, Check.nmse(1e-7))


CASES = [
    _case(NORMAL, (64, 3, 5, 1), 32, n_offs=16),
    _case(NEOX, (64, 3, 5, 1), 32, n_offs=32),
    _case(NEOX, (64, 3, 5, 1), 16, n_offs=8, type=T.F16),
    _case(MROPE, (64, 3, 5, 1), 64, sections=(12, 10, 10, 0)),
    _case(MROPE, (64, 3, 5, 1), 48, sections=(8, 8, 4, 4), ext=1.0),
    _case(IMROPE, (64, 3, 5, 1), 64, sections=(11, 11, 10, 0)),
    _case(IMROPE, (64, 3, 5, 1), 64, sections=(11, 11, 10, 0), type=T.F16),
    _case(VISION, (64, 3, 5, 1), 32, sections=(8, 8, 0, 0)),
    _case(NORMAL, (128, 2, 6, 1), 128, far=True),
    _case(NEOX, (128, 2, 6, 1), 128, ext=1.0, far=True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rope_variants_match_the_cpu(case: Case, ocl: OpenCLDevice, cpu: g.Device) -> None:
    result = run_case(case, ocl, reference=cpu)
    assert result.status == Status.OK, f"{case.name}: {result.status.value} {result.message}"
