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
"""

import importlib

from ggml_core.ops._build import check_operand_types
from ggml_core.ops._enum import VIEW_OPS, GGMLOp, GluOp, PoolOp, Prec, ScaleMode, SortOrder, TriType, UnaryOp
from ggml_core.ops.attention import *  # noqa: F403
from ggml_core.ops.attention import __all__ as _attention_all
from ggml_core.ops.conv import *  # noqa: F403
from ggml_core.ops.conv import __all__ as _conv_all
from ggml_core.ops.elementwise import *  # noqa: F403
from ggml_core.ops.elementwise import __all__ as _elementwise_all
from ggml_core.ops.glu import *  # noqa: F403
from ggml_core.ops.glu import __all__ as _glu_all
from ggml_core.ops.layout import *  # noqa: F403
from ggml_core.ops.layout import __all__ as _layout_all
from ggml_core.ops.matmul import *  # noqa: F403
from ggml_core.ops.matmul import __all__ as _matmul_all
from ggml_core.ops.movement import *  # noqa: F403
from ggml_core.ops.movement import __all__ as _movement_all
from ggml_core.ops.norm import *  # noqa: F403
from ggml_core.ops.norm import __all__ as _norm_all
from ggml_core.ops.reduce import *  # noqa: F403
from ggml_core.ops.reduce import __all__ as _reduce_all
from ggml_core.ops.unary import *  # noqa: F403
from ggml_core.ops.unary import __all__ as _unary_all

__all__ = [
    "VIEW_OPS",
    "GGMLOp",
    "GluOp",
    "PoolOp",
    "Prec",
    "ScaleMode",
    "SortOrder",
    "TriType",
    "UnaryOp",
    *_attention_all,
    *_conv_all,
    *_elementwise_all,
    *_glu_all,
    *_layout_all,
    *_matmul_all,
    *_movement_all,
    *_norm_all,
    *_reduce_all,
    *_unary_all,
]
__all__.sort()

# every builder checks that its tensor operands are tensors (OpError naming the builder and the argument)
for _family in ("attention", "conv", "elementwise", "glu", "layout", "matmul", "movement", "norm", "reduce", "unary"):
    check_operand_types(importlib.import_module(f"{__name__}.{_family}"), globals())
