"""Regenerate ``golden.json``: SHA-256 digests of ggml's own quantizer / dequantizer output on the test inputs.

Needs ggml-python (which builds ggml from source), e.g. ``pip install ggml-python==0.0.45`` (ggml 0.15.3). Run
``python tests/quant_vectors/regen.py`` from the repository root; it prints the digests and rewrites
``golden.json`` next to this file. ``tests/quants/test_quants.py`` recomputes the same digests from ggml-core's numpy
code, so CI without ggml still checks every byte against what ggml produced here.

Inputs (``inputs.make_rows()``): the edge rows of ``inputs.edge_rows()`` and ``inputs.N_RANDOM_ROWS`` random rows
from ``np.random.default_rng(inputs.DEFAULT_SEED)``, 512 float32 values each.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def sha256(a: np.ndarray) -> str:
    """Digest of an array's raw C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def main() -> int:
    """Compute and write the digests; returns a process exit status."""
    import ggml_ref  # beside this script, whose folder Python puts first on sys.path
    import inputs

    ref = ggml_ref.load()
    if ref is None:
        print("ggml-python is not importable: pip install ggml-python", file=sys.stderr)
        return 1
    sys.path.insert(0, str(HERE.parents[1]))
    from ggml_core._types import GGMLType

    x = inputs.make_rows()
    golden: dict[str, object] = {
        "ggml_version": ref.version,
        "source": "ggml-python 0.0.45 (libggml-base quantize_row_*_ref / dequantize_row_*)",
        "input": {"shape": list(x.shape), "sha256": sha256(x)},
        "quantize": {},
        "dequantize": {},
    }
    for name in ggml_ref.QUANT_TYPES:
        t = GGMLType[name]
        q = ref.quantize(name, x, t.block_size, t.type_size)
        golden["quantize"][name] = sha256(q)  # type: ignore[index]
        if name in ggml_ref.DEQUANT_TYPES:
            golden["dequantize"][name] = sha256(ref.dequantize(name, q, t.block_size, t.type_size))  # type: ignore[index]
    golden["quantize"]["F16"] = sha256(ref.fp32_to_fp16(x))  # type: ignore[index]
    golden["quantize"]["BF16"] = sha256(ref.fp32_to_bf16(x))  # type: ignore[index]
    out = HERE / "golden.json"
    out.write_text(json.dumps(golden, indent=2) + "\n")
    print(json.dumps(golden, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
