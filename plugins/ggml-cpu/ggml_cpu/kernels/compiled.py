"""Compiled thunks for the decode step's small ops (kernels in :mod:`.qdot._row_kernels`), bound once per plan.

Each ``bind_*`` function returns a thunk that is **one** call into compiled code on operands resolved at bind time
(flat views of the tensors' memory and an int64 array of shapes and element strides), or ``None`` when compiled
kernels are off (``GGML_CPU_NUMBA=0``, no numba, a failed compile) or the operands are outside what the kernel
handles (types, a non-contiguous ``ne[0]``); the op's numpy path then runs. A plan is re-bound whenever a tensor
moves (:mod:`ggml_cpu.engine`), so views resolved here stay valid for the plan's life.

Agreement with the numpy path (``tests/test_kernels_compiled.py`` checks each against numpy from the op's
definition, and against the numpy path itself):

* RMS_NORM (+ MUL), ROPE, SET_ROWS: the same float32 operations in the same order — equal bit for bit, except that
  RMS_NORM's double sum is sequential where numpy's is pairwise (a difference only when the float64 sums round to
  different float32 means: at most 1 ulp of the mean, so ≤ 2 ulp of a result), and that decode ROPE's in-kernel
  angles take cos / sin from libm where the numpy path takes numpy's (both float64, rounded to float32);
* SOFT_MAX: ``exp`` by :func:`.qdot._row_kernels.exp_f32` (float64 evaluation rounded once: equal to float64
  ``exp`` rounded to float32 on 3 million samples) where the numpy path uses numpy's float32 ``exp`` (up to 2 ulp
  from that), so results agree to a few ulp (the tests allow 8·2⁻²⁴ relative);
* SWIGLU: ``exp`` in double rounded once, as the numpy path: ≤ 1 ulp of the result;
* f16 products: activations rounded to f16 as the numpy path does, weights read as f16, products summed in float32
  in SIMD lanes (the order depends on the vector width): within the float32 dot-product bound
  ``k·2⁻²³·Σ|x·w|`` of the numpy path's BLAS product — and independent of the thread count (one thread);
* f32 products: up to :data:`F32_ROWS_LIMIT` activation rows, float32 sums in 16 lanes in a fixed order; more
  rows, register tiles of fused multiply-adds in the CPU's vector width, the lanes summed by a fixed tree (explicit
  vector code either way, so the same bits on every machine with the same lanes and at every thread count),
  within the same bound of BLAS's product (``tests/test_f32_decode_product.py``, ``tests/test_f32_tiles.py``).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ggml_core import GGMLOp, GGMLType, GluOp, Tensor, TensorFlag
from ggml_cpu.kernels._base import Thunk, _host, arr, check_index_range
from ggml_cpu.kernels.qdot import _jit
from ggml_cpu.threads import Faster

__all__ = [
    "batch_soft_max_kernel",
    "bind_f32_product",
    "bind_glu",
    "bind_half_product",
    "bind_pair",
    "bind_rms_norm",
    "bind_rope",
    "bind_rope_positions",
    "bind_set_rows",
    "bind_soft_max",
    "flat",
    "kernel",
    "row_split_parts",
    "split_rows",
    "used_columns_kernel",
]

#: f16 products with at most this many activation rows run the compiled kernel (decode, short batches); above it
#: the numpy path's BLAS product is faster
HALF_ROWS_LIMIT = 32
#: ... or with any number of rows when one weight slice (a KV head) is at most this many bytes (it stays in cache)
HALF_SLICE_BYTES = 1 << 20
#: below this much work (weights × rows) a product runs on the calling thread (waking threads costs more)
_SERIAL_WORK = 1 << 20

_DTYPE: dict[GGMLType, np.dtype] = {
    GGMLType.F32: np.dtype(np.float32),
    GGMLType.F16: np.dtype(np.uint16),  # f16 as its bits: the kernels convert
    GGMLType.I32: np.dtype(np.int32),
    GGMLType.I64: np.dtype(np.int64),
}


def _module() -> Any:
    """:mod:`.qdot._row_kernels`, or None when compiled kernels are off or its intrinsics cannot be built."""
    return _load("_row_kernels", "compiled row kernels")


def _load(name: str, what: str) -> Any:
    """The kernel module ``qdot.<name>``, or None when compiled kernels are off or its intrinsics cannot be built
    (logged once as ``what``)."""
    if not _jit.enabled():
        return None
    try:
        return importlib.import_module(f"ggml_cpu.kernels.qdot.{name}")
    except Exception as exc:  # noqa: BLE001 - building the intrinsics may fail on an odd target: numpy path
        _jit.note_failure(what, exc)
        return None


def kernel(name: str, key: object = None, module: str = "_row_kernels") -> Callable[..., Any] | None:
    """The compiled kernel of the spec ``name`` of ``qdot.<module>`` (:mod:`.qdot._row_kernels` unless named;
    ``key`` picks one of a dict of specs), or None when unavailable. Compiles on first use (cached on disk, see
    :mod:`.qdot._jit`)."""
    mod = _module() if module == "_row_kernels" else _load(module, f"compiled {module}")
    if mod is None:
        return None
    spec = getattr(mod, name)
    return _jit.get(spec if key is None else spec[key])


#: from this many elements a row kernel runs split across the spinning helpers at 2+ threads (a prompt's rows;
#: a decode step's few rows take a few µs on one thread)
SPLIT_ELEMENTS = 16384


def split_rows(
    mode: str, arrays: tuple[np.ndarray, ...], p: np.ndarray, f: tuple[float, ...], rows: int, elements: int,
    serial: Callable[[], Any], key: object = None, extra: int = 0, *, min_elements: int = SPLIT_ELEMENTS,
    product: bool = False, batch: bool = False,
) -> Callable[[], Any]:  # fmt: skip
    """``serial`` (the whole kernel on the calling thread), or where the row split of :mod:`.qdot._row_parts` is
    compiled and the kernel has at least ``min_elements`` elements, a callable that splits it across the
    engine's threads when there are 2 or more (one :class:`.qdot._row_parts.RowJob` per thread count). Both return
    the kernel's result. ``mode`` names the kernel (``key`` picks a SET_ROWS variant); ``arrays``, ``p``, ``f`` and
    ``extra`` are its operands in the row job's order. A row kernel splits only while the helpers run for quantized
    products (``parts.helping``); a ``product`` splits whenever there are threads, starting them, and a ``batch``
    product (the f32 tiles of a prompt) also lets the batch's row kernels use them (see ``RowJob``)."""
    parts = row_split_parts() if elements >= min_elements and rows >= 2 else None
    if parts is None:
        return serial
    code = getattr(parts, mode)
    code = code if key is None else code[key]
    jobs: dict[int, Any] = {}

    def run() -> Any:
        threads = _jit.current_threads()
        if threads <= 1 or not (product or parts.helping(threads)):
            return serial()
        job = jobs.get(threads)
        if job is None:
            job = jobs[threads] = parts.RowJob(code, arrays, p, f, rows, threads, serial, extra, batch=batch)
        return job()

    return run


