"""The fp16 storage path: vload_half/vstore_half conversions are exact, with or without cl_khr_fp16."""

from __future__ import annotations

import numpy as np

import ggml_core as g
from ggml_core import ops
from ggml_opencl import OpenCLDevice
from ggml_opencl._programs import kernel_source


def _special_f32() -> np.ndarray:
    rng = np.random.default_rng(3)
    edge = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65520.0,
            1e6,
            -1e6,
            np.inf,
            -np.inf,
            6.1e-5,
            5.96e-8,
            2.98e-8,
            1e-9,
            1.00048828125,
            1.000732421875,
            2049.0,
            2051.0,
            0.333333343,
        ],
        dtype=np.float32,
    )  # overflow to inf, subnormals, and ties that round to even
    return np.concatenate([edge, rng.standard_normal(1005).astype(np.float32) * 100]).astype(np.float32)


def _copy(backend: g.Backend, dev: OpenCLDevice, src_type: str, dst_type: str, values: np.ndarray) -> np.ndarray:
    ctx = g.Context("c")
    a = ctx.new_tensor_1d(src_type, values.size, "a")
    out = ops.cast(a, dst_type)
    graph = g.build_graph(out)
    buf = g.alloc_ctx_tensors(ctx, dev.buffer_type())
    a.set_bytes(values.tobytes())
    backend.graph_compute(graph)
    raw = out.get_bytes()
    buf.free()
    return np.frombuffer(raw, dtype={"f32": np.float32, "f16": np.uint16, "bf16": np.uint16}[dst_type])


def test_program_needs_no_half_arithmetic(ocl: OpenCLDevice) -> None:
    src = kernel_source()
    assert "vload_half" in src and "vstore_half_rte" in src
    assert ("-DGGML_CL_FP16=1" in ocl.info.build_options()) == ocl.info.fp16
    assert ocl.program() is not None  # built on this device, cl_khr_fp16 or not


def test_f32_to_f16_rounds_to_nearest_even_bit_exact(ocl: OpenCLDevice, backend: g.Backend) -> None:
    v = _special_f32()
    got = _copy(backend, ocl, "f32", "f16", v)
    with np.errstate(over="ignore"):
        want = v.astype(np.float16).view(np.uint16)
    assert np.array_equal(got, want)


def test_f16_to_f32_is_exact_for_every_bit_pattern(ocl: OpenCLDevice, backend: g.Backend) -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    bits = bits[(bits & 0x7C00) != 0x7C00]  # every finite half (NaN payloads are not specified by OpenCL)
    got = _copy(backend, ocl, "f16", "f32", bits)
    assert np.array_equal(got.view(np.uint32), bits.view(np.float16).astype(np.float32).view(np.uint32))


def test_bf16_rounding_matches_ggml(ocl: OpenCLDevice, backend: g.Backend) -> None:
    v = np.concatenate([_special_f32(), np.array([np.nan], np.float32)])
    got = _copy(backend, ocl, "f32", "bf16", v)
    u = v.view(np.uint32).astype(np.uint64)
    want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    want[-1] = ((u[-1] >> 16) | 64).astype(np.uint16)  # NaN keeps its top bits, made quiet
    assert np.array_equal(got, want)
    back = _copy(backend, ocl, "bf16", "f32", want)
    assert np.array_equal(back[:-1].view(np.uint32), (want[:-1].astype(np.uint32) << 16))


def test_activation_rounding_to_f16_is_bit_exact(ocl: OpenCLDevice, backend: g.Backend) -> None:
    """f16 weights round the activations to f16 (as ggml does) with float arithmetic: an identity weight matrix
    returns the rounded activations themselves, which must equal numpy's float16 conversion bit for bit."""
    v = _special_f32()
    v = v[np.isfinite(v) & (np.abs(v) < 65504.0)]
    k = 64
    x = np.resize(v, (2 * ((v.size + k - 1) // k), k)).astype(np.float32)  # 2 × rows of 64, every value used
    for n in (x.shape[0], 3):  # the GEMM and the matrix-vector path
        ctx = g.Context("id")
        w = ctx.new_tensor_2d("f16", k, k, "eye")
        b = ctx.new_tensor_2d("f32", k, n, "x")
        out = ops.mul_mat(w, b)
        graph = g.build_graph(out)
        buf = g.alloc_ctx_tensors(ctx, ocl.buffer_type())
        w.set_data(np.eye(k, dtype=np.float32))
        b.set_data(x[:n])
        backend.graph_compute(graph)
        got = out.to_numpy().reshape(n, k)
        assert np.array_equal(got, x[:n].astype(np.float16).astype(np.float32))  # exact (a dot product makes -0 +0)
        buf.free()
