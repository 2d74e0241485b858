"""The multi-backend scheduler (ggml's ``ggml_backend_sched``): placement, splits, input copies, execution.

:class:`Scheduler` runs one graph over several backends; :meth:`Scheduler.plan` describes what it decided as data
(:class:`SchedPlan`), which :func:`render_text`, :func:`render_dot` and :func:`render_svg` draw.
:class:`MetaDevice` (tensor parallelism) splits one graph's weights over several devices and runs the per-device
graphs, with their all-reduces, on a scheduler.
"""

from ggml_core.sched._allreduce import all_reduce
from ggml_core.sched._exec import EvalCallback, tensor_copy
from ggml_core.sched._meta import MetaDevice, StateOf, TensorParallelGraph
from ggml_core.sched._placement import PlacementError
from ggml_core.sched._plan import InputCopy, SchedPlan, SplitPlan
from ggml_core.sched._scheduler import DEFAULT_SCHED_GRAPH_SIZE, MAX_BACKENDS, MAX_COPIES, Scheduler
from ggml_core.sched._split import MAX_SPLIT_INPUTS
from ggml_core.sched._split_state import (
    SplitError,
    SplitKind,
    SplitState,
    delta_net_split_states,
    llama_split_states,
    mamba2_split_states,
    rwkv7_split_states,
    shard_sizes,
    shortconv_split_states,
)
from ggml_core.sched.render import render_dot, render_svg, render_text

__all__ = [
    "DEFAULT_SCHED_GRAPH_SIZE",
    "MAX_BACKENDS",
    "MAX_COPIES",
    "MAX_SPLIT_INPUTS",
    "EvalCallback",
    "InputCopy",
    "MetaDevice",
    "PlacementError",
    "SchedPlan",
    "Scheduler",
    "SplitError",
    "SplitKind",
    "SplitPlan",
    "SplitState",
    "StateOf",
    "TensorParallelGraph",
    "all_reduce",
    "delta_net_split_states",
    "llama_split_states",
    "mamba2_split_states",
    "render_dot",
    "render_svg",
    "render_text",
    "rwkv7_split_states",
    "shard_sizes",
    "shortconv_split_states",
    "tensor_copy",
]