def row_split_parts() -> Any:
    """:mod:`.qdot._row_parts`, or None where it or the helpers' kernels do not compile (Linux x86-64 only)."""
    parts = _load("_row_parts", "compiled row split")
    if parts is None:
        return None
    from ggml_cpu.kernels.qdot import _packed_split  # after _load: numba is loaded

    return parts if _packed_split.jobs() is not None else None


def flat(t: Tensor, *, any_ne0: bool = False) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """A 1-D view of ``t``'s memory from its first element to its last, and its element strides (dims 0–3).

    None unless ``ne[0]`` is contiguous (``nb[0]`` = element size; any stride with ``any_ne0``), every stride is
    a whole number of elements, the data is aligned and not empty.
    """
    dt = _DTYPE.get(t.type)
    if dt is None or t.nelements == 0 or t.buffer is None or t.data_offset is None:
        return None
    size = dt.itemsize
    if (t.nb[0] != size and not any_ne0) or any(nb % size for nb in t.nb) or t.data_offset % size:
        return None
    s = tuple(nb // size for nb in t.nb)
    extent = 1 + sum((n - 1) * st for n, st in zip(t.ne, s, strict=True))
    try:
        view = np.ndarray((extent,), dtype=dt, buffer=_host(t), offset=t.data_offset)
    except (TypeError, ValueError):
        return None
    if not view.flags.aligned:
        return None
    return view, (s[0], s[1], s[2], s[3])


def _params(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _rows(p: np.ndarray) -> int:
    """The rows ``n1 · n2 · n3`` of a row kernel's parameters (``p[1:4]``)."""
    return int(p[1] * p[2] * p[3])


# ------------------------------------------------------------------------------------------------ RMS_NORM (+ MUL)


def bind_rms_norm(node: Tensor, mul: Tensor | None = None) -> Thunk | None:
    """RMS_NORM of f32 rows; with ``mul`` (the MUL node right after it, ``mul.src[0] is node``) also the product
    with its other operand (repeated as ggml broadcasts), written to both outputs in one pass."""
    a = node.src[0]
    fn = kernel("RMS_NORM_SPEC")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    eps = float(node.op_param_f32(0))
    bias: tuple[int, ...] = (0,) * 10
    b_arr, m_arr = out[0], out[0]
    if mul is not None:
        b = mul.src[1]
        fb, fm = (flat(b), flat(mul)) if b is not None else (None, None)
        if b is None or fb is None or fm is None or b.type != GGMLType.F32 or mul.type != GGMLType.F32:
            return None
        if b.ne[0] != a.ne[0] or tuple(mul.ne) != tuple(node.ne):
            return None
        b_arr, m_arr = fb[0], fm[0]
        bias = (b.ne[0], b.ne[1], b.ne[2], b.ne[3], *fb[1][1:], *fm[1][1:])
    p = _params(*a.ne, *x[1][1:], *out[1][1:], 1 if mul is not None else 0, *bias)
    xv, ov = x[0], out[0]

    def serial() -> None:
        fn(xv, ov, b_arr, m_arr, p, eps)

    split = split_rows("RMS_NORM", (xv, ov, b_arr, m_arr), p, (eps,), _rows(p), a.nelements, serial)
    return serial if split is serial else lambda: split()  # a closure: profilers label it


# ------------------------------------------------------------------------------------------------ SOFT_MAX


def batch_soft_max_kernel() -> Callable[..., Any] | None:
    """The compiled softmax of a prompt batch's attention scores (:mod:`.qdot._attn_kernels`), or None when compiled
    kernels are off or it failed to build."""
    mod = _load("_attn_kernels", "compiled attention kernels")
    return _jit.get(mod.BATCH_SOFT_MAX_SPEC) if mod is not None else None


def used_columns_kernel() -> Callable[..., Any] | None:
    """The compiled scan of a mask for its used columns (:mod:`.qdot._attn_kernels`), or None."""
    mod = _load("_attn_kernels", "compiled attention kernels")
    return _jit.get(mod.USED_COLUMNS_SPEC) if mod is not None else None


def bind_soft_max(node: Tensor, slopes: np.ndarray, *, zero_under_mask: bool = False) -> Thunk | None:
    """SOFT_MAX (ext) of f32 rows with an optional f32 mask, ``slopes`` (ALiBi, per head) and f32 sinks.
    ``zero_under_mask``: the input is 0 wherever the mask is −inf and the slopes are 1 (the scores of
    :func:`bind_half_product` with this node): each row's trailing masked columns are then not walked."""
    a, mask, sinks = node.src[0], node.src[1], node.src[2]
    fn = kernel("SOFT_MAX_SPEC")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    mv, mp = np.zeros(1, np.float32), (0, 1, 1, 0, 0, 0, 0)
    if mask is not None:
        fm = flat(mask)
        if fm is None or mask.type != GGMLType.F32:
            return None
        mv, mp = fm[0], (1, mask.ne[2], mask.ne[3], 0, *fm[1][1:])
    sv, has_sinks = np.zeros(1, np.float32), 0
    if sinks is not None:
        fs = flat(sinks)
        if fs is None or sinks.type != GGMLType.F32 or sinks.ne[0] < a.ne[2]:
            return None
        sv, has_sinks = fs[0], 1
    sl = np.ascontiguousarray(slopes.reshape(-1), dtype=np.float32)
    scale = float(node.op_param_f32(0))
    trim = int(zero_under_mask and mask is not None and bool((sl == 1.0).all()) and math.isfinite(scale))
    p = _params(*a.ne, *x[1][1:], *out[1][1:], *mp, has_sinks, trim)
    xv, ov = x[0], out[0]

    def run() -> None:
        fn(xv, ov, mv, sv, sl, p, scale)

    return run


# ------------------------------------------------------------------------------------------------ ROPE


def bind_rope(node: Tensor, first: int, step: int, delta: int) -> Callable[[np.ndarray, np.ndarray], None] | None:
    """ROPE's rotation of f32 rows: ``rotate(cos, sin)`` with the (tokens, pairs) tables turns the pairs
    ``(first + i·step, first + i·step + delta)`` and copies the other channels."""
    a = node.src[0]
    fn = kernel("ROPE_SPEC")
    if fn is None or a is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out = flat(a), flat(node)
    if x is None or out is None:
        return None
    p = _params(*a.ne, *x[1][1:], *out[1][1:], first, step, delta)
    xv, ov = x[0], out[0]

    def rotate(cos: np.ndarray, sin: np.ndarray) -> None:
        fn(xv, ov, cos, sin, p)

    parts = row_split_parts() if a.nelements >= SPLIT_ELEMENTS else None
    if parts is None:
        return rotate
    rows, tables = _rows(p), [xv, xv]  # tables: this call's (cos, sin), for the job's fallback
    jobs: dict[int, Any] = {}

    def rotate_split(cos: np.ndarray, sin: np.ndarray) -> None:
        threads = _jit.current_threads()
        contiguous = cos.flags.c_contiguous and sin.flags.c_contiguous
        if threads <= 1 or cos.shape[1] == 0 or not contiguous or not parts.helping(threads):
            fn(xv, ov, cos, sin, p)
            return
        tables[:] = (cos, sin)
        job = jobs.get(threads)
        if job is None:
            serial = lambda: fn(xv, ov, tables[0], tables[1], p)  # noqa: E731
            job = jobs[threads] = parts.RowJob(parts.ROPE, (xv, ov, cos, sin), p, (), rows, threads, serial,
                                               cos.shape[1])  # fmt: skip
        else:
            job.bind((xv, ov, cos, sin))
        job()

    return rotate_split


#: up to this many tokens ROPE computes its angles inside the kernel (decode); above, one numpy table shared by the
#: nodes of a step (cheaper for a prompt's many positions)
ROPE_INLINE_TOKENS = 4


def bind_rope_positions(
    node: Tensor, settings: tuple[float, ...], n_pairs: int, first: int, step: int, delta: int
) -> Thunk | None:
    """ROPE of f32 rows with the angles computed in the kernel from the positions (modes without sections, no
    frequency factors): ``settings`` = (theta_scale, freq_scale, ext_factor, mscale, corr_low, corr_high), each a
    float32 value, as :func:`ggml_cpu.kernels.attention.rope_cos_sin` uses them."""
    a, pos = node.src[0], node.src[1]
    fn = kernel("ROPE_POS_SPEC")
    if fn is None or a is None or pos is None or a.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    x, out, fp = flat(a), flat(node), flat(pos)
    if x is None or out is None or fp is None or pos.type != GGMLType.I32:
        return None
    p = _params(*a.ne, *x[1][1:], *out[1][1:], first, step, delta, n_pairs)
    f = np.array(settings, np.float64)
    cs = np.empty(2 * max(n_pairs, 1), np.float32)
    xv, ov, pv = x[0], out[0], fp[0]

    def run() -> None:
        fn(xv, ov, pv, p, f, cs)

    return run


# ------------------------------------------------------------------------------------------------ SET_ROWS


def _token_width(b: Tensor) -> int:
    """C when ``b``, SET_ROWS' source, is one-value rows ``t·C + c`` of a batch's C values per token (a transposed
    V cache's store: ``b`` reshapes the batch's V, whose last non-unit dimension counts tokens) and C fills a
    channel block of the kernel (:data:`.qdot._row_kernels.SET_ROWS_BLOCK`), else 0. Only the order the rows are
    written in depends on it."""
    mod = _module()
    if mod is None or b.ne[0] != 1 or b.ne[2] != 1 or b.ne[3] != 1 or b.ne[1] < 2 * mod.SET_ROWS_BLOCK:
        return 0
    base = b.view_src
    while base is not None and base.view_src is not None:
        base = base.view_src
    if base is None or base.nelements != b.nelements:
        return 0
    tokens = next((n for n in reversed(base.ne) if n > 1), 1)
    chans = b.ne[1] // tokens
    return chans if tokens > 1 and chans * tokens == b.ne[1] and chans >= mod.SET_ROWS_BLOCK else 0


def bind_set_rows(node: Tensor) -> Thunk | None:
    """SET_ROWS of f32 rows into f32 or f16 rows (any destination strides), indices I32 / I64 checked per call."""
    b, c = node.src[0], node.src[1]
    if b is None or c is None or b.type != GGMLType.F32 or node.type not in (GGMLType.F32, GGMLType.F16):
        return None
    if c.type not in (GGMLType.I32, GGMLType.I64):
        return None
    fn = kernel("SET_ROWS_SPECS", ("float32" if node.type == GGMLType.F32 else "uint16", str(_DTYPE[c.type])))
    src, idx, dst = flat(b), flat(c), flat(node, any_ne0=True)
    if fn is None or src is None or idx is None or dst is None:
        return None
    ds, cs = dst[1], idx[1]
    chans = _token_width(b)
    p = _params(*b.ne, *src[1][1:], *ds[1:], node.ne[1], cs[0], cs[1], c.ne[1], cs[2], c.ne[2], ds[0], chans)
    sv, iv, dv = src[0], idx[0], dst[0]
    key = (dv.dtype.name, iv.dtype.name)
    # a transposed V cache's one-value rows go in blocks of channels (no two threads write a cache line); other
    # rows split only from 64 values: one-value rows of neighbouring tokens share cache lines, and two cores
    # writing them took longer than one (false sharing: 0.41 against 0.24 ms a layer)
    rows = -(-chans // _module().SET_ROWS_BLOCK) if chans else _rows(p)  # the kernel's module: loaded for fn
    elements = b.nelements if b.ne[0] >= 64 or chans else 0
    split = split_rows("SET_ROWS", (sv, iv, dv), p, (), rows, elements, lambda: fn(sv, iv, dv, p), key)

    def run() -> None:
        if split():
            check_index_range(node, arr(c), node.ne[1], "destination row")

    return run


# ------------------------------------------------------------------------------------------------ GLU


def bind_glu(node: Tensor) -> Thunk | None:
    """SWIGLU or GEGLU of f32 rows, split (``src1`` the gate) or fused (``[x | g]`` rows, swapped or not). GEGLU
    (Gemma's feed-forward) runs on the calling thread: ~13 µs a decode step's 2,048 values, where the numpy path's
    dozen array operations took ~65 µs (Gemma 3 270M, one thread: 0.23 against 1.16 ms a token)."""
    a, b = node.src[0], node.src[1]
    op = GluOp(node.op_param_i32(0))
    if a is None or op not in (GluOp.SWIGLU, GluOp.GEGLU):
        return None
    fn = kernel("GLU_SPEC" if op == GluOp.SWIGLU else "GEGLU_SPEC")
    if fn is None:
        return None
    if a.type != GGMLType.F32 or node.type != GGMLType.F32 or (b is not None and b.type != GGMLType.F32):
        return None
    x, out = flat(a), flat(node)
    g = flat(b) if b is not None else x
    if x is None or out is None or g is None:
        return None
    n = node.ne[0]
    x_off, g_off = 0, 0
    if b is None:
        x_off, g_off = (n, 0) if node.op_param_i32(1) else (0, n)
    p = _params(*node.ne, *x[1][1:], *out[1][1:], *g[1][1:], x_off, g_off)
    xv, gv, ov = x[0], g[0], out[0]
    if op == GluOp.GEGLU:
        from ggml_cpu.kernels.unary import gelu_f16_table

        table = gelu_f16_table()
        return lambda: fn(xv, gv, ov, p, table)

    def serial() -> None:
        fn(xv, gv, ov, p)

    split = split_rows("GLU", (xv, gv, ov), p, (), _rows(p), node.nelements, serial)
    return serial if split is serial else lambda: split()  # a closure: profilers label it


# ------------------------------------------------------------------------------------------------ f16 products


def _half_ok(a: Tensor, b: Tensor, node: Tensor) -> bool:
    """Few activation rows (decode), or weight slices small enough to stay in cache while every row reads them
    (a KV cache's heads): large f16 weight matrices with many rows are the BLAS route's."""
    if a.type != GGMLType.F16 or b.type != GGMLType.F32 or node.type != GGMLType.F32:
        return False
    rows = b.ne[1] * (b.ne[2] // a.ne[2]) * (b.ne[3] // a.ne[3])
    return rows <= HALF_ROWS_LIMIT or 2 * a.ne[0] * a.ne[1] <= HALF_SLICE_BYTES


def bind_half_product(a: Tensor, b: Tensor, node: Tensor, soft_max: Tensor | None = None) -> Thunk | None:
    """MUL_MAT of f16 weights (a KV cache) and f32 activations, reading the f16 values where they are (no float32
    copy of the cache); terms past an activation row's last non-zero value are skipped (the unused cells of a
    KV cache after SOFT_MAX). With ``soft_max`` (the SOFT_MAX node that alone reads this product, its mask f32 and
    no ALiBi), outputs under a −inf mask are 0 and their cache rows are not read — llama.cpp's flash attention
    skips masked cells the same way; the softmax's result is the same (a garbage non-finite value in an unused
    cell would have made ggml's whole row NaN)."""
    if not _half_ok(a, b, node):
        return None
    small = a.ne[1] * b.nelements < _SERIAL_WORK or b.ne[2] == 1
    serial = kernel("HALF_DOT_SPECS", 1)
    parallel = serial if small else kernel("HALF_DOT_SPECS", 0)  # compiled only when it may run
    w, x, out = flat(a), flat(b), flat(node)
    if parallel is None or serial is None or w is None or x is None or out is None:
        return None
    mv, mp = np.zeros(1, np.float32), (0, 0, 0, 0, 1, 1)
    if soft_max is not None:
        mask = soft_max.src[1]
        fm = flat(mask) if mask is not None else None
        if mask is None or fm is None or mask.type != GGMLType.F32 or soft_max.op_param_f32(1) != 0.0:
            return None
        mv, mp = fm[0], (1, *fm[1][1:], mask.ne[2], mask.ne[3])
    k = a.ne[0]
    p = _params(k, a.ne[1], b.ne[1], b.ne[2], b.ne[3], b.ne[2] // a.ne[2], b.ne[3] // a.ne[3],
                *w[1][1:], *x[1][1:], *out[1][1:], *mp)  # fmt: skip
    xh = np.empty(max(k, 1) * b.ne[2], np.float32)
    args = (w[0], x[0], out[0], p, xh, mv)
    if small:
        return lambda: serial(*args)
    faster = Faster(parallel, serial, key=("half", tuple(a.ne), tuple(b.ne), soft_max is not None))

    def run() -> None:
        (serial if _jit.current_threads() == 1 else faster)(*args)

    return run


# ------------------------------------------------------------------------------------------------ f32 products

#: f32 products with at most this many activation rows run the row kernel (a decode step); above it the tiles
F32_ROWS_LIMIT = 4
#: ... split over the helpers at 2+ threads from this many weights (a 512 × 512 matrix is 262,144)
F32_SPLIT_ELEMENTS = 1 << 16
#: f32 tile products split over the helpers at 2+ threads from this many multiply-adds (weights × rows)
F32_GEMM_SPLIT_WORK = 1 << 20


def bind_f32_product(a: Tensor, b: Tensor, node: Tensor) -> Thunk | None:
    """MUL_MAT of 2-D f32 weights and f32 activations, on our compiled kernels (None: numpy's BLAS product).

    * Up to :data:`F32_ROWS_LIMIT` activation rows (a decode step): each weight row is read once, by
      :func:`.qdot._row_kernels.f32_dot_rows`. A decode step streams its weights from memory, which one thread does
      as fast as OpenBLAS's SGEMV (AMD EPYC, Zen 5: the LLaMA bench model's 29 products of one token, 63 MB,
      2.0–2.2 ms here against 2.0–2.9 ms through numpy), and at two threads the split runs on the helpers that
      already spin between a decode step's nodes (1.45–1.7 ms) instead of waking OpenBLAS's threads.
    * More rows (a prompt batch): register tiles of :mod:`.qdot._gemm_kernels`, with no packing.

    At 2+ threads the weight rows (tiles) are split across the calling thread and the spinning helpers (started
    here if no other product started them). The sums are float32 in SIMD lanes, as ggml's ``vec_dot_f32`` and
    tinyBLAS's: not BLAS's bits, and the same bits at any thread count.
    """
    if a.type != GGMLType.F32 or b.type != GGMLType.F32 or node.type != GGMLType.F32:
        return None
    if a.ne[2] != 1 or a.ne[3] != 1 or b.ne[2] != 1 or b.ne[3] != 1 or a.ne[0] != b.ne[0]:
        return None
    w, x, out = flat(a), flat(b), flat(node)
    if w is None or x is None or out is None:
        return None
    k, m, n = a.ne[0], a.ne[1], b.ne[1]
    if n > F32_ROWS_LIMIT:
        return _bind_f32_tiles((w[0], x[0], out[0]), (k, m, n, w[1][1], x[1][1], out[1][1]))
    fn = kernel("F32_DOT_SPEC")
    if fn is None:
        return None
    p = _params(k, m, n, w[1][1], x[1][1], out[1][1])
    wv, xv, ov = w[0], x[0], out[0]

    def serial() -> None:
        fn(wv, xv, ov, p)

    split = split_rows("F32_DOT", (wv, xv, ov), p, (), m, m * k, serial, min_elements=F32_SPLIT_ELEMENTS, product=True)
    return serial if split is serial else lambda: split()  # a closure: profilers label it


def _bind_f32_tiles(views: tuple[np.ndarray, np.ndarray, np.ndarray], shape: tuple[int, ...]) -> Thunk | None:
    """The tile product of :mod:`.qdot._gemm_kernels` on flat views (w, x, out) with ``shape`` = (K, M, N, the
    three row strides), split over weight tiles at 2+ threads."""
    fn = kernel("F32_GEMM_SPEC", module="_gemm_kernels")
    mod = _load("_gemm_kernels", "compiled f32 tiles") if fn is not None else None
    if fn is None or mod is None:
        return None
    k, m, n = shape[:3]
    p = _params(*shape, mod.block_tokens(k, n))
    wv, xv, ov = views

    def serial() -> None:
        fn(wv, xv, ov, p)

    split = split_rows(
        "F32_GEMM", views, p, (), mod.tiles(m), m * k * n, serial, min_elements=F32_GEMM_SPLIT_WORK, product=True,
        batch=True,
    )  # fmt: skip
    return serial if split is serial else lambda: split()


def _only_reader(t: Tensor, reader: Tensor, uses: dict[int, int]) -> bool:
    return uses.get(t.id, 0) == 1 and not t.flags & TensorFlag.OUTPUT and reader.src[0] is t


def bind_pair(node: Tensor, nxt: Tensor, uses: dict[int, int]) -> Thunk | None:
    """One thunk computing ``node`` and the node right after it when they fuse, else None: RMS_NORM → MUL, and a
    KV-cache product → the SOFT_MAX that alone reads it (masked cells skipped, see :func:`bind_half_product`).
    ``uses`` counts how many nodes of the graph read each tensor (by id): as in ggml's fusion, a node read by one
    node and not flagged OUTPUT is an intermediate whose value nobody else sees."""
    return _labelled(_bind_pair(node, nxt, uses), nxt)


def _labelled(thunk: Thunk | None, nxt: Tensor) -> Thunk | None:
    """``thunk`` with ``fused`` = the second node's op name (profilers show ``MUL_MAT+SOFT_MAX``)."""
    if thunk is not None:
        setattr(thunk, "fused", nxt.op.name)  # noqa: B010 - an attribute on a closure
    return thunk


def _bind_pair(node: Tensor, nxt: Tensor, uses: dict[int, int]) -> Thunk | None:
    if node.op == GGMLOp.RMS_NORM and nxt.op == GGMLOp.MUL and nxt.src[0] is node:
        return bind_rms_norm(node, nxt)
    if node.op == GGMLOp.MUL_MAT and nxt.op == GGMLOp.SOFT_MAX and _only_reader(node, nxt, uses):
        a, b = node.src[0], node.src[1]
        if a is None or b is None:
            return None
        from ggml_cpu.kernels.attention import alibi_slopes, bind_batch_attention

        batch = bind_batch_attention(node, nxt)  # a prompt batch: BLAS per head + numpy softmax
        if batch is not None:
            return batch
        product = bind_half_product(a, b, node, nxt)
        slopes = alibi_slopes(node.ne[2], 0.0)
        soft_max = bind_soft_max(nxt, slopes, zero_under_mask=True) if product is not None else None
        if product is None or soft_max is None:
            return None

        def run() -> None:
            product()
            soft_max()

        return run
    return None
