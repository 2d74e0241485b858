"""The CPU backend's execution engine: plan a graph once, then replay it (the CPU analogue of a CUDA graph).

**Planning** resolves every tensor of a graph to a numpy view of its buffer and binds each node to its kernel
(``bind(node) -> thunk``, see :mod:`ggml_cpu.ops`). **Replaying** calls the thunks in order, inside one
``np.errstate`` (ggml's float arithmetic is silent: overflow gives inf, as in C) — nothing else happens per node
unless an abort callback is set.

A plan stays valid while the graph is the same object with the same nodes, every node keeps its operands, and every
tensor the thunks touch keeps its buffer, offset and the buffer its memory; this is checked on every compute with
C-speed list comparisons (a fraction of a microsecond per node), and the graph is re-planned when anything moved.
Shapes, types and op parameters are fixed when a tensor is created, so they are not re-checked.

Threads: :class:`ggml_cpu.threads.Threads` applies the backend's setting to numba's pool, BLAS and the plugin's
worker pool before each replay (see :mod:`ggml_cpu.threads`).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from ggml_core import Buffer, ComputeError, GGMLOp, Graph, Tensor, TensorError, TensorFlag, UnsupportedOpError
from ggml_core.backend import buffer_of
from ggml_cpu import ops, quant
from ggml_cpu.ops import matmul
from ggml_cpu.ops.fused import bind_pair
from ggml_cpu.threads import Threads

__all__ = ["Engine", "Plan", "describe"]

_HOST_ARRAY: Final = operator.methodcaller("host_array")

Thunk = Callable[[], None]


# ================================================================================================ plans


@dataclass
class Plan:
    """A graph bound to thunks, and what must not change for them to stay valid."""

    graph_nodes: list[Tensor]
    steps: list[tuple[Tensor, Thunk]]
    thunks: list[Thunk]
    tensors: list[Tensor]
    #: each tensor's buffer and byte offset when planned (two flat lists: comparing them builds no tuples)
    tensor_buffers: list[Buffer | None]
    offsets: list[int | None]
    srcs: list[list[Tensor | None]]
    memory: list[tuple[Buffer, Any]] = field(default_factory=list)
    buffers: list[Buffer] = field(init=False)
    arrays: list[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.buffers = [b for b, _ in self.memory]
        self.arrays = [m for _, m in self.memory]

    def memory_current(self) -> bool:
        """True while every buffer the plan uses still holds the memory it had (not freed, not replaced)."""
        return all(map(operator.is_, map(_HOST_ARRAY, self.buffers), self.arrays))

    def valid_for(self, graph: Graph) -> bool:
        """True while the graph, its operands and every tensor's memory are as they were when planned.

        List comprehensions, not ``map(attrgetter)``: CPython specialises their slot reads, about twice as fast
        (the bench model's decode graph, 128 nodes and 180 tensors: ~47 → ~20 µs a step on a Zen 3 guest)."""
        tensors = self.tensors
        return (
            graph.nodes == self.graph_nodes
            and [n.src for n in self.graph_nodes] == self.srcs
            and [t.buffer for t in tensors] == self.tensor_buffers
            and [t.data_offset for t in tensors] == self.offsets
            and self.memory_current()
        )


def _computed(node: Tensor) -> bool:
    """True for the nodes a plan runs a kernel for (not views, not inputs, not empty)."""
    return not (node.is_view_op or node.op == GGMLOp.NONE or node.is_empty or not node.flags & TensorFlag.COMPUTE)


def _involved(graph: Graph) -> list[Tensor]:
    """Every tensor whose memory a thunk may read or write: the nodes, their operands and views' sources."""
    seen: dict[int, Tensor] = {}
    for node in graph.nodes:
        for t in (node, *node.src, node.view_src):
            if t is not None and t.id not in seen:
                seen[t.id] = t
    return list(seen.values())


class Engine:
    """Plans and replays graphs for one CPU backend.

    :param name: the backend's name (for error messages)
    :param n_threads: threads for BLAS and the compiled kernels
    """

    #: plans kept per engine (the least recently used dropped first; a tensor-parallel step computes about 20 graphs
    #: per device in turn). A plan's views keep its buffers' memory alive, so plans are also dropped when their
    #: graph is garbage-collected and when a buffer they use was freed or replaced.
    MAX_PLANS: Final = 64

    def __init__(self, name: str, n_threads: int) -> None:
        self.name = name
        self.threads = Threads(n_threads)
        self.weights_cache: matmul.WeightsCache | None = None
        self._plans: dict[int, Plan] = {}
        self._finalizers: dict[int, weakref.finalize] = {}
        #: how many times a graph was (re-)planned; tests read it
        self.n_plans = 0

    def _bind(self, node: Tensor) -> Thunk:
        if node.op == GGMLOp.MUL_MAT and ops.KERNELS.supports(node):
            return matmul.bind_mul_mat(node, self.weights_cache)
        return ops.KERNELS.get(node)(node)

    def plan(self, graph: Graph) -> Plan:
        """The graph's plan: the cached one while valid, else a new one."""
        cached = self._plans.get(graph.uid)
        if cached is not None and cached.valid_for(graph):
            self._plans[graph.uid] = self._plans.pop(graph.uid)  # the most recently used last
            return cached
        steps: list[tuple[Tensor, Thunk]] = []
        nodes = graph.nodes
        fused: Tensor | None = None  # the node a fused thunk of the previous step already computes
        for i, node in enumerate(nodes):
            if node is fused or not _computed(node):
                continue
            try:
                nxt = nodes[i + 1] if i + 1 < len(nodes) else None
                pair = bind_pair(node, nxt, graph.use_counts) if nxt is not None and _computed(nxt) else None
                if pair is not None:
                    fused = nxt
                steps.append((node, pair or self._bind(node)))
            except (NotImplementedError, UnsupportedOpError, TensorError, ValueError) as exc:
                raise ComputeError(node, self.name, str(exc)) from exc
        tensors = _involved(graph)
        buffers = {id(b): b for b in map(buffer_of, tensors) if b is not None}
        plan = Plan(
            graph_nodes=list(graph.nodes),
            steps=steps,
            thunks=[thunk for _, thunk in steps],
            tensors=tensors,
            tensor_buffers=[buffer_of(t) for t in tensors],
            offsets=[t.data_offset for t in tensors],
            srcs=[list(n.src) for n in graph.nodes],
            memory=[(b, b.host_array()) for b in buffers.values()],
        )
        stale = [uid for uid, p in self._plans.items() if not p.memory_current()]
        for uid in [*stale, graph.uid]:
            self._plans.pop(uid, None)
        if len(self._plans) >= self.MAX_PLANS:
            self._plans.pop(next(iter(self._plans)))
        if graph.uid not in self._finalizers:
            self._finalizers[graph.uid] = weakref.finalize(graph, self._drop, graph.uid)
        self._plans[graph.uid] = plan
        self.n_plans += 1
        return plan

    def _drop(self, uid: int) -> None:
        self._plans.pop(uid, None)
        self._finalizers.pop(uid, None)

    def forget(self) -> None:
        """Drop every plan (the next compute re-binds)."""
        self._plans.clear()

    def compute(self, graph: Graph, abort: Callable[[], bool] | None = None) -> None:
        """Run every node of ``graph`` (synchronously)."""
        plan = self.plan(graph)
        self.threads.apply()
        with np.errstate(all="ignore"):
            if abort is None:
                self._replay(plan)
            else:
                self._replay_abortable(plan, abort)

    def _replay(self, plan: Plan) -> None:
        i = 0
        try:
            for i, thunk in enumerate(plan.thunks):  # noqa: B007 - i names the failing node below
                thunk()
        except ComputeError:
            raise
        except Exception as exc:
            raise ComputeError(plan.steps[i][0], self.name, f"{type(exc).__name__}: {exc}") from exc

    def _replay_abortable(self, plan: Plan, abort: Callable[[], bool]) -> None:
        for node, thunk in plan.steps:
            if abort():
                raise ComputeError(node, self.name, "aborted by the abort callback")
            try:
                thunk()
            except ComputeError:
                raise
            except Exception as exc:
                raise ComputeError(node, self.name, f"{type(exc).__name__}: {exc}") from exc


def describe() -> dict[str, str]:
    """The engine's runtime facts for ``features()``: compiled kernels, cache, BLAS thread control."""
    reason = quant.disabled_reason()
    out = {
        "compiled kernels": f"numba ({quant.max_threads()} threads max)" if reason is None else f"off: {reason}",
        "BLAS threads": Threads.blas_description(),
    }
    if reason is None:
        loaded = quant.numba_loaded()
        out["kernel cache"] = (quant.cache_dir() or "none (read-only)") if loaded else "(numba loads at the first use)"
    return out
