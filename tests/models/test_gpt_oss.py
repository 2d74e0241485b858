"""gpt-oss (GGUF architecture ``gpt-oss``) against llama.cpp built here and against its numpy definition, on a
tiny random model written in the test: MXFP4 experts (quantized with gguf-py's quantizer), every other weight f32.

What the model exercises (the sinks, SWIGLU_OAI's clamps and the layer pattern checked to be in play): attention
sinks (one logit per head, in every softmax denominator), q/k/v/o biases, alternating sliding-window (even layers,
window 4, over 16 tokens) and full layers, YaRN rope (factor 4 over an original context of 8), the biased router
with top-k-then-softmax weights, per-expert biases (ADD_ID) and SWIGLU_OAI with values past its limit of 7.

Bounds: MXFP4 weights meet activations rounded to Q8_0 on both sides (ggml's ``vec_dot_type``), so the bound
is tests/models/test_families_vs_llama_cpp.py's for q8_0 weights, 1e-3 max |Δlogit|; with an f16 KV cache and
FLASH_ATTN_EXT, 2e-3 from the float64 definition and 1e-2 from llama.cpp (whose f16 flash attention's error
depends on its build).
The router's top-k choice and the Q8_0 rounding are the discontinuities: the test measures in the float64 reference
the smallest gap between the k-th and (k+1)-th router logit, and how close any Q8_0-rounded activation comes to a
rounding step (relative to its size), and asserts both are far above the float32 differences between implementations
(MIN_ROUTER_GAP, MIN_Q8_MARGIN), for seeds chosen so (SEED).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants
from gpt_oss_models import (
    ALPHA,
    BETA_FAST,
    BETA_SLOW,
    EXPERTS,
    FREQ_BASE,
    HEAD_DIM,
    LIMIT,
    N_HEAD,
    N_HEAD_KV,
    N_LAYER,
    N_SWA,
    N_USED,
    RMS_EPS,
    SEED,
    SEED_FULL_FIRST,
    YARN_FACTOR,
    YARN_ORIG_CTX,
    gpt_oss_weights,
    write_gpt_oss,
)
from llama_cpp_logits import TOKENS, cpu_params, llama_cpp_prompt_and_steps, prompt_and_steps

from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_core.quants import dequantize, quantize
from ggml_core.testing import llama_cpp

#: float32 rounding moves router logits (O(1)) by ~1e-6; a gap this wide cannot be crossed by it
MIN_ROUTER_GAP = 1e-3
#: ggml-core and llama.cpp compute the experts' inputs ~1e-7..1e-6 apart (relative; their logits agree to ~1e-6): a
#: value this far (relative) from a Q8_0 rounding step rounds the same on both sides, on any machine
MIN_Q8_MARGIN = 5e-6


# ------------------------------------------------------------------------------------------------ the definition


def _rms_norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * w


def _yarn_neox(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """ggml's ROPE (NEOX) with YaRN: per pair, the interpolated angle (× 1/factor) and the extrapolated one mixed
    by a ramp between the correction dims of beta_fast / beta_slow, cos and sin scaled by 1 + 0.1·ln(factor)."""
    d, half = x.shape[-1], x.shape[-1] // 2

    def corr_dim(n_rot: float) -> float:
        return d * np.log(YARN_ORIG_CTX / (n_rot * 2 * np.pi)) / (2 * np.log(FREQ_BASE))

    low, high = max(0.0, np.floor(corr_dim(BETA_FAST))), min(d - 1.0, np.ceil(corr_dim(BETA_SLOW)))
    i = np.arange(half)
    ramp = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)  # ggml's rope_yarn_ramp at i0 = 2i
    extrap = pos[:, None].astype(np.float64) * FREQ_BASE ** (-2.0 * i / d)
    theta = extrap / YARN_FACTOR * (1 - ramp) + extrap * ramp
    mscale = 1.0 + 0.1 * np.log(YARN_FACTOR)
    c, s = (np.cos(theta) * mscale)[:, None, :], (np.sin(theta) * mscale)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1)


def _q8_0(x: np.ndarray, margins: list[float]) -> np.ndarray:
    """Activations as ggml's CPU rounds them before a product with MXFP4 weights (vec_dot_type Q8_0); appends to
    ``margins`` how close (relative to |x/d|) any value came to a rounding step."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    blocks = np.abs(x32.reshape(-1, 32).astype(np.float64))
    d = blocks.max(axis=1, keepdims=True) / 127
    v = blocks / np.where(d > 0, d, 1)
    margins.append(float((np.abs(v - np.floor(v) - 0.5) / np.maximum(v, 1)).min()))
    return dequantize(quantize(x32, "q8_0"), "q8_0").reshape(x.shape).astype(np.float64)


