"""WGSL sources: the shared bind group, generated operand accessors, and the kernel families in ``shaders/``.

Every kernel module is ``header + accessors + common.wgsl + quants.wgsl + <family>.wgsl``; one shader module per
family is compiled per device and one compute pipeline per entry point (``PipelineCache``, below).
"""

from __future__ import annotations

import threading
from functools import cache
from importlib import resources
from typing import Any, Final

from ggml_webgpu._f16 import native_source

__all__ = [
    "FAMILIES",
    "N_WORDS",
    "OP_WORD",
    "PARAM_BYTES",
    "SLOT_BINDINGS",
    "PipelineCache",
    "common_source",
    "family_source",
]

#: u32 words of one dispatch's uniform parameters (6 tensor descriptors of 9 words, then the op's words)
N_WORDS: Final = 128
#: the first op word (after the descriptors of A, B, C, D, E, F; OP in common.wgsl)
OP_WORD: Final = 54
#: operand slots -> binding numbers (5 is the error word)
SLOT_BINDINGS: Final = (1, 2, 3, 4, 6, 7)
PARAM_BYTES: Final = 4 * N_WORDS
#: kernel families (file stem -> entry points)
FAMILIES: Final = {
    "elementwise": ("map", "binary", "glu", "binary_flat", "map_flat", "add_id"),
    "rows": ("norm", "soft_max", "sum_rows", "rank_sort", "argmax", "cumsum", "sum_all"),
    "attention": ("flash_attn",),
    "rope": ("rope",),
    "movement": ("cpy", "cpy_raw", "get_rows", "get_rows_q", "set_rows", "gather", "set_rows_q", "cpy_q", "cpy_dq"),
    "matmul": ("pack_b", "mul_mat", "pack_a", "sgemm", "mul_mat_id"),
    "recurrent": ("ssm_conv", "load", "ssm_scan", "gated_delta_net", "rwkv_wkv7"),
}

_HEADER: Final = f"""
struct Params {{ v: array<vec4<u32>, {N_WORDS // 4}> }};
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> A: array<u32>;
@group(0) @binding(2) var<storage, read_write> B: array<u32>;
@group(0) @binding(3) var<storage, read_write> C: array<u32>;
@group(0) @binding(4) var<storage, read_write> D: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> ERR: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read_write> E: array<u32>;
@group(0) @binding(7) var<storage, read_write> F: array<u32>;
"""

# byte-addressed reads of one operand binding (X is A, B or C); little-endian, any alignment where it matters
_ACCESSORS: Final = """
fn X_w(b: u32) -> u32 { return X[b >> 2u]; }
fn X_u8(b: u32) -> u32 { return (X[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }
fn X_u16(b: u32) -> u32 {
    if ((b & 1u) == 0u) { return (X[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }
    return X_u8(b) | (X_u8(b + 1u) << 8u);
}
fn X_u32(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    if (s == 0u) { return X[b >> 2u]; }
    return (X[b >> 2u] >> s) | (X[(b >> 2u) + 1u] << (32u - s));
}
fn X_f32(b: u32) -> f32 { return bitcast<f32>(X[b >> 2u]); }
fn X_f(b: u32, t: u32) -> f32 {
    switch t {
        case 0u: { return X_f32(b); }
        case 1u: { return f16_to_f32(X_u16(b)); }
        case 30u: { return bf16_to_f32(X_u16(b)); }
        case 26u: { return f32(bitcast<i32>(X[b >> 2u])); }
        case 25u: { return f32(bitcast<i32>(X_u16(b) << 16u) >> 16u); }
        case 24u: { return f32(bitcast<i32>(X_u8(b) << 24u) >> 24u); }
        default: { return 0.0; }
    }
}
// an index: i32, or i64 within the i32 range (-1, i.e. out of range, otherwise)
fn X_i(b: u32, t: u32) -> i32 {
    switch t {
        case 26u: { return bitcast<i32>(X[b >> 2u]); }
        case 27u: {
            let lo = bitcast<i32>(X[b >> 2u]);
            if (X[(b >> 2u) + 1u] == select(0u, 0xffffffffu, lo < 0)) { return lo; }
            return -1;
        }
        default: { return -1; }
    }
}
"""


