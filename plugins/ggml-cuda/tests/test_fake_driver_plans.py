"""Graph plans against the fake driver: which kernels each op launches, geometry, packed arguments, scratch
memory, plan caching, compile-once-per-architecture, and the errors a plan raises. No kernel runs here: results
of the kernels are checked on a GPU (test_gpu_device.py, test_conformance.py).
"""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from cuda_helpers import alloc_and_plan, kernel_sources
from fake_driver import FakeDriver

import ggml_core as g
from ggml_core import GGMLOp, GGMLType, GluOp, UnaryOp, ops
from ggml_cuda._compile import KERNEL_DIR
from ggml_cuda._device import CUDABackend, CUDADevice
from ggml_cuda.ops import KERNELS, STATUS, Args, Launch, Scratch, pack_args
from ggml_cuda.ops._launch import rows_grid
from ggml_cuda.ops.elementwise import GLU_CODES, MATH_CODES, UNARY_CODES
from ggml_cuda.ops.matmul import K_QUANTS, MMVQ_TYPES, matmul_path, mvq_vec_width


def _kernels(steps: list) -> list[str]:  # type: ignore[type-arg]
    return [s.launch.kernel for s in steps]


def _defines(prefix: str, source: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(rf"#define {prefix}(\w+) (\d+)", source)}


# ------------------------------------------------------------------------------------------------ argument packing


def test_pack_args_follows_c_layout() -> None:
    args = Args().ptr(0x1000).i32(7).desc((1, 2, 3, 4), (4, 8, 16, 32)).f32(1.5).i64(-3).ptr(Scratch(256)).ptr(STATUS)
    packed = pack_args("".join(args.codes), args.values, scratch_base=0x9000, status_ptr=0x7000)
    # P(8) i(4) pad(4) T(64) f(4) pad(4) q(8) P(8) P(8)
    assert len(packed) == 8 + 4 + 4 + 64 + 4 + 4 + 8 + 8 + 8
    assert struct.unpack_from("<Q", packed, 0)[0] == 0x1000
    assert struct.unpack_from("<i", packed, 8)[0] == 7
    assert struct.unpack_from("<8q", packed, 16) == (1, 2, 3, 4, 4, 8, 16, 32)
    assert struct.unpack_from("<f", packed, 80)[0] == 1.5
    assert struct.unpack_from("<q", packed, 88)[0] == -3
    assert struct.unpack_from("<QQ", packed, 96) == (0x9100, 0x7000)


def test_int_arguments_that_overflow_are_refused() -> None:
    with pytest.raises(OverflowError):
        Args().i32(2**31)


def test_launch_geometry_is_checked() -> None:
    with pytest.raises(ValueError, match="invalid launch geometry"):
        Launch.of("m", "k", (1,), (2048,), Args())
    with pytest.raises(ValueError, match="exceeds"):
        Launch.of("m", "k", (1, 70000), (32,), Args())
    grid, block = rows_grid(4096, 10**6)
    assert grid == (16, 65535, 1) and block == (256, 1, 1)  # rows beyond 65535 are walked grid-stride
    assert rows_grid(10, 3) == ((1, 3, 1), (32, 1, 1))


# ------------------------------------------------------------------------------------------------ codes vs .cu


def test_op_and_type_codes_match_the_kernel_sources() -> None:
    src = kernel_sources()
    unary = _defines("U_", src["elementwise"])
    for op, code in UNARY_CODES.items():
        assert unary[op.name] == code, op
    for op, code in MATH_CODES.items():
        assert unary[op.name] == code, op
    glu = _defines("G_", src["elementwise"])
    assert {GluOp[k]: v for k, v in glu.items()} == GLU_CODES
    binary = _defines("B_", src["elementwise"])
    assert all(GGMLOp[k] == v for k, v in binary.items())
    types = _defines("GT_", (KERNEL_DIR / "common.cuh").read_text())
    assert types and all(GGMLType[k] == v for k, v in types.items())


# ------------------------------------------------------------------------------------------------ elementwise


