"""The Mamba-2 mixer (llama.cpp's ``build_mamba2_layer``): its weights and its graph.

The rolling convolution window (``r``: the last ``d_conv - 1`` inputs of every channel) is written back as the tail
of the window the batch convolved; the scan's state (``s``) is copied out of the scan's result, which holds it after
the outputs.
"""

from __future__ import annotations

from ggml_core import ops
from ggml_core._tensor import Tensor
from ggml_core.models.blocks import LayerWeight, rms_norm
from ggml_core.models.graph import GraphBuilder
from ggml_core.models.hparams import HParams
from ggml_core.models.recurrent import store_state

__all__ = ["mamba2_mixer", "mamba2_weights"]


def mamba2_weights(hp: HParams) -> list[LayerWeight]:
    """The tensors of a Mamba-2 mixer (ggml shapes), as llama.cpp's ``LLM_ARCH_MAMBA2`` loads them."""
    d_inner, d_state, n_group, n_head = hp.ssm_d_inner, hp.ssm_d_state, hp.ssm_n_group, hp.ssm_dt_rank
    conv_dim = d_inner + 2 * n_group * d_state
    return [  # (name, ggml ne, f32 only): the convolution, scan and norm vectors stay f32, as llama.cpp keeps them
        ("ssm_in.weight", (hp.n_embd, d_inner + conv_dim + n_head), False),
        ("ssm_conv1d.weight", (hp.ssm_d_conv, conv_dim), True),
        ("ssm_conv1d.bias", (conv_dim,), True),
        ("ssm_dt.bias", (n_head,), True),
        ("ssm_a", (1, n_head), True),
        ("ssm_d", (1, n_head), True),
        ("ssm_norm.weight", (d_inner // n_group, n_group), True),
        ("ssm_out.weight", (d_inner, hp.n_embd), False),
    ]


def mamba2_mixer(g: GraphBuilder, il: int, cur: Tensor) -> Tensor:
    """The Mamba-2 mixer of layer ``il`` on the normed input ``cur`` ``[n_embd, n_tokens]``.

    ``in_proj`` gives ``z | xBC | dt``; ``xBC`` goes through the causal depthwise convolution (with the cached window
    in front), its bias and SiLU; the selective scan (per-head A, grouped B/C) runs from the cached state; then
    ``y + x·D``, gated by ``silu(z)``, RMS-normed per group, projected out.
    """
    hp, kv = g.hp, g.kv
    d_conv, d_inner, d_state = hp.ssm_d_conv, hp.ssm_d_inner, hp.ssm_d_state
    n_group, n_head = hp.ssm_n_group, hp.ssm_dt_rank
    head_dim, n_t = d_inner // n_head, g.n_tokens
    conv_dim = d_inner + 2 * n_group * d_state
    r_state, s_state = kv.r[il], kv.s[il]
    assert r_state is not None and s_state is not None, f"layer {il} has no recurrent state"
    es = 4  # f32 activations

    zxbcdt = ops.mul_mat(g.layer(il, "ssm_in.weight"), cur)  # [d_in_proj, n_t]
    nb1 = zxbcdt.nb[1]
    z = ops.view_4d(zxbcdt, head_dim, n_head, n_t, 1, head_dim * es, nb1, nb1 * n_t, 0)
    xbc = ops.view_3d(zxbcdt, conv_dim, n_t, 1, nb1, nb1 * n_t, d_inner * es)
    dt = ops.view_3d(zxbcdt, n_head, n_t, 1, nb1, nb1 * n_t, (d_inner + conv_dim) * es)

    # convolution over [cached window | this batch], then keep the window's new tail
    window = ops.concat(ops.reshape_3d(r_state, d_conv - 1, conv_dim, 1), ops.transpose(xbc), 0)
    tail = ops.view_3d(window, d_conv - 1, conv_dim, 1, window.nb[1], window.nb[2], n_t * window.nb[0])
    store_state(g, tail, r_state)
    xbc = ops.silu(ops.add(ops.ssm_conv(window, g.layer(il, "ssm_conv1d.weight")), g.layer(il, "ssm_conv1d.bias")))

    # the selective scan: x, B, C are views of the convolved xBC
    nb1 = xbc.nb[1]
    x = ops.view_4d(xbc, head_dim, n_head, n_t, 1, head_dim * es, nb1, nb1 * n_t, 0)
    b = ops.view_4d(xbc, d_state, n_group, n_t, 1, d_state * es, nb1, nb1 * n_t, d_inner * es)
    c = ops.view_4d(xbc, d_state, n_group, n_t, 1, d_state * es, nb1, nb1 * n_t, (d_inner + n_group * d_state) * es)
    dt = ops.add(ops.cont(dt), g.layer(il, "ssm_dt.bias"))
    s = ops.reshape_4d(s_state, d_state, head_dim, n_head, 1)
    scan = ops.ssm_scan(s, x, dt, g.layer(il, "ssm_a"), b, c, g.inputs["s_ids"])
    store_state(g, ops.view_1d(scan, d_state * d_inner, x.nelements * es), s_state)
    row = head_dim * es
    y = ops.view_4d(scan, head_dim, n_head, n_t, 1, row, row * n_head, row * n_head * n_t, 0)

    y = ops.add(y, ops.mul(x, g.layer(il, "ssm_d")))
    y = ops.swiglu_split(ops.cont(z), y)
    y = ops.reshape_4d(y, d_inner // n_group, n_group, n_t, 1)
    y = rms_norm(g, y, g.layer(il, "ssm_norm.weight"))
    return ops.mul_mat(g.layer(il, "ssm_out.weight"), ops.reshape_2d(y, d_inner, n_t))
