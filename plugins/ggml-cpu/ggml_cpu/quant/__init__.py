"""Quantized products: block layouts, activation quantizers, block dot products, tile dequantizers, repacked
weights and their lane tiles, and the products split over the spinning helper threads.

:func:`qmatmul` is the entry point (see :mod:`.product`); :mod:`ggml_cpu.jit._jit` compiles the kernels with numba
on first use and falls back to numpy when numba is missing or a kernel fails to compile.
"""

from ggml_cpu.jit._jit import (
    cache_dir,
    compile_log,
    compile_seconds,
    disabled_reason,
    import_seconds,
    max_threads,
    numba_loaded,
    set_threads,
)
from ggml_cpu.quant.activations import QActs, from_float, quantize_activations, quantize_activations_numpy
from ggml_cpu.quant.product import (
    BLOCK_KERNEL_TYPES,
    DOT_TYPE,
    BlockProduct,
    block_kernels_ready,
    block_product,
    compile_ahead,
    dequantize_rows,
    dequantizer_ready,
    qmatmul,
    splits_itself,
    tile_rows,
    vec_rows_limit,
)
from ggml_cpu.quant.prompt import PromptProduct, prompt_product

__all__ = [
    "BLOCK_KERNEL_TYPES",
    "DOT_TYPE",
    "BlockProduct",
    "PromptProduct",
    "QActs",
    "block_kernels_ready",
    "block_product",
    "cache_dir",
    "compile_ahead",
    "compile_log",
    "compile_seconds",
    "dequantize_rows",
    "dequantizer_ready",
    "disabled_reason",
    "from_float",
    "import_seconds",
    "max_threads",
    "numba_loaded",
    "prompt_product",
    "qmatmul",
    "quantize_activations",
    "quantize_activations_numpy",
    "set_threads",
    "splits_itself",
    "tile_rows",
    "vec_rows_limit",
]
