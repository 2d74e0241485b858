"""A split axis made of parts (``SplitState.segmented``): each device's indices of every part, in the order the
devices hold them, and reshapes that scale every part; the Mamba-2 and delta-net states of a fused projection."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_core import Context
from ggml_core.sched import SplitError, SplitState, delta_net_split_states, mamba2_split_states


def test_parts_are_held_part_after_part_by_each_device() -> None:
    st = SplitState.segmented(1, [(2, 1), (1, 2), (3, 0)])
    assert st.sizes == (6, 3) and st.parts == ((2, 1), (1, 2), (3, 0))
    # part 0 is 0..2, part 1 is 3..5, part 2 is 6..8: device 0 holds 0 1 | 3 | 6 7 8, device 1 holds 2 | 4 5
    assert st.device_order() == [0, 1, 3, 6, 7, 8, 2, 4, 5]
    assert st.describe() == "split(axis 1: 2+1 | 1+2 | 3+0)"
    assert SplitState.segmented(0, [(4, 2)]) == SplitState.split(0, (4, 2))  # one part: a plain split
    assert st.scaled(0, 4, 2) == SplitState.segmented(0, [(4, 2), (2, 4), (6, 0)])
    assert st.scaled(0, 1, 2) is None  # 1 / 2 is not whole


def test_mamba2_in_proj_parts_follow_the_groups() -> None:
    """d_inner 8 in 4 heads of 2, 2 groups of d_state 3, over 2 devices: each takes one group and its 2 heads."""
    state_of = mamba2_split_states((1, 1), d_inner=8, d_state=3, n_group=2, n_head=4, d_conv=4)
    ctx = Context("t")
    w = ctx.new_tensor("f32", (5, 8 + 8 + 2 * 2 * 3 + 4), "blk.0.ssm_in.weight")
    st = state_of(w)
    assert st == SplitState.segmented(1, [(4, 4), (4, 4), (3, 3), (3, 3), (2, 2)])
    rows = np.arange(w.ne[1])
    mine = rows[st.device_order()][: st.sizes[0]]  # device 0: z, x of heads 0-1, B and C of group 0, dt of heads 0-1
    assert mine.tolist() == [0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 22, 23, 24, 28, 29]
    assert state_of(ctx.new_tensor("f32", (3 * 14, 1), "cache_r_l3")) == SplitState.segmented(
        0, [(12, 12), (9, 9), (9, 9)]
    )
    with pytest.raises(SplitError, match="cannot split 2 SSM groups over 3 devices"):
        mamba2_split_states((1, 1, 1), d_inner=8, d_state=3, n_group=2, n_head=4, d_conv=4)


def test_delta_net_keys_stay_on_the_first_device() -> None:
    """2 key heads, 4 value heads of 2, over 2 devices: value heads 2 + 2, q and k on the first device only."""
    state_of = delta_net_split_states((1, 1), n_k=2, n_v=4, size=2, d_conv=4)
    ctx = Context("t")
    st = state_of(ctx.new_tensor("f32", (5, 4 + 4 + 8), "blk.0.attn_qkv.weight"))
    assert st == SplitState.segmented(1, [(4, 0), (4, 0), (4, 4)])
    assert state_of(ctx.new_tensor("f32", (5,), "blk.0.ssm_norm.weight")) is None
