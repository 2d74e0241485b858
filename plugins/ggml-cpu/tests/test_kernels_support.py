"""Which ops the CPU plugin runs: every op without a kernel answers supports_op False and fails scheduling with an
UnsupportedOpError naming the op and the devices; type pairs a kernel cannot handle are refused the same way."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import CpuGraph

import ggml_core as gc
from ggml_core import GGMLOp, GGMLType, UnsupportedOpError, ops
from ggml_core.sched import Scheduler
from ggml_cpu.ops import KERNELS

#: ops that only re-describe memory (no kernel needed)
_NO_KERNEL_NEEDED = {GGMLOp.NONE, GGMLOp.VIEW, GGMLOp.RESHAPE, GGMLOp.PERMUTE, GGMLOp.TRANSPOSE}


def _node(op: GGMLOp) -> gc.Tensor:
    """A bare f32 node of ``op`` over one f32 operand (no builder needed)."""
    ctx = gc.Context()
    src = ctx.new_tensor("f32", (8, 4))
    node = ctx.new_tensor("f32", (8, 4))
    node.op = op
    node.src[0] = src
    return node


def test_ops_without_a_kernel_are_unsupported() -> None:
    cpu = gc.get_device("CPU")
    missing = [op for op in GGMLOp if op not in KERNELS and op not in _NO_KERNEL_NEEDED]
    assert GGMLOp.RWKV_WKV6 in missing and GGMLOp.MUL_MAT_ID not in missing
    for op in missing:
        assert not cpu.supports_op(_node(op)), op.name
    # every op below has a CPU kernel
    wanted = {
        "ADD",
        "SUB",
        "MUL",
        "DIV",
        "ADD1",
        "ACC",
        "SQR",
        "SQRT",
        "LOG",
        "SIN",
        "COS",
        "CLAMP",
        "SCALE",
        "LEAKY_RELU",
        "UNARY",
        "GLU",
        "SUM",
        "SUM_ROWS",
        "MEAN",
        "ARGMAX",
        "ARGSORT",
        "TOP_K",
        "COUNT_EQUAL",
        "NORM",
        "RMS_NORM",
        "L2_NORM",
        "GROUP_NORM",
        "MUL_MAT",
        "MUL_MAT_ID",
        "OUT_PROD",
        "GET_ROWS",
        "SET_ROWS",
        "CPY",
        "DUP",
        "CONT",
        "REPEAT",
        "CONCAT",
        "PAD",
        "ARANGE",
        "FILL",
        "SET",
        "DIAG_MASK_INF",
        "DIAG_MASK_ZERO",
        "SOFT_MAX",
        "ROPE",
        "FLASH_ATTN_EXT",
        "IM2COL",
        "CONV_2D",
        "CONV_TRANSPOSE_1D",
        "POOL_2D",
        "UPSCALE",
    }
    assert wanted <= {op.name for op in KERNELS}


def test_scheduling_an_unsupported_op_names_it_and_the_devices() -> None:
    node = _node(GGMLOp.RWKV_WKV6)
    graph = gc.build_graph(node)
    sched = Scheduler([gc.init_backend("CPU")])
    with pytest.raises(UnsupportedOpError) as info:
        sched.alloc_graph(graph)
    assert "RWKV_WKV6" in str(info.value) and "CPU" in str(info.value)


def test_unsupported_type_pairs_and_modes() -> None:
    cpu = gc.get_device("CPU")
    g = CpuGraph()
    x = g.tensor(np.zeros((2, 3, 64), np.float32))
    row = g.tensor(np.zeros(256, np.float32))
    assert not cpu.supports_op(ops.cpy(row, g.ctx.new_tensor("iq1_s", (256,))))  # no IQ1_S quantizer
    assert cpu.supports_op(ops.cpy(row, g.ctx.new_tensor("q5_k", (256,))))
    pos = g.tensor(np.zeros(8, np.int32), "i32")  # 4 positions per token (ne[2] = 2)
    assert cpu.supports_op(ops.rope_multi(x, pos, None, 16, (4, 2, 2, 0), 8, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0))
    vision_bad = ops.rope_multi(x, pos, None, 16, (4, 4, 0, 0), 24, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0)
    assert not cpu.supports_op(vision_bad)  # vision RoPE needs n_dims == ne0 / 2, as ggml asserts
    q16 = g.tensor(np.zeros((2, 3, 64), np.float16), "f16")
    k = g.tensor(np.zeros((2, 5, 64), np.float16), "f16")
    assert not cpu.supports_op(ops.flash_attn_ext(q16, k, k, None, 1.0))  # ggml reads q as f32
    assert cpu.supports_op(ops.flash_attn_ext(x, k, k, None, 1.0))
    assert not cpu.supports_op(ops.argmax(g.tensor(np.zeros((3, 4), np.float16), "f16")))
    assert GGMLType.IQ1_S.is_quantized