def _read(name: str) -> str:
    return (resources.files("ggml_webgpu") / "shaders" / name).read_text(encoding="utf-8")


def common_source() -> str:
    """``common.wgsl`` (the f16/bf16 conversions and operand helpers every family includes)."""
    return _read("common.wgsl")


@cache
def family_source(family: str, native_f16: bool = False) -> str:
    """The complete WGSL module of one kernel family; with ``native_f16``, f16 loads by the hardware (``_f16``)."""
    if family not in FAMILIES:
        raise KeyError(f"no WGSL kernel family {family!r} (known: {', '.join(FAMILIES)})")
    accessors = "".join(_ACCESSORS.replace("X", x) for x in "ABCEF")
    common = native_source(common_source()) if native_f16 else common_source()
    return "\n".join([_HEADER, accessors, common, _read("quants.wgsl"), _read(f"{family}.wgsl")])


class PipelineCache:
    """Shader modules (one per kernel family) and compute pipelines (one per entry point) of one GPU device."""

    def __init__(self, gpu: Any, native_f16: bool = False) -> None:
        self._gpu = gpu
        #: f16 loads through shader-f16 (see ``_f16``) in every module compiled here
        self.native_f16 = native_f16
        self._lock = threading.Lock()
        self._modules: dict[str, Any] = {}
        self._pipelines: dict[str, Any] = {}
        import wgpu

        stage = wgpu.ShaderStage.COMPUTE
        entries = [{"binding": 0, "visibility": stage, "buffer": {"type": wgpu.BufferBindingType.uniform}}]
        entries += [
            {"binding": i, "visibility": stage, "buffer": {"type": wgpu.BufferBindingType.storage}} for i in range(1, 8)
        ]
        #: the one bind group layout of every kernel: P, A, B, C, D, ERR, E, F
        self.layout = gpu.create_bind_group_layout(entries=entries)
        self._pipeline_layout = gpu.create_pipeline_layout(bind_group_layouts=[self.layout])

    def get(self, name: str) -> Any:
        """The pipeline of ``family.entry``, compiled on first use (a failure raises with naga's message)."""
        pipe = self._pipelines.get(name)
        if pipe is not None:
            return pipe
        family, entry = name.split(".")
        with self._lock:
            if name in self._pipelines:
                return self._pipelines[name]
            module = self._modules.get(family)
            if module is None:
                try:
                    module = self._gpu.create_shader_module(code=family_source(family, self.native_f16), label=family)
                except Exception as exc:
                    raise RuntimeError(f"the WGSL kernels {family}.wgsl do not compile: {exc}") from exc
                self._modules[family] = module
            pipe = self._gpu.create_compute_pipeline(
                layout=self._pipeline_layout, compute={"module": module, "entry_point": entry}, label=name
            )
            self._pipelines[name] = pipe
            return pipe

    def compile_all(self) -> None:
        """Compile every kernel now (families otherwise compile on first use: 5-10 s for all on lavapipe)."""
        for family, entries in FAMILIES.items():
            for entry in entries:
                self.get(f"{family}.{entry}")

    def probe(self) -> None:
        """Build one small kernel on the shared layout: enumeration checks that the driver compiles WGSL at all."""
        code = (
            "@group(0) @binding(4) var<storage, read_write> D: array<atomic<u32>>;\n"
            "@compute @workgroup_size(64) fn main() { atomicStore(&D[0], 0u); }\n"
        )
        module = self._gpu.create_shader_module(code=code, label="probe")
        self._gpu.create_compute_pipeline(
            layout=self._pipeline_layout, compute={"module": module, "entry_point": "main"}, label="probe"
        )
