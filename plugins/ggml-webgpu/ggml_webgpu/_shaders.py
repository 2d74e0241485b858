"""WGSL sources: the shared bind group, generated operand accessors, and the kernel families in ``shaders/``.

Every kernel module is ``header + accessors + common.wgsl + quants.wgsl + <family>.wgsl``; one shader module per
family is compiled per device and one compute pipeline per entry point (see ``PipelineCache`` in plugin.py).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Final

from ggml_webgpu._f16 import native_source

__all__ = ["FAMILIES", "N_WORDS", "OP_WORD", "PARAM_BYTES", "SLOT_BINDINGS", "common_source", "family_source"]

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
