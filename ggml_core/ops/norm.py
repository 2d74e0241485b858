"""Normalisations: NORM, RMS_NORM, L2_NORM, GROUP_NORM."""

from __future__ import annotations

from ggml_core._tensor import Tensor
from ggml_core.ops._build import check, finish, same_or_dup
from ggml_core.ops._enum import GGMLOp

__all__ = ["group_norm", "l2_norm", "norm", "rms_norm"]


def _eps_op(op: GGMLOp, a: Tensor, eps: float, inplace: bool) -> Tensor:
    result = same_or_dup(op.name, a, inplace)
    result.set_op_params_f32([eps])
    return finish(result, op, [a])


def norm(a: Tensor, eps: float, inplace: bool = False) -> Tensor:
    """``ggml_norm``: per row, (x - mean) / sqrt(var + eps) with the biased variance."""
    return _eps_op(GGMLOp.NORM, a, eps, inplace)


def rms_norm(a: Tensor, eps: float, inplace: bool = False) -> Tensor:
    """``ggml_rms_norm``: per row, x / sqrt(mean(x²) + eps)."""
    return _eps_op(GGMLOp.RMS_NORM, a, eps, inplace)


def l2_norm(a: Tensor, eps: float, inplace: bool = False) -> Tensor:
    """``ggml_l2_norm``: per row, x / max(‖x‖, eps)."""
    return _eps_op(GGMLOp.L2_NORM, a, eps, inplace)


def group_norm(a: Tensor, n_groups: int, eps: float, inplace: bool = False) -> Tensor:
    """``ggml_group_norm``: normalise groups of ceil(ne[2] / n_groups) channels (dims 0, 1 and the channel group)."""
    check(n_groups > 0, "GROUP_NORM", f"n_groups must be positive, got {n_groups}", a)
    result = same_or_dup("GROUP_NORM", a, inplace)
    result.set_op_param_i32(0, n_groups)
    result.set_op_param_f32(1, eps)
    return finish(result, GGMLOp.GROUP_NORM, [a])
