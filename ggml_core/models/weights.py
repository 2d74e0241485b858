"""The weights of a model: which tensors (names, shapes, layer slot), and loading them onto devices.

CPU-placed weights are used in place: one ``CPU_Mapped`` buffer wraps the file's memory-mapped data section
(``buffer_from_host_ptr``, zero-copy) and each tensor is bound at its file offset. Weights of other devices go into
one WEIGHTS buffer per device, uploaded tensor by tensor in chunks with a progress bar and a MB/s figure at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TextIO

from ggml_core._context import Context
from ggml_core._errors import GGUFError
from ggml_core._tensor import Tensor
from ggml_core._types import GGMLType
from ggml_core.alloc import alloc_ctx_tensors, pad
from ggml_core.backend.interfaces import Buffer, BufferType, BufferUsage, Device
from ggml_core.models.gguf_file import GGUFFile
from ggml_core.models.hparams import HParams
from ggml_core.models.plan.placement import INPUT_SLOT, Placement
from ggml_core.models.progress import Progress

__all__ = [
    "UPLOAD_CHUNK",
    "LayerWeight",
    "ModelWeights",
    "UploadStat",
    "WeightSpec",
    "family_weight_specs",
    "load_weights",
    "slot_bytes",
    "slot_nbytes",
]

#: bytes per upload call when streaming weights to a device
UPLOAD_CHUNK: Final = 16 * 2**20


#: one tensor of a layer: (name inside ``blk.{il}.``, ggml ne, True for an f32 vector)
LayerWeight = tuple[str, tuple[int, ...], bool]


@dataclass(frozen=True)
class WeightSpec:
    """One weight the graph needs: its name in the graph, the file tensor it comes from, its slot and shape."""

    name: str
    source: str
    slot: int
    ne: tuple[int, ...]
    vector: bool = False


#: a LayerNorm's tensors
_WB: Final = ("weight", "bias")


def _strip(ne: tuple[int, ...]) -> tuple[int, ...]:
    out = list(ne)
    while len(out) > 1 and out[-1] == 1:
        out.pop()
    return tuple(out)


def family_weight_specs(
    f: GGUFFile,
    hp: HParams,
    layer_weights: Callable[[HParams, int], list[LayerWeight]],
    *,
    frame_norm: bool,
    output_norm: str,
) -> list[WeightSpec]:
    """Every weight of a model of a family with its expected shape; GGUFError naming the tensor when one is missing
    or wrong.

    :param layer_weights: the family's tensors of layer ``il``
    :param frame_norm: the family norms the frame with its own LayerNorm (``token_embd_norm`` and the output norm's
        bias are weights too)
    :param output_norm: the file's name of the final norm's weight
    """
    e, nl = hp.n_embd, hp.n_layer
    specs = [WeightSpec("token_embd.weight", "token_embd.weight", INPUT_SLOT, (e, hp.n_vocab))]
    if frame_norm:  # the embeddings' norm (weight, bias): on the first layer's device, as llama.cpp
        specs += [WeightSpec(f"token_embd_norm.{n}", f"token_embd_norm.{n}", 0, (e,), True) for n in _WB]
    for il in range(nl):
        b = f"blk.{il}."
        specs += [WeightSpec(b + n, b + n, il, ne, vec) for n, ne, vec in layer_weights(hp, il)]
    specs.append(WeightSpec("output_norm.weight", output_norm, nl, (e,), True))  # the file's name for it
    if frame_norm:
        specs.append(WeightSpec("output_norm.bias", "output_norm.bias", nl, (e,), True))
    # no output matrix: the embeddings are tied (used again as lm_head)
    out_src = "output.weight" if f.has_tensor("output.weight") else "token_embd.weight"
    specs.append(WeightSpec("output.weight", out_src, nl, (e, hp.n_vocab)))
    if f.has_tensor("rope_freqs.weight"):
        # per-pair frequency divisors (llama 3.1 style): one copy per layer, on the layer's device, as llama.cpp does
        # (a weight on another device would cut the layer's split in pieces)
        for il in range(nl):
            specs.append(WeightSpec(f"blk.{il}.rope_freqs", "rope_freqs.weight", il, (hp.n_rot // 2,), True))
    for s in specs:
        info = f.tensor_info(s.source)
        if _strip(info.ne) != _strip(s.ne):
            raise GGUFError(f.path, f"tensor {s.source!r}", f"has ne={list(info.ne)}, expected {list(s.ne)}")
        if s.vector and info.type != GGMLType.F32:
            raise GGUFError(
                f.path, f"tensor {s.source!r}", f"norm and bias vectors must be f32, is {info.type.traits.name}"
            )
    return specs


def slot_nbytes(f: GGUFFile, spec: WeightSpec, alignment: int = 64) -> int:
    """One weight's bytes, padded to ``alignment``."""
    return pad(f.tensor_info(spec.source).nbytes, alignment)


def slot_bytes(f: GGUFFile, specs: list[WeightSpec], alignment: int = 64) -> dict[int, int]:
    """Weight bytes per slot (each tensor padded to ``alignment``)."""
    out: dict[int, int] = {}
    for s in specs:
        out[s.slot] = out.get(s.slot, 0) + slot_nbytes(f, s, alignment)
    return out