def reference(
    w: dict[str, np.ndarray], tokens: list[int], local: tuple[bool, ...] = (True, False)
) -> tuple[np.ndarray, float, float, int]:
    """(logits [n_tokens, n_vocab], smallest router gap between the k-th and (k+1)-th logit, smallest relative
    Q8_0 rounding margin, count of gate/up
    values past SWIGLU_OAI's limit), float64 from the definition; experts as stored (MXFP4) and Q8_0 inputs."""
    st = {n: a.astype(np.float64) for n, a in w.items()}
    for n, a in w.items():
        if n.endswith(EXPERTS):
            q = gguf_quants.quantize(a, GGMLQuantizationType.MXFP4)
            st[n] = gguf_quants.dequantize(q, GGMLQuantizationType.MXFP4).astype(np.float64)
    n, pos = len(tokens), np.arange(len(tokens))
    back = pos[:, None] - pos[None, :]
    x = st["token_embd.weight"][np.asarray(tokens)]
    gap, clamped, margins = np.inf, 0, list[float]()
    for il in range(N_LAYER):
        b = f"blk.{il}."
        h = _rms_norm(x, st[b + "attn_norm.weight"])
        q, k, v = (h @ st[b + f"attn_{t}.weight"].T + st[b + f"attn_{t}.bias"] for t in "qkv")
        q = _yarn_neox(q.reshape(n, N_HEAD, HEAD_DIM), pos)
        k = _yarn_neox(k.reshape(n, N_HEAD_KV, HEAD_DIM), pos)
        v = v.reshape(n, N_HEAD_KV, HEAD_DIM)
        visible = (back >= 0) & (back < N_SWA) if local[il] else back >= 0
        out = np.empty((n, N_HEAD, HEAD_DIM))
        for hh in range(N_HEAD):
            kvh = hh // (N_HEAD // N_HEAD_KV)
            s = np.where(visible, q[:, hh] @ k[:, kvh].T / np.sqrt(HEAD_DIM), -np.inf)
            sink = st[b + "attn_sinks.weight"][hh]
            m = np.maximum(s.max(axis=1, keepdims=True), sink)
            p = np.exp(s - m)
            p /= p.sum(axis=1, keepdims=True) + np.exp(sink - m)
            out[:, hh] = p @ v[:, kvh]
        x = x + out.reshape(n, -1) @ st[b + "attn_output.weight"].T + st[b + "attn_output.bias"]
        h = _rms_norm(x, st[b + "post_attention_norm.weight"])
        logits = h @ st[b + "ffn_gate_inp.weight"].T + st[b + "ffn_gate_inp.bias"]
        ffn = np.zeros_like(x)
        for t in range(n):
            order = np.argsort(-logits[t], kind="stable")
            gap = min(gap, logits[t, order[N_USED - 1]] - logits[t, order[N_USED]])
            chosen = order[:N_USED]
            wsel = np.exp(logits[t, chosen] - logits[t, chosen].max())
            wsel /= wsel.sum()
            xa = _q8_0(h[t], margins)
            for e, we in zip(chosen, wsel, strict=True):
                gate = xa @ st[b + "ffn_gate_exps.weight"][e].T + st[b + "ffn_gate_exps.bias"][e]
                up = xa @ st[b + "ffn_up_exps.weight"][e].T + st[b + "ffn_up_exps.bias"][e]
                clamped += int((gate > LIMIT).sum() + (np.abs(up) > LIMIT).sum())
                g = np.minimum(gate, LIMIT)
                act = g / (1 + np.exp(-ALPHA * g)) * (np.clip(up, -LIMIT, LIMIT) + 1)
                y = _q8_0(act, margins) @ st[b + "ffn_down_exps.weight"][e].T + st[b + "ffn_down_exps.bias"][e]
                ffn[t] += we * y
        x = x + ffn
    logits = _rms_norm(x, st["output_norm.weight"]) @ st["output.weight"].T
    return logits, float(gap), min(margins), clamped


