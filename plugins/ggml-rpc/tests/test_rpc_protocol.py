"""The wire format against the measured reference (ggml-rpc-v7.md): field offsets, sizes, command ids, HELLO
bytes, FNV-1a, and ggml's op and type numbering, which travel as numbers."""

from __future__ import annotations

import dataclasses
import struct
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ggml_core import Context, GGMLOp, GGMLType, Tensor, TensorError, ops
from ggml_rpc import _fnv
from ggml_rpc.protocol import (
    FIXED_REQUEST_SIZE,
    FIXED_RESPONSE_SIZE,
    PROTO_VERSION,
    RPC_TENSOR,
    RPC_TENSOR_SIZE,
    Cmd,
    RpcTensor,
)
from ggml_rpc.serialize import GraphPayloads, fits_wire, serialize_graph, serialize_tensor

# ggml.h at llama.cpp 0c1e570 (RPC protocol 7.0.0): enum ggml_op in order, GGML_OP_COUNT == 101
GGML_OPS = """
NONE DUP ADD ADD_ID ADD1 ACC SUB MUL DIV SQR SQRT LOG SIN COS SUM SUM_ROWS CUMSUM MEAN ARGMAX
COUNT_EQUAL REPEAT REPEAT_BACK CONCAT SILU_BACK NORM RMS_NORM RMS_NORM_BACK GROUP_NORM L2_NORM
MUL_MAT MUL_MAT_ID OUT_PROD SCALE SET CPY CONT RESHAPE VIEW PERMUTE TRANSPOSE GET_ROWS
GET_ROWS_BACK SET_ROWS DIAG DIAG_MASK_INF DIAG_MASK_ZERO SOFT_MAX SOFT_MAX_BACK ROPE ROPE_BACK
CLAMP CONV_TRANSPOSE_1D IM2COL IM2COL_BACK IM2COL_3D COL2IM_1D CONV_2D CONV_3D CONV_2D_DW
CONV_TRANSPOSE_2D POOL_1D POOL_2D POOL_2D_BACK UPSCALE PAD PAD_REFLECT_1D ROLL ARANGE
TIMESTEP_EMBEDDING ARGSORT TOP_K LEAKY_RELU TRI FILL FLASH_ATTN_EXT FLASH_ATTN_BACK SSM_CONV
SSM_SCAN WIN_PART WIN_UNPART GET_REL_POS ADD_REL_POS RWKV_WKV6 GATED_LINEAR_ATTN RWKV_WKV7
SOLVE_TRI GATED_DELTA_NET LIGHTNING_INDEXER DSV4_HC_COMB DSV4_HC_PRE DSV4_HC_POST UNARY MAP_CUSTOM1
MAP_CUSTOM2 MAP_CUSTOM3 CUSTOM CROSS_ENTROPY_LOSS CROSS_ENTROPY_LOSS_BACK OPT_STEP_ADAMW
OPT_STEP_SGD GLU
""".split()  # noqa: SIM905 - one name per word, as in ggml.h
# enum ggml_type at the same commit (ids 4, 5, 31-33, 36-38 removed)
GGML_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9, "Q2_K": 10, "Q3_K": 11,
    "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "Q8_K": 15, "IQ2_XXS": 16, "IQ2_XS": 17, "IQ3_XXS": 18, "IQ1_S": 19,
    "IQ4_NL": 20, "IQ3_S": 21, "IQ2_S": 22, "IQ4_XS": 23, "I8": 24, "I16": 25, "I32": 26, "I64": 27, "F64": 28,
    "IQ1_M": 29, "BF16": 30, "TQ1_0": 34, "TQ2_0": 35, "MXFP4": 39, "NVFP4": 40, "Q1_0": 41, "Q2_0": 42,
}  # fmt: skip


def test_op_and_type_numbering_is_ggmls() -> None:
    assert len(GGML_OPS) == 101
    assert [op.name for op in GGMLOp] == GGML_OPS
    assert [int(op) for op in GGMLOp] == list(range(101))
    assert {t.name: int(t) for t in GGMLType} == GGML_TYPES


