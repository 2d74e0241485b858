"""f16 loads through the hardware's conversion (``unpack2x16float``) where it gives the integer path's values.

Every kernel reads f16 storage through ``f16_to_f32`` (``common.wgsl``), which decodes the bits with integer
arithmetic (a dozen operations and two branches per value). WGSL's ``unpack2x16float`` does the same conversion in
one instruction and needs no feature. The route through ``shader-f16`` types, ``f32(bitcast<vec2<f16>>(word).x)``,
does not compile with the naga of wgpu-native 0.32 (it types the bitcast as f32: "invalid field accessor"), and
f16 *arithmetic* would not keep ggml's numerics (ggml's CPU computes in f32 on f16-rounded values), so neither is
used. Only loads change: stores keep the integer round-to-nearest-even (WGSL leaves the rounding of f32 -> f16
conversions to the implementation).

WGSL lets an implementation flush f16 subnormals, so the hardware conversion is used only after a probe at device
opening converts all 65,536 f16 bit patterns both ways and finds the same f32 bits for every non-NaN value and a
NaN for every NaN (a signalling NaN's payload may come back quieted, as with x86's F16C conversion, which ggml's
CPU uses). Otherwise the integer path stays. ``props()`` says which is in use; ``GGML_WEBGPU_F16=0`` keeps the
integer path.
"""

from __future__ import annotations

import re
from typing import Any, Final

import numpy as np

__all__ = ["NATIVE_F16_TO_F32", "native_source", "probe_native_f16"]

#: the native load: the low 16 bits as an f16, widened (exact for every f16 where subnormals are kept)
NATIVE_F16_TO_F32: Final = "fn f16_to_f32(h: u32) -> f32 { return unpack2x16float(h & 0xffffu).x; }\n"
_INTEGER_DEF: Final = re.compile(r"fn f16_to_f32\(h: u32\) -> f32 \{.*?\n\}\n", re.S)


def native_source(module: str) -> str:
    """``module`` (a complete kernel family, or common.wgsl) with the native f16 load."""
    out, n = _INTEGER_DEF.subn(NATIVE_F16_TO_F32, module)
    if n != 1:
        raise ValueError("the WGSL source has no (or several) integer f16_to_f32 to replace")
    return out


def _probe_source(common: str) -> str:
    integer = _INTEGER_DEF.search(common)
    assert integer is not None
    return (
        integer.group(0).replace("fn f16_to_f32", "fn f16_int")
        + NATIVE_F16_TO_F32.replace("fn f16_to_f32", "fn f16_native")
        + "@group(0) @binding(0) var<storage, read_write> OUT: array<u32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let h = gid.x + gid.y * 65535u * 64u;\n"
        "    if (h >= 65536u) { return; }\n"
        "    OUT[h] = bitcast<u32>(f16_native(h));\n"
        "    OUT[65536u + h] = bitcast<u32>(f16_int(h));\n"
        "}\n"
    )


def probe_native_f16(gpu: Any, common: str) -> tuple[bool, str]:
    """(use the native loads, why) for the opened device ``gpu``."""
    import wgpu

    try:
        module = gpu.create_shader_module(code=_probe_source(common), label="f16 probe")
        pipe = gpu.create_compute_pipeline(
            layout=wgpu.AutoLayoutMode.auto, compute={"module": module, "entry_point": "main"}
        )
        out = gpu.create_buffer(size=2 * 65536 * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
        group = gpu.create_bind_group(
            layout=pipe.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": out}}]
        )
        enc = gpu.create_command_encoder()
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pipe)
        cpass.set_bind_group(0, group)
        cpass.dispatch_workgroups(65536 // 64)
        cpass.end()
        gpu.queue.submit([enc.finish()])
        words = np.frombuffer(gpu.queue.read_buffer(out), dtype=np.uint32)
        out.destroy()
    except Exception as exc:  # noqa: BLE001 - a driver that cannot run the probe keeps the integer path
        return False, f"integer (the unpack2x16float probe failed: {type(exc).__name__}: {exc})"
    native, integer = words[:65536], words[65536:]
    nan = np.isnan(integer.view(np.float32))
    same = np.array_equal(native[~nan], integer[~nan]) and bool(np.isnan(native[nan].view(np.float32)).all())
    if not same:
        bad = int(np.flatnonzero((native != integer) & ~nan)[0]) if (native != integer)[~nan].any() else -1
        return False, f"integer (unpack2x16float differs from the integer decoding, e.g. at f16 bits {bad:#06x})"
    return True, "unpack2x16float (all 65,536 f16 values probed equal to the integer decoding)"