def test_binary_launch_pointers_descriptors_and_codes(backend: CUDABackend) -> None:
    ctx = g.Context()
    a = ctx.new_tensor_2d("f32", 64, 3, "a")
    b = ctx.new_tensor_2d("f16", 64, 1, "b")
    out = ops.sub(a, b)
    graph, steps = alloc_and_plan(backend, ctx, out)
    assert _kernels(steps) == ["k_binary"]
    ln = steps[0].launch
    assert ln.module == "elementwise" and ln.codes == "PPPTTTiiii"
    pa, pb, pd = (t.buffer.ptr + t.data_offset for t in (a, b, out))  # type: ignore[union-attr]
    assert ln.values[:3] == (pa, pb, pd)
    assert ln.values[3] == (*a.ne, *a.nb) and ln.values[4] == (*b.ne, *b.nb)
    assert ln.values[6:] == (0, 1, 0, int(GGMLOp.SUB))
    assert (ln.grid, ln.block) == ((1, 3, 1), (64, 1, 1))
    backend.graph_compute(graph)
    assert backend.cuda_device.driver.launches[-1].kernel == "k_binary"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("build", "kernel", "code"),
    [
        (lambda x: ops.gelu(x), "k_unary", UNARY_CODES[UnaryOp.GELU]),
        (lambda x: ops.scale(x, 0.5), "k_unary", MATH_CODES[GGMLOp.SCALE]),
        (lambda x: ops.sqr(x), "k_unary", MATH_CODES[GGMLOp.SQR]),
        (lambda x: ops.clamp(x, -1.0, 1.0), "k_unary", MATH_CODES[GGMLOp.CLAMP]),
    ],
)
def test_unary_family(backend: CUDABackend, build, kernel: str, code: int) -> None:  # type: ignore[no-untyped-def]
    ctx = g.Context()
    x = ctx.new_tensor_2d("f32", 32, 5, "x")
    _, steps = alloc_and_plan(backend, ctx, build(x))
    assert _kernels(steps) == [kernel]
    assert steps[0].launch.values[6] == code


def test_scale_and_clamp_parameters_reach_the_kernel(backend: CUDABackend) -> None:
    ctx = g.Context()
    x = ctx.new_tensor_1d("f32", 32, "x")
    _, steps = alloc_and_plan(backend, ctx, [ops.scale_bias(x, 2.0, 0.25)])
    assert steps[0].launch.values[7:9] == (2.0, 0.25)


def test_glu_fused_swapped_passes_the_halves(backend: CUDABackend) -> None:
    ctx = g.Context()
    a = ctx.new_tensor_2d("f32", 64, 4, "a")
    out = ops.swiglu(a, swapped=True)
    _, steps = alloc_and_plan(backend, ctx, out)
    ln = steps[0].launch
    base = a.buffer.ptr + a.data_offset  # type: ignore[union-attr]
    assert ln.kernel == "k_glu" and ln.values[0] == base + 32 * 4 and ln.values[1] == base  # swapped: x is the 2nd half
    assert ln.values[3] == (32, 4, 1, 1, *a.nb)


# ------------------------------------------------------------------------------------------------ MUL_MAT


@pytest.mark.parametrize(
    ("wtype", "n", "cc", "path"),
    [
        (GGMLType.F16, 1, (9, 0), "mv"),
        (GGMLType.F32, 8, (9, 0), "mv"),
        (GGMLType.Q4_0, 1, (9, 0), "mv_q"),
        (GGMLType.Q4_K, 8, (9, 0), "mv_q"),
        (GGMLType.F32, 9, (9, 0), "gemm_f32"),
        (GGMLType.F16, 512, (9, 0), "wmma"),
        (GGMLType.BF16, 64, (8, 0), "wmma"),
        (GGMLType.BF16, 64, (7, 5), "gemm_f32"),
        (GGMLType.Q8_0, 64, (7, 5), "wmma"),
    ],
)
def test_matmul_path_selection(wtype: GGMLType, n: int, cc: tuple[int, int], path: str) -> None:
    assert matmul_path(wtype, n, cc) == path


