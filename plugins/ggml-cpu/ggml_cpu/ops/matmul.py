"""MUL_MAT with ggml's CPU numerics: activations are rounded to the weight type's dot type first.

ggml's CPU multiplies a quantized weight row with activations that it first quantizes to the weight type's
``vec_dot_type`` (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants; f16 weights round
activations to f16). Emulating that rounding, then multiplying in float32, agrees with ggml to float rounding.

Routes (chosen once, when the node is bound):

* **f32 weights** — one BLAS call into the output (``np.matmul(..., out=)``), no copies of the operands;
* **quantized weights** — :func:`ggml_cpu.quant.qmatmul`: integer block kernels for up to
  ``vec_rows_limit()`` activation rows, dequantized tiles + BLAS above; never a full float32 copy of the weights,
  unless the backend's opt-in :class:`WeightsCache` holds one;
* **f16 / bf16 weights** — converted tile by tile (bounded memory), then BLAS;
* anything else (types without a fast route) — :func:`mul_mat_reference`, the straightforward numpy definition,
  which also serves as the tests' reference for the fast routes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

import numpy as np

from ggml_core import BufferUsage, GGMLOp, GGMLType, Tensor
from ggml_core.quants import can_dequantize, dequantize
from ggml_cpu import quant
from ggml_cpu.jit import _jit
from ggml_cpu.jit.halves import f16_to_f32, round_f16
from ggml_cpu.ops._base import KERNELS, Thunk, arr, f32
from ggml_cpu.ops._compiled import (
    SERIAL_WORK,
    flat,
    kernel,
    load_module,
    params,
    row_split_parts,
    split_rows,
)
from ggml_cpu.threads import Faster, current_threads, one_thread, parallel_for, single_threaded_blas

__all__ = [
    "VEC_DOT_TYPE",
    "WeightsCache",
    "activations_as_dot_type",
    "bind_mul_mat",
    "expert_product",
    "matmul_4d",
    "mul_mat_reference",
    "weights_f32",
]

#: ggml's ``type_traits_cpu[t].vec_dot_type``
VEC_DOT_TYPE: Final[dict[GGMLType, GGMLType]] = {
    GGMLType.F32: GGMLType.F32,
    GGMLType.F16: GGMLType.F16,
    GGMLType.BF16: GGMLType.BF16,
    **quant.DOT_TYPE,
}

#: float32 bytes per converted f16 / bf16 weight tile
_TILE_BYTES: Final = 4 << 20
#: f16 / bf16 operands up to this many float32 bytes are converted whole (transient memory)
_WHOLE_BYTES: Final = 16 << 20


def activations_as_dot_type(x: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """float32 activations rounded through the dot type of weights of ``wtype`` (rows along the last axis)."""
    dot = VEC_DOT_TYPE[wtype]
    if dot == GGMLType.F32:
        return x
    if dot == GGMLType.F16:
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(np.float16).astype(np.float32)
    return dequantize(quant.from_float(x, dot), dot)


def weights_f32(w: Tensor) -> np.ndarray:
    """The weights as float32 (dequantized copy for quantized types)."""
    return f32(w)


def _q_1_mins(w: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """The f16 ``m`` field of Q4_1 / Q5_1 blocks, shape (..., n_blocks)."""
    blocks = w.reshape(*w.shape[:-1], -1, wtype.type_size)
    return blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)


def matmul_4d(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ggml's broadcasting product: w (a3, a2, M, K), x (b3, b2, N, K) → (b3, b2, N, M), w index = x index / ratio."""
    a3, a2 = w.shape[:2]
    b3, b2, n, k = x.shape
    r2, r3 = b2 // a2, b3 // a3
    m = w.shape[2]
    if r2 == 1 and r3 == 1:
        return np.matmul(x, w.swapaxes(-1, -2))
    # group the x slices sharing one w slice: (a3, r3, a2, r2, N, K) → (a3, a2, r3*r2*N, K)
    xs = x.reshape(a3, r3, a2, r2, n, k).transpose(0, 2, 1, 3, 4, 5).reshape(a3, a2, r3 * r2 * n, k)
    out = np.matmul(xs, w.swapaxes(-1, -2))  # (a3, a2, r3*r2*N, M)
    return out.reshape(a3, a2, r3, r2, n, m).transpose(0, 2, 1, 3, 4, 5).reshape(b3, b2, n, m)


