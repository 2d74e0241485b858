"""The scheduler (ggml's ``ggml_backend_sched``): one graph on several backends.

Typical use (as llama.cpp)::

    sched = Scheduler([gpu, cpu])      # priority order, the CPU last
    sched.reserve(worst_case_graph)    # plan the compute buffers once
    sched.alloc_graph(graph)           # place, split, bind memory (reuses the reservation)
    x.set_data(...)                    # inputs are set after alloc_graph
    sched.graph_compute(graph)         # copies, computes, events
    out.to_numpy()

Differences from ggml, all on the side of safety:

- the user's graph is left as it was: operands the scheduler rewires to device copies are rewired only while a
  compute runs (from ``graph_compute_async`` until :meth:`Scheduler.synchronize`, which ``graph_compute`` calls);
- a graph seen before (same graph object, same pre-allocated tensors, same user assignments) reuses its placement
  and splits instead of running the passes again, and its allocation instead of binding everything again;
- failures raise the core's exceptions naming node, op and devices, and poison unfinished results (see
  :mod:`ggml_core.sched._exec`); the eval callback cancelling stops the whole graph, not just one split;
- an override set with :meth:`set_tensor_backend` survives the automatic reset of ``graph_compute``; an explicit
  :meth:`reset` clears it (as ggml).
"""

from __future__ import annotations

import os
import sys
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from ggml_core._errors import AllocationError, GraphError
from ggml_core._graph import Graph
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.alloc._gallocr import GraphAllocator
from ggml_core.backend.interfaces import (
    Backend,
    BufferType,
    DeviceType,
    Event,
    check_graph_memory,
    compute_locks,
    computing,
)
from ggml_core.sched._exec import EvalCallback, compute_splits, poison
from ggml_core.sched._placement import Placer
from ggml_core.sched._plan import SchedPlan, build_plan, print_assignments
from ggml_core.sched._split import SplitResult, split_graph

__all__ = ["DEFAULT_SCHED_GRAPH_SIZE", "MAX_BACKENDS", "MAX_COPIES", "Scheduler"]

_INPUT: Final = int(TensorFlag.INPUT)  # plain ints: IntFlag arithmetic is slow in hot loops

#: ``GGML_SCHED_MAX_BACKENDS``
MAX_BACKENDS: Final = 16
#: ``GGML_SCHED_MAX_COPIES``: input copies kept with ``parallel=True``
MAX_COPIES: Final = 4
#: the most nodes + leafs a graph may have unless ``graph_size`` says otherwise
DEFAULT_SCHED_GRAPH_SIZE: Final = 8192
#: how many split results are kept for graphs seen again
_SPLIT_CACHE: Final = 8