@dataclass
class UploadStat:
    """One device's weight upload: bytes and seconds."""

    device: str
    nbytes: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        """10^6 bytes per second."""
        return self.nbytes / 1e6 / max(self.seconds, 1e-9)


@dataclass
class ModelWeights:
    """The loaded weights: tensors by graph name, the buffers holding them, upload statistics."""

    tensors: dict[str, Tensor]
    buffers: list[Buffer] = field(default_factory=list)
    uploads: list[UploadStat] = field(default_factory=list)
    contexts: list[Context] = field(default_factory=list)

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def get(self, name: str) -> Tensor | None:
        """The tensor, or None."""
        return self.tensors.get(name)

    def free(self) -> None:
        """Release every buffer (mapped buffers just drop their reference to the mmap)."""
        for b in self.buffers:
            b.free()
        self.buffers.clear()


def load_weights(
    f: GGUFFile,
    specs: list[WeightSpec],
    placement: Placement,
    *,
    progress: bool = True,
    stream: TextIO | None = None,
    upload: bool = True,
    deferred: Callable[[Tensor], bool] | None = None,
) -> ModelWeights:
    """Create each weight in its chosen buffer type: in place from the mmap for the CPU's own buffer type, uploaded
    elsewhere (the placement's per-weight choice; without one, the slot's device).

    ``upload=False`` allocates device weights without copying their data (for planning: shapes and buffers only).
    ``deferred``: weights it answers True for are made without memory (``-sm tensor``: the meta device allocates
    and writes their shards).
    """
    out = ModelWeights({})
    by_buft: dict[tuple[int, int], tuple[Device, BufferType, list[WeightSpec]]] = {}
    if deferred is not None:
        held = Context("weights:deferred")
        out.contexts.append(held)
        kept = []
        for s in specs:
            info = f.tensor_info(s.source)
            t = held.new_tensor(info.type, info.ne, name=s.name)
            if deferred(t):
                out.tensors[s.name] = t
            else:
                kept.append(s)
        specs = kept
    for s in specs:
        choice = placement.weights.get(s.name)
        dev = choice.device if choice is not None else placement.device_of(s.slot)
        buft = choice.buft if choice is not None else dev.buffer_type()
        by_buft.setdefault((id(dev), id(buft)), (dev, buft, []))[2].append(s)
    try:
        for dev, buft, dspecs in by_buft.values():
            ctx = Context(f"weights:{buft.name}")
            out.contexts.append(ctx)
            made = []
            for s in dspecs:
                info = f.tensor_info(s.source)
                t = ctx.new_tensor(info.type, info.ne, name=s.name)
                out.tensors[s.name] = t
                made.append((t, s))
            mapped = buft is dev.buffer_type() and placement.maps(dev) and _bind_mapped(f, dev, made, out)
            if not mapped:
                _upload(f, dev, buft, ctx, made, out, progress and upload, stream, upload)
    except BaseException:
        out.free()
        raise
    return out


def _bind_mapped(f: GGUFFile, dev: Device, made: list[tuple[Tensor, WeightSpec]], out: ModelWeights) -> bool:
    max_size = max((t.nbytes for t, _ in made), default=0)
    buf = dev.buffer_from_host_ptr(f.data_section, max_size)
    if buf is None:
        return False
    buf.set_usage(BufferUsage.WEIGHTS)
    for t, s in made:
        buf.alloc_tensor(t, f.tensor_info(s.source).rel_offset)
    out.buffers.append(buf)
    return True


def _upload(
    f: GGUFFile,
    dev: Device,
    buft: BufferType,
    ctx: Context,
    made: list[tuple[Tensor, WeightSpec]],
    out: ModelWeights,
    progress: bool,
    stream: TextIO | None,
    upload: bool,
) -> None:
    buf = alloc_ctx_tensors(ctx, buft)
    out.buffers.append(buf)
    buf.set_usage(BufferUsage.WEIGHTS)
    if not upload:
        return
    total = sum(t.nbytes for t, _ in made)
    start = time.perf_counter()
    where = getattr(dev, "device_id", None)
    label = f"{dev.name} ({where})" if where and where != dev.name else dev.name
    # a remote device's connection may count the weights its server already held (ggml-rpc: load once)
    conn = getattr(dev, "conn", None)
    held_before = int(getattr(conn, "weights_cached", 0))
    cached = lambda: int(getattr(conn, "weights_cached", 0)) - held_before  # noqa: E731
    err = stream if stream is not None else sys.stderr
    with Progress(total, label, enabled=progress, stream=err, cached=cached) as bar:
        for t, s in made:
            src = f.tensor_bytes(s.source)
            tbuf = t.buffer
            assert tbuf is not None
            for off in range(0, t.nbytes, UPLOAD_CHUNK):
                chunk = src[off : off + UPLOAD_CHUNK]
                tbuf.set_tensor(t, memoryview(chunk.data), off)
                bar.advance(chunk.nbytes)
    out.uploads.append(UploadStat(dev.name, total, time.perf_counter() - start))