def mul_mat_reference(a: Tensor, b: Tensor) -> np.ndarray:
    """The product by its numpy definition (full float32 weights): the slow path and the tests' reference."""
    x = f32(b)
    wtype = a.type
    if wtype in (GGMLType.Q4_1, GGMLType.Q5_1):
        # Q4_1/Q5_1 · Q8_1: Σ_blocks d_w·d_x·Σ q_w q_x + m_w · s_x, where s_x is d_x·Σq_x rounded to f16
        xq = quant.from_float(x, GGMLType.Q8_1)
        xd = dequantize(xq, GGMLType.Q8_1)
        sx = _q_1_mins(xq, GGMLType.Q8_1)  # Q8_1's s sits where Q4_1's m does: bytes 2..4 of each block
        wraw = np.ascontiguousarray(arr(a))
        mw = _q_1_mins(wraw, wtype)
        w_scaled = dequantize(wraw, wtype) - np.repeat(mw, 32, axis=-1)  # the d·q part of each weight
        return matmul_4d(w_scaled, xd) + matmul_4d(mw, sx)
    return matmul_4d(weights_f32(a), activations_as_dot_type(x, wtype))


# ------------------------------------------------------------------------------------------------ weights cache


class WeightsCache:
    """Opt-in float32 copies of quantized / f16 weights, for users who trade memory for prompt speed.

    Only tensors in buffers marked :attr:`BufferUsage.WEIGHTS` are cached (never the KV cache or activations),
    keyed by their memory; the weights must not change while cached (call :meth:`clear` after writing them). A
    copy costs 4 bytes per weight (Q4_0: 7× its size). Used for products with more than ``vec_rows_limit()``
    activation rows; decoding keeps reading the quantized blocks, which is faster.

    :param max_bytes: stop adding entries beyond this many bytes (None: no limit)
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: dict[tuple[int, int, int, tuple[int, ...]], tuple[np.ndarray, np.ndarray | None]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def eligible(t: Tensor) -> bool:
        """True for quantized, f16 and bf16 tensors held in a weights buffer."""
        buf = t.buffer
        return (
            buf is not None
            and getattr(buf, "usage", None) == BufferUsage.WEIGHTS
            and (t.type.is_quantized or t.type in (GGMLType.F16, GGMLType.BF16))
            and can_dequantize(t.type)
        )

    def get(self, t: Tensor) -> tuple[np.ndarray, np.ndarray | None] | None:
        """``(q·d or values as float32 (a3, a2, M, K), Q4_1/Q5_1 minima or None)`` for ``t``, made on first use."""
        if not self.eligible(t):
            return None
        key = (id(t.buffer), int(t.data_offset or 0), int(t.type), (*t.ne, *t.nb))
        hit = self._entries.get(key)
        if hit is not None:
            return hit
        size = 4 * t.nelements
        if self.max_bytes is not None and self.nbytes + size > self.max_bytes:
            return None
        raw = np.ascontiguousarray(arr(t))
        mins = _q_1_mins(raw, t.type) if t.type in (GGMLType.Q4_1, GGMLType.Q5_1) else None
        values = f32(t) if mins is None else dequantize(raw, t.type) - np.repeat(mins, 32, axis=-1)
        entry = (np.ascontiguousarray(values, dtype=np.float32), mins)
        with self._lock:
            self._entries[key] = entry
            self.nbytes += size
        return entry

    def clear(self) -> None:
        """Drop every cached copy."""
        with self._lock:
            self._entries.clear()
            self.nbytes = 0


# ------------------------------------------------------------------------------------------------ slices


def _groups(a: Tensor, b: Tensor, x: np.ndarray, out: np.ndarray) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """For each weight slice ``(i3, i2)``: its activation rows (R, K) and where their results go (R, M).

    ggml broadcasts the weights over the activations' batch dimensions (ratio r2 = b.ne[2]/a.ne[2], r3 likewise);
    the activation slices sharing one weight slice are stacked so the weights are read once.
    """
    a3, a2 = a.ne[3], a.ne[2]
    r2, r3 = b.ne[2] // a2, b.ne[3] // a3
    n, k, m = x.shape[2], x.shape[3], out.shape[3]
    for i3 in range(a3):
        for i2 in range(a2):
            xs = x[i3 * r3 : (i3 + 1) * r3, i2 * r2 : (i2 + 1) * r2]
            os_ = out[i3 * r3 : (i3 + 1) * r3, i2 * r2 : (i2 + 1) * r2]
            yield i3, i2, xs.reshape(r3 * r2 * n, k), os_.reshape(r3 * r2 * n, m) if os_.flags.c_contiguous else os_


def _into(dst: np.ndarray, rows: int, m: int) -> tuple[np.ndarray, Callable[[], None]]:
    """A C-contiguous (rows, m) float32 target for ``dst`` and the function that copies it back when needed."""
    if dst.ndim == 2 and dst.flags.c_contiguous:
        return dst, lambda: None
    tmp = np.empty((rows, m), np.float32)
    return tmp, lambda: np.copyto(dst, tmp.reshape(dst.shape))


def _weight_rows(w: np.ndarray, i3: int, i2: int) -> np.ndarray:
    rows = w[i3, i2]
    return rows if rows.flags.c_contiguous else np.ascontiguousarray(rows)


# ------------------------------------------------------------------------------------------------ binders


def _either_threading(run: Thunk, out: np.ndarray, key: object) -> Thunk:
    """``run`` as bound, or on one thread when that measures faster here and gives the same bits (see Faster)."""

    def one() -> None:
        with one_thread():
            run()

    return Faster(run, one, out, key)


def _mul_mat_ok(node: Tensor) -> bool:
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    return a.type in VEC_DOT_TYPE and b.type in (GGMLType.F32, GGMLType.F16) and node.type == GGMLType.F32


def _bind_f32(a: Tensor, b: Tensor, node: Tensor) -> Thunk:
    own = bind_f32_product(a, b, node)  # 2-D f32 operands: our compiled kernels, split over the helpers
    if own is not None:
        return own
    w, x, out = arr(a), f32(b) if b.type == GGMLType.F32 else None, arr(node)
    broadcast = a.ne[2] != b.ne[2] or a.ne[3] != b.ne[3]
    if x is not None and not broadcast and out.flags.c_contiguous:
        if a.ne[2] == a.ne[3] == 1:
            x, wt, out = x[0, 0], w[0, 0].T, out[0, 0]  # 2-D operands: numpy calls BLAS directly
        else:
            wt = w.swapaxes(-1, -2)

        def run() -> None:
            np.matmul(x, wt, out=out)

        return _either_threading(run, out, ("f32", x.shape, wt.shape))

    def run_general() -> None:
        np.copyto(out, matmul_4d(w, f32(b)))

    return run_general


def _float_rows_f32(rows: np.ndarray, wtype: GGMLType) -> np.ndarray:
    """f16 values or bf16 bit patterns as float32."""
    if wtype == GGMLType.BF16:
        return (rows.astype(np.uint32) << 16).view(np.float32)
    return f16_to_f32(rows)


def _bind_half(a: Tensor, b: Tensor, node: Tensor, cache: WeightsCache | None) -> Thunk:
    wtype = a.type
    k, m = a.ne[0], a.ne[1]
    step = max(16, min(m, _TILE_BYTES // (4 * max(k, 1))))
    if 4 * a.nelements <= _WHOLE_BYTES and (cache is None or not cache.eligible(a)):
        # small (a KV cache, a small matrix): one conversion and one batched product beat tiles per weight slice

        # per weight slice (a head of a KV cache) one single-threaded product, on the workers or on the calling
        # thread, whichever measures faster: the same slices either way, so the same bits for any thread count
        a3, a2 = a.ne[3], a.ne[2]
        r2, r3 = b.ne[2] // a2, b.ne[3] // a3
        n_slices = a3 * a2

        def whole(workers: int) -> None:
            x = activations_as_dot_type(f32(b), wtype)
            wf = _float_rows_f32(arr(a), wtype)
            out = arr(node)

            def work(first: int) -> None:
                for i in range(first, n_slices, workers):
                    i3, i2 = divmod(i, a2)
                    o3, o2 = slice(i3 * r3, (i3 + 1) * r3), slice(i2 * r2, (i2 + 1) * r2)
                    out[o3, o2] = matmul_4d(wf[i3 : i3 + 1, i2 : i2 + 1], x[o3, o2])

            with single_threaded_blas():
                parallel_for(work, workers)

        if n_slices == 1:
            return lambda: whole(1)
        key = ("half", tuple(a.ne), tuple(b.ne))
        return Faster(lambda: whole(min(current_threads(), n_slices)), lambda: whole(1), key=key)

    def run() -> None:
        x = activations_as_dot_type(f32(b), wtype)
        out = arr(node)
        hit = cache.get(a) if cache is not None else None
        w = arr(a)
        for i3, i2, xs, os_ in _groups(a, b, x, out):
            target, done = _into(os_, xs.shape[0], m)
            if hit is not None:
                np.matmul(xs, hit[0][i3, i2].T, out=target)
            else:
                for r0 in range(0, m, step):
                    tile = _float_rows_f32(w[i3, i2, r0 : r0 + step], wtype)
                    np.matmul(xs, tile.T, out=target[:, r0 : r0 + step])
            done()

    return _either_threading(run, arr(node), (a.type, tuple(a.ne), tuple(b.ne)))


#: from this many activation rows a small f16 product (a KV cache: the batch's KQV) is one BLAS call per slice
_HALF_BATCH_ROWS: Final = 8


def _last_nonzero_column(x: np.ndarray) -> int:
    """One past the last column (last axis) of ``x`` holding a non-zero value in any row; 0 for none."""
    rows = x.reshape(-1, x.shape[-1])
    for c0 in range((x.shape[-1] - 1) // 32 * 32, -1, -32):
        hit = np.flatnonzero(rows[:, c0 : c0 + 32].any(axis=0))
        if hit.size:
            return int(c0 + hit[-1] + 1)
    return 0


def _bind_half_batch(a: Tensor, b: Tensor, node: Tensor, cache: WeightsCache | None) -> Thunk | None:
    """A prompt batch's product with a small f16 operand (the V cache of KQV): the activations rounded to f16 (ggml's
    dot type for f16) and the f16 values converted to float32 — f16 × f16 products are exact in float32 — then one
    single-threaded BLAS call per weight slice, on the plugin's workers (the same bits for any thread count; BLAS sums
    in another order than ggml's ``vec_dot_f16``: float rounding). Terms past the activations' last non-zero column
    (the unused cells of a KV cache after SOFT_MAX: zero weights) are skipped, as :func:`bind_half_product`
    does, so an unused cell's garbage never reaches the result. None: not this case (decode, large weights)."""
    if a.type != GGMLType.F16 or b.type != GGMLType.F32 or b.ne[1] < _HALF_BATCH_ROWS:
        return None
    if 4 * a.nelements > _WHOLE_BYTES or (cache is not None and cache.eligible(a)) or not arr(node).flags.c_contiguous:
        return None
    a3, a2 = a.ne[3], a.ne[2]
    r2, r3 = b.ne[2] // a2, b.ne[3] // a3
    n_slices = a3 * a2
    stacked = a3 == 1 and b.ne[3] == 1  # one K/V-head axis (a KV cache): one batched call per thread

    mask = b.src[1] if b.op == GGMLOp.SOFT_MAX else None
    if mask is not None and (mask.type != GGMLType.F32 or mask.ne[2] != 1 or mask.ne[3] != 1 or b.src[2] is not None):
        mask = None

    def run(most: int) -> None:
        x = f32(b)
        # after a masked SOFT_MAX the columns past the mask's last finite one are 0 in every row (exp(−inf)):
        # the mask, T × n_kv, says where they start at a fraction of the cost of scanning the product's input
        used = used_columns(f32(mask)[0, 0, : b.ne[1]]) if mask is not None else _last_nonzero_column(x)
        out = arr(node)
        if used == 0:
            out.fill(0.0)
            return
        xh = round_f16(x[..., :used])
        w = arr(a)
        if stacked:  # one K/V-head axis: every head's cells converted in one call, one SGEMM per head
            wf = f16_to_f32(w[0, :, :, :used])  # (H_kv, M, used)
            xs = xh[0].reshape(a2, r2 * b.ne[1], used)
            os_ = out[0].reshape(a2, r2 * b.ne[1], a.ne[1])
            workers = min(most, a2)
            cuts = [a2 * i // workers for i in range(workers + 1)]

            def part(i: int) -> None:
                g0, g1 = cuts[i], cuts[i + 1]
                np.matmul(xs[g0:g1], wf[g0:g1].transpose(0, 2, 1), out=os_[g0:g1])

            with single_threaded_blas():
                parallel_for(part, workers)
            return
        workers = min(most, n_slices)

        def work(first: int) -> None:
            for i in range(first, n_slices, workers):
                i3, i2 = divmod(i, a2)
                o3, o2 = slice(i3 * r3, (i3 + 1) * r3), slice(i2 * r2, (i2 + 1) * r2)
                wf = f16_to_f32(w[i3, i2, :, :used])  # (M, used)
                rows, dst = xh[o3, o2].reshape(-1, used), out[o3, o2]
                if dst.flags.c_contiguous:  # the slices sharing these weights: one GEMM, straight into the output
                    np.matmul(rows, wf.T, out=dst.reshape(-1, wf.shape[0]))
                else:
                    dst[...] = np.matmul(rows, wf.T).reshape(dst.shape)

        with single_threaded_blas():
            parallel_for(work, workers)

    parts = row_split_parts()

    def threaded() -> None:
        most = current_threads()
        # where the spinning helpers serve this batch's products (parts.helping), a worker of the plugin's pool
        # shares a core with one of them: the heads then run on this thread (f32 bench model, 2 threads, the
        # 128-token batch's four KQV products: 2.1 → 1.5 ms on a Zen 3 guest)
        run(1 if most > 1 and parts is not None and parts.helping(most) else most)

    # on the workers or on the calling thread, whichever measures faster (the same slices: the same bits)
    return Faster(threaded, lambda: run(1), key=("half-batch", tuple(a.ne), tuple(b.ne)))


def _bind_block_products(a: Tensor, b: Tensor, node: Tensor) -> Thunk | None:
    """The decode route, fully resolved: one prepared :class:`quant.BlockProduct` per weight slice (None: not
    applicable — too many rows, no block kernels, or operands whose slices are not plain views of their memory)."""
    n_rows = b.ne[1] * (b.ne[2] // a.ne[2]) * (b.ne[3] // a.ne[3])
    if b.type != GGMLType.F32 or a.type not in quant.BLOCK_KERNEL_TYPES or n_rows > quant.vec_rows_limit(a.type):
        return None
    return _bind_slices(a, b, node, quant.block_product)


def _bind_slices(a: Tensor, b: Tensor, node: Tensor, make: Callable[..., Thunk | None]) -> Thunk | None:
    """One product bound by ``make(weight rows, type, activation rows, out rows)`` per weight slice, or None when
    ``make`` declines one or a slice is not a plain view of its operand's memory (a copy would miss later writes)."""
    w, x, out = arr(a), arr(b), arr(node)
    products = []
    for i3, i2, xs, os_ in _groups(a, b, x, out):
        rows = w[i3, i2]
        views = ((rows, w), (xs, x), (os_, out))
        if not all(v.flags.c_contiguous and v.ndim == 2 and np.may_share_memory(v, base) for v, base in views):
            return None
        product = make(rows, a.type, xs, os_)
        if product is None:
            return None
        products.append(product)
    if len(products) == 1:
        return products[0]

    def run() -> None:
        for product in products:
            product()

    return run


def _bind_quantized(a: Tensor, b: Tensor, node: Tensor, cache: WeightsCache | None) -> Thunk:
    wtype = a.type
    m = a.ne[1]
    if not can_dequantize(wtype):
        return lambda: np.copyto(arr(node), mul_mat_reference(a, b))
    fast = _bind_block_products(a, b, node)
    if fast is not None:
        return fast

    def run() -> None:
        x = f32(b)
        out = arr(node)
        w = arr(a)
        n_rows = x.shape[2] * (b.ne[2] // a.ne[2]) * (b.ne[3] // a.ne[3])
        hit = cache.get(a) if cache is not None and n_rows > quant.vec_rows_limit(wtype) else None
        for i3, i2, xs, os_ in _groups(a, b, x, out):
            target, done = _into(os_, xs.shape[0], m)
            if hit is not None:
                _cached_product(hit, i3, i2, wtype, xs, target)
            else:
                quant.qmatmul(_weight_rows(w, i3, i2), wtype, xs, target)
            done()

    n_rows = b.ne[1] * (b.ne[2] // a.ne[2]) * (b.ne[3] // a.ne[3])
    if cache is None and quant.splits_itself(wtype, n_rows):
        # the split chooses its threads itself (see quant.splits_itself); file-mapped weights bind it once
        bound = _bind_slices(a, b, node, quant.prompt_product) if b.type == GGMLType.F32 else None
        return bound or run
    return _either_threading(run, arr(node), (a.type, tuple(a.ne), tuple(b.ne)))


def _cached_product(
    hit: tuple[np.ndarray, np.ndarray | None], i3: int, i2: int, wtype: GGMLType, x: np.ndarray, out: np.ndarray
) -> None:
    acts = quant.quantize_activations(x, quant.DOT_TYPE[wtype])
    np.matmul(acts.dequantized(), hit[0][i3, i2].T, out=out)
    if hit[1] is not None:
        out += acts.s @ hit[1][i3, i2].T


def bind_mul_mat(node: Tensor, cache: WeightsCache | None = None) -> Thunk:
    """The thunk for one MUL_MAT node; ``cache`` is the backend's opt-in :class:`WeightsCache` (or None)."""
    a, b = node.src[0], node.src[1]
    assert a is not None and b is not None
    if node.is_empty or a.ne[0] == 0:
        out = arr(node)
        return lambda: out.fill(0.0)
    if a.type == GGMLType.F32:
        return _bind_f32(a, b, node)
    if a.type in (GGMLType.F16, GGMLType.BF16):
        batch = _bind_half_batch(a, b, node, cache)
        return batch or bind_half_product(a, b, node) or _bind_half(a, b, node, cache)
    return _bind_quantized(a, b, node, cache)


@KERNELS.kernel(GGMLOp.MUL_MAT, supports=_mul_mat_ok)
def _bind_mul_mat(node: Tensor) -> Thunk:
    return bind_mul_mat(node)


def expert_product(wraw: np.ndarray, wtype: GGMLType, x: np.ndarray) -> np.ndarray:
    """Rows ``x`` (n, K) float32 times one expert's weight rows ``wraw`` → (n, M), with MUL_MAT's numerics.

    ``wraw`` is (M, row bytes) for quantized types, (M, K) values for f32 / f16, (M, K) uint16 bits for bf16. This
    is the helper MUL_MAT_ID can call per expert: the same block kernels / tiles as MUL_MAT.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty((x.shape[0], wraw.shape[0]), np.float32)
    if wtype.is_quantized and can_dequantize(wtype) and wtype in quant.DOT_TYPE:
        quant.qmatmul(np.ascontiguousarray(wraw), wtype, x, out)
    elif wtype == GGMLType.F32:
        np.matmul(x, wraw.T, out=out)
    else:
        np.matmul(activations_as_dot_type(x, wtype), _float_rows_f32(wraw, wtype).T, out=out)
    return out


# ------------------------------------------------------------------------------------- the compiled path


#: f16 products with at most this many activation rows run the compiled kernel (decode, short batches); above it
#: the numpy path's BLAS product is faster
HALF_ROWS_LIMIT = 32


#: ... or with any number of rows when one weight slice (a KV head) is at most this many bytes (it stays in cache)
HALF_SLICE_BYTES = 1 << 20


def used_columns_kernel() -> Callable[..., Any] | None:
    """The compiled scan of a mask for its used columns (:mod:`._attn_kernels`), or None."""
    mod = load_module("_attn_kernels", "compiled attention kernels")
    return _jit.get(mod.USED_COLUMNS_SPEC) if mod is not None else None


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
    small = a.ne[1] * b.nelements < SERIAL_WORK or b.ne[2] == 1
    serial = kernel("HALF_DOT_SPECS", 1, module="_matmul_kernels")
    # the threaded variant is compiled only when it may run
    parallel = serial if small else kernel("HALF_DOT_SPECS", 0, module="_matmul_kernels")
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
    p = params(k, a.ne[1], b.ne[1], b.ne[2], b.ne[3], b.ne[2] // a.ne[2], b.ne[3] // a.ne[3],
                *w[1][1:], *x[1][1:], *out[1][1:], *mp)  # fmt: skip
    xh = np.empty(max(k, 1) * b.ne[2], np.float32)
    args = (w[0], x[0], out[0], p, xh, mv)
    if small:
        return lambda: serial(*args)
    faster = Faster(parallel, serial, key=("half", tuple(a.ne), tuple(b.ne), soft_max is not None))

    def run() -> None:
        (serial if _jit.current_threads() == 1 else faster)(*args)

    return run


#: f32 products with at most this many activation rows run the row kernel (a decode step); above it the tiles
F32_ROWS_LIMIT = 4


#: ... split over the helpers at 2+ threads from this many weights (a 512 × 512 matrix is 262,144)
F32_SPLIT_ELEMENTS = 1 << 16


#: f32 tile products split over the helpers at 2+ threads from this many multiply-adds (weights × rows)
F32_GEMM_SPLIT_WORK = 1 << 20


def bind_f32_product(a: Tensor, b: Tensor, node: Tensor) -> Thunk | None:
    """MUL_MAT of 2-D f32 weights and f32 activations, on our compiled kernels (None: numpy's BLAS product).

    * Up to :data:`F32_ROWS_LIMIT` activation rows (a decode step): each weight row is read once, by
      :func:`._matmul_kernels.f32_dot_rows`. A decode step streams its weights from memory, which one thread does
      as fast as OpenBLAS's SGEMV (AMD EPYC, Zen 5: the LLaMA bench model's 29 products of one token, 63 MB,
      2.0–2.2 ms here against 2.0–2.9 ms through numpy), and at two threads the split runs on the helpers that
      already spin between a decode step's nodes (1.45–1.7 ms) instead of waking OpenBLAS's threads.
    * More rows (a prompt batch): register tiles of :mod:`ggml_cpu.quant._gemm_kernels`, with no packing.

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
    fn = kernel("F32_DOT_SPEC", module="_matmul_kernels")
    if fn is None:
        return None
    p = params(k, m, n, w[1][1], x[1][1], out[1][1])
    wv, xv, ov = w[0], x[0], out[0]

    def serial() -> None:
        fn(wv, xv, ov, p)

    split = split_rows("F32_DOT", (wv, xv, ov), p, (), m, m * k, serial, min_elements=F32_SPLIT_ELEMENTS, product=True)
    return serial if split is serial else lambda: split()  # a closure: profilers label it


def _bind_f32_tiles(views: tuple[np.ndarray, np.ndarray, np.ndarray], shape: tuple[int, ...]) -> Thunk | None:
    """The tile product of :mod:`ggml_cpu.quant._gemm_kernels` on flat views (w, x, out) with ``shape`` = (K, M, N, the
    three row strides), split over weight tiles at 2+ threads."""
    fn = kernel("F32_GEMM_SPEC", module="ggml_cpu.quant._gemm_kernels")
    mod = load_module("ggml_cpu.quant._gemm_kernels", "compiled f32 tiles") if fn is not None else None
    if fn is None or mod is None:
        return None
    k, m, n = shape[:3]
    p = params(*shape, mod.block_tokens(k, n))
    wv, xv, ov = views

    def serial() -> None:
        fn(wv, xv, ov, p)

    split = split_rows(
        "F32_GEMM", views, p, (), mod.tiles(m), m * k * n, serial, min_elements=F32_GEMM_SPLIT_WORK, product=True,
        batch=True,
    )  # fmt: skip
    return serial if split is serial else lambda: split()


def used_columns(m: np.ndarray) -> int:
    """One past the last column of the 2-D ``m`` holding a value other than −inf (masks) — 0 when there is none."""
    fn = used_columns_kernel() if m.dtype == np.float32 and m.ndim == 2 and m.size >= 1024 else None
    if fn is not None:
        return int(fn(m))
    n = m.shape[-1]
    for c0 in range((n - 1) // 32 * 32, -1, -32):
        if (m[:, c0 : c0 + 32] != -np.inf).any():
            last = np.flatnonzero((m[:, c0 : c0 + 32] != -np.inf).any(axis=0))[-1]
            return int(c0 + last + 1)
    return 0
