"""The kernels with a GPU's shapes (4×4 GEMM tiles in 8×8 work-groups, work-group reductions over rows and
matrix-vector chunks), run on whatever OpenCL device is here: the code paths a real GPU takes are checked even
on PoCL, whose own shapes use one work-item per row. Compared with the CPU plugin like the conformance suite."""

from __future__ import annotations

import dataclasses

import pytest

import ggml_core as g
from ggml_core.testing import Case, Status, run_case, select
from ggml_opencl import OpenCLDevice, OpenCLReg

OPS = "MUL_MAT,MUL_MAT_ID,SOFT_MAX,RMS_NORM,NORM,L2_NORM,GROUP_NORM,SUM,SUM_ROWS,MEAN,ADD,GELU,FLASH_ATTN_EXT,ROPE"


@pytest.fixture(scope="module")
def gpu_shaped(ocl: OpenCLDevice) -> OpenCLDevice:
    """A second handle on the device (its own registry and context) with a GPU's kernel shapes."""
    dev = OpenCLReg(environ={"GGML_OPENCL_DEVICES": str(ocl.info.index)}).devices[0]
    assert isinstance(dev, OpenCLDevice)
    dev.info = dataclasses.replace(dev.info, gemm_tm=4, gemm_tn=4, gemm_ls=(8, 8), ew_ls=128, row_ls=64, mv_ls=32)
    assert dev.info.build_options() != ocl.info.build_options()  # another program: other tile defines
    return dev


@pytest.mark.parametrize("case", select(ops=OPS), ids=lambda c: c.name)
def test_gpu_shapes(case: Case, gpu_shaped: OpenCLDevice, cpu: g.Device) -> None:
    result = run_case(case, gpu_shaped, reference=cpu)
    if result.status in (Status.NOT_SUPPORTED, Status.SKIPPED):
        pytest.skip(result.message)
    assert result.status == Status.OK, result.message


def test_gpu_shaped_large_gemm(gpu_shaped: OpenCLDevice, cpu: g.Device) -> None:
    """A product large enough for several 8×8 work-groups of 4×4 tiles, with partial tiles at the edges."""
    cases = [c for c in select(ops="MUL_MAT") if "m=33" in c.name or "m=67" in c.name]
    assert cases
    for c in cases:
        r = run_case(c, gpu_shaped, reference=cpu)
        assert r.status == Status.OK, f"{c.name}: {r.message}"