class Scheduler:
    """Runs graphs over several backends: placement, splits, input copies, one compute buffer per backend.

    :param backends: in priority order (index 0 first); the last must be a CPU backend, as in ggml
    :param bufts: the buffer type each backend takes compute memory from (default: its device's)
    :param graph_size: the most nodes + leafs of a graph this scheduler accepts
    :param parallel: keep :data:`MAX_COPIES` copies of every split input, rotated per :meth:`alloc_graph`, so the
        upload for one batch overlaps the compute of the previous one (pipeline parallelism); events order them
        where devices offer events
    :param op_offload: let an accelerator take an op whose weights are in host memory when it says so
        (``offload_op``, e.g. large batches)
    """

    def __init__(
        self,
        backends: Sequence[Backend],
        bufts: Sequence[BufferType | None] | None = None,
        graph_size: int = DEFAULT_SCHED_GRAPH_SIZE,
        parallel: bool = False,
        op_offload: bool = True,
    ) -> None:
        self.backends: list[Backend] = list(backends)
        if not self.backends:
            raise ValueError("Scheduler needs at least one backend (the CPU, last)")
        if len(self.backends) > MAX_BACKENDS:
            raise ValueError(f"Scheduler takes at most {MAX_BACKENDS} backends, got {len(self.backends)}")
        if len({id(b) for b in self.backends}) != len(self.backends):
            raise ValueError("Scheduler: the same backend object is given twice")
        last = self.backends[-1]
        if last.device.type != DeviceType.CPU:
            raise ValueError(
                f"Scheduler: the last backend must be the CPU (inputs and fallbacks go there), got {last.name}; "
                "pass the backends in priority order with the CPU last"
            )
        if bufts is not None and len(bufts) != len(self.backends):
            raise ValueError(f"Scheduler: {len(bufts)} buffer types for {len(self.backends)} backends")
        self.bufts: list[BufferType] = []
        for i, be in enumerate(self.backends):
            buft = bufts[i] if bufts is not None and bufts[i] is not None else be.default_buffer_type
            assert buft is not None
            if not be.supports_buft(buft):
                raise ValueError(f"Scheduler: backend {be.name} cannot use buffer type {buft.name}")
            self.bufts.append(buft)
        if graph_size <= 0:
            raise ValueError(f"Scheduler: graph_size must be positive, got {graph_size}")
        self.graph_size = graph_size
        self.op_offload = op_offload
        #: ggml's n_copies: copies of every input kept for pipeline parallelism (1, or MAX_COPIES when parallel)
        self.n_copies = MAX_COPIES if parallel else 1
        #: ``events[backend][copy]`` (only with parallel=True, and only for devices that have events)
        self.events: list[list[Event | None]] = [
            [be.device.event_new() if self.n_copies > 1 else None for _ in range(self.n_copies)] for be in self.backends
        ]
        self.allocator = GraphAllocator(self.bufts)
        self._placer = Placer(self.backends, self.bufts, op_offload, self.allocator.external_buffer)
        self.debug = _env_int("GGML_SCHED_DEBUG")
        #: ``GGML_SCHED_DEBUG_REALLOC``: 1 raises when a graph of unchanged size needs new memory, 2 on any re-plan
        self.debug_realloc = _env_int("GGML_SCHED_DEBUG_REALLOC")
        self._prev_size: tuple[int, int] | None = None
        self.eval_callback: EvalCallback | None = None
        self._overrides: dict[int, int] = {}
        self._cache: OrderedDict[tuple[object, ...], SplitResult] = OrderedDict()
        self._res: SplitResult | None = None  # the split result of the current graph
        self._prev_ids: tuple[list[int], list[int]] | None = None
        self._is_reset = True
        self._is_alloc = False
        self.cur_copy = 0
        self.next_copy = 0
        #: how many times the placement passes really ran (a graph seen again does not count)
        self.n_placements = 0
        #: bytes copied into splits so far (every compute; inputs and weights copied to the devices that use them)
        self.bytes_copied = 0
        #: copy only the experts a batch uses of host expert weights offloaded to a MUL_MAT_ID (ggml's behaviour)
        self.partial_expert_copy = True
        #: start a new split before a node reading another backend's result (see :func:`split_graph`): devices
        #: computing side by side (the meta device) then wait for each other only where they exchange data
        self.cut_at_copies = False

    def __repr__(self) -> str:
        return f"Scheduler([{', '.join(b.name for b in self.backends)}], n_splits={self.n_splits})"

    # ------------------------------------------------------------------------------------------- helpers

    def backend_index(self, backend: Backend) -> int:
        """The priority index of ``backend`` (ValueError when it is not one of the scheduler's)."""
        for i, b in enumerate(self.backends):
            if b is backend:
                return i
        raise ValueError(f"backend {backend.name} is not one of this scheduler's ({', '.join(self.names)})")

    @property
    def names(self) -> list[str]:
        """Backend names, in priority order."""
        return [b.name for b in self.backends]

    @property
    def n_backends(self) -> int:
        """Number of backends."""
        return len(self.backends)

    @property
    def n_splits(self) -> int:
        """Splits of the last graph split (0 before any)."""
        return len(self._res.splits) if self._res is not None else 0

    @property
    def n_input_copies(self) -> int:
        """Tensors copied between backends per compute of the last graph split."""
        return sum(len(s.inputs) for s in self._res.splits) if self._res is not None else 0

    def get_buffer_type(self, backend: Backend) -> BufferType:
        """The buffer type ``backend`` takes compute memory from."""
        return self.bufts[self.backend_index(backend)]

    def get_buffer_size(self, backend: Backend) -> int:
        """Bytes of ``backend``'s compute buffer (0 when it shares another backend's buffer type, as ggml)."""
        return self.allocator.get_buffer_size(self.backend_index(backend))

    def buffer_sizes(self) -> dict[str, int]:
        """Compute buffer bytes per backend name."""
        return {b.name: self.allocator.get_buffer_size(i) for i, b in enumerate(self.backends)}

    def set_tensor_backend(self, t: Tensor, backend: Backend) -> None:
        """Run (or keep) ``t`` on ``backend``: wins over every placement rule until :meth:`reset`."""
        self._overrides[t.id] = self.backend_index(backend)
        self._is_reset = False

    def get_tensor_backend(self, t: Tensor) -> Backend | None:
        """The backend ``t`` was placed on in the last split (or the user's assignment), else None."""
        b = self._res.ids.get(t.id, -1) if self._res is not None else -1
        if b == -1:
            b = self._overrides.get(t.id, -1)
        return self.backends[b] if b >= 0 else None

    def set_eval_callback(self, cb: EvalCallback | None) -> None:
        """``cb(t, ask) -> bool``: asked per node (ask=True: want this node's data?), then shown each wanted node
        after it is computed (ask=False: return False to cancel the rest of the graph)."""
        self.eval_callback = cb

    # ------------------------------------------------------------------------------------------- splitting

    def _key(self, graph: Graph) -> tuple[object, ...]:
        ext = self.allocator.external_buffer
        sig: list[object] = []
        for t in (*graph.leafs, *graph.nodes):
            buf = ext(t)
            if buf is None:
                sig.append(int(t.flags) & _INPUT)
            else:
                sig.append((id(buf.buffer_type), buf.usage, buf.is_host, int(t.flags) & _INPUT))
        copy = self.cur_copy if self.n_copies > 1 else 0
        return (graph.uid, len(graph.nodes), len(graph.leafs), frozenset(self._overrides.items()), tuple(sig), copy)

    def _split(self, graph: Graph) -> SplitResult:
        """ggml's ``split_graph``, or the cached result of an identical earlier call."""
        if len(graph.nodes) + len(graph.leafs) > self.graph_size:
            raise GraphError(
                f"scheduler: the graph has {len(graph.nodes)} nodes and {len(graph.leafs)} leafs, more than "
                f"graph_size={self.graph_size}; create the Scheduler with a larger graph_size"
            )
        if self._res is not None:
            self._res.undo()  # only the current result is ever applied: the graph is pristine now
        key = self._key(graph)
        res = self._cache.get(key)
        if res is not None:
            self._cache.move_to_end(key)
            res.apply()
        else:
            self._placer.place(graph, self._overrides)
            res = split_graph(self._placer, graph, key, self.n_copies, self.cur_copy, cut_at_copies=self.cut_at_copies)
            self.n_placements += 1
            self._cache[key] = res
            while len(self._cache) > _SPLIT_CACHE:
                self._cache.popitem(last=False)
        self._res = res
        self._is_reset = False
        if self.debug:
            print_assignments(res, self.backends, self.debug, sys.stderr)
        return res

    def _alloc_splits(self, res: SplitResult) -> None:
        ids = (res.node_ids, res.leaf_ids)
        changed = self._prev_ids is None or _bufts_changed(self.bufts, self._prev_ids, ids)
        self._prev_ids = ids
        size = (len(res.alloc_graph.nodes), len(res.alloc_graph.leafs))
        prev_size, self._prev_size = self._prev_size, size
        if not changed and self.allocator.alloc_graph(res.alloc_graph):
            return
        if self.debug_realloc and ((not changed and prev_size == size) or self.debug_realloc > 1):
            raise GraphError(
                f"scheduler: unexpected graph reallocation ({size[0]} nodes, {size[1]} leafs, "
                f"GGML_SCHED_DEBUG_REALLOC={self.debug_realloc}): the graph changed without changing size"
            )
        # the re-allocation may move split inputs: finish all work first (without touching cur_copy)
        for be in self.backends:
            be.synchronize()
        self.allocator.reserve(res.alloc_graph, res.node_ids, res.leaf_ids)
        if not self.allocator.alloc_graph(res.alloc_graph):
            raise AllocationError(
                ", ".join(self.names), 0, reason="the graph does not fit the compute buffers just reserved for it"
            )

    # ------------------------------------------------------------------------------------------- public API

    def reserve(self, graph: Graph) -> bool:
        """Measure ``graph`` (a worst case) and allocate the compute buffers for it; binds nothing, then resets.

        Raises :class:`~ggml_core.AllocationError` (device, size, the node at the peak) when a buffer cannot be had.
        """
        self.synchronize()
        res = self._split(graph)
        self.allocator.reserve(res.alloc_graph, res.node_ids, res.leaf_ids)
        self._prev_ids = (res.node_ids, res.leaf_ids)
        self._prev_size = (len(res.alloc_graph.nodes), len(res.alloc_graph.leafs))
        self.reset(keep_overrides=True)
        return True

    def reserve_size(self, graph: Graph) -> dict[str, int]:
        """The compute buffer bytes per backend name ``graph`` would need (a dry run; nothing is allocated)."""
        self.reset(keep_overrides=True)
        self.synchronize()
        res = self._split(graph)
        sizes = self.allocator.reserve_size(res.alloc_graph, res.node_ids, res.leaf_ids)
        self.reset(keep_overrides=True)
        return {b.name: sizes[i] for i, b in enumerate(self.backends)}

    def alloc_graph(self, graph: Graph) -> bool:
        """Place and split ``graph`` and bind its tensors to compute memory; set inputs after this.

        Returns True; allocation failures raise :class:`~ggml_core.AllocationError`, placement failures
        :class:`~ggml_core.UnsupportedOpError`.
        """
        if self._is_alloc:
            self.reset(keep_overrides=True)
        self.cur_copy = self.next_copy
        self.next_copy = (self.next_copy + 1) % self.n_copies
        res = self._split(graph)
        try:
            self._alloc_splits(res)
        finally:
            res.undo()  # the graph stays as the user built it until a compute needs the rewired operands
        self._is_alloc = True
        return True

    def graph_compute_async(self, graph: Graph) -> bool:
        """Allocate ``graph`` if that was not done, then queue every split. False: the eval callback cancelled."""
        if self._is_alloc and (self._res is None or self._res.graph is not graph):
            self.reset(keep_overrides=True)
        if not self._is_reset and not self._is_alloc:
            self.reset(keep_overrides=True)
        if not self._is_alloc:
            self.alloc_graph(graph)
        res = self._res
        assert res is not None
        res.apply()
        try:
            return compute_splits(self, res)
        except BaseException:
            res.undo()  # the backends were synchronised by the failure handling: nothing reads the graph now
            raise

    def graph_compute(self, graph: Graph) -> bool:
        """Compute ``graph`` and wait for it. False: the eval callback cancelled (unfinished results poisoned).

        Thread-safe as :meth:`Backend.graph_compute` is: holds every backend's compute lock, and a graph another
        thread is computing raises :class:`~ggml_core.GraphInUseError`.
        """
        with computing(graph, "scheduler"), compute_locks(self.backends):
            check_graph_memory(graph)
            return self._graph_compute(graph)

    def _graph_compute(self, graph: Graph) -> bool:
        try:
            ok = self.graph_compute_async(graph)
            try:
                for be in self.backends:
                    be.synchronize()
            except Exception:
                # an asynchronous failure: which split it hit is unknown, so nothing computed can be trusted
                if self._res is not None:
                    poison(self.allocator.owns, self._res.graph.nodes)
                raise
        finally:
            self._release()
        return ok

    def synchronize(self) -> None:
        """Wait for every backend; gives rewired operands back to the graph's nodes."""
        try:
            for be in self.backends:
                be.synchronize()
        finally:
            self._release()

    def _release(self) -> None:
        if self._res is not None:
            self._res.undo()
        if not self._is_alloc:
            self.next_copy = 0  # the same copy every time between graphs (stable device graphs)

    def reset(self, keep_overrides: bool = False) -> None:
        """Forget the current graph's placement and allocation; user assignments too unless ``keep_overrides``."""
        if self._res is not None:
            self._res.undo()
        if not keep_overrides:
            self._overrides.clear()
        self._is_reset = True
        self._is_alloc = False

    def plan(self) -> SchedPlan:
        """The current split plan as data (after :meth:`reserve`, :meth:`alloc_graph` or a compute)."""
        if self._res is None:
            raise GraphError("scheduler: no graph was split yet; call reserve(), alloc_graph() or graph_compute()")
        return build_plan(self._res, self.backends, self.n_copies, self.buffer_sizes())

    def free(self) -> None:
        """Release the compute buffers and every cached split."""
        self.reset()
        for res in self._cache.values():
            res.undo()
        self._cache.clear()
        self._res = None
        self._prev_ids = None
        self.allocator.free()


def _bufts_changed(
    bufts: Sequence[BufferType], prev: tuple[list[int], list[int]], cur: tuple[list[int], list[int]]
) -> bool:
    """True when a node or leaf moved to a backend with another buffer type (ggml's ``backend_ids_changed``)."""
    for p, c in zip(prev, cur, strict=True):
        if p is c:
            continue
        if len(p) != len(c):
            return True
        for a, b in zip(p, c, strict=True):
            if a != b and bufts[a] is not bufts[b]:
                return True
    return False


def _env_int(name: str) -> int:
    try:
        return int(os.environ.get(name, "0") or 0)
    except ValueError:
        return 0