# ------------------------------------------------------------------------------------------------ tests


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    w = gpt_oss_weights(SEED)
    return write_gpt_oss(tmp_path_factory.mktemp("gpt_oss") / "gpt-oss.gguf", w), w


def _ours(
    path: Path, kv_type: str = "f32", flash_attn: bool = False, local: tuple[bool, ...] = (True, False)
) -> tuple[np.ndarray, np.ndarray]:
    with Model.load(path, cpu_params(kv_type=kv_type, flash_attn=flash_attn)) as m:
        assert m.hp.swa_layers == local and m.hp.attn_sinks and m.hp.moe_gating == "softmax_weight"
        return prompt_and_steps(m)


def test_gpt_oss_matches_its_definition(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    """The numpy definition: the router gap is wide, SWIGLU_OAI's clamps engage, our logits agree."""
    path, w = model
    want, gap, margin, clamped = reference(w, TOKENS)
    assert gap > MIN_ROUTER_GAP, f"router gap {gap:.2g}: the top-k choice is fragile, pick another seed"
    assert margin > MIN_Q8_MARGIN, f"Q8_0 margin {margin:.2g}: a rounding could flip, pick another seed"
    assert clamped > 0, "no gate/up value passes the limit: SWIGLU_OAI's clamp is not exercised"
    sinkless = {n: np.full_like(a, -30.0) if n.endswith("attn_sinks.weight") else a for n, a in w.items()}
    assert np.abs(reference(sinkless, TOKENS)[0] - want).max() > 1e-2  # the sinks take probability mass
    got, _ = _ours(path)
    rel = np.abs(got - want).max() / np.abs(want).max()
    # Q8_0 rounding of float32 vs float64 inputs can land one value on the other side of a rounding step
    # (one step is 1/127 of its block's largest value): bounded well under 1e-3 of the logits' scale
    assert rel < 1e-3, f"max |Δ| / max |logit| = {rel:.3g}"


@pytest.mark.usefixtures("llama_cpp_harness")
def test_gpt_oss_matches_llama_cpp(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = model
    want, want_steps = llama_cpp_prompt_and_steps(path)
    got, got_steps = _ours(path)
    assert np.abs(got - want).max() <= 1e-3, f"batch: max |Δlogit| = {np.abs(got - want).max():.3g}"
    assert np.abs(got_steps - want_steps).max() <= 1e-3, f"steps: {np.abs(got_steps - want_steps).max():.3g}"


@pytest.mark.usefixtures("llama_cpp_harness")
def test_gpt_oss_flash_attention_f16_cache_matches_llama_cpp(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    """FLASH_ATTN_EXT with the sinks added to it (``add_sinks``), f16 KV cache on both sides.

    Ours is bound tightly by the float64 definition (2e-3: what rounding K and V to f16 moves the logits, measured
    8.5e-4), and loosely by llama.cpp (1e-2): llama.cpp's own f16 flash attention is further from the definition
    and by how much depends on its build (6.0e-3 on an AVX2 build, AMD EPYC Zen 4; under 5e-3 on AVX-512 builds).
    """
    path, w = model
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f16", flash_attn=True).logits(TOKENS)
    got, got_steps = _ours(path, kv_type="f16", flash_attn=True)
    definition = reference(w, TOKENS)[0]
    for name, ours in (("batch", got), ("steps", got_steps)):
        assert np.abs(ours - definition).max() <= 2e-3, f"{name}: max |Δlogit| = {np.abs(ours - definition).max():.3g}"
        assert np.abs(ours - want).max() <= 1e-2, f"{name}: max |Δlogit| = {np.abs(ours - want).max():.3g} to llama.cpp"


def test_placement_probes_the_ops_that_read_gpt_oss_weights(model: tuple[Path, dict[str, np.ndarray]]) -> None:
    """Each weight's buffer type is chosen by asking a device about the op that reads it: ADD_ID for the
    per-expert biases, SOFT_MAX (its sinks source) for the sinks; the CPU runs every one of those probes."""
    import ggml_core as gc
    from ggml_core.models import open_gguf
    from ggml_core.models.arch import read_hparams, weight_specs
    from ggml_core.models.plan.bufts import ProbeShapes, consumer_op

    path, _ = model
    f = open_gguf(path)
    hp = read_hparams(f)
    shapes = ProbeShapes(hp.head_dim_k, hp.n_head, hp.n_rot, hp.rope_type, hp.n_expert_used)
    cpu = gc.get_device("CPU")
    kinds = {}
    for spec in weight_specs(f, hp):
        info = f.tensor_info(spec.source)
        with gc.Context("stand-in") as ctx:
            w = ctx.new_tensor(info.type, spec.ne, spec.name)
        op = consumer_op(spec.name, w, shapes)
        assert cpu.supports_op(op), f"{spec.name}: the CPU refuses its probe {op.op.name}"
        kinds[spec.name.split(".", 2)[-1]] = op.op.name
    assert kinds["ffn_up_exps.bias"] == "ADD_ID" and kinds["attn_sinks.weight"] == "SOFT_MAX"
    assert kinds["ffn_down_exps.weight"] == "MUL_MAT_ID" and kinds["attn_output.bias"] == "ADD"


@pytest.mark.usefixtures("llama_cpp_harness")
def test_sliding_window_pattern_from_the_file_matches_llama_cpp(tmp_path: Path) -> None:
    """``attention.sliding_window_pattern`` as one bool per layer (llama.cpp's ``load_swa_pattern`` reads it before
    the family's period of 2): here layer 0 full, layer 1 local, against llama.cpp and the definition."""
    w = gpt_oss_weights(SEED_FULL_FIRST)
    path = write_gpt_oss(tmp_path / "pattern.gguf", w, pattern=[False, True])
    want = llama_cpp.LlamaCpp(path, threads=1, kv_type="f32").logits(TOKENS)
    got, steps = _ours(path, local=(False, True))
    assert np.abs(got - want).max() <= 1e-3 and np.abs(steps - want).max() <= 1e-3
    ref, gap, margin, _ = reference(w, TOKENS, local=(False, True))
    assert gap > MIN_ROUTER_GAP and margin > MIN_Q8_MARGIN
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-3
    assert np.abs(ref - reference(w, TOKENS)[0]).max() > 1e-2  # the pattern is in play


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"drop": ("attention.sliding_window",)}, "attention.sliding_window"),
        ({"drop": ("expert_feed_forward_length",)}, "expert_feed_forward_length"),
        ({"rope_dimension_count": 8}, "rope.dimension_count"),
    ],
)
def test_bad_gpt_oss_metadata_is_a_one_line_error(tmp_path: Path, kw: dict[str, object], field: str) -> None:
    from ggml_core import GGUFError
    from ggml_core.models import open_gguf
    from ggml_core.models.arch import read_hparams

    path = write_gpt_oss(tmp_path / "bad.gguf", gpt_oss_weights(0), **kw)  # type: ignore[arg-type]
    with pytest.raises(GGUFError, match=field.replace(".", r"\.")) as exc:
        read_hparams(open_gguf(path))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("flash_attn", [False, True])
