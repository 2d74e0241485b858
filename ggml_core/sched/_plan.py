"""The split plan as data (:class:`SchedPlan`) and ggml's ``GGML_SCHED_DEBUG`` printout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from ggml_core._tensor import TensorFlag
from ggml_core.ops._enum import VIEW_OPS

if TYPE_CHECKING:
    from ggml_core.backend.interfaces import Backend
    from ggml_core.sched._split import SplitResult

__all__ = ["InputCopy", "SchedPlan", "SplitPlan", "build_plan", "fmt_size", "print_assignments"]


@dataclass(frozen=True)
class InputCopy:
    """One tensor copied to a split's device before the split runs."""

    #: the tensor copied
    name: str
    #: the backend it lives on
    from_backend: str
    #: the split's backend
    to_backend: str
    #: bytes copied per compute
    nbytes: int
    #: the name of the copy (``"<to>#<name>#<c>"``)
    copy_name: str = ""
    #: ``Tensor.id`` of the tensor copied
    tensor_id: int = 0
    #: ``Tensor.id`` of the nodes that read the copy (this split's, and later splits' on the same backend)
    consumer_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class SplitPlan:
    """One split: a run of consecutive nodes on one backend."""

    index: int
    #: the backend's name
    backend: str
    #: names of the split's nodes, in order (view ops included)
    nodes: tuple[str, ...]
    #: the inputs copied to this split's backend before it runs
    inputs: tuple[InputCopy, ...]
    #: ``Tensor.id`` of each node
    node_ids: tuple[int, ...] = ()
    #: op of each node (``op_desc``)
    ops: tuple[str, ...] = ()
    #: position of the first node in the graph and one past the last
    i_start: int = 0
    i_end: int = 0

    @property
    def n_compute(self) -> int:
        """Nodes that run a kernel (view ops excluded)."""
        return sum(1 for op in self.ops if op not in _VIEW_NAMES)

    @property
    def bytes_copied(self) -> int:
        """Bytes copied into this split per compute."""
        return sum(c.nbytes for c in self.inputs)


_VIEW_NAMES = frozenset(op.name for op in VIEW_OPS)


@dataclass(frozen=True)
class SchedPlan:
    """What the scheduler decided for one graph: the splits, their input copies, every tensor's backend.

    ``n_copies`` here counts the input copies made per compute (what crosses between devices); the scheduler's own
    ``Scheduler.n_copies`` is ggml's pipeline copy count (1, or 4 with ``parallel=True``), given here as
    ``pipeline_copies``.
    """

    splits: tuple[SplitPlan, ...]
    #: backend names in priority order
    backends: tuple[str, ...]
    n_splits: int
    #: input copies per compute (sum of every split's inputs)
    n_copies: int
    #: ggml's n_copies: copies of each input kept for pipeline parallelism
    pipeline_copies: int = 1
    #: ``Tensor.id`` → backend name, for every node and leaf of the graph
    assignments: Mapping[int, str] = field(default_factory=dict)
    #: ``Tensor.id`` → why it went there (ggml's cause codes: ``1.wgt0``, ``2.sup``, ``usr``...)
    causes: Mapping[int, str] = field(default_factory=dict)
    #: compute buffer bytes per backend name
    buffer_sizes: Mapping[str, int] = field(default_factory=dict)
    n_nodes: int = 0

    @property
    def bytes_copied(self) -> int:
        """Bytes copied between devices per compute."""
        return sum(s.bytes_copied for s in self.splits)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        d = asdict(self)
        d["assignments"] = {str(k): v for k, v in self.assignments.items()}
        d["causes"] = {str(k): v for k, v in self.causes.items()}
        d["bytes_copied"] = self.bytes_copied
        return d


