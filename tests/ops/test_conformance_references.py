"""The numpy references of the conformance suite checked against the real ggml (ggml-python, ``import ggml``).

Each case's graph is rebuilt node by node with ggml's own builders, computed by ggml's CPU on the very input bytes
the suite generates, and compared with the case's numpy reference using the case's own check. This verifies the
references (and the builders' shapes and strides) against ggml itself. ggml aborts the process on inputs it
rejects, so the comparison runs in a child process; this file is also that child's script.

Skipped when ggml-python is not installed. ggml-python wraps an older ggml than the one ggml-core mirrors: ops
it lacks are reported and skipped, not failed.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

#: cases where ggml-python's ggml is wrong and the reference right, with the reason
KNOWN_DIFFERENCES: dict[str, str] = {
    "COUNT_EQUAL(type=i32,ne=[33,7,3,1])": (
        "ggml's CPU count_equal splits the row index of 3-D inputs with the wrong strides (ne03/ne02 where "
        "ne02*ne01/ne01 belong) and so compares the wrong rows; test-backend-ops only tries 2-D inputs"
    ),
    "RWKV_WKV7(type=f32,heads=3,size=32,n_t=9,n_s=1)": (
        "ggml's SIMD rwkv_wkv7 steps over a head in vectors of the SIMD width (64 floats with AVX-512) and so "
        "reads and writes past a head of 32; test-backend-ops only tries head size 64"
    ),
}

#: op families verified (one child process each, so that an abort loses only one family)
FAMILIES = [
    "ADD,SUB,MUL,DIV,ADD1,ACC,ADD_ID",
    "ABS,SGN,NEG,STEP,TANH,ELU,RELU,SIGMOID,GELU,GELU_QUICK,GELU_ERF,SILU,HARDSWISH,HARDSIGMOID,EXP,EXPM1,SOFTPLUS,"
    "FLOOR,CEIL,ROUND,TRUNC,XIELU",
    "SQR,SQRT,LOG,SIN,COS,CLAMP,SCALE,LEAKY_RELU",
    "REGLU,GEGLU,SWIGLU,GEGLU_ERF,GEGLU_QUICK,SWIGLU_OAI",
    "SUM,SUM_ROWS,MEAN,CUMSUM,ARGMAX,ARGSORT,TOP_K,COUNT_EQUAL",
    "NORM,RMS_NORM,L2_NORM,GROUP_NORM",
    "MUL_MAT,MUL_MAT_ID,OUT_PROD",
    "GET_ROWS,SET_ROWS,CPY,DUP,CONT",
    "REPEAT,CONCAT,PAD,ARANGE,FILL,SET,DIAG_MASK_INF,DIAG_MASK_ZERO",
    "REPEAT_BACK,PAD_REFLECT_1D,ROLL,DIAG,TRI,TIMESTEP_EMBEDDING",
    "NONE,VIEW,RESHAPE,PERMUTE,TRANSPOSE",
    "SOFT_MAX,ROPE,FLASH_ATTN_EXT",
    "IM2COL,CONV_2D,CONV_TRANSPOSE_1D,POOL_2D,UPSCALE",
    "SSM_CONV,SSM_SCAN,GATED_DELTA_NET,RWKV_WKV7",
]


# ================================================================================================ the child


class Unavailable(Exception):
    """ggml-python cannot build this node (op or type missing from its ggml)."""


def _gtype(g: Any, t: Any) -> int:
    v = getattr(g, f"GGML_TYPE_{t.name}", None)
    if v is None:
        raise Unavailable(f"ggml-python has no type {t.name}")
    return int(v)


def _fn(g: Any, name: str) -> Any:
    f = getattr(g, name, None)
    if f is None:
        raise Unavailable(f"ggml-python has no {name}")
    return f


def _translate(g: Any, gctx: Any, node: Any, m: dict[int, Any]) -> Any:
    """The ggml tensor computing ``node`` from already translated operands ``m`` (by tensor id)."""
    from ggml_core.ops import GGMLOp, GluOp, UnaryOp

    op = node.op
    s = [None if x is None else m[x.id] for x in node.src]
    i32, f32 = node.op_param_i32, node.op_param_f32
    binary = {
        GGMLOp.ADD: "ggml_add",
        GGMLOp.SUB: "ggml_sub",
        GGMLOp.MUL: "ggml_mul",
        GGMLOp.DIV: "ggml_div",
        GGMLOp.ADD1: "ggml_add1",
        GGMLOp.COUNT_EQUAL: "ggml_count_equal",
        GGMLOp.OUT_PROD: "ggml_out_prod",
        GGMLOp.MUL_MAT: "ggml_mul_mat",
        GGMLOp.GET_ROWS: "ggml_get_rows",
        GGMLOp.CPY: "ggml_cpy",
    }
    unary = {
        GGMLOp.SQR: "ggml_sqr",
        GGMLOp.SQRT: "ggml_sqrt",
        GGMLOp.LOG: "ggml_log",
        GGMLOp.SIN: "ggml_sin",
        GGMLOp.COS: "ggml_cos",
        GGMLOp.SUM: "ggml_sum",
        GGMLOp.SUM_ROWS: "ggml_sum_rows",
        GGMLOp.MEAN: "ggml_mean",
        GGMLOp.ARGMAX: "ggml_argmax",
        GGMLOp.CUMSUM: "ggml_cumsum",
        GGMLOp.DUP: "ggml_dup",
        GGMLOp.CONT: "ggml_cont",
    }
    if op in binary:
        return _fn(g, binary[op])(gctx, s[0], s[1])
    if op in unary:
        if op == GGMLOp.CONT and node.ne != node.src[0].ne:
            return _fn(g, "ggml_cont_4d")(gctx, s[0], *node.ne)
        return _fn(g, unary[op])(gctx, s[0])
    if op == GGMLOp.VIEW:
        offs = int(node.op_params[0:2].view(np.uint64)[0])
        return g.ggml_view_4d(gctx, s[0], *node.ne, *node.nb[1:], offs)
    if op == GGMLOp.PERMUTE:
        return g.ggml_permute(gctx, s[0], *[i32(i) for i in range(4)])
    if op == GGMLOp.TRANSPOSE:
        return g.ggml_transpose(gctx, s[0])
    if op == GGMLOp.RESHAPE:
        return g.ggml_reshape_4d(gctx, s[0], *node.ne)
    if op == GGMLOp.UNARY:
        name = UnaryOp(i32(0)).name
        t = g.ggml_unary(gctx, s[0], int(_fn(g, f"GGML_UNARY_OP_{name}")))
        if name == "XIELU":  # ggml stores transformed parameters; ours must have the same layout
            for i in range(1, 5):
                t.contents.op_params[i] = int(node.op_params[i])
        return t
    if op == GGMLOp.GLU and GluOp(i32(0)) == GluOp.SWIGLU_OAI:
        return g.ggml_swiglu_oai(gctx, s[0], s[1], f32(2), f32(3))
    if op == GGMLOp.GLU:
        code = int(_fn(g, f"GGML_GLU_OP_{GluOp(i32(0)).name}"))
        if s[1] is not None:
            return g.ggml_glu_split(gctx, s[0], s[1], code)
        return g.ggml_glu(gctx, s[0], code, bool(i32(1)))
    if op == GGMLOp.SCALE:
        return g.ggml_scale_bias(gctx, s[0], f32(0), f32(1))
    if op == GGMLOp.CLAMP:
        return g.ggml_clamp(gctx, s[0], f32(0), f32(1))
    if op == GGMLOp.LEAKY_RELU:
        return g.ggml_leaky_relu(gctx, s[0], f32(0), False)
    if op in (GGMLOp.ACC, GGMLOp.SET):
        f = g.ggml_acc if op == GGMLOp.ACC else g.ggml_set
        return f(gctx, s[0], s[1], i32(0), i32(1), i32(2), i32(3))
    if op in (GGMLOp.NORM, GGMLOp.RMS_NORM, GGMLOp.L2_NORM):
        return _fn(g, f"ggml_{op.name.lower()}")(gctx, s[0], f32(0))
    if op == GGMLOp.GROUP_NORM:
        return g.ggml_group_norm(gctx, s[0], i32(0), f32(1))
    if op == GGMLOp.ARGSORT:
        return g.ggml_argsort(gctx, s[0], i32(0))
    if op == GGMLOp.TOP_K:
        return g.ggml_top_k(gctx, s[0], node.ne[0])
    if op == GGMLOp.MUL_MAT_ID:
        return g.ggml_mul_mat_id(gctx, s[0], s[1], s[2])
    if op == GGMLOp.SET_ROWS:  # ours: src = [rows, indices, destination]
        return g.ggml_set_rows(gctx, s[2], s[0], s[1])
    if op == GGMLOp.REPEAT:
        return g.ggml_repeat_4d(gctx, s[0], *node.ne)
    if op == GGMLOp.CONCAT:
        return g.ggml_concat(gctx, s[0], s[1], i32(0))
    if op == GGMLOp.PAD:
        return g.ggml_pad_ext(gctx, s[0], *[i32(i) for i in range(8)])
    if op == GGMLOp.PAD_REFLECT_1D:
        return g.ggml_pad_reflect_1d(gctx, s[0], i32(0), i32(1))
    if op == GGMLOp.ROLL:
        return g.ggml_roll(gctx, s[0], *[i32(i) for i in range(4)])
    if op == GGMLOp.DIAG:
        return g.ggml_diag(gctx, s[0])
    if op == GGMLOp.TRI:
        return _fn(g, "ggml_tri")(gctx, s[0], i32(0))
    if op == GGMLOp.TIMESTEP_EMBEDDING:
        return g.ggml_timestep_embedding(gctx, s[0], i32(0), i32(1))
    if op == GGMLOp.ADD_ID:
        return g.ggml_add_id(gctx, s[0], s[1], s[2])
    if op == GGMLOp.REPEAT_BACK:
        shape = g.ggml_new_tensor(gctx, _gtype(g, node.type), 4, (ctypes.c_int64 * 4)(*node.ne))
        return g.ggml_repeat_back(gctx, s[0], shape)
    if op == GGMLOp.ARANGE:
        return g.ggml_arange(gctx, f32(0), f32(1), f32(2))
    if op == GGMLOp.FILL:
        return g.ggml_fill(gctx, s[0], f32(0))
    if op in (GGMLOp.DIAG_MASK_INF, GGMLOp.DIAG_MASK_ZERO):
        return _fn(g, f"ggml_{op.name.lower()}")(gctx, s[0], i32(0))
    if op == GGMLOp.SOFT_MAX:
        t = g.ggml_soft_max_ext(gctx, s[0], s[1], f32(0), f32(1))
        if s[2] is not None:
            g.ggml_soft_max_add_sinks(t, s[2])
        return t
    if op == GGMLOp.ROPE:
        return g.ggml_rope_ext(gctx, s[0], s[1], s[2], i32(1), i32(2), i32(4), *[f32(i) for i in range(5, 11)])
    if op == GGMLOp.FLASH_ATTN_EXT:
        t = g.ggml_flash_attn_ext(gctx, s[0], s[1], s[2], s[3], f32(0), f32(1), f32(2))
        if s[4] is not None:
            g.ggml_flash_attn_ext_add_sinks(t, s[4])
        return t
    if op == GGMLOp.SSM_CONV:
        return _fn(g, "ggml_ssm_conv")(gctx, s[0], s[1])
    if op == GGMLOp.SSM_SCAN:
        if i32(0) != 1:
            raise Unavailable("ggml-python's ssm_scan has no snapshot slots (K)")
        return _fn(g, "ggml_ssm_scan")(gctx, *s[:7])
    if op == GGMLOp.GATED_DELTA_NET:
        return _fn(g, "ggml_gated_delta_net")(gctx, *s[:6], i32(0))
    if op == GGMLOp.RWKV_WKV7:
        return _fn(g, "ggml_rwkv_wkv7")(gctx, *s[:7])
    if op == GGMLOp.IM2COL:
        return g.ggml_im2col(gctx, s[0], s[1], *[i32(i) for i in range(6)], bool(i32(6)), _gtype(g, node.type))
    if op == GGMLOp.CONV_TRANSPOSE_1D:
        return g.ggml_conv_transpose_1d(gctx, s[0], s[1], i32(0), i32(1), i32(2))
    if op == GGMLOp.POOL_2D:
        return g.ggml_pool_2d(gctx, s[0], i32(0), i32(1), i32(2), i32(3), i32(4), float(i32(5)), float(i32(6)))
    if op == GGMLOp.UPSCALE:
        return g.ggml_upscale_ext(gctx, s[0], *node.ne, i32(0))
    raise Unavailable(f"no translation for {op.name}")


def _ggml_values(case: Any) -> tuple[np.ndarray, np.ndarray]:
    """(numpy expected, ggml's result) for one case, both as the output's values."""
    import ggml as g

    from ggml_core import _convert
    from ggml_core.ops import GGMLOp
    from ggml_core.testing._runner import _numpy_expected, prepare

    p = prepare(case)
    expected = _numpy_expected(case, p)
    params = g.ggml_init_params(mem_size=256 * 2**20, mem_buffer=None, no_alloc=False)
    gctx = g.ggml_init(params)
    try:
        m: dict[int, Any] = {}
        for t in p.ctx:  # leafs first, in creation order
            if t.op == GGMLOp.NONE and t.view_src is None:
                gt = g.ggml_new_tensor(gctx, _gtype(g, t.type), 4, (ctypes.c_int64 * 4)(*t.ne))
                raw = p.host[t.id]
                ctypes.memmove(g.ggml_get_data(gt), raw.ctypes.data, raw.size)
                m[t.id] = gt
        for node in [*p.graph.nodes]:
            if node.id not in m:
                m[node.id] = _translate(g, gctx, node, m)
        out = p.built.out
        gout = m[out.id]
        ne = tuple(gout.contents.ne[i] for i in range(4))
        nb = tuple(gout.contents.nb[i] for i in range(4))
        if ne != out.ne or nb != out.nb:
            ours = f"ggml-core ne={list(out.ne)} nb={list(out.nb)}"
            raise AssertionError(f"ggml builds ne={list(ne)} nb={list(nb)}, {ours}")
        graph = g.ggml_new_graph(gctx)
        g.ggml_build_forward_expand(graph, gout)
        g.ggml_graph_compute_with_ctx(gctx, graph, 1)
        size = out.nbytes
        raw = np.frombuffer(ctypes.string_at(g.ggml_get_data(gout), size), dtype=np.uint8).copy()
        return expected, _convert.from_bytes(raw, out)
    finally:
        g.ggml_free(gctx)


def _child(ops: str, first: int) -> None:
    """Verify the cases of ``ops`` from index ``first`` on; JSON lines on stdout (``start`` before each case)."""
    from ggml_core.testing import CaseUnavailable, MissingBuilder, compare, select

    for case in select(ops=ops)[first:]:
        print(json.dumps({"start": case.name}), flush=True)
        try:
            expected, got = _ggml_values(case)
        except (Unavailable, MissingBuilder, CaseUnavailable) as exc:
            print(json.dumps({"case": case.name, "status": "skip", "why": str(exc)}), flush=True)
            continue
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            print(json.dumps({"case": case.name, "status": "error", "why": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        res = compare(expected, got, case.check)
        status = "ok" if res.passed else "fail"
        print(json.dumps({"case": case.name, "status": status, "why": res.message, "err": res.error}), flush=True)


# ================================================================================================ the test


def _run_family(ops: str) -> list[dict[str, Any]]:
    """Run the child over a family; when ggml aborts on a case, record it and go on after it."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out: list[dict[str, Any]] = []
    first = 0
    while True:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", ops, str(first)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            check=False,
        )
        rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        out += [r for r in rows if "case" in r]
        if proc.returncode == 0:
            return out
        started = [r["start"] for r in rows if "start" in r]
        done = {r["case"] for r in rows if "case" in r}
        crashed = [n for n in started if n not in done]
        if not crashed:
            out.append({"case": ops, "status": "crash", "why": f"child exited with {proc.returncode}"})
            return out
        tail = [ln for ln in proc.stderr.splitlines() if "GGML" in ln or "error" in ln.lower()][-2:]
        out.append({"case": crashed[0], "status": "abort", "why": f"ggml aborted ({proc.returncode}): {tail}"})
        first += len(started)


