"""Running model graphs: through the scheduler (``ggml_core.sched``) when it is available, else on the CPU alone.

The :class:`Executor` is the one place that knows how graphs reach backends. With the scheduler, a graph that was
allocated last time is computed again without re-splitting (llama.cpp's graph reuse: only the inputs change between
decode steps). Without it, a single CPU backend runs the graph with every intermediate allocated once per graph
shape (``alloc_ctx_tensors`` over the graph's tensors); placing layers on several devices then needs the scheduler.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ggml_core._errors import DeviceNotFoundError
from ggml_core._tensor import Tensor
from ggml_core.alloc import alloc_ctx_tensors
from ggml_core.backend.interfaces import Backend, Buffer, BufferUsage, Device, DeviceType, buffer_of
from ggml_core.models.graph import BuiltGraph
from ggml_core.ops import GGMLOp

if TYPE_CHECKING:
    from ggml_core.models.tensor_parallel import TensorParallel

__all__ = ["Executor", "attention_nodes", "norm_pins", "scheduler_available"]


def _scheduler_class() -> Any | None:
    try:
        from ggml_core.sched import Scheduler
    except ImportError:
        return None
    return Scheduler


def attention_nodes(bg: BuiltGraph) -> list[Tensor]:
    """The attention nodes of ``bg`` (KQ, softmax, KQV, flash attention: ``blocks.ATTENTION_NODE``), cached."""
    got = bg.state.get("attention_nodes")
    if got is None:
        from ggml_core.models.blocks import ATTENTION_NODE

        got = bg.state["attention_nodes"] = [t for t in bg.graph.nodes if ATTENTION_NODE.fullmatch(t.name)]
    assert isinstance(got, list)
    return got


def pin_attention(sched: Any, bg: BuiltGraph, cpu: Backend) -> None:
    """llama.cpp's ``--no-kv-offload``: the attention runs where the cache is, on the host, whatever device holds
    the layer (``set_tensor_backend`` on every attention node; the views between follow their sources)."""
    for t in attention_nodes(bg):
        sched.set_tensor_backend(t, cpu)


def norm_pins(bg: BuiltGraph, backends: list[Backend]) -> list[tuple[Tensor, Backend]]:
    """llama.cpp's pin of each layer's ``norm``: each norm of ``bg`` that a weight scales (``mul(rms_norm(x), w)``,
    ``mul(norm(x), w)``) with the backend of that weight's device, when it runs the norm; chosen once per graph.

    The norm has no weight of its own, so the scheduler would run it where its input was computed — at a layer
    boundary, on the previous layer's device — and then two tensors would cross the boundary (the residual and the
    norm) where one does (the residual). Weights in host memory are left to the scheduler's rules (a device may
    take their ops for large batches)."""
    got = bg.state.get("norm_pins")
    if got is None:
        pins: list[tuple[Tensor, Backend]] = []
        for t in bg.graph.nodes:
            norm, weight = t.src[0], t.src[1]
            if t.op != GGMLOp.MUL or norm is None or norm.op not in (GGMLOp.RMS_NORM, GGMLOp.NORM):
                continue
            buf = buffer_of(weight) if weight is not None and weight.op == GGMLOp.NONE else None
            if buf is None or buf.usage != BufferUsage.WEIGHTS or buf.is_host:
                continue
            b = next((b for b in backends if b.supports_buft(buf.buffer_type)), None)
            if b is not None and b.supports_op(norm):
                pins.append((norm, b))
        got = bg.state["norm_pins"] = pins
    assert isinstance(got, list)
    return got


def scheduler_available() -> bool:
    """True when ``ggml_core.sched.Scheduler`` can be imported."""
    return _scheduler_class() is not None


class Executor:
    """Backends for the devices of a placement (CPU last) and the way graphs are computed on them.

    :param devices: the placement's devices in priority order; the CPU is appended when missing
    :param n_threads: threads for the CPU backend (None: its default)
    :param graph_size: the scheduler's node budget
    :param use_scheduler: None: use it when available; False: never (CPU only); True: require it
    :param op_offload: let a device take ops whose weights are in host memory (large batches; ``--no-op-offload``)
    :param kv_offload: False (``--no-kv-offload``): the attention nodes run on the CPU, where the caches are
    :param split_state: ``--split-mode tensor``: every weight's split state (``ggml_core.sched.StateOf``); each
        graph is then split over ``devices`` in their order (:mod:`ggml_core.models.tensor_parallel`) and runs on
        a scheduler of its own
    """

    def __init__(
        self,
        devices: list[Device],
        *,
        n_threads: int | None = None,
        graph_size: int = 4096,
        use_scheduler: bool | None = None,
        op_offload: bool = True,
        kv_offload: bool = True,
        split_state: Callable[[Tensor], Any] | None = None,
    ) -> None:
        self.kv_offload = kv_offload
        self.tensor_parallel: TensorParallel | None = None
        self._last: BuiltGraph | None = None
        if split_state is not None:
            self._init_tensor_parallel(devices, split_state, n_threads)
            return
        devs = [d for d in devices if d.type != DeviceType.CPU]
        cpus = [d for d in devices if d.type == DeviceType.CPU]
        if not cpus:
            from ggml_core.backend.registry import get_registry

            found = get_registry().devices_by_type(DeviceType.CPU)
            if not found:
                raise DeviceNotFoundError("CPU", [d.name for d in get_registry().devices()])
            cpus = found[:1]
        self.devices = devs + cpus[:1]
        sched_cls = _scheduler_class() if use_scheduler is not False else None
        if use_scheduler and sched_cls is None:
            raise RuntimeError("the scheduler (ggml_core.sched) is not available in this installation")
        if sched_cls is None and len(self.devices) > 1:
            names = ", ".join(d.name for d in self.devices)
            raise RuntimeError(
                f"running one model on several devices ({names}) needs the scheduler (ggml_core.sched), which is not "
                "available; place every layer on the CPU (--device CPU or --n-gpu-layers 0)"
            )
        self.backends: list[Backend] = [d.init_backend() for d in self.devices]
        self.cpu_backend = self.backends[-1]
        if n_threads is not None:
            self.cpu_backend.set_n_threads(n_threads)
        self.sched: Any | None = (
            sched_cls(self.backends, None, graph_size=graph_size, parallel=False, op_offload=op_offload)
            if sched_cls is not None
            else None
        )

    def _init_tensor_parallel(
        self, devices: list[Device], split_state: Callable[[Tensor], Any], n_threads: int | None
    ) -> None:
        from ggml_core.models.tensor_parallel import TensorParallel

        self.devices = list(devices)
        self.backends = [d.init_backend() for d in self.devices]
        cpus = [b for b in self.backends if b.device.type == DeviceType.CPU]
        host = None
        if not cpus:
            from ggml_core.backend.registry import get_registry

            host = get_registry().init_backend("CPU")
            self.backends.append(host)
            cpus = [host]
        self.cpu_backend = cpus[0]
        if n_threads is not None:
            self.cpu_backend.set_n_threads(n_threads)
        self.tensor_parallel = TensorParallel(self.backends[: len(self.devices)], split_state, host)
        self.sched = None
        self._tp_sched: Any | None = None  # the scheduler of the last split graph

    @property
    def uses_scheduler(self) -> bool:
        """True when graphs go through the scheduler (one per split graph under ``-sm tensor``)."""
        return self.sched is not None or self.tensor_parallel is not None

    @property
    def n_splits(self) -> int:
        """Splits of the last graph (1 without the scheduler)."""
        sched = self._tp_sched if self.tensor_parallel is not None else self.sched
        if sched is None:
            return 1
        return int(sched.n_splits)

    def plan(self) -> Any | None:
        """The scheduler's plan of the last graph (None without the scheduler)."""
        sched = self._tp_sched if self.tensor_parallel is not None else self.sched
        return None if sched is None else sched.plan()

    def reserve(self, bg: BuiltGraph) -> None:
        """Size the compute buffers for the worst-case graph (scheduler only). Under ``-sm tensor``: split it
        (the first split allocates the shards) and allocate it once, so that missing memory shows now."""
        if self.tensor_parallel is not None:
            tp = self.tensor_parallel.split(bg)
            tp.alloc()
            self._tp_sched = tp.scheduler
            self._last = bg
            return
        if self.sched is not None:
            self._pin(bg)
            self.sched.reserve(bg.graph)
            self._last = None

    def compute(self, bg: BuiltGraph, set_inputs: Callable[[BuiltGraph], None]) -> None:
        """Allocate ``bg`` (unless it was the last graph), write its inputs, compute it."""
        if self.tensor_parallel is not None:
            tp = self.tensor_parallel.split(bg)
            if self._last is not bg:
                tp.alloc()
                self._tp_sched = tp.scheduler
                self._last = bg
            set_inputs(bg)
            tp.compute()
            return
        if self.sched is not None:
            if self._last is not bg:
                if hasattr(self.sched, "reset"):
                    self.sched.reset()
                self._pin(bg)
                self.sched.alloc_graph(bg.graph)
                self._last = bg
            set_inputs(bg)
            self.sched.graph_compute(bg.graph)
            return
        if "buffer" not in bg.state:
            bg.state["buffer"] = _alloc_graph(bg, self.cpu_backend)
        set_inputs(bg)
        self.cpu_backend.graph_compute(bg.graph)

    def _pin(self, bg: BuiltGraph) -> None:
        if self.sched is None or len(self.backends) < 2:
            return
        for norm, backend in norm_pins(bg, self.backends):
            self.sched.set_tensor_backend(norm, backend)
        if not self.kv_offload:
            pin_attention(self.sched, bg, self.cpu_backend)

    def release(self, bg: BuiltGraph) -> None:
        """Free what ``bg`` holds (its CPU buffer without the scheduler)."""
        buf = bg.state.pop("buffer", None)
        if isinstance(buf, Buffer):
            buf.free()
        tp = bg.state.get("tensor_parallel")
        if self.tensor_parallel is not None and tp is not None and tp is not self.tensor_parallel.owner:
            self.tensor_parallel.release(bg)
        if self._last is bg:
            self._last = None

    def free(self) -> None:
        """Release the scheduler's compute buffers and the backends."""
        if self.sched is not None:
            self.sched.allocator.free()  # the compute buffers; the last plan stays readable (n_splits)
        owner = self.tensor_parallel.owner if self.tensor_parallel is not None else None
        if owner is not None:
            owner.scheduler.allocator.free()
        for b in self.backends:
            b.free()


def _alloc_graph(bg: BuiltGraph, backend: Backend) -> Buffer:
    seen: set[int] = set()
    todo: list[Tensor] = []
    for t in itertools.chain(bg.graph.leafs, bg.graph.nodes, bg.inputs.values()):
        if t.id not in seen and t.buffer is None:
            seen.add(t.id)
            todo.append(t)
    return alloc_ctx_tensors(todo, backend)
