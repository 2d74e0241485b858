"""The host packs every kernel's arguments exactly as nvcc lays out that kernel's parameters.

Graphs covering every binder path are planned on the fake driver; each launch's argument codes (pointer, int,
long long, float, TDesc) are compared with the parameter list nvcc writes into the kernel's PTX entry (sizes
and alignments). A mismatch would make a kernel read garbage on a GPU. Also: every kernel declared in the
sources is launched by some path (no dead kernels) and every launched kernel exists. Needs nvcc, not a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from cuda_helpers import alloc_and_plan, kernel_sources, ptx_param_layouts
from fake_driver import FakeDriver, fake_compiler, fake_info, kernel_names

import ggml_core as g
from ggml_core import ops
from ggml_cuda._device import CUDABackend, CUDADevice
from ggml_cuda.ops import ARG_LAYOUT, Launch
from ggml_cuda.ops.matmul import MMVQ_TYPES

Build = Callable[[g.Context], list[g.Tensor]]


def _graphs() -> dict[str, Build]:
    def t2(c: g.Context, ty: str, n0: int, n1: int) -> g.Tensor:
        return c.new_tensor_2d(ty, n0, n1)

    def mm(wt: str, n: int, k: int = 256, bt: str = "f32") -> Build:
        return lambda c: [ops.mul_mat(t2(c, wt, k, 16), t2(c, bt, k, n))]

    def attention(c: g.Context) -> list[g.Tensor]:
        x = c.new_tensor_3d("f32", 32, 4, 6)
        pos = c.new_tensor_1d("i32", 6)
        mask = t2(c, "f16", 32, 8)
        sinks = c.new_tensor_1d("f32", 6)
        sm = ops.soft_max_add_sinks(ops.soft_max_ext(c.new_tensor_3d("f32", 32, 4, 6), mask, 0.5), sinks)
        q = c.new_tensor_4d("f32", 64, 3, 4, 1)
        k = c.new_tensor_4d("f16", 64, 32, 2, 1)
        v = c.new_tensor_4d("f32", 64, 32, 2, 1)
        fa = ops.flash_attn_ext(q, k, v, t2(c, "f16", 32, 4), 0.125, 1.0, 20.0)
        return [sm, ops.rope(x, pos, 16, 2), fa]

    def copies(c: g.Context) -> list[g.Tensor]:
        f = t2(c, "f32", 64, 4)
        q = t2(c, "q5_1", 64, 4)
        return [
            ops.cast(f, "bf16"),
            ops.cont(ops.transpose(f)),
            ops.cast(f, "q4_1"),
            ops.cast(q, "f16"),
            ops.cpy(q, t2(c, "q5_1", 128, 2)),
        ]

    def rows(c: g.Context) -> list[g.Tensor]:
        idx = c.new_tensor_1d("i32", 3)
        dst_f, dst_q = t2(c, "f16", 64, 8), t2(c, "q8_0", 64, 8)
        return [
            ops.get_rows(t2(c, "q3_K", 256, 8), idx),
            ops.set_rows(dst_f, t2(c, "f32", 64, 3), idx),
            ops.set_rows(dst_q, t2(c, "f32", 64, 3), c.new_tensor_1d("i64", 3)),
        ]

    def elementwise(c: g.Context) -> list[g.Tensor]:
        a = t2(c, "f32", 64, 4)
        return [
            ops.add(a, t2(c, "f32", 64, 1)),
            ops.silu(a),
            ops.swiglu(a),
            ops.geglu(a, t2(c, "f32", 64, 4)),
            ops.diag_mask_inf(t2(c, "f32", 8, 8), 2),
            ops.leaky_relu(a, 0.1),
        ]

    def norms(c: g.Context) -> list[g.Tensor]:
        a = c.new_tensor_3d("f32", 16, 4, 6)
        return [ops.norm(a, 1e-5), ops.l2_norm(a, 1e-6), ops.group_norm(a, 4, 1e-5)]

    def recurrent(c: g.Context) -> list[g.Tensor]:
        f = "f32"
        seqs = c.new_tensor_1d("i32", 2)
        scan = ops.ssm_scan(
            c.new_tensor_4d(f, 16, 8, 4, 2),
            c.new_tensor_4d(f, 8, 4, 3, 2),
            c.new_tensor_3d(f, 4, 3, 2),
            t2(c, f, 1, 4),
            c.new_tensor_4d(f, 16, 2, 3, 2),
            c.new_tensor_4d(f, 16, 2, 3, 2),
            seqs,
            2,
        )
        qk = [c.new_tensor_4d(f, 16, 2, 3, 1) for _ in range(2)]
        gdn = ops.gated_delta_net(
            *qk,
            c.new_tensor_4d(f, 16, 2, 3, 2),
            c.new_tensor_4d(f, 1, 2, 3, 2),
            c.new_tensor_4d(f, 1, 2, 3, 2),
            c.new_tensor_4d(f, 16, 16, 2, 2),
        )
        wkv = ops.rwkv_wkv7(*(c.new_tensor_3d(f, 16, 2, 4) for _ in range(6)), t2(c, f, 16 * 16 * 2, 2))
        return [ops.ssm_conv(c.new_tensor_3d(f, 6, 8, 2), t2(c, f, 4, 8)), scan, gdn, wkv]

    def mul_mat_id(wt: str) -> Build:
        return lambda c: [
            ops.mul_mat_id(c.new_tensor_3d(wt, 256, 16, 4), c.new_tensor_3d("f32", 256, 2, 3), t2(c, "i32", 2, 3))
        ]

    return {
        "mul_mat_id_f32": mul_mat_id("f32"),
        "mul_mat_id_q8_0": mul_mat_id("q8_0"),
        "elementwise": elementwise,
        "norms": norms,
        "recurrent": recurrent,
        "attention": attention,
        "copies": copies,
        "rows": rows,
        "mv_f16": mm("f16", 1),
        "mv_bf16": mm("bf16", 3),
        **{f"mv_{t.name.lower()}": mm(t.name.lower(), 2) for t in MMVQ_TYPES},
        "gemm_f32": mm("f32", 20, bt="f16"),
        "wmma_f16": mm("f16", 20),
        "wmma_bf16": mm("bf16", 20),
        "wmma_quant": mm("q4_K", 20),
    }


@pytest.fixture(scope="module")
def launches() -> dict[str, list[Launch]]:
    """Every launch of every covering graph, planned on fake sm_90 and sm_75 devices."""
    out: dict[str, list[Launch]] = {}
    for cc in ((9, 0), (7, 5)):
        drv = FakeDriver(infos=[fake_info(0, cc)])
        dev = CUDADevice(drv, drv.infos[0], 0, fake_compiler())
        be = dev.init_backend()
        assert isinstance(be, CUDABackend)
        for name, build in _graphs().items():
            ctx = g.Context(name)
            _, steps = alloc_and_plan(be, ctx, build(ctx), fill=False)
            out.setdefault(name, []).extend(s.launch for s in steps)
        be.free()
    return out


def test_packed_arguments_match_the_ptx_parameter_lists(
    launches: dict[str, list[Launch]], ptx: dict[tuple[str, str], str]
) -> None:
    layouts: dict[str, list[tuple[int, int]]] = {}
    for (_module, arch), text in ptx.items():
        if arch == "sm_90":
            layouts.update(ptx_param_layouts(text))
    checked = set()
    for graph, lns in launches.items():
        for ln in lns:
            expected = layouts.get(ln.kernel)
            assert expected is not None, f"{ln.kernel} ({graph}) is not in the PTX of kernels/{ln.module}.cu"
            host = [ARG_LAYOUT[c] for c in ln.codes]
            assert host == expected, f"{ln.kernel} ({graph}): host packs {ln.codes} = {host}, PTX expects {expected}"
            checked.add(ln.kernel)
    declared = {k for src in kernel_sources().values() for k in _names(src)}
    assert declared - checked == set(), f"kernels no test path launches: {sorted(declared - checked)}"


def _names(source: str) -> set[str]:
    return kernel_names(source)


def test_every_launch_resolves_to_a_kernel_of_its_module(launches: dict[str, list[Launch]]) -> None:
    sources = kernel_sources()
    for lns in launches.values():
        for ln in lns:
            assert ln.kernel in _names(sources[ln.module]), (ln.module, ln.kernel)