def _mul_mat_plan(backend: CUDABackend, wtype: str, m: int, n: int, k: int, btype: str = "f32") -> list:  # type: ignore[type-arg]
    ctx = g.Context()
    w = ctx.new_tensor_2d(wtype, k, m, "w")
    x = ctx.new_tensor_2d(btype, k, n, "x")
    _, steps = alloc_and_plan(backend, ctx, ops.mul_mat(w, x))
    return steps


def test_f16_matvec_uses_wide_loads_when_aligned(backend: CUDABackend) -> None:
    steps = _mul_mat_plan(backend, "f16", 48, 1, 256)
    ln = steps[0].launch
    assert _kernels(steps) == ["k_mv_float"] and ln.values[-3:] == (1, 1, 1)  # ncols, vec, n_used
    assert ln.values[3:5] == (0, 0)  # no ids, no status word: plain MUL_MAT never reads the status back
    assert ln.grid == (12, 1, 1) and ln.block == (128, 1, 1)
    odd = _mul_mat_plan(backend, "f16", 48, 3, 36)  # K % 8 != 0: scalar path
    assert odd[0].launch.values[-3:] == (3, 0, 1)


@pytest.mark.parametrize("wtype", sorted(MMVQ_TYPES, key=int))
def test_quantized_matvec_quantizes_activations_then_dots(backend: CUDABackend, wtype: GGMLType) -> None:
    m, n, k = 40, 2, 512
    steps = _mul_mat_plan(backend, wtype.name.lower(), m, n, k)
    assert _kernels(steps) == ["k_quantize_act", f"k_mv_{wtype.name.lower()}"]
    quant, mv = steps[0].launch, steps[1].launch
    act_qk = 256 if wtype in K_QUANTS else 32
    assert quant.values[6] == act_qk  # mode: ggml's Q8_K for K-quants, Q8_0/Q8_1 otherwise
    n_blocks = n * k // act_qk
    assert quant.values[7] == n_blocks and quant.grid == (-(-n_blocks // 8), 1, 1)
    qx, dx, sx = quant.values[1:4]
    assert isinstance(qx, Scratch) and isinstance(dx, Scratch) and isinstance(sx, Scratch)
    assert qx.offset == 0 and dx.offset >= n * k and sx.offset >= dx.offset + n_blocks * 4  # no overlap
    assert mv.values[1:4] == (qx, dx, sx) and mv.grid == (10, 1, 1)
    # the packed arguments point into the backend's scratch memory
    base = int(backend._scratch)
    assert struct.unpack_from("<QQQ", steps[1].args, 8) == (base + qx.offset, base + dx.offset, base + sx.offset)


def test_mvq_vec_width_follows_alignment() -> None:
    ctx = g.Context()
    w = ctx.new_tensor_2d("q4_0", 256, 8, "w")  # rows of 144 bytes, chunks of 576
    assert mvq_vec_width(w, 0x1000) == 16
    assert mvq_vec_width(w, 0x1008) == 8
    v = ctx.new_view(w, (256, 4), (18, 146, 146 * 4, 146 * 4), 0)  # padded rows of 146 bytes
    assert mvq_vec_width(v, 0x1000) == 2
    q6 = ctx.new_tensor_2d("q6_K", 512, 4, "q6")  # rows 420 bytes, chunks 840
    assert mvq_vec_width(q6, 0x1000) == 4


def test_batched_f16_converts_activations_and_uses_tensor_cores(backend: CUDABackend) -> None:
    steps = _mul_mat_plan(backend, "f16", 130, 20, 64)
    assert _kernels(steps) == ["k_convert_rows", "k_gemm_wmma_f16"]
    conv, gemm = steps[0].launch, steps[1].launch
    assert conv.values[-1] == int(GGMLType.F16)
    assert gemm.grid == (1, 2, 1) and gemm.block == (256, 1, 1)
    assert gemm.values[4] == (64, 20, 1, 1, 2, 128, 2560, 2560)  # packed f16 activations
    assert gemm.values[-1] == 1  # aligned: cp.async 16-byte copies


def test_batched_quantized_dequantizes_weights(backend: CUDABackend) -> None:
    steps = _mul_mat_plan(backend, "q8_0", 64, 16, 64)
    assert _kernels(steps) == ["k_dequant_rows", "k_convert_rows", "k_gemm_wmma_f16"]


def test_batched_f32_needs_no_conversion(backend: CUDABackend) -> None:
    steps = _mul_mat_plan(backend, "f32", 64, 16, 64)
    assert _kernels(steps) == ["k_gemm_f32"]
    assert steps[0].launch.grid == (1, 1, 1)
    assert _kernels(_mul_mat_plan(backend, "f32", 64, 16, 64, btype="f16")) == ["k_convert_rows", "k_gemm_f32"]


def test_bf16_before_ampere_is_widened_to_f32(driver: FakeDriver) -> None:
    from fake_driver import fake_compiler, fake_info

    info = fake_info(0, (7, 5))
    dev = CUDADevice(driver, info, 0, fake_compiler())
    be = dev.init_backend()
    assert isinstance(be, CUDABackend)
    assert _kernels(_mul_mat_plan(be, "bf16", 64, 16, 64)) == ["k_convert_rows", "k_gemm_f32"]
    be.free()


def test_broadcast_batches_reach_the_grid(backend: CUDABackend) -> None:
    ctx = g.Context()
    w = ctx.new_tensor_3d("f16", 64, 32, 2, "w")
    x = ctx.new_tensor_4d("f32", 64, 1, 6, 3, "x")
    _, steps = alloc_and_plan(backend, ctx, ops.mul_mat(w, x))
    assert steps[0].launch.grid == (8, 18, 1)


# ------------------------------------------------------------------------------------------------ other families


def test_norm_softmax_rope_flash_attn_launches(backend: CUDABackend) -> None:
    ctx = g.Context()
    x = ctx.new_tensor_3d("f32", 64, 4, 6, "x")
    pos = ctx.new_tensor_1d("i32", 6, "pos")
    mask = ctx.new_tensor_2d("f16", 64, 8, "mask")
    n = ops.rms_norm(x, 1e-5)
    sm = ops.soft_max_ext(x, mask, 0.125, 8.0)
    r = ops.rope_ext(x, pos, None, 32, 2, 4096, 10000.0, 0.5, 1.0, 1.0, 32.0, 1.0)
    q = ctx.new_tensor_4d("f32", 64, 5, 4, 1, "q")
    k = ctx.new_tensor_4d("f16", 64, 64, 2, 1, "k")
    v = ctx.new_tensor_4d("f16", 64, 64, 2, 1, "v")
    fa = ops.flash_attn_ext(q, k, v, mask, 0.125)
    _, steps = alloc_and_plan(backend, ctx, [n, sm, r, fa])
    by = {s.launch.kernel: s.launch for s in steps}
    assert set(by) == {"k_norm_rows", "k_soft_max", "k_rope", "k_flash_attn"}
    assert by["k_norm_rows"].grid == (24, 1, 1)
    sm_l = by["k_soft_max"]
    assert sm_l.values[7:10] == (int(GGMLType.F16), 1, 0) and sm_l.values[11] == 8.0
    assert sm_l.values[-1] == 4  # n_head_log2
    rope_l = by["k_rope"]
    assert rope_l.values[7:11] == (32, 0, 1, 0)  # n_dims, n_offs, neox, no freq factors
    assert by["k_flash_attn"].grid == (5, 4, 1)


def test_copies_choose_their_kernel(backend: CUDABackend) -> None:
    ctx = g.Context()
    f = ctx.new_tensor_2d("f32", 64, 4, "f")
    q = ctx.new_tensor_2d("q4_0", 64, 4, "q")
    cases = {
        "k_cpy_convert": ops.cast(f, "f16"),
        "k_cpy_elements": ops.cont(ops.transpose(f)),
        "k_cpy_quantize": ops.cast(f, "q8_0"),
        "k_cpy_dequant": ops.cast(q, "f32"),
        "k_cpy_block_bytes": ops.cpy(q, ctx.new_tensor_2d("q4_0", 128, 2, "q2")),
    }
    _, steps = alloc_and_plan(backend, ctx, list(cases.values()))
    assert sorted(_kernels(steps)) == sorted(cases)


def test_rows_ops_use_the_status_word(backend: CUDABackend, driver: FakeDriver) -> None:
    ctx = g.Context()
    table = ctx.new_tensor_2d("q4_K", 256, 10, "table")
    idx = ctx.new_tensor_1d("i32", 3, "idx")
    rows = ops.get_rows(table, idx)
    graph, steps = alloc_and_plan(backend, ctx, rows)
    assert steps[0].uses_status and steps[0].launch.values[-1] is STATUS
    status = int(backend._status)
    assert struct.unpack_from("<Q", steps[0].args, len(steps[0].args) - 8)[0] == status
    backend.graph_compute(graph)  # no error reported by the (fake) kernel
    backend.graph_compute_async(graph)
    driver.view(status, 4)[:] = [1, 0, 0, 0]  # what k_get_rows does on a bad index
    with pytest.raises(g.ComputeError, match="row index was outside its tensor"):
        backend.synchronize()
    assert driver.view(status, 4).tolist() == [0, 0, 0, 0]
    backend.synchronize()  # reported once


# ------------------------------------------------------------------------------------------------ plans and programs


def test_plans_are_cached_and_modules_compiled_once(
    backend: CUDABackend, driver: FakeDriver, compile_log: list[tuple[str, str]]
) -> None:
    ctx = g.Context()
    x = ctx.new_tensor_2d("f32", 64, 8, "x")
    out = ops.add(ops.silu(x), x)
    graph, steps = alloc_and_plan(backend, ctx, out)
    assert backend.plan(graph) is steps
    backend.graph_compute(graph)
    backend.graph_compute(graph)
    assert [k for k, _ in compile_log] == ["elementwise"]
    assert compile_log[0][1] == "sm_90"
    assert len(driver.launches) == 4
    x.set_op_param_i32(0, 0)  # unchanged signature → same plan
    assert backend.plan(graph) is steps


def test_each_architecture_compiles_its_own_image(
    two_devices: tuple[FakeDriver, CUDADevice, CUDADevice], compile_log: list[tuple[str, str]]
) -> None:
    _, d0, d1 = two_devices
    for dev in (d0, d1):
        dev.programs.function("norm", "k_norm_rows")
        dev.programs.function("norm", "k_group_norm")
    assert compile_log == [("norm", "sm_90"), ("norm", "sm_80")]


def test_scratch_grows_after_synchronizing_and_drops_stale_plans(backend: CUDABackend, driver: FakeDriver) -> None:
    small = _mul_mat_plan(backend, "q4_0", 8, 1, 256)
    assert small and backend._scratch_size == 1 << 20
    first = int(backend._scratch)
    ctx = g.Context()
    w = ctx.new_tensor_2d("q8_0", 1024, 8, "w")
    x = ctx.new_tensor_2d("f32", 1024, 8, "x")
    before = len([c for c in driver.calls if c[0] == "stream_synchronize"])
    alloc_and_plan(backend, ctx, ops.mul_mat(w, x))
    assert backend._scratch_size == 1 << 20  # 8 KiB of quants still fit
    big_ctx = g.Context()
    wb = big_ctx.new_tensor_2d("q8_0", 4096, 8, "w")
    xb = big_ctx.new_tensor_2d("f32", 4096, 512, "x")
    alloc_and_plan(backend, big_ctx, ops.mul_mat(wb, xb))
    assert backend._scratch_size >= 4096 * 512 * 2 and int(backend._scratch) != first
    assert ("free", 0, first) in driver.calls
    assert len([c for c in driver.calls if c[0] == "stream_synchronize"]) > before


def test_unsupported_node_is_a_compute_error_naming_the_op(backend: CUDABackend) -> None:
    ctx = g.Context()
    node = ops.out_prod(ctx.new_tensor_2d("f32", 8, 4, "a"), ctx.new_tensor_2d("f32", 6, 4, "b"))
    assert not KERNELS.supports(node)
    graph = g.build_graph(node)
    g.alloc_ctx_tensors(ctx, backend)
    with pytest.raises(g.ComputeError, match="no kernel for OUT_PROD"):
        backend.graph_compute(graph)


@pytest.mark.parametrize("wtype", ["f16", "q4_K"])
def test_mul_mat_id_runs_one_matvec_per_expert_slot_and_token(backend: CUDABackend, wtype: str) -> None:
    ctx = g.Context()
    experts = ctx.new_tensor_3d(wtype, 256, 24, 4, "experts")
    b = ctx.new_tensor_3d("f32", 256, 1, 5, "b")
    ids = ctx.new_tensor_2d("i32", 2, 5, "ids")
    out = ops.mul_mat_id(experts, b, ids)
    _, steps = alloc_and_plan(backend, ctx, out)
    mv = steps[-1].launch
    assert mv.grid == (6, 10, 1)  # 24 rows / 4 per block; 2 expert slots x 5 tokens
    ids_ptr = ids.buffer.ptr + ids.data_offset  # type: ignore[union-attr]
    if wtype == "f16":
        assert _kernels(steps) == ["k_mv_float"] and mv.values[3] == ids_ptr and mv.values[4] is STATUS
    else:
        assert _kernels(steps) == ["k_quantize_act", "k_mv_q4_k"] and mv.values[5] == ids_ptr
        assert mv.values[6] is STATUS and steps[0].launch.values[7] == 5  # 5 activation rows of 256
    assert mv.values[-1] == 2 and steps[-1].uses_status


def test_operands_outside_device_memory_are_refused(backend: CUDABackend, cpu: g.Device) -> None:
    hctx = g.Context("h")
    x = hctx.new_tensor_1d("f32", 16, "host_x")
    g.alloc_ctx_tensors(hctx, cpu.buffer_type())
    y = ops.neg(x)  # created after the allocation: bound to device memory below
    buf = backend.alloc_buffer(64)
    buf.alloc_tensor(y, 0)
    with pytest.raises(g.ComputeError, match="lives in CPU memory"):
        backend.graph_compute(g.build_graph(y))


def test_abort_callback_stops_before_the_next_node(backend: CUDABackend, driver: FakeDriver) -> None:
    ctx = g.Context()
    x = ctx.new_tensor_1d("f32", 16, "x")
    graph, _ = alloc_and_plan(backend, ctx, ops.neg(ops.neg(x)))
    backend.abort_callback = lambda: True
    with pytest.raises(g.ComputeError, match="aborted"):
        backend.graph_compute(graph)
    assert not driver.launches


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda c: ops.mul_mat(c.new_tensor_2d("iq4_nl", 64, 4), c.new_tensor_2d("f32", 64, 2)), False),
        (lambda c: ops.mul_mat(c.new_tensor_2d("q5_1", 64, 4), c.new_tensor_2d("f16", 64, 2)), True),
        (lambda c: ops.soft_max(c.new_tensor_2d("f16", 64, 4)), False),
        (lambda c: ops.cast(c.new_tensor_2d("f32", 256, 2), "q4_K"), False),
        (lambda c: ops.cast(c.new_tensor_2d("f32", 256, 2), "q5_1"), True),
        (lambda c: ops.cast(c.new_tensor_2d("i32", 8, 2), "f32"), True),
        (lambda c: ops.cast(c.new_tensor_2d("f32", 8, 2), "i32"), True),
        (lambda c: ops.get_rows(c.new_tensor_2d("q6_K", 256, 4), c.new_tensor_1d("i32", 2)), True),
        (lambda c: ops.get_rows(c.new_tensor_2d("f32", 8, 4), c.new_tensor_1d("i32", 2)), True),
        (lambda c: ops.transpose(c.new_tensor_2d("f32", 8, 4)), True),
    ],
)
def test_supports_op_decisions(build, expected: bool) -> None:  # type: ignore[no-untyped-def]
    assert KERNELS.supports(build(g.Context())) is expected


def test_every_value_packs_to_bytes(backend: CUDABackend) -> None:
    steps = _mul_mat_plan(backend, "q4_K", 64, 3, 256)
    for s in steps:
        assert isinstance(s.args, bytes) and len(s.args) > 0
    assert np.frombuffer(steps[0].args, np.uint8).size == len(steps[0].args)
