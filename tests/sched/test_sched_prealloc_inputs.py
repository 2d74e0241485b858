"""A graph allocated by a GraphAllocator, inputs set, then computed by a scheduler: the inputs' data survives.

The scheduler moves such a graph into its own compute memory (the nodes are recomputed there); before this was
fixed, the inputs the user had written were left behind and the result was silently computed from zeros.
"""

from __future__ import annotations

import numpy as np

import ggml_core as g
from ggml_core import ops


def test_inputs_set_before_a_scheduler_compute_are_kept() -> None:
    ctx = g.Context()
    a, b = ctx.new_tensor_1d("f32", 8, "a"), ctx.new_tensor_1d("f32", 8, "b")
    a.set_input()
    b.set_input()
    y = ops.mul(ops.add(a, b), b)
    graph = g.build_graph(y)
    backend = g.init_backend("CPU")
    g.GraphAllocator(backend.device.buffer_type()).alloc_graph(graph)
    av, bv = np.arange(8, dtype=np.float32), np.linspace(-2, 3, 8, dtype=np.float32)
    a.set_data(av)
    b.set_data(bv)
    sched = g.Scheduler([backend])
    sched.graph_compute(graph)
    np.testing.assert_array_equal(y.to_numpy().ravel(), (av + bv) * bv)
    # and the documented order (inputs after the scheduler allocated) keeps working
    a.set_data(bv)
    sched.graph_compute(graph)
    np.testing.assert_array_equal(y.to_numpy().ravel(), (bv + bv) * bv)
