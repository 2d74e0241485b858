"""Tensors, views, graphs and buffers: ggml's layout rules and the bounds checks around them."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import GGMLOp, GGMLType, TensorFlag, ops


@pytest.fixture
def cpu() -> g.Backend:
    return g.init_backend("CPU")


def test_contiguous_strides_follow_ggml() -> None:
    ctx = g.Context()
    t = ctx.new_tensor_3d("f32", 5, 3, 2)
    assert t.ne == (5, 3, 2, 1) and t.nb == (4, 20, 60, 120)
    assert t.nbytes == 120 and t.nelements == 30 and t.nrows == 6 and t.n_dims == 3
    q = ctx.new_tensor_2d("q4_0", 64, 3)
    assert q.nb == (18, 36, 108, 108) and q.nbytes == 108 and q.row_size == 36
    k = ctx.new_tensor_2d(GGMLType.Q4_K, 512, 2)
    assert k.nb[1] == 288 and k.nbytes == 576


def test_quantized_row_must_hold_whole_blocks() -> None:
    with pytest.raises(g.TensorError, match="block size 32"):
        g.Context().new_tensor_2d("q8_0", 33, 2)


def test_type_names_and_ids_match_ggml() -> None:
    assert GGMLType.Q4_K.traits.name == "q4_K" and int(GGMLType.BF16) == 30 and int(GGMLType.Q8_K) == 15
    assert g.type_traits("Q6_K").type_size == 210 and g.type_traits(14).block_size == 256
    assert g.row_size("q8_0", 64) == 68
    with pytest.raises(ValueError, match="unknown ggml type 'q9_0'"):
        g.as_type("q9_0")
    assert len(GGMLOp) == 101 and GGMLOp.GLU == 100 and GGMLOp.MUL_MAT == 29 and GGMLOp.FLASH_ATTN_EXT == 74


def test_permute_transpose_and_contiguity() -> None:
    ctx = g.Context()
    a = ctx.new_tensor_4d("f32", 2, 3, 4, 5)
    p = ops.permute(a, 0, 2, 1, 3)  # source dim i goes to result dim axis_i
    assert p.ne == (2, 4, 3, 5) and p.nb == (a.nb[0], a.nb[2], a.nb[1], a.nb[3])
    assert not p.is_contiguous and p.is_permuted and p.view_src is a
    assert list(p.op_params[:4]) == [0, 2, 1, 3]
    t = ops.transpose(ctx.new_tensor_2d("f32", 3, 2))
    assert t.is_transposed and t.ne == (2, 3, 1, 1)
    r = ops.reshape_2d(a, 6, 20)
    assert r.is_contiguous and r.view_src is a and r.op == GGMLOp.RESHAPE
    with pytest.raises(g.OpError, match="RESHAPE: source must be contiguous"):
        ops.reshape_1d(p, 120)
    with pytest.raises(g.OpError, match=r"RESHAPE: new shape \[7, 3\] has 21 elements, source has 120"):
        ops.reshape_2d(a, 7, 3)


def test_views_are_bounded_by_their_source() -> None:
    ctx = g.Context()
    a = ctx.new_tensor_2d("f32", 8, 4)  # 128 bytes
    v = ops.view_2d(a, 4, 4, a.nb[1], 16)
    assert v.view_offs == 16 and v.nbytes == 3 * 32 + 16
    assert int(v.op_params[:2].view(np.uint64)[0]) == 16  # ggml stores the offset as size_t
    vv = ops.view_1d(v, 2, 4)  # a view of a view points at the base tensor
    assert vv.view_src is a and vv.view_offs == 20
    with pytest.raises(g.TensorError, match="reaches byte 132"):
        ops.view_2d(a, 4, 4, a.nb[1], 20)
    with pytest.raises(g.TensorError, match="reaches byte"):
        ops.view_1d(v, 28, 4)  # inside the view's own extent is not enough: the base bounds it
    with pytest.raises(g.OpError, match="negative offset"):
        ops.view_1d(a, 1, -4)


def test_builders_name_op_and_operands() -> None:
    ctx = g.Context()
    a = ctx.new_tensor_2d("f32", 64, 8, "w")
    b = ctx.new_tensor_2d("f32", 32, 4, "x")
    with pytest.raises(g.OpError) as err:
        ops.mul_mat(a, b)
    msg = str(err.value)
    assert msg.startswith("MUL_MAT: inner dimensions differ: a.ne[0]=64 but b.ne[0]=32")
    assert "'w' (f32, ne=[64, 8, 1, 1])" in msg and "'x' (f32, ne=[32, 4, 1, 1])" in msg
    with pytest.raises(g.OpError, match=r"ADD: b \(ne=\[3, 1, 1, 1\]\) must repeat"):
        ops.add(a, ctx.new_tensor_1d("f32", 3))
    with pytest.raises(g.OpError, match="GET_ROWS: indices must be i32"):
        ops.get_rows(a, ctx.new_tensor_1d("f32", 3))
    with pytest.raises(g.OpError, match="ROPE: a has 8 tokens"):
        ops.rope(ctx.new_tensor_3d("f32", 64, 2, 8), ctx.new_tensor_1d("i32", 7), 64)
    with pytest.raises(g.OpError, match=r"SOFT_MAX: mask.ne\[0\]=5 must equal a.ne\[0\]=64"):
        ops.soft_max_ext(a, ctx.new_tensor_2d("f16", 5, 8), 1.0)
    with pytest.raises(g.OpError, match="needs a mask"):
        ops.soft_max_ext(a, None, 1.0, max_bias=8.0)
    with pytest.raises(ValueError):  # OpError is a ValueError for callers that do not know ggml_core
        ops.glu(ctx.new_tensor_1d("f32", 7), g.GluOp.SWIGLU)


def test_op_params_layout_matches_ggml() -> None:
    ctx = g.Context()
    x = ctx.new_tensor_3d("f32", 64, 4, 3)
    pos = ctx.new_tensor_1d("i32", 3)
    r = ops.rope_ext(x, pos, None, 32, 2, 4096, 10000.0, 0.5, 1.0, 1.0, 32.0, 1.0)
    assert list(r.op_params[:5]) == [0, 32, 2, 0, 4096]
    assert [r.op_param_f32(i) for i in range(5, 11)] == [10000.0, 0.5, 1.0, 1.0, 32.0, 1.0]
    s = ops.soft_max_ext(x, None, 0.125, 0.0)
    assert s.op_params[0] == np.float32(0.125).view(np.int32)
    sc = ops.scale_bias(x, 2.0, -1.0)
    assert (sc.op_param_f32(0), sc.op_param_f32(1)) == (2.0, -1.0)
    u = ops.silu(x)
    assert u.op == GGMLOp.UNARY and u.op_param_i32(0) == int(g.UnaryOp.SILU) and u.op_desc == "SILU"


def test_graph_order_leafs_flags_and_names() -> None:
    ctx = g.Context()
    a = ctx.new_tensor_1d("f32", 4)
    b = ctx.new_tensor_1d("f32", 4)
    c = ops.add(a, b)
    d = ops.mul(c, a)
    e = ops.add(d, c)
    graph = g.build_graph(e)
    assert graph.nodes == [c, d, e] and graph.leafs == [a, b]
    assert all(n.flags & TensorFlag.COMPUTE for n in graph.nodes) and not a.flags & TensorFlag.COMPUTE
    assert (a.name, b.name, c.name) == ("leaf_0", "leaf_1", "node_0")
    assert graph.use_counts[c.id] == 2 and graph.use_counts[a.id] == 2
    assert graph.get_tensor("node_1") is d
    with pytest.raises(g.GraphError, match="more than 2 nodes"):
        g.build_graph(e, size=2)


def test_deep_graph_does_not_recurse() -> None:
    ctx = g.Context()
    t = ctx.new_tensor_1d("f32", 2)
    for _ in range(5000):
        t = ops.scale(t, 1.0)
    assert g.build_graph(t, size=6000).n_nodes == 5000


def test_set_get_roundtrip_and_conversions(cpu: g.Backend) -> None:
    ctx = g.Context()
    f = ctx.new_tensor_2d("f32", 4, 3)
    h = ctx.new_tensor_2d("f16", 4, 3)
    q = ctx.new_tensor_2d("q8_0", 32, 2)
    i = ctx.new_tensor_1d("i32", 5)
    buf = g.alloc_ctx_tensors(ctx, cpu)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    f.set_data(x)
    h.set_data(x)
    i.set_data(np.arange(5, dtype=np.int32))
    assert np.array_equal(f.to_numpy()[0, 0], x)
    assert h.to_numpy().dtype == np.float16 and np.array_equal(h.to_numpy()[0, 0], x.astype(np.float16))
    q.set_data(np.linspace(-1, 1, 64, dtype=np.float32))
    assert np.abs(q.to_numpy().reshape(-1) - np.linspace(-1, 1, 64)).max() < 1 / 127
    assert q.to_numpy(dequantize=False).shape == (1, 1, 2, 34)
    with pytest.raises(g.TensorError, match="holds 5"):
        i.set_data(np.zeros(6, np.int32))
    with pytest.raises(g.TensorError, match="without rounding"):
        i.set_data(np.zeros(5, np.float32))
    view = ops.transpose(f)
    g.Buffer.view_init(view)
    assert np.array_equal(view.to_numpy()[0, 0], x.T)  # strided read
    assert np.shares_memory(f.numpy_view(), buf.host_array())
    buf.free()


def test_buffer_bounds_are_checked(cpu: g.Backend) -> None:
    ctx = g.Context()
    a = ctx.new_tensor_1d("f32", 4)
    b = ctx.new_tensor_1d("f32", 4)
    buf = g.alloc_ctx_tensors(ctx, cpu)
    with pytest.raises(g.OutOfBoundsError, match="outside its 16 bytes"):
        a.set_bytes(b"\0" * 20)
    with pytest.raises(g.OutOfBoundsError):
        a.get_bytes(offset=12, size=8)
    with pytest.raises(g.OutOfBoundsError):
        buf.read(buf.size - 4, 8)
    with pytest.raises(g.OutOfBoundsError):
        buf.write(-1, b"x")
    with pytest.raises(g.TensorError, match="is not allocated in this"):
        other = cpu.alloc_buffer(64)
        other.set_tensor(a, memoryview(b"\0" * 4))
    a.set_data(np.ones(4, np.float32))
    b.set_data(np.zeros(4, np.float32))
    assert np.array_equal(a.to_numpy().reshape(-1), np.ones(4))  # b's write did not touch a
    unallocated = g.Context().new_tensor_1d("f32", 4)
    with pytest.raises(g.TensorError, match="has no memory yet"):
        unallocated.to_numpy()
    buf.free()
    with pytest.raises(g.TensorError, match="freed"):
        a.to_numpy()


def test_mapped_read_only_memory_refuses_writes() -> None:
    dev = g.get_device("CPU")
    mem = np.arange(64, dtype=np.uint8)
    mem.flags.writeable = False
    buf = dev.buffer_from_host_ptr(mem, 64)
    assert buf is not None and buf.size == 64 and buf.is_host
    assert buf.read(8, 4) == bytes([8, 9, 10, 11])
    with pytest.raises(g.TensorError, match="read-only"):
        buf.write(0, b"\1")


def test_multibuffer_when_context_exceeds_max_size(cpu: g.Backend) -> None:
    dev = g.get_device("CPU")
    small = type(dev.buffer_type())("CPU_small", dev, alignment=64, max_size=1024, is_host=True)
    ctx = g.Context()
    ts = [ctx.new_tensor_1d("f32", 128) for _ in range(5)]  # 512 bytes each
    buf = g.alloc_ctx_tensors(ctx, small)
    assert isinstance(buf, g.alloc.MultiBuffer) and len(buf.parts) == 3
    for k, t in enumerate(ts):
        t.set_data(np.full(128, k, np.float32))
    assert [int(t.to_numpy().reshape(-1)[0]) for t in ts] == [0, 1, 2, 3, 4]
    big = g.Context().new_tensor_1d("f32", 1024)
    with pytest.raises(g.TensorError, match="over CPU_small's maximum"):
        g.alloc_ctx_tensors([big], small)


def test_results_go_to_the_enclosing_build_context() -> None:
    weights = g.Context("weights")
    w = weights.new_tensor_2d("f32", 8, 4, "w")
    with g.Context("batch") as batch:
        x = batch.new_tensor_2d("f32", 8, 2, "x")
        y = ops.scale(ops.mul_mat(w, x), 2.0)
        v = ops.view_1d(w, 4)
    assert len(weights) == 1 and weights.tensors == [w]  # nothing piled up in the long-lived context
    assert y.ctx is batch and v.ctx is batch and len(batch) == 4
    assert g.current_context() is None
    z = ops.scale(w, 1.0)  # outside: the first operand's context, as ggml
    assert z.ctx is weights


def test_rope_yarn_corr_dims_follows_ggml() -> None:
    low, high = ops.rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0)
    assert (low, high) == (20.0, 46.0)
    assert ops.rope_yarn_corr_dims(64, 4096, 10000.0, 1e9, 1e-9) == (0.0, 63.0)  # clamped to [0, n_dims - 1]
    nan_low, nan_high = ops.rope_yarn_corr_dims(64, 0, 10000.0, 0.0, 0.0)  # C passes NaN through, never raises
    assert np.isnan(nan_low) and np.isnan(nan_high)
    ggml = pytest.importorskip("ggml", reason="ggml-python (the real ggml) is not installed")
    import ctypes

    for args in [(128, 4096, 10000.0, 32.0, 1.0), (64, 2048, 500000.0, 16.0, 2.0), (96, 512, 1e6, 64.0, 0.5)]:
        dims = (ctypes.c_float * 2)()
        ggml.ggml_rope_yarn_corr_dims(*args, dims)
        assert ops.rope_yarn_corr_dims(*args) == (dims[0], dims[1])
