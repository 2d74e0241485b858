"""The embedded default model: a small LLaMA-architecture model generated locally from a fixed seed (no download).

``ggml-core run`` without a model file writes it once to the cache directory (``$GGML_CORE_CACHE``, else
``$XDG_CACHE_HOME/ggml-core``, else ``~/.cache/ggml-core``; a temporary directory when none is writable) and runs it.
The weights are random, so the text it writes is nonsense — but every part of the system is exercised: the GGUF
writer and loader, a SentencePiece-style vocabulary with byte fallback, GQA attention, the KV cache, placement over
every available device and the scheduler's splits. The bytes are the same on every machine (numpy's PCG64).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

__all__ = ["DEFAULT_MODEL", "DefaultModelSpec", "default_model_path", "default_vocab", "write_default_model"]

#: bump when the generated file changes, so stale cached copies are not reused
VERSION: Final = 1

#: words whose pieces (every prefix) join the byte and character tokens of the vocabulary
_WORD_TEXT: Final = (
    "the and of to in is it that was for on are as with be at by this from or have an not but what all were when "
    "we there can your which their said if will each about how up out them then she many some so these would other "
    "into has more her two like him see time could no make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know hello world ggml core "
    "backend device tensor graph model token layer plugin"
)
_WORDS: Final = tuple(_WORD_TEXT.split(" "))


@dataclass(frozen=True)
class DefaultModelSpec:
    """The default model's shape."""

    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 320
    n_ctx: int = 2048
    seed: int = 20240501


DEFAULT_MODEL: Final = DefaultModelSpec()


def default_vocab() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: <unk> <s> </s>, 256 byte tokens, characters, then word pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    chars = ["\u2581"] + [chr(c) for c in range(33, 127)]
    seen = set(tokens)
    for c in chars:
        tokens.append(c)
        types.append(1)
        scores.append(-100.0)
        seen.add(c)
    for w in _WORDS:
        piece = "\u2581" + w
        for n in range(2, len(piece) + 1):
            p = piece[:n]
            if p not in seen:
                seen.add(p)
                tokens.append(p)
                types.append(1)
                scores.append(float(n))  # longer pieces win: they merge first
    return tokens, scores, types


def default_model_path() -> Path:
    """Where the default model lives (generated on first use)."""
    name = f"ggml-core-default-llama-v{VERSION}.gguf"
    for base in _cache_dirs():
        try:
            base.mkdir(parents=True, exist_ok=True)
            if os.access(base, os.W_OK):
                return base / name
        except OSError:
            continue
    return Path(tempfile.gettempdir()) / name


def _cache_dirs() -> list[Path]:
    out = []
    if os.environ.get("GGML_CORE_CACHE"):
        out.append(Path(os.environ["GGML_CORE_CACHE"]))
    xdg = os.environ.get("XDG_CACHE_HOME")
    out.append(Path(xdg) / "ggml-core" if xdg else Path.home() / ".cache" / "ggml-core")
    out.append(Path(tempfile.gettempdir()) / "ggml-core")
    return out


def write_default_model(path: str | os.PathLike[str] | None = None, spec: DefaultModelSpec = DEFAULT_MODEL) -> Path:
    """Write the default model (atomically) unless it is already there; returns its path."""
    from gguf import GGUFWriter

    target = Path(path) if path is not None else default_model_path()
    if target.exists():
        return target
    tokens, scores, types = default_vocab()
    rng = np.random.default_rng(spec.seed)
    e, hd = spec.n_embd, spec.n_embd // spec.n_head
    n_vocab = len(tokens)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    w = GGUFWriter(str(tmp), "llama")
    w.add_name("ggml-core default model (random weights)")
    w.add_uint32("llama.context_length", spec.n_ctx)
    w.add_uint32("llama.embedding_length", e)
    w.add_uint32("llama.block_count", spec.n_layer)
    w.add_uint32("llama.feed_forward_length", spec.n_ff)
    w.add_uint32("llama.attention.head_count", spec.n_head)
    w.add_uint32("llama.attention.head_count_kv", spec.n_head_kv)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_uint32("llama.rope.dimension_count", hd)
    w.add_uint32("llama.vocab_size", n_vocab)
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", scores)
    w.add_array("tokenizer.ggml.token_type", types)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_tensor("token_embd.weight", rng.standard_normal((n_vocab, e)).astype(np.float32))
    for il in range(spec.n_layer):
        b = f"blk.{il}."
        w.add_tensor(b + "attn_norm.weight", np.ones(e, np.float32))
        w.add_tensor(b + "attn_q.weight", mat(e, e))
        w.add_tensor(b + "attn_k.weight", mat(hd * spec.n_head_kv, e))
        w.add_tensor(b + "attn_v.weight", mat(hd * spec.n_head_kv, e))
        w.add_tensor(b + "attn_output.weight", mat(e, e))
        w.add_tensor(b + "ffn_norm.weight", np.ones(e, np.float32))
        w.add_tensor(b + "ffn_gate.weight", mat(spec.n_ff, e))
        w.add_tensor(b + "ffn_up.weight", mat(spec.n_ff, e))
        w.add_tensor(b + "ffn_down.weight", mat(e, spec.n_ff))
    w.add_tensor("output_norm.weight", np.ones(e, np.float32))
    w.add_tensor("output.weight", mat(n_vocab, e) * 4)
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target
