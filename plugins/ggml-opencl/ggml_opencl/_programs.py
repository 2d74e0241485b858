"""The kernel program of a device: every ``kernels/*.cl`` source in one program, built once per device with tile
sizes taken from the device's properties (:meth:`ggml_opencl._device_info.DeviceInfo.build_options`)."""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any, Final

from ggml_opencl._device_info import DeviceInfo
from ggml_opencl._notices import announced_if_slow
from ggml_opencl._opencl import cl

__all__ = ["KERNEL_FILES", "ProgramCache", "kernel_source"]

#: kernel sources, concatenated in this order into one program per device
KERNEL_FILES: Final = (
    "common.cl",
    "quants.cl",
    "elementwise.cl",
    "norm.cl",
    "attention.cl",
    "movement.cl",
    "matmul.cl",
    "layout.cl",
    "reduce.cl",
    "conv.cl",
    "recurrent.cl",
)


def kernel_source() -> str:
    """All kernel sources of the package, concatenated."""
    folder = resources.files("ggml_opencl") / "kernels"
    return "\n".join(f"// ---- {name}\n" + (folder / name).read_text(encoding="utf-8") for name in KERNEL_FILES)


class ProgramCache:
    """Built programs, one per (context, device, options); building is the slow part (PoCL also caches on disk)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[tuple[int, int, str], Any] = {}

    def get(self, context: Any, cl_device: Any, info: DeviceInfo, label: str = "") -> Any:
        """The program for this device, built on first use; a failure raises with the compiler's log. A build that
        takes more than a couple of seconds (not cached by the driver) says so on stderr while it runs."""
        opts = info.build_options()
        key = (context.int_ptr, cl_device.int_ptr, " ".join(opts))
        with self._lock:
            prog = self._built.get(key)
            if prog is None:
                note = f"ggml-opencl: building the OpenCL kernels for {label or info.description} (once: the driver "
                note += "caches them)"
                try:
                    with announced_if_slow(note):
                        prog = cl.Program(context, kernel_source()).build(options=opts, devices=[cl_device])
                except cl.Error as exc:
                    raise RuntimeError(f"{info.description}: the OpenCL kernels do not build: {exc}") from exc
                self._built[key] = prog
            return prog