def build_plan(
    res: SplitResult, backends: Sequence[Backend], pipeline_copies: int, buffer_sizes: Mapping[str, int]
) -> SchedPlan:
    """The data view of a split result."""
    names = [be.name for be in backends]
    consumers: dict[int, list[int]] = {}  # copy tensor id → nodes reading it (in any later split too)
    for node, _j, _orig, cpy in res.rewires:
        consumers.setdefault(cpy.id, []).append(node.id)
    splits = []
    for k, sp in enumerate(res.splits):
        nodes = sp.graph.nodes if sp.graph is not None else []
        inputs = []
        for t in sp.inputs:
            cpy = res.copy_of(t, sp.backend_id, res.cur_copy)
            inputs.append(
                InputCopy(
                    name=t.name,
                    from_backend=names[res.ids[t.id]],
                    to_backend=names[sp.backend_id],
                    nbytes=t.nbytes,
                    copy_name=cpy.name,
                    tensor_id=t.id,
                    consumer_ids=tuple(dict.fromkeys(consumers.get(cpy.id, ()))),
                )
            )
        splits.append(
            SplitPlan(
                index=k,
                backend=names[sp.backend_id],
                nodes=tuple(t.name for t in nodes),
                inputs=tuple(inputs),
                node_ids=tuple(t.id for t in nodes),
                ops=tuple(t.op_desc for t in nodes),
                i_start=sp.i_start,
                i_end=sp.i_end,
            )
        )
    tensors = [*res.graph.leafs, *res.graph.nodes]
    return SchedPlan(
        splits=tuple(splits),
        backends=tuple(names),
        n_splits=len(splits),
        n_copies=sum(len(s.inputs) for s in splits),
        pipeline_copies=pipeline_copies,
        assignments={t.id: names[res.ids[t.id]] for t in tensors if res.ids.get(t.id, -1) >= 0},
        causes={t.id: res.causes.get(t.id, "") for t in tensors},
        buffer_sizes=dict(buffer_sizes),
        n_nodes=len(res.graph.nodes),
    )


def fmt_size(n: int) -> str:
    """ggml's ``fmt_size``: whole MiB from 1 MiB up, else whole KiB."""
    return f"{n // 1024 // 1024}M" if n >= 1024 * 1024 else f"{n // 1024}K"


def _f(s: str, w: int) -> str:
    # printf("%w.ws"): right-aligned, truncated
    return s[:w].rjust(w)


def print_assignments(res: SplitResult, backends: Sequence[Backend], level: int, out: TextIO) -> None:
    """ggml's ``ggml_backend_sched_print_assignments``: the splits and their inputs; per node with level > 1."""
    graph = res.graph
    names = [be.name for be in backends]
    cur = 0
    lines: list[str] = []

    def bname(t_id: int) -> str:
        b = res.ids.get(t_id, -1)
        return names[b] if b >= 0 else "NULL"

    for i, node in enumerate(graph.nodes):
        if cur < len(res.splits) and i == res.splits[cur].i_start:
            sp = res.splits[cur]
            head = f"\n## SPLIT #{cur}: {names[sp.backend_id]} # {len(sp.inputs)} inputs"
            if sp.inputs:
                head += ": " + "".join(f"[{t.name} ({_f(fmt_size(t.nbytes), 5)})] " for t in sp.inputs)
            lines.append(head + "\n")
            cur += 1
        if node.op in VIEW_OPS or level <= 1:
            continue
        use = graph.use_counts.get(node.id, 0)
        computed = 1 if node.flags & TensorFlag.COMPUTE else 0
        line = (
            f"node #{i:3d} ({_f(node.op_desc, 10)}): {_f(node.name, 20)} ({_f(fmt_size(node.nbytes), 5)}) "
            f"[{_f(bname(node.id), 5)} {_f(res.causes.get(node.id, ''), 8)}] use={use},c={computed}:"
        )
        for s in node.src:
            if s is None:
                continue
            cause = res.causes.get(s.id, "")
            line += f" {_f(s.name, 20)} ({_f(fmt_size(s.nbytes), 5)}) [{_f(bname(s.id), 5)} {_f(cause, 8)}]"
        lines.append(line + "\n")
    out.write("".join(lines))
    out.flush()
