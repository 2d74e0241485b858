"""The bottom layer of the CPU plugin: numba's lazy, cached compilation (:mod:`._jit`, :mod:`._kernel_cache`), the
LLVM intrinsics the kernels are built from (:mod:`._simd`, :mod:`._blocks`, :mod:`._half_kernels`), the spinning
helper threads' synchronisation (:mod:`._spin`) and f16 conversion (:mod:`.halves`). Nothing here imports the
plugin's other packages; the intrinsics' modules import numba, so they load only after :func:`._jit.enabled`."""
