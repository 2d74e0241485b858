"""Graphs: ``build_forward_expand`` from output tensors, nodes in topological order, leafs apart."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Final

from ggml_core._errors import GraphError
from ggml_core._tensor import Tensor, TensorFlag
from ggml_core.ops._enum import GGMLOp

__all__ = ["DEFAULT_GRAPH_SIZE", "Graph", "build_graph"]

DEFAULT_GRAPH_SIZE: Final = 2048

_uids = itertools.count(1)
_COMPUTE: Final = TensorFlag.COMPUTE.value


class Graph:
    """A computation graph (ggml's ``ggml_cgraph``).

    ``nodes`` are tensors with an op, in an order where every operand comes first; ``leafs`` are tensors
    without an op (weights, inputs, constants). Like ggml, visiting marks every node with
    :attr:`TensorFlag.COMPUTE` and names unnamed tensors ``node_N`` / ``leaf_N``.

    :param size: the most nodes (and, separately, leafs) the graph may hold
    """

    def __init__(self, size: int = DEFAULT_GRAPH_SIZE) -> None:
        if size <= 0:
            raise GraphError(f"graph size must be positive, got {size}")
        self.size = size
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        #: how many graph nodes use each tensor (by tensor id) as an operand
        self.use_counts: dict[int, int] = {}
        #: changes whenever the graph changes; backends may cache plans per uid
        self.uid = next(_uids)
        self._visited: set[int] = set()

    def __repr__(self) -> str:
        return f"Graph({len(self.nodes)} nodes, {len(self.leafs)} leafs)"

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.nodes)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @property
    def n_leafs(self) -> int:
        """Number of leafs."""
        return len(self.leafs)

    def build_forward_expand(self, tensor: Tensor) -> Graph:
        """Add ``tensor`` and everything it depends on (``ggml_build_forward_expand``); returns self."""
        self._visit_iterative(tensor)
        self.uid = next(_uids)
        return self

    def _visit_iterative(self, root: Tensor) -> None:
        # depth-first, operands left to right, as ggml_visit_parents_graph (iterative: deep graphs are fine)
        stack: list[tuple[Tensor, int]] = [(root, 0)]
        while stack:
            t, i = stack.pop()
            if i == 0:
                if t.op != GGMLOp.NONE:
                    t.flags = int(t.flags) | _COMPUTE
                if t.id in self._visited:
                    continue
                self._visited.add(t.id)
                self.use_counts.setdefault(t.id, 0)
            # find the next operand to visit
            while i < len(t.src) and t.src[i] is None:
                i += 1
            if i < len(t.src):
                s = t.src[i]
                assert s is not None
                self.use_counts[s.id] = self.use_counts.get(s.id, 0) + 1
                stack.append((t, i + 1))
                if s.id not in self._visited:
                    stack.append((s, 0))
                elif s.op != GGMLOp.NONE:
                    s.flags = int(s.flags) | _COMPUTE
                continue
            self._append(t)

    def _append(self, t: Tensor) -> None:
        if t.op == GGMLOp.NONE and not (t.flags & TensorFlag.PARAM):
            if len(self.leafs) >= self.size:
                raise GraphError(f"graph is full: more than {self.size} leafs; create it with Graph(size=...) larger")
            if not t.name:
                t.name = f"leaf_{len(self.leafs)}"
            self.leafs.append(t)
        else:
            if len(self.nodes) >= self.size:
                raise GraphError(f"graph is full: more than {self.size} nodes; create it with Graph(size=...) larger")
            if not t.name:
                t.name = f"node_{len(self.nodes)}"
            self.nodes.append(t)

    def add_node(self, t: Tensor) -> None:
        """Append one node as it is (``ggml_graph_add_node``): its operands must already be in the graph."""
        self._visited.add(t.id)
        self._append(t)
        self.uid = next(_uids)

    def get_tensor(self, name: str) -> Tensor | None:
        """The node or leaf with this name (``ggml_graph_get_tensor``)."""
        for t in itertools.chain(self.leafs, self.nodes):
            if t.name == name:
                return t
        return None

    def view(self, i0: int, i1: int) -> Graph:
        """A graph of nodes[i0:i1] sharing the tensors (``ggml_graph_view``): no leafs, a new uid."""
        g = Graph(max(1, i1 - i0))
        g.nodes = self.nodes[i0:i1]
        g._visited = {t.id for t in g.nodes}
        g.use_counts = self.use_counts
        return g

    def node_index(self) -> dict[int, int]:
        """Map from tensor id to its position among the nodes."""
        return {t.id: i for i, t in enumerate(self.nodes)}


def build_graph(outputs: Tensor | Sequence[Tensor], size: int = DEFAULT_GRAPH_SIZE) -> Graph:
    """A new graph holding ``outputs`` and everything they depend on, expanded in order."""
    g = Graph(size)
    for t in [outputs] if isinstance(outputs, Tensor) else outputs:
        g.build_forward_expand(t)
    return g