@pytest.mark.parametrize("ops", FAMILIES, ids=[f.split(",")[0] + "..." for f in FAMILIES])
def test_references_agree_with_ggml(ops: str) -> None:
    pytest.importorskip("ggml", reason="ggml-python (the real ggml through ctypes) is not installed")
    rows = _run_family(ops)
    bad = [r for r in rows if r["status"] in ("fail", "error", "crash") and r["case"] not in KNOWN_DIFFERENCES]
    aborted = [r["case"] for r in rows if r["status"] == "abort"]
    checked = sum(r["status"] == "ok" for r in rows)
    if bad:
        lines = "\n".join(f"  {r['case']}: {r['status']}: {r['why']}" for r in bad[:20])
        pytest.fail(f"{len(bad)} case(s) disagree with ggml ({checked} agree):\n{lines}", pytrace=False)
    if aborted:
        print(f"ggml-python aborted on {len(aborted)} case(s) it does not accept: {aborted[:5]}")
    if checked == 0:
        pytest.skip(f"no case of {ops} could be checked against ggml-python here: " + (rows[0]["why"] if rows else ""))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        for family in FAMILIES:
            for row in _run_family(family):
                if row["status"] != "ok":
                    print(f"{row['status']:6} {row['case']}: {row.get('why', '')}")
