"""A LLaMA layer scheduled over OpenCL0 + CPU gives the CPU's result (and needs the scheduler, ggml_core.sched).

Attention weights live in OpenCL0 memory and the feed-forward weights in host memory, so the scheduler cuts the
graph into splits on both devices and copies activations between them.
"""

from __future__ import annotations

import numpy as np
import pytest

import ggml_core as g
from ggml_core import ops
from ggml_opencl import OpenCLDevice

sched = pytest.importorskip("ggml_core.sched", reason="the scheduler (ggml_core.sched) is not importable yet")

EMBD, HEADS, HEADS_KV, FF, TOKENS = 256, 4, 2, 512, 6
HEAD_DIM = EMBD // HEADS
EPS = 1e-5
ATTN = ("wq", "wk", "wv", "wo")


def _shapes() -> dict[str, tuple[int, int]]:
    kv = HEADS_KV * HEAD_DIM
    return {
        "wq": (EMBD, EMBD),
        "wk": (kv, EMBD),
        "wv": (kv, EMBD),
        "wo": (EMBD, EMBD),
        "w_gate": (FF, EMBD),
        "w_up": (FF, EMBD),
        "w_down": (EMBD, FF),
    }


def _layer(
    actx: g.Context, fctx: g.Context, ctx: g.Context, wtype: str
) -> tuple[dict[str, g.Tensor], g.Tensor, g.Tensor, g.Tensor, g.Tensor]:
    """The layer's graph: attention weights in ``actx``, feed-forward weights in ``fctx``, the rest in ``ctx``."""
    w = {
        name: (actx if name in ATTN else fctx).new_tensor_2d(wtype, cols, rows, name)
        for name, (rows, cols) in _shapes().items()
    }
    w["attn_norm"] = actx.new_tensor_1d("f32", EMBD, "attn_norm")
    w["ffn_norm"] = fctx.new_tensor_1d("f32", EMBD, "ffn_norm")
    x = ctx.new_tensor_2d("f32", EMBD, TOKENS, "x").set_input()
    pos = ctx.new_tensor_1d("i32", TOKENS, "pos").set_input()
    mask = ctx.new_tensor_2d("f32", TOKENS, TOKENS, "mask").set_input()
    h = ops.mul(ops.rms_norm(x, EPS), w["attn_norm"])
    q = ops.reshape_3d(ops.mul_mat(w["wq"], h), HEAD_DIM, HEADS, TOKENS)
    k = ops.reshape_3d(ops.mul_mat(w["wk"], h), HEAD_DIM, HEADS_KV, TOKENS)
    v = ops.reshape_3d(ops.mul_mat(w["wv"], h), HEAD_DIM, HEADS_KV, TOKENS)
    q = ops.permute(ops.rope_ext(q, pos, None, HEAD_DIM, 0, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0), 0, 2, 1, 3)
    k = ops.permute(ops.rope_ext(k, pos, None, HEAD_DIM, 0, 0, 10000.0, 1.0, 0.0, 1.0, 0.0, 0.0), 0, 2, 1, 3)
    kq = ops.soft_max_ext(ops.mul_mat(k, q), mask, 1.0 / np.sqrt(HEAD_DIM), 0.0)
    kqv = ops.mul_mat(ops.cont(ops.permute(v, 1, 2, 0, 3)), kq)
    x2 = ops.add(x, ops.mul_mat(w["wo"], ops.cont_2d(ops.permute(kqv, 0, 2, 1, 3), EMBD, TOKENS)))
    h2 = ops.mul(ops.rms_norm(x2, EPS), w["ffn_norm"])
    ffn = ops.swiglu(ops.mul_mat(w["w_gate"], h2), ops.mul_mat(w["w_up"], h2))
    out = ops.add(x2, ops.mul_mat(w["w_down"], ffn)).set_output()
    return w, x, pos, mask, out


def _values(rng: np.random.Generator) -> dict[str, np.ndarray]:
    vals = {n: rng.uniform(-1, 1, s).astype(np.float32) / np.sqrt(s[1]) for n, s in _shapes().items()}
    vals["attn_norm"] = rng.uniform(0.5, 1.5, EMBD).astype(np.float32)
    vals["ffn_norm"] = rng.uniform(0.5, 1.5, EMBD).astype(np.float32)
    vals["x"] = rng.uniform(-1, 1, (TOKENS, EMBD)).astype(np.float32)
    vals["pos"] = np.arange(2, 2 + TOKENS, dtype=np.int32)
    vals["mask"] = np.triu(np.full((TOKENS, TOKENS), -np.inf, np.float32), 1)
    return vals


def _run(wtype: str, vals: dict[str, np.ndarray], devices: list[g.Device]) -> tuple[np.ndarray, int]:
    """Run the layer; with two devices the attention weights go to the first, the FFN weights to the CPU."""
    cpu = devices[-1]
    actx, fctx, ctx = g.Context("attn-w"), g.Context("ffn-w"), g.Context("layer")
    w, x, pos, mask, out = _layer(actx, fctx, ctx, wtype)
    bufs = [g.alloc_ctx_tensors(actx, devices[0].buffer_type()), g.alloc_ctx_tensors(fctx, cpu.buffer_type())]
    for b in bufs:
        b.set_usage(g.BufferUsage.WEIGHTS)
    for name, t in w.items():
        t.set_data(vals[name])
    backends = [d.init_backend() for d in devices]
    s = sched.Scheduler(backends)
    graph = g.build_graph(out)
    s.alloc_graph(graph)
    x.set_data(vals["x"])
    pos.set_data(vals["pos"])
    mask.set_data(vals["mask"])
    s.graph_compute(graph)
    result = out.to_numpy().reshape(TOKENS, EMBD)
    n_splits = s.n_splits
    for b in bufs:
        b.free()
    return result, n_splits


@pytest.mark.parametrize("wtype", ["f32", "f16", "q8_0", "q4_K"])
def test_llama_layer_over_opencl_and_cpu_matches_cpu_alone(wtype: str, ocl: OpenCLDevice, cpu: g.Device) -> None:
    vals = _values(np.random.default_rng(7))
    alone, _ = _run(wtype, vals, [cpu])
    split, n_splits = _run(wtype, vals, [ocl, cpu])
    assert n_splits >= 2, "the layer should run on both devices"
    nmse = float(((split - alone) ** 2).sum() / (alone**2).sum())
    assert nmse < 1e-9, nmse
    assert np.isfinite(split).all()