def test_rpc_tensor_layout_matches_the_reference_table() -> None:
    assert RPC_TENSOR_SIZE == 296 and RPC_TENSOR.format == "<QIQ4I4II16ii10QQQQ64si"
    fields = RpcTensor(
        id=0x1111111111111111,
        type=0x22222222,
        buffer=0x3333333333333333,
        ne=(0x44444401, 0x44444402, 0x44444403, 0x44444404),
        nb=(0x55555501, 0x55555502, 0x55555503, 0x55555504),
        op=0x66666666,
        op_params=tuple(range(0x7700, 0x7710)),
        flags=0x08080808,
        src=tuple(range(0x9900, 0x990A)),
        view_src=0xAAAAAAAAAAAAAAAA,
        view_offs=0xBBBBBBBBBBBBBBBB,
        data=0xCCCCCCCCCCCCCCCC,
        name=b"name",
        use_count=0x0D0D0D0D,
    )
    raw = fields.pack()
    # offsets from the reference: id 0, type 8, buffer 12, ne 20, nb 36, op 52, op_params 56, flags 120,
    # src 124, view_src 204, view_offs 212, data 220, name 228, use_count 292
    assert struct.unpack_from("<Q", raw, 0)[0] == fields.id
    assert struct.unpack_from("<I", raw, 8)[0] == fields.type
    assert struct.unpack_from("<Q", raw, 12)[0] == fields.buffer
    assert struct.unpack_from("<4I", raw, 20) == fields.ne
    assert struct.unpack_from("<4I", raw, 36) == fields.nb
    assert struct.unpack_from("<I", raw, 52)[0] == fields.op
    assert struct.unpack_from("<16i", raw, 56) == fields.op_params
    assert struct.unpack_from("<i", raw, 120)[0] == fields.flags
    assert struct.unpack_from("<10Q", raw, 124) == fields.src
    assert struct.unpack_from("<Q", raw, 204)[0] == fields.view_src
    assert struct.unpack_from("<Q", raw, 212)[0] == fields.view_offs
    assert struct.unpack_from("<Q", raw, 220)[0] == fields.data
    assert raw[228:292] == b"name" + bytes(60)
    assert struct.unpack_from("<i", raw, 292)[0] == fields.use_count
    assert RpcTensor.unpack_from(raw) == dataclasses.replace(fields, name=b"name" + bytes(60))


def test_command_ids_and_sizes() -> None:
    assert Cmd.HELLO == 14 and Cmd.COUNT == 19
    names = [c.name for c in Cmd if c < Cmd.COUNT]
    assert names == [
        "ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE", "FREE_BUFFER", "BUFFER_CLEAR",
        "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR", "GRAPH_COMPUTE", "GET_DEVICE_MEMORY",
        "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO", "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR", "NONE",
    ]  # fmt: skip
    # the reference table's fixed request and response sizes
    want_req = {0: 12, 1: 4, 2: 4, 3: 8, 4: 8, 5: 9, 7: 312, 8: 312, 9: 592, 11: 4, 12: 296, 13: 3260, 14: 24, 15: 0}
    want_req |= {16: 4, 17: 313}
    assert {int(c): n for c, n in FIXED_REQUEST_SIZE.items() if c < Cmd.COUNT} == want_req
    want_rsp = {0: 16, 1: 8, 2: 8, 3: 8, 7: 1, 9: 1, 11: 16, 13: 8, 14: 28, 15: 4}
    assert {int(c): n for c, n in FIXED_RESPONSE_SIZE.items() if c < Cmd.COUNT} == want_rsp
    assert min(c for c in Cmd if c > Cmd.COUNT) >= 0x80  # extensions far from ggml's ids
    assert PROTO_VERSION == (7, 0, 0)


def test_hello_frame_is_the_measured_one() -> None:
    import socket

    a, b = socket.socketpair()
    with a, b:
        from ggml_rpc.protocol import send_frame

        send_frame(a, Cmd.HELLO, [bytes(24)])
        sent = b.recv(100)
    assert sent.hex() == "0e" + "1800000000000000" + "00" * 24


def test_fnv1a64_vectors() -> None:
    # published FNV-1a 64 test vectors
    assert _fnv.fnv1a64(b"") == 0xCBF29CE484222325
    assert _fnv.fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert _fnv.fnv1a64(b"foobar") == 0x85944171F73967E8
    data = np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8)
    slow = 0xCBF29CE484222325
    for byte in data.tobytes():
        slow = ((slow ^ byte) * 0x100000001B3) & (2**64 - 1)
    assert _fnv.fnv1a64(data) == slow  # the compiled loop (with numba) agrees with the definition


