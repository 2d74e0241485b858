"""The compiled paths' plumbing: kernel lookup, flat views of tensors, parameter arrays and the row split.

Each family's ``bind_*`` function (:mod:`.norm`, :mod:`.attention`, :mod:`.movement`, :mod:`.glu`, :mod:`.matmul`)
returns a thunk that is **one** call into compiled code on operands resolved at bind time (flat views of the
tensors' memory, :func:`flat`, and an int64 array of shapes and element strides, :func:`params`), or ``None`` when
compiled kernels are off (``GGML_CPU_NUMBA=0``, no numba, a failed compile) or the operands are outside what the
kernel handles (types, a non-contiguous ``ne[0]``); the op's numpy path then runs. A plan is re-bound whenever a
tensor moves (:mod:`ggml_cpu.engine`), so views resolved here stay valid for the plan's life.

Agreement with the numpy path (``tests/test_compiled_row_ops.py`` checks each against numpy from the op's
definition, and against the numpy path itself):

* RMS_NORM (+ MUL), ROPE, SET_ROWS: the same float32 operations in the same order — equal bit for bit, except that
  RMS_NORM's double sum is sequential where numpy's is pairwise (a difference only when the float64 sums round to
  different float32 means: at most 1 ulp of the mean, so ≤ 2 ulp of a result), and that decode ROPE's in-kernel
  angles take cos / sin from libm where the numpy path takes numpy's (both float64, rounded to float32);
* SOFT_MAX: ``exp`` by :func:`ggml_cpu.jit._row_math.exp_f32` (float64 evaluation rounded once: equal to float64
  ``exp`` rounded to float32 on 3 million samples) where the numpy path uses numpy's float32 ``exp`` (up to 2 ulp
  from that), so results agree to a few ulp (the tests allow 8·2⁻²⁴ relative);
* SWIGLU: ``exp`` in double rounded once, as the numpy path: ≤ 1 ulp of the result;
* f16 products: activations rounded to f16 as the numpy path does, weights read as f16, products summed in float32
  in SIMD lanes (the order depends on the vector width): within the float32 dot-product bound
  ``k·2⁻²³·Σ|x·w|`` of the numpy path's BLAS product — and independent of the thread count (one thread);
* f32 products: up to :data:`.matmul.F32_ROWS_LIMIT` activation rows, float32 sums in 16 lanes in a fixed order;
  more rows, register tiles of fused multiply-adds in the CPU's vector width, the lanes summed by a fixed tree
  (explicit vector code either way, so the same bits on every machine with the same lanes and at every thread
  count), within the same bound of BLAS's product (``tests/test_f32_decode_product.py``, ``tests/test_f32_tiles.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ggml_core import GGMLType, Tensor
from ggml_cpu.jit import _jit
from ggml_cpu.ops._base import host

__all__ = [
    "DTYPE",
    "SERIAL_WORK",
    "SPLIT_ELEMENTS",
    "flat",
    "kernel",
    "load_module",
    "params",
    "row_split_parts",
    "rows_of",
    "split_rows",
]

#: below this much work (weights × rows) a product runs on the calling thread (waking threads costs more)
SERIAL_WORK = 1 << 20

DTYPE: dict[GGMLType, np.dtype] = {
    GGMLType.F32: np.dtype(np.float32),
    GGMLType.F16: np.dtype(np.uint16),  # f16 as its bits: the kernels convert
    GGMLType.I32: np.dtype(np.int32),
    GGMLType.I64: np.dtype(np.int64),
}


def load_module(name: str, what: str) -> Any:
    """The kernel module ``ggml_cpu.ops.<name>`` (or the full module name), or None when compiled kernels are off or
    its intrinsics cannot be built (logged once as ``what``)."""
    if not _jit.enabled():
        return None
    try:
        return importlib.import_module(name if "." in name else f"ggml_cpu.ops.{name}")
    except Exception as exc:  # noqa: BLE001 - building the intrinsics may fail on an odd target: numpy path
        _jit.note_failure(what, exc)
        return None


def kernel(name: str, key: object = None, *, module: str) -> Callable[..., Any] | None:
    """The compiled kernel of the spec ``name`` of ``module`` (``ggml_cpu.ops.<module>``, or a full module name;
    ``key`` picks one of a dict or tuple of specs), or None when unavailable. Compiles on first use (cached on disk,
    see :mod:`ggml_cpu.jit._jit`)."""
    mod = load_module(module, f"compiled {module.rsplit('.', 1)[-1].strip('_')}")
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
    """``serial`` (the whole kernel on the calling thread), or where the row split of :mod:`._row_parts` is
    compiled and the kernel has at least ``min_elements`` elements, a callable that splits it across the
    engine's threads when there are 2 or more (one :class:`._row_parts.RowJob` per thread count). Both return
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
    """:mod:`._row_parts`, or None where it or the helpers' kernels do not compile (Linux x86-64 only)."""
    parts = load_module("_row_parts", "compiled row split")
    if parts is None:
        return None
    from ggml_cpu.quant import _packed_split

    return parts if _packed_split.jobs() is not None else None


def flat(t: Tensor, *, any_ne0: bool = False) -> tuple[np.ndarray, tuple[int, int, int, int]] | None:
    """A 1-D view of ``t``'s memory from its first element to its last, and its element strides (dims 0–3).

    None unless ``ne[0]`` is contiguous (``nb[0]`` = element size; any stride with ``any_ne0``), every stride is
    a whole number of elements, the data is aligned and not empty.
    """
    dt = DTYPE.get(t.type)
    if dt is None or t.nelements == 0 or t.buffer is None or t.data_offset is None:
        return None
    size = dt.itemsize
    if (t.nb[0] != size and not any_ne0) or any(nb % size for nb in t.nb) or t.data_offset % size:
        return None
    s = tuple(nb // size for nb in t.nb)
    extent = 1 + sum((n - 1) * st for n, st in zip(t.ne, s, strict=True))
    try:
        view = np.ndarray((extent,), dtype=dt, buffer=host(t), offset=t.data_offset)
    except (TypeError, ValueError):
        return None
    if not view.flags.aligned:
        return None
    return view, (s[0], s[1], s[2], s[3])


def params(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def rows_of(p: np.ndarray) -> int:
    """The rows ``n1 · n2 · n3`` of a row kernel's parameters (``p[1:4]``)."""
    return int(p[1] * p[2] * p[3])
