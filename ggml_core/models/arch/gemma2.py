"""gemma2 (``llm_build_gemma2_iswa``): Gemma's sandwich block without QK-norm, alternating sliding-window and global
layers (even layers local unless the file's ``attention.sliding_window_pattern`` says otherwise, window 4096 unless
the file says), attention-logit softcapping (default 50) and final logit softcapping (default 30), one rope base
unless the file sets ``rope.freq_base_swa`` for the local layers (which keep the file's rope scaling)."""

from __future__ import annotations

from dataclasses import replace

from ggml_core._errors import GGUFError
from ggml_core.models.arch._base import Architecture
from ggml_core.models.arch.gemma3 import build_layer, layer_weights, read_gemma
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.ops import ROPE_TYPE_NEOX

__all__ = ["ARCH"]


def _read(f: GGUFFile, hp: HParams) -> HParams:
    k = hp.arch + "."
    attn_cap = f.get_float(k + "attn_logit_softcapping", 50.0)
    if attn_cap <= 0:
        raise GGUFError(f.path, f"metadata '{k}attn_logit_softcapping'", f"{attn_cap} must be > 0")
    hp = read_gemma(f, hp, pattern=2, big_layers=46, n_swa_default=4096)
    return replace(hp, attn_softcap=attn_cap, final_softcap=f.get_float(k + "final_logit_softcapping", 30.0))


ARCH = Architecture(
    name="gemma2",
    description="Gemma 2: alternating sliding-window/global layers, attention and final logit softcapping, GEGLU",
    rope_type=ROPE_TYPE_NEOX,
    layer_weights=layer_weights,
    build_layer=build_layer,
    read=_read,
)
