"""Helpers shared by the WebGPU plugin's tests (a uniquely named module: pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
import tempfile

from ggml_core.testing.plugin_tests import devices_of
from ggml_webgpu import WebGPUDevice, webgpu_reg

# wgpu-native warns on stderr when XDG_RUNTIME_DIR is unset; a private temporary folder silences it
os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="ggml-webgpu-"))


def webgpu_devices() -> list[WebGPUDevice]:
    """Every WebGPU device the process-wide registry exposes."""
    return devices_of(WebGPUDevice)


def no_device_reason() -> str:
    """Why there is no WebGPU device here (for skip messages)."""
    return f"no WebGPU adapter: {webgpu_reg().unavailable_reason or 'none found'}"
