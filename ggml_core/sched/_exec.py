"""Running the splits (ggml's ``ggml_backend_sched_compute_splits``): input copies, events, computes, callbacks.

Per split, in order:

- a split without inputs that follows a split on another backend first waits for that backend (the allocator
  reuses memory across splits, so its work must be finished);
- user inputs (``INPUT``) are copied with a blocking copy after the split's backend (or its event) is idle, so
  the user may overwrite the host data right after;
- other inputs: the split's stream waits for its event (or the backend), then ``cpy_tensor_async`` on the split's
  backend; where that is not offered, both backends are synchronised and a blocking copy follows;
- an expert weight in host memory that a split's first node, a MUL_MAT_ID, reads (MoE experts kept on the host and
  offloaded for a large batch) is copied only in part: the experts the batch's ids select, in runs of consecutive
  experts (ggml does this since 2025); the other experts' rows of the copy are never read;
- the split is computed (``graph_compute_async``), or with an eval callback in batches that end at each node the
  callback asks for;
- the split's event is recorded.

Failures: whatever goes wrong (a copy, a kernel, a callback cancelling) leaves no stale result that looks valid —
every node the scheduler allocated from the failing point on is filled with ``0xFF`` bytes (NaN in every float type,
-1 in integer types) before the error is raised. Memory the scheduler does not own (weights, KV caches, user
buffers) is never touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol

import numpy as np

from ggml_core._errors import ComputeError, GGMLError, TensorError
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.alloc._gallocr import GraphAllocator
from ggml_core.alloc._liveness import same_layout
from ggml_core.backend.interfaces import Backend, BufferUsage, Event
from ggml_core.ops._enum import GGMLOp

if TYPE_CHECKING:
    from ggml_core.sched._split import Split, SplitResult

__all__ = ["EvalCallback", "SchedState", "compute_splits", "poison", "tensor_copy"]

#: ``cb(tensor, ask) -> bool``: with ask=True "do you want this node's data?", with ask=False "here it is; go on?"
EvalCallback = Callable[[Tensor, bool], bool]


class SchedState(Protocol):
    """What running the splits uses of a :class:`~ggml_core.Scheduler`."""

    #: the backends, by index
    backends: list[Backend]
    #: per backend, per copy slot: the event of its last split there (None without events)
    events: list[list[Event | None]]
    #: the compute-memory allocator (which nodes it owns decides what a failure poisons)
    allocator: GraphAllocator
    #: the callback that watches (and may cancel) the computation
    eval_callback: EvalCallback | None
    #: copy only the experts a batch selects of a host expert weight
    partial_expert_copy: bool
    #: bytes copied between backends (added to while running)
    bytes_copied: int


#: the byte every float type reads as NaN (and every signed integer as -1)
POISON = 0xFF


def tensor_copy(src: Tensor, dst: Tensor) -> None:
    """``ggml_backend_tensor_copy``: a blocking byte copy between tensors of the same layout on any devices."""
    if not same_layout(src, dst):
        raise TensorError(dst, f"cannot copy {src.describe()} into a tensor of another layout")
    if src is dst:
        return
    sbuf, dbuf = src.buffer, dst.buffer
    if sbuf is None or src.data_offset is None:
        raise TensorError(src, "copy source has no memory")
    if dbuf is None or dst.data_offset is None:
        raise TensorError(dst, "copy destination has no memory")
    n = src.nbytes
    if n == 0:
        return
    host = sbuf.host_array()
    if host is not None:
        dbuf.set_tensor(dst, host[src.data_offset : src.data_offset + n].data)
        return
    host = dbuf.host_array()
    if host is not None and host.flags.writeable:
        sbuf.get_tensor(src, host[dst.data_offset : dst.data_offset + n].data)
        return
    if dbuf.cpy_tensor(src, dst):
        return
    dst.set_bytes(src.get_bytes())  # staged through the host


def poison(owned: Callable[[Tensor], bool], nodes: Iterable[Tensor]) -> list[str]:
    """Fill every scheduler-owned, non-view node with ``0xFF``; returns the errors met (best effort)."""
    errors: list[str] = []
    for t in nodes:
        if t.view_src is not None or t.op == GGMLOp.NONE or not t.is_allocated or not t.nbytes or not owned(t):
            continue
        try:
            assert t.buffer is not None
            t.buffer.memset_tensor(t, POISON)
        except Exception as exc:  # noqa: BLE001 - poisoning is best effort on a device that already failed
            errors.append(f"{t.name}: {exc}")
    return errors


def _sync_event_or(event: Event | None, sched: SchedState, b: int) -> None:
    if event is not None:
        event.synchronize()
    else:
        sched.backends[b].synchronize()


#: bytes of the next expert copied after a run (ggml: padding that keeps the last expert's tail finite for kernels
#: reading whole tiles)
_EXPERT_PAD: Final = 512


def _used_experts(sched: SchedState, res: SplitResult, split: Split, k: int, node: Tensor) -> np.ndarray:
    """The expert ids the MUL_MAT_ID ``node`` reads, sorted, unique; read from the ids' own backend when they are a
    later input of this split (not copied yet)."""
    ids = node.src[2]
    assert ids is not None
    ids_be = sched.backends[split.backend_id]
    for later in split.inputs[k + 1 :]:
        if ids is res.copy_of(later, split.backend_id, res.cur_copy):
            ids, ids_be = later, sched.backends[res.ids[later.id]]
            break
    ids_be.synchronize()
    raw = bytearray(ids.nbytes)
    assert ids.buffer is not None
    ids.buffer.get_tensor(ids, memoryview(raw))
    flat = np.frombuffer(raw, dtype=np.int32)
    # a strided ids tensor: pick its elements by their byte strides
    idx = (np.arange(ids.ne[1])[:, None] * (ids.nb[1] // 4) + np.arange(ids.ne[0])[None, :] * (ids.nb[0] // 4)).ravel()
    return np.unique(flat[idx])


def _copy_experts(sched: SchedState, res: SplitResult, split: Split, k: int, inp: Tensor, cpy: Tensor) -> int | None:
    """Copy only the used experts of ``inp`` into ``cpy``; bytes copied, or None when this input is not such a case."""
    graph = split.graph
    if not sched.partial_expert_copy or graph is None or not graph.nodes:
        return None
    node = graph.nodes[0]
    buf = inp.buffer
    if node.op != GGMLOp.MUL_MAT_ID or node.src[0] is not cpy or buf is None or inp.data_offset is None:
        return None
    host = buf.host_array() if buf.usage == BufferUsage.WEIGHTS and buf.is_host else None
    if host is None or cpy.buffer is None:
        return None
    n_expert, size = inp.ne[2], inp.nb[2]
    sched.backends[res.ids[inp.id]].synchronize()
    used = _used_experts(sched, res, split, k, node)
    if not used.size:
        return 0
    if used[0] < 0 or used[-1] >= n_expert:
        bad = int(used[0] if used[0] < 0 else used[-1])
        raise ComputeError(node, sched.backends[split.backend_id].name, f"expert id {bad} outside 0..{n_expert - 1}")
    be = sched.backends[split.backend_id]
    copied = 0
    # runs of consecutive experts: [first, last]
    breaks = np.flatnonzero(np.diff(used) != 1)
    for first, last in zip(used[np.r_[0, breaks + 1]], used[np.r_[breaks, used.size - 1]], strict=True):
        off = int(first) * size
        n = (int(last) - int(first) + 1) * size + (min(size, _EXPERT_PAD) if last < n_expert - 1 else 0)
        be.set_tensor_async(cpy, host[inp.data_offset + off : inp.data_offset + off + n].data, off)
        copied += n
    return copied


def _copy_inputs(sched: SchedState, res: SplitResult, split: Split) -> None:
    b = split.backend_id
    be = sched.backends[b]
    c = res.cur_copy
    event = sched.events[b][c]
    for k, inp in enumerate(split.inputs):
        cpy = res.copy_of(inp, b, c)
        in_b = res.ids[inp.id]
        in_be = sched.backends[in_b]
        try:
            if inp.flags & TensorFlag.INPUT:
                # the user may overwrite the data as soon as compute returns: copy now, blocking
                _sync_event_or(event, sched, b)
                tensor_copy(inp, cpy)
                sched.bytes_copied += inp.nbytes
                continue
            if event is not None:
                be.event_wait(event)
            else:
                be.synchronize()
            part = _copy_experts(sched, res, split, k, inp, cpy)
            if part is not None:
                sched.bytes_copied += part
                continue
            sched.bytes_copied += inp.nbytes
            if not be.cpy_tensor_async(in_be, inp, cpy):
                in_be.synchronize()
                _sync_event_or(event, sched, b)
                tensor_copy(inp, cpy)
        except ComputeError:
            raise
        except Exception as exc:
            why = f"{type(exc).__name__}: {exc}"
            raise ComputeError(
                inp, be.name, f"copying input of split on {be.name} from {in_be.name} failed: {why}"
            ) from exc


def _compute(sched: SchedState, split: Split, cb: EvalCallback | None) -> int:
    """Compute one split; returns -1 when done, else the index of the first node not computed (cancelled)."""
    be = sched.backends[split.backend_id]
    graph = split.graph
    assert graph is not None
    if cb is None:
        be.graph_compute_async(graph)
        return -1
    nodes = graph.nodes
    j0 = 0
    while j0 < len(nodes):
        j1 = j0
        t = nodes[j0]
        need = bool(cb(t, True))
        while not need and j1 < len(nodes) - 1:
            j1 += 1
            t = nodes[j1]
            need = bool(cb(t, True))
        be.graph_compute_async(graph.view(j0, j1 + 1))
        be.synchronize()
        if need and not cb(t, False):
            return j1 + 1
        j0 = j1 + 1
    return -1


def compute_splits(sched: SchedState, res: SplitResult) -> bool:
    """Run every split of ``res``; False when the eval callback cancelled (remaining results poisoned)."""
    prev = -1
    c = res.cur_copy
    owned = sched.allocator.owns
    for k, split in enumerate(res.splits):
        b = split.backend_id
        be = sched.backends[b]
        try:
            if not split.inputs and prev >= 0 and prev != b:
                _sync_event_or(sched.events[prev][c], sched, prev)
            _copy_inputs(sched, res, split)
            stopped = _compute(sched, split, sched.eval_callback)
        except Exception as exc:
            _fail(sched, res, k, 0, exc, be.name)
            raise AssertionError("unreachable") from exc  # pragma: no cover - _fail raises
        if stopped >= 0:
            assert split.graph is not None
            rest = [*split.graph.nodes[stopped:], *(n for s in res.splits[k + 1 :] for n in _nodes(s))]
            poison(owned, rest)
            return False
        event = sched.events[b][c]
        if event is not None:
            be.event_record(event)
        prev = b
    return True


def _nodes(split: Split) -> list[Tensor]:
    return split.graph.nodes if split.graph is not None else []


def _fail(sched: SchedState, res: SplitResult, k: int, start: int, exc: Exception, backend: str) -> None:
    """Synchronise what can be, poison results from split ``k`` on, and raise a ComputeError naming the culprit."""
    for be in sched.backends:
        with contextlib.suppress(Exception):  # the original error is the one to report
            be.synchronize()
    rest = [n for s in res.splits[k:] for n in _nodes(s)][start:]
    errors = poison(sched.allocator.owns, rest)
    note = f" (could not invalidate {len(errors)} result(s): {errors[0]})" if errors else ""
    if isinstance(exc, ComputeError):
        if note:
            exc.args = (str(exc) + note,)
        raise exc
    split = res.splits[k]
    first = _nodes(split)[0] if _nodes(split) else None
    what = f"split #{k} ({len(_nodes(split))} nodes from {first.describe() if first else '-'})"
    if isinstance(exc, GGMLError):
        raise ComputeError(first, backend, f"{what}: {exc}{note}") from exc
    raise ComputeError(first, backend, f"{what}: {type(exc).__name__}: {exc}{note}") from exc