@settings(max_examples=60, deadline=None)
@given(
    ne=st.tuples(*[st.integers(1, 2**32 - 1)] * 4),
    params=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=16, max_size=16),
    name=st.binary(max_size=63).filter(lambda b: b"\0" not in b),
)
def test_rpc_tensor_round_trip(ne: tuple[int, int, int, int], params: list[int], name: bytes) -> None:
    rt = RpcTensor(7, 0, 9, ne, ne, 2, tuple(params), 16, tuple(range(10)), 3, 4, 5, name, 6)
    back = RpcTensor.unpack_from(rt.pack())
    assert back == dataclasses.replace(rt, name=name + bytes(64 - len(name)))
    assert back.name_str == name.decode("utf-8", errors="replace")


def test_serialize_tensor_fields_and_the_32_bit_limit() -> None:
    ctx = Context()
    a = ctx.new_tensor("f32", (8, 4), name="a")
    b = ctx.new_tensor("f32", (8, 4), name="b")
    c = ops.add(a, b)
    c.set_op_params_i32([5, -6])
    rt = RpcTensor.unpack_from(serialize_tensor(c, None, use_count=2))
    assert rt.id == c.id and rt.type == 0 and rt.op == int(GGMLOp.ADD)
    assert rt.ne == (8, 4, 1, 1) and rt.nb == (4, 32, 128, 128)
    assert rt.src[:3] == (a.id, b.id, 0) and rt.buffer == 0 and rt.data == 0
    assert rt.op_params[:3] == (5, -6, 0) and rt.use_count == 2
    big = Tensor(ctx, GGMLType.I8, (2**32, 1))
    assert not fits_wire(big)
    with pytest.raises(TensorError, match="32-bit ne/nb fields"):
        serialize_tensor(big, None)


def test_graph_payload_lists_every_reachable_tensor_after_its_sources() -> None:
    ctx = Context()
    a = ctx.new_tensor("f32", (4, 4), name="a")
    v = ops.view_1d(a, 4, 16)
    x = ops.mul(ops.add(v, v), v)
    from ggml_core import build_graph

    g = build_graph(x)
    raw = serialize_graph(3, g, None)  # type: ignore[arg-type]
    device, n_nodes = struct.unpack_from("<II", raw)
    ids = struct.unpack_from(f"<{n_nodes}Q", raw, 8)
    (n_tensors,) = struct.unpack_from("<I", raw, 8 + 8 * n_nodes)
    assert device == 3 and list(ids) == [t.id for t in g.nodes]
    tensors = [RpcTensor.unpack_from(raw, 12 + 8 * n_nodes + i * 296) for i in range(n_tensors)]
    assert len(raw) == 12 + 8 * n_nodes + 296 * n_tensors
    pos = {t.id: i for i, t in enumerate(tensors)}
    assert set(pos) == {a.id, v.id, *ids}
    for t in tensors:
        for s in (*t.src, t.view_src):
            if s:
                assert pos[s] < pos[t.id]
    assert all(t.flags & 16 for t in tensors if t.op)  # nodes carry GGML_TENSOR_FLAG_COMPUTE


def test_graph_payloads_are_kept_until_the_graph_changes() -> None:
    from ggml_core import build_graph

    ctx = Context()
    a = ctx.new_tensor("f32", (4, 4), name="a")
    b = ctx.new_tensor("f32", (4, 4), name="b")
    x = ops.add(a, a)
    g = build_graph(x)
    cache = GraphPayloads()
    first = cache.payload(1, g, None)  # type: ignore[arg-type]
    assert first == serialize_graph(1, g, None)  # type: ignore[arg-type]
    assert cache.payload(1, g, None) is first  # type: ignore[arg-type]  # unchanged: kept
    x.src[1] = b  # an operand rewired (as a scheduler does for a copied input)
    rewired = cache.payload(1, g, None)  # type: ignore[arg-type]
    assert rewired != first and rewired == serialize_graph(1, g, None)  # type: ignore[arg-type]
    assert b.id in {RpcTensor.unpack_from(rewired, 12 + 8 * len(g.nodes) + i * 296).id for i in range(3)}
    conn = object()  # the connection whose remote buffer the node is bound to (what serialisation reads of it)
    x.buffer = SimpleNamespace(rpc_remote=(conn, 7, 4096))  # type: ignore[assignment]
    x.data_offset = 0
    bound = cache.payload(1, g, conn)  # type: ignore[arg-type]
    assert bound == serialize_graph(1, g, conn) != rewired  # type: ignore[arg-type]
    x.data_offset = 64  # the node's memory moved
    moved = cache.payload(1, g, conn)  # type: ignore[arg-type]
    assert moved == serialize_graph(1, g, conn) != bound  # type: ignore[arg-type]
