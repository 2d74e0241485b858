"""Data movement (``movement.wgsl``): CPY/DUP/CONT, GET_ROWS (in row windows), SET_ROWS."""

from __future__ import annotations

import math
from typing import Final

from ggml_core import GGMLOp, GGMLType, Tensor
from ggml_webgpu.ops._dispatch import (
    FLOAT_TYPES,
    KERNELS,
    QUANT_TYPES,
    Dispatch,
    Launcher,
    Limits,
    elementwise,
    f32,
    fits,
    groups_1d,
    row_windows,
    slot,
    src,
)

T = GGMLType

__all__ = ["QUANTIZE_TYPES"]

#: types CPY and SET_ROWS quantize into (ggml's reference quantizers, byte for byte)
QUANTIZE_TYPES: Final = frozenset({GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0})

_GATHER: Final = {GGMLOp.REPEAT: 0, GGMLOp.CONCAT: 1, GGMLOp.PAD: 2, GGMLOp.DIAG_MASK_INF: 3, GGMLOp.DIAG_MASK_ZERO: 3}


# ------------------------------------------------------------------------------------------------ CPY / CONT / DUP


def _copy_ok(limits: Limits, node: Tensor) -> bool:
    a = src(node, 0)
    if a.nelements != node.nelements or not fits(limits, a, node):
        return False
    if a.type == node.type:
        bs = a.type.block_size
        # a block copy needs whole blocks along ne[0] on both sides
        return bs == 1 or (a.ne[0] % bs == 0 and node.ne[0] % bs == 0)
    if node.type in QUANTIZE_TYPES:
        return a.type in FLOAT_TYPES and node.ne[0] % 32 == 0
    if a.type in QUANT_TYPES:
        return node.type in FLOAT_TYPES and a.nb[0] == a.type.type_size
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


def _blocks(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """ne/nb of ``t`` counted in its type's units (blocks for quantized types)."""
    bs = t.type.block_size
    return (t.ne[0] // bs, *t.ne[1:]), t.nb


@KERNELS.kernel(GGMLOp.CPY, GGMLOp.DUP, GGMLOp.CONT, supports=_copy_ok)
def _bind_copy(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a = src(node, 0)
    if node.type in QUANTIZE_TYPES and a.type in FLOAT_TYPES:
        n = node.nelements // 32
        slots = (slot(launcher, a), None, None, slot(launcher, node))
        return [Dispatch("movement.cpy_q", groups_1d(n), slots, [n, a.type, node.type])]
    if a.type in QUANT_TYPES and node.type in FLOAT_TYPES:
        n = a.nelements // 32
        slots = (slot(launcher, a), None, None, slot(launcher, node))
        return [Dispatch("movement.cpy_dq", groups_1d(n), slots, [n, a.type, node.type])]
    if a.type != node.type:
        return [elementwise("movement.cpy", launcher, node, [a.type, node.type], a=a)]
    unit = a.type.type_size
    (ane, anb), (dne, dnb) = _blocks(a), _blocks(node)
    sa = slot(launcher, a, ne=ane, nb=anb, nbytes=a.nbytes)
    sd = slot(launcher, node, ne=dne, nb=dnb, nbytes=node.nbytes)
    wordwise = unit % 4 == 0 and all(x % 4 == 0 for x in (*anb, *dnb, sa.words[0], sd.words[0]))
    n = math.prod(ane) * unit // (4 if wordwise else 1)
    return [Dispatch("movement.cpy_raw", groups_1d(n), (sa, None, None, sd), [n, unit, int(wordwise)])]


# ------------------------------------------------------------------------------------------------ GET_ROWS / SET_ROWS


def _get_rows_ok(limits: Limits, node: Tensor) -> bool:
    a, b = src(node, 0), src(node, 1)
    if b.type not in (T.I32, T.I64) or not fits(limits, b, node) or a.nb[0] != a.type.type_size:
        return False
    if a.type == T.I32:
        return node.type == T.I32
    if a.type in QUANT_TYPES:
        return node.type == T.F32 and a.ne[0] % 32 == 0
    return a.type in FLOAT_TYPES and node.type in FLOAT_TYPES


@KERNELS.kernel(GGMLOp.GET_ROWS, supports=_get_rows_ok)
def _bind_get_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = src(node, 0), src(node, 1)
    out: list[Dispatch] = []
    code = launcher.error_code(node)
    quant = a.type in QUANT_TYPES
    n = node.nelements // 32 if quant else node.nelements
    sb, sd = slot(launcher, b), slot(launcher, node)
    for r0, rn in row_windows(launcher.limits, a):
        sa = slot(launcher, a, ne=(a.ne[0], rn, a.ne[2], a.ne[3]), extra=r0 * a.nb[1])
        words = [n, a.type, node.type, r0, rn, a.ne[1], code, b.type]
        out.append(
            Dispatch("movement.get_rows_q" if quant else "movement.get_rows", groups_1d(n), (sa, sb, None, sd), words)
        )
    return out


def _set_rows_ok(limits: Limits, node: Tensor) -> bool:
    b, c = src(node, 0), src(node, 1)
    return (
        b.type in (T.F32, T.F16)
        and c.type in (T.I32, T.I64)
        and (node.type in FLOAT_TYPES or (node.type in QUANTIZE_TYPES and b.ne[0] % 32 == 0))
        and fits(limits, b, c, node)
    )


@KERNELS.kernel(GGMLOp.SET_ROWS, supports=_set_rows_ok)
def _bind_set_rows(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    b, c = src(node, 0), src(node, 1)
    slots = (slot(launcher, b), slot(launcher, c), None, slot(launcher, node))
    if node.type in QUANTIZE_TYPES:
        n = b.nelements // 32
        return [
            Dispatch(
                "movement.set_rows_q", groups_1d(n), slots, [n, b.type, node.type, c.type, launcher.error_code(node)]
            )
        ]
    words = [b.nelements, b.type, node.type, c.type, launcher.error_code(node)]
    return [Dispatch("movement.set_rows", groups_1d(b.nelements), slots, words)]


# ---------------------------------------------------------------------------------- REPEAT, CONCAT, PAD, DIAG_MASK


def _gather_ok(limits: Limits, node: Tensor) -> bool:
    a, b = src(node, 0), node.src[1]
    if a.type not in FLOAT_TYPES or node.type != a.type or not fits(limits, a, b, node) or a.is_empty:
        return False
    if node.op == GGMLOp.CONCAT:
        return b is not None and b.type == a.type
    if node.op in (GGMLOp.DIAG_MASK_INF, GGMLOp.DIAG_MASK_ZERO):
        return a.type == T.F32 and node.ne == a.ne
    return True


@KERNELS.kernel(*_GATHER, supports=_gather_ok)
def _bind_gather(launcher: Launcher, node: Tensor) -> list[Dispatch]:
    a, b = src(node, 0), node.src[1]
    mode = _GATHER[node.op]
    words = [mode, a.type, 0, 0, *([0] * 8)]
    if node.op == GGMLOp.CONCAT:
        words[2] = node.op_param_i32(0)
    elif node.op == GGMLOp.PAD:
        words[2] = node.op_param_i32(8)
        words[4:12] = [node.op_param_i32(i) & 0xFFFFFFFF for i in range(8)]
    elif mode == 3:
        words[2] = node.op_param_i32(0)
        words[3] = f32(float("-inf") if node.op == GGMLOp.DIAG_MASK_INF else 0.0)
    slots = {"a": a, "b": b} if b is not None else {"a": a}
    return [elementwise("movement.gather", launcher, node, words, **slots)]
