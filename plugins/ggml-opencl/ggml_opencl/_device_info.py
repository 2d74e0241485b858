"""What the plugin needs to know about one OpenCL device, and the kernel shapes chosen from it.

Tile and work-group sizes come from the device's properties, never from a hard-wired device name: CPU-type
devices (PoCL, Intel's CPU runtime) get one work-item per matrix tile with vectors as wide as the device's native
float vector and a single work-item per reduction row (their compilers vectorise across work-items); GPUs get
small per-item tiles and wide work-groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceInfo", "device_info"]


@dataclass(frozen=True)
class DeviceInfo:
    """Properties of one OpenCL device and the kernel shapes chosen for it."""

    #: position among all devices of all platforms (what GGML_OPENCL_DEVICES indices refer to)
    index: int
    platform_index: int
    platform: str
    name: str
    #: "GPU", "CPU", "ACCELERATOR" or "CUSTOM"
    cl_type: str
    version: str
    global_mem: int
    max_alloc: int
    max_work_group: int
    local_mem: int
    compute_units: int
    host_unified: bool
    #: the device has cl_khr_fp16 (half arithmetic); the kernels only ever need half *storage*
    fp16: bool
    fp64: bool
    #: the device honours -cl-fp32-correctly-rounded-divide-sqrt
    exact_div: bool
    #: native float vector width (4 on SSE, 8 on AVX2, 16 on AVX-512 CPUs)
    vector_width: int
    #: MUL_MAT tile: TM weights rows (one vector) x TN activation rows per work-item
    gemm_tm: int
    gemm_tn: int
    #: work-group of the GEMM kernel (1, 1 on CPU-type devices)
    gemm_ls: tuple[int, int]
    #: work-group size of elementwise kernels, of row reductions, of the matrix-vector kernel
    ew_ls: int
    row_ls: int
    mv_ls: int

    @property
    def description(self) -> str:
        """``platform: device``, as ``ggml-core devices`` shows it."""
        return f"{self.platform}: {self.name}"

    @property
    def device_id(self) -> str:
        """``opencl:<platform>:<device>``, stable while the set of platforms does not change."""
        return f"opencl:{self.platform_index}:{self.index}"

    @property
    def is_cpu(self) -> bool:
        """A CPU-type OpenCL device (PoCL's pthread device, Intel's CPU runtime)."""
        return self.cl_type == "CPU"

    def build_options(self) -> list[str]:
        """Compiler options: the kernel shapes as defines, exact division where the device offers it."""
        opts = [
            "-cl-std=CL1.2",
            f"-DGEMM_TM={self.gemm_tm}",
            f"-DGEMM_TN={self.gemm_tn}",
        ]
        if self.fp16:
            opts.append("-DGGML_CL_FP16=1")
        if self.exact_div:
            opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
        return opts

    def extra(self) -> dict[str, Any]:
        """Details for ``ggml-core devices --json``."""
        return {
            "platform": self.platform,
            "opencl_type": self.cl_type,
            "host_cpu": self.is_cpu,
            "opencl_version": self.version,
            "compute_units": self.compute_units,
            "max_alloc": self.max_alloc,
            "host_unified_memory": self.host_unified,
            "cl_khr_fp16": self.fp16,
            "fp16_path": "native half" if self.fp16 else "vload_half/vstore_half storage",
            "gemm_tile": f"{self.gemm_tn}x{self.gemm_tm}",
        }


def _pow2_at_most(n: int, cap: int) -> int:
    p = 1
    while p * 2 <= min(n, cap):
        p *= 2
    return p


def device_info(cl: Any, dev: Any, index: int, platform_index: int, platform_name: str) -> DeviceInfo:
    """Read a ``pyopencl.Device``'s properties and choose kernel shapes for it."""
    kind = int(dev.type)  # a bit field: PoCL reports "ALL | CPU"
    if kind & cl.device_type.GPU:
        cl_type = "GPU"
    elif kind & cl.device_type.CPU:
        cl_type = "CPU"
    elif kind & cl.device_type.ACCELERATOR:
        cl_type = "ACCELERATOR"
    else:
        cl_type = "CUSTOM"
    exts = set(dev.extensions.split())
    try:
        host_unified = bool(dev.host_unified_memory)
    except Exception:  # noqa: BLE001 - removed in OpenCL 2.0+ on some drivers
        host_unified = False
    try:
        exact_div = bool(dev.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
    except Exception:  # noqa: BLE001
        exact_div = False
    width = max(1, int(dev.native_vector_width_float or dev.preferred_vector_width_float or 4))
    max_wg = int(dev.max_work_group_size)
    if cl_type == "CPU":
        tm = 16 if width >= 16 else (8 if width >= 8 else 4)
        tn, gemm_ls, ew_ls, row_ls, mv_ls = 8, (1, 1), min(64, max_wg), 1, 1
    else:
        tm, tn = 4, 4
        side = _pow2_at_most(int(max_wg**0.5), 16)
        gemm_ls = (side, side)
        ew_ls = _pow2_at_most(max_wg, 256)
        row_ls = _pow2_at_most(max_wg, 256)
        mv_ls = _pow2_at_most(max_wg, 64)
    return DeviceInfo(
        index=index,
        platform_index=platform_index,
        platform=platform_name.strip(),
        name=dev.name.strip(),
        cl_type=cl_type,
        version=dev.version.strip(),
        global_mem=int(dev.global_mem_size),
        max_alloc=int(dev.max_mem_alloc_size),
        max_work_group=max_wg,
        local_mem=int(dev.local_mem_size),
        compute_units=int(dev.max_compute_units),
        host_unified=host_unified,
        fp16="cl_khr_fp16" in exts,
        fp64="cl_khr_fp64" in exts,
        exact_div=exact_div,
        vector_width=width,
        gemm_tm=tm,
        gemm_tn=tn,
        gemm_ls=gemm_ls,
        ew_ls=ew_ls,
        row_ls=row_ls,
        mv_ls=mv_ls,
    )
