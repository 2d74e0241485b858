"""ggml's ops: the op enums (ggml numbering) and one builder per op, grouped by family.

Builders check shapes and types as ggml's ``ggml_*`` constructors do and raise :class:`ggml_core.OpError` naming
the op and operands. The result lives in the first operand's context. Families:

- :mod:`.elementwise`: binary with broadcasting, SQR/SQRT/LOG/SIN/COS, SCALE, CLAMP, LEAKY_RELU
- :mod:`.unary`: the UNARY op and its sub-ops (ABS ... TRUNC, XIELU)
- :mod:`.glu`: the GLU family (fused, swapped, split)
- :mod:`.reduce`: SUM, SUM_ROWS, MEAN, CUMSUM, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K
- :mod:`.matmul`: MUL_MAT, MUL_MAT_ID, OUT_PROD
- :mod:`.norm`: NORM, RMS_NORM, L2_NORM, GROUP_NORM
- :mod:`.attention`: SOFT_MAX, ROPE, FLASH_ATTN_EXT, DIAG_MASK_*
- :mod:`.movement`: views, reshape, permute, cont, cpy, get_rows, set_rows
- :mod:`.conv`: IM2COL, CONV_2D, CONV_TRANSPOSE_1D/2D, POOL_1D/2D, UPSCALE (+ conv_1d/conv_2d composites)
- :mod:`.layout`: repeat, concat, pad, roll, set, acc, diag, tri, arange, fill, timestep_embedding
- :mod:`.recurrent`: SSM_CONV, SSM_SCAN, GATED_DELTA_NET, RWKV_WKV7 (state-space and linear-attention layers)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ggml_core.ops._enum import (  # noqa: F401 - re-exported (__all__ is computed, see _load)
    VIEW_OPS,
    GGMLOp,
    GluOp,
    PoolOp,
    Prec,
    ScaleMode,
    SortOrder,
    TriType,
    UnaryOp,
)

if TYPE_CHECKING:  # the builders load on first use (see __getattr__): the enums alone stay cheap
    from ggml_core.ops.attention import *  # noqa: F403
    from ggml_core.ops.conv import *  # noqa: F403
    from ggml_core.ops.elementwise import *  # noqa: F403
    from ggml_core.ops.glu import *  # noqa: F403
    from ggml_core.ops.layout import *  # noqa: F403
    from ggml_core.ops.matmul import *  # noqa: F403
    from ggml_core.ops.movement import *  # noqa: F403
    from ggml_core.ops.norm import *  # noqa: F403
    from ggml_core.ops.recurrent import *  # noqa: F403
    from ggml_core.ops.reduce import *  # noqa: F403
    from ggml_core.ops.unary import *  # noqa: F403

#: the builder families, imported together on the first access to any builder
_FAMILIES = (
    "attention",
    "conv",
    "elementwise",
    "glu",
    "layout",
    "matmul",
    "movement",
    "norm",
    "recurrent",
    "reduce",
    "unary",
)
_ENUMS = ["VIEW_OPS", "GGMLOp", "GluOp", "PoolOp", "Prec", "ScaleMode", "SortOrder", "TriType", "UnaryOp"]
_loaded: list[str] | None = None


def _load() -> list[str]:
    """Import every family, wrap its builders with the operand check and copy its public names here; returns the
    sorted ``__all__``."""
    global _loaded
    if _loaded is None:
        from ggml_core.ops._build import check_operand_types

        names = list(_ENUMS)
        for family in _FAMILIES:
            module = importlib.import_module(f"ggml_core.ops.{family}")
            # every builder checks that its tensor operands are tensors (OpError naming the builder and argument)
            check_operand_types(module, globals())
            for name in module.__all__:
                globals()[name] = getattr(module, name)
            names += module.__all__
        _loaded = sorted(names)
    return _loaded


def __getattr__(name: str) -> Any:
    if name == "__all__":
        return _load()
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _FAMILIES or _loaded is None:
        _load()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'ggml_core.ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_load()})
