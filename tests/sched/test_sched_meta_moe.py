"""The meta device on a mixture-of-experts block: each expert split by its width (MUL_MAT_ID by rows and by columns,
ADD_ID biases split alike), and the partial sums kept partial through the bias, the expert weights, the sum over
the chosen experts and the residual: one all-reduce for the whole block, against a float64 numpy definition.
"""

from __future__ import annotations

import numpy as np
import pytest
from opencl_device import opencl_backend

import ggml_core as gc
from ggml_core import Context, Graph, Tensor, ops
from ggml_core.sched import MetaDevice, SplitKind, SplitState, llama_split_states

N_EMBD, N_FF, N_EXPERT, N_USED, N_TOKENS = 32, 48, 4, 2, 5
ALPHA, LIMIT = 1.702, 7.0


def _moe() -> tuple[Graph, Tensor, dict[str, Tensor]]:
    """gpt-oss's expert block (biases, SWIGLU_OAI), the router's choice and weights given as inputs."""
    ctx = Context("moe")
    x = ctx.new_tensor("f32", [N_EMBD, N_TOKENS], "x").set_input()
    ids = ctx.new_tensor("i32", [N_USED, N_TOKENS], "ids").set_input()
    wts = ctx.new_tensor("f32", [1, N_USED, N_TOKENS], "wts").set_input()
    w = {
        "gate": ctx.new_tensor("f32", [N_EMBD, N_FF, N_EXPERT], "blk.0.ffn_gate_exps.weight"),
        "up": ctx.new_tensor("f32", [N_EMBD, N_FF, N_EXPERT], "blk.0.ffn_up_exps.weight"),
        "down": ctx.new_tensor("f32", [N_FF, N_EMBD, N_EXPERT], "blk.0.ffn_down_exps.weight"),
        "gate_b": ctx.new_tensor("f32", [N_FF, N_EXPERT], "blk.0.ffn_gate_exps.bias"),
        "up_b": ctx.new_tensor("f32", [N_FF, N_EXPERT], "blk.0.ffn_up_exps.bias"),
        "down_b": ctx.new_tensor("f32", [N_EMBD, N_EXPERT], "blk.0.ffn_down_exps.bias"),
    }
    xr = ops.reshape_3d(x, N_EMBD, 1, N_TOKENS)
    gate = ops.add_id(ops.mul_mat_id(w["gate"], xr, ids), w["gate_b"], ids)
    up = ops.add_id(ops.mul_mat_id(w["up"], xr, ids), w["up_b"], ids)
    act = ops.swiglu_oai(gate, up, ALPHA, LIMIT)
    experts = ops.mul(ops.add_id(ops.mul_mat_id(w["down"], act, ids), w["down_b"], ids), wts)
    views = [ops.view_2d(experts, N_EMBD, N_TOKENS, experts.nb[2], i * experts.nb[1]) for i in range(N_USED)]
    out = ops.add(ops.add(views[0], views[1]), x).set_name("out").set_output()
    g = Graph()
    g.build_forward_expand(out)
    return g, out, w | {"x": x, "ids": ids, "wts": wts}


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)

    def mat(*shape: int) -> np.ndarray:
        return (rng.uniform(-1, 1, shape) / np.sqrt(shape[-1])).astype(np.float32)

    ids = np.stack([rng.choice(N_EXPERT, N_USED, replace=False) for _ in range(N_TOKENS)]).astype(np.int32)
    return {
        "x": rng.standard_normal((N_TOKENS, N_EMBD)).astype(np.float32),
        "ids": ids,
        "wts": rng.uniform(0, 1, (N_TOKENS, N_USED, 1)).astype(np.float32),
        "gate": mat(N_EXPERT, N_FF, N_EMBD) * 4,  # some gates past SWIGLU_OAI's limit
        "up": mat(N_EXPERT, N_FF, N_EMBD),
        "down": mat(N_EXPERT, N_EMBD, N_FF),
        "gate_b": rng.uniform(-1, 1, (N_EXPERT, N_FF)).astype(np.float32),
        "up_b": rng.uniform(-1, 1, (N_EXPERT, N_FF)).astype(np.float32),
        "down_b": rng.uniform(-1, 1, (N_EXPERT, N_EMBD)).astype(np.float32),
    }


def _reference(v: dict[str, np.ndarray]) -> np.ndarray:
    """``x + Σ_k w_k · (down_e · swiglu_oai(gate_e·x + bg_e, up_e·x + bu_e) + bd_e)``, e = ids[t, k], float64."""
    f = {k: a.astype(np.float64) for k, a in v.items() if k != "ids"}
    out = f["x"].copy()
    for t in range(N_TOKENS):
        for k in range(N_USED):
            e = int(v["ids"][t, k])
            g = np.minimum(f["gate"][e] @ f["x"][t] + f["gate_b"][e], LIMIT)
            u = np.clip(f["up"][e] @ f["x"][t] + f["up_b"][e], -LIMIT, LIMIT)
            a = g / (1 + np.exp(-ALPHA * g)) * (u + 1)
            out[t] += f["wts"][t, k, 0] * (f["down"][e] @ a + f["down_b"][e])
    return out


@pytest.mark.parametrize("proportions", [(1, 1), (3, 1)], ids=["even", "uneven"])
def test_experts_split_by_width_reduce_once(proportions: tuple[int, int]) -> None:
    backends = [gc.init_backend("cpu"), opencl_backend()]
    g, out, w = _moe()
    v = _values()
    state_of = llama_split_states(proportions, n_head=2, n_head_kv=2, head_dim=16, n_ff=N_FF)
    tp = MetaDevice(backends).split_graph(g, state_of)
    widths = (36, 12) if proportions == (3, 1) else (24, 24)
    assert tp.state(w["up"]) == SplitState.split(1, widths)
    assert tp.state(w["down"]) == SplitState.split(0, widths)
    assert tp.state(w["gate_b"]) == SplitState.split(0, widths)
    assert tp.state(w["down_b"]).kind is SplitKind.MIRRORED  # added once, after the sum
    assert tp.n_all_reduces == 1
    tp.alloc_weights()
    for key in ("gate", "up", "down", "gate_b", "up_b", "down_b"):
        tp.set_weight(w[key], v[key])
    tp.alloc()
    for key in ("x", "ids", "wts"):
        w[key].set_data(v[key])
    assert tp.compute()
    got = tp.tensor(out).to_numpy()[0, 0]
    np.testing.assert_allclose(got, _reference(v), rtol=0, atol=1e-4 * float(np.abs(_reference(v)).max()))