def test_gpt_oss_split_over_cpu_and_opencl_gives_the_cpu_logits(
    model: tuple[Path, dict[str, np.ndarray]], flash_attn: bool
) -> None:
    """One layer on each of CPU and OpenCL0 (PoCL here): the sinks, ADD_ID, SWIGLU_OAI and MXFP4 products run where
    the devices say they can, and give the CPU's logits to float32 rounding. An f32 cache: with f16 K/V each device
    rounds (and the CPU's FLASH_ATTN_EXT accumulates) in f16 its own way, ~1e-3 apart, which moves expert inputs
    across Q8_0 rounding steps (up to 0.4 wide after SWIGLU_OAI's clamp) and the logits by a few 1e-3."""
    from opencl_device import require_opencl

    require_opencl()
    path, _ = model
    kv = "f32"
    cpu, cpu_steps = _ours(path, kv, flash_attn)
    # three slots (two layers and the output): 1:2 gives layer 0 to the CPU, layer 1 and the output to OpenCL0
    req = PlacementRequest(devices=["CPU", "OpenCL0"], tensor_split=[1, 2])
    params = ModelParams(placement=req, n_ctx=64, kv_type=kv, flash_attn=flash_attn, progress=False)
    with Model.load(path, params) as m:
        assert {s.name for s in m.placement.shares if s.layers} == {"CPU", "OpenCL0"}
        split = m.process_prompt(TOKENS, all_logits=True)
        m.reset()
        steps = np.stack([m.decode([t])[-1] for t in TOKENS])
        assert m.executor.n_splits >= 2
    scale = np.abs(cpu).max()
    assert np.abs(split - cpu).max() < 1e-5 * scale and np.abs(steps - cpu_steps).max() < 1e-5 * scale
