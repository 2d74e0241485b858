"""How to load and run a model: the request (the CLI's flags) that planning, fitting and the session share.

:class:`ModelParams` holds the whole request: the placement asked for (:class:`PlacementRequest`), the context and
cache, ``--fit`` (:class:`FitParams`) and what ``--split-mode auto`` optimises for (:class:`Workload`). The cache's
padding (:data:`KV_PAD`) and the default context (:func:`default_n_ctx`) are here too, as planning sizes the cache
and the graphs the session builds with the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ggml_core.backend.interfaces import Device
from ggml_core.models.hparams import HParams

__all__ = [
    "DEFAULT_FIT_CTX",
    "DEFAULT_FIT_TARGET_MIB",
    "KV_PAD",
    "SPLIT_MODES",
    "FitParams",
    "ModelParams",
    "PlacementRequest",
    "Workload",
    "check_context",
    "default_n_ctx",
]

#: the cache window a graph attends over is padded to a multiple of this many cells (llama.cpp uses 256)
KV_PAD: Final = 256
SPLIT_MODES: Final = ("none", "layer", "auto", "tensor")
#: llama.cpp's ``--fit-target`` default (MiB kept free on each device)
DEFAULT_FIT_TARGET_MIB: Final = 1024
#: llama.cpp's ``--fit-ctx`` default (the smallest context --fit may choose)
DEFAULT_FIT_CTX: Final = 4096
_MIB: Final = 2**20


@dataclass(frozen=True)
class PlacementRequest:
    """What the user asked for (the CLI flags)."""

    #: device names in order (``--device OpenCL0,RPC0``); None: llama.cpp's default list; ``["none"]``: no offload
    devices: Sequence[str] | None = None
    #: slots to offload (``--n-gpu-layers``); None: all of them
    n_gpu_layers: int | None = None
    split_mode: str = "layer"
    #: share per device (``--tensor-split 3,1``); None: proportional to free memory
    tensor_split: Sequence[float] | None = None
    #: index into ``devices`` of the main device for ``--split-mode none``
    main_device: int = 0
    #: ``-ot``/``--cpu-moe``/``--n-cpu-moe`` buffer type overrides (:class:`~ggml_core.models.plan.bufts.BuftOverride`)
    overrides: Sequence[Any] = ()
    #: False (``--no-kv-offload``): every layer's KV cache in host memory
    kv_offload: bool = True
    #: False (``--no-mmap``): the CPU's weights are read into buffers of their own, not used in place from the
    #: memory-mapped file
    mmap: bool = True


@dataclass(frozen=True)
class FitParams:
    """``--fit``, ``--fit-target``, ``--fit-ctx``."""

    enabled: bool = True
    #: MiB kept free per offload device, in device-list order; a single value is used for every device
    target_mib: tuple[int, ...] = (DEFAULT_FIT_TARGET_MIB,)
    #: the smallest context --fit may choose when no context was given
    min_ctx: int = DEFAULT_FIT_CTX
    #: what the user changes to make the given context smaller (``run`` sizes it from -n when -c is not given)
    ctx_flag: str = "--ctx-size"

    def margins(self, devices: Sequence[Device]) -> dict[str, int]:
        """Bytes to keep free per offload device name; ValueError when the count matches neither 1 nor the list."""
        t = list(self.target_mib)
        if any(v < 0 for v in t):
            raise ValueError(f"--fit-target needs MiB values >= 0, got {','.join(map(str, t))}")
        if len(t) == 1:
            t = t * len(devices)
        elif len(t) != len(devices):
            names = ", ".join(d.name for d in devices) or "none"
            raise ValueError(
                f"--fit-target has {len(t)} values for {len(devices)} offload devices ({names}); give one value "
                "for all of them or one per device"
            )
        return {d.name: v * _MIB for d, v in zip(devices, t, strict=True)}


@dataclass(frozen=True)
class Workload:
    """What the run will do: prompt tokens, generated tokens, prompt batch, cells attended over."""

    n_prompt: int = 512
    n_gen: int = 128
    n_batch: int = 512
    n_kv: int = 512

    @property
    def batch(self) -> int:
        """Tokens of one prompt batch."""
        return max(1, min(self.n_batch, self.n_prompt))


@dataclass(frozen=True)
class ModelParams:
    """How to load and run a model (the CLI's flags)."""

    placement: PlacementRequest = field(default_factory=PlacementRequest)
    #: KV cache cells (the context size); None: :func:`default_n_ctx`
    n_ctx: int | None = None
    #: the K and V cache type (``--kv-type``); :attr:`type_k` / :attr:`type_v` override it for one of them
    kv_type: str = "f16"
    #: llama.cpp's ``-ctk``: the K cache type (None: :attr:`kv_type`)
    type_k: str | None = None
    #: llama.cpp's ``-ctv``: the V cache type (None: :attr:`kv_type`); a quantized V needs flash attention
    type_v: str | None = None
    #: FLASH_ATTN_EXT instead of SOFT_MAX attention; None: llama.cpp's ``-fa auto`` (on when every layer's device
    #: runs it, see :func:`~ggml_core.models.plan.planner.flash_attn_auto`)
    flash_attn: bool | None = False
    batch_size: int = 512
    n_threads: int | None = None
    #: show the upload progress bar and MB/s
    progress: bool = True
    #: None: use the scheduler when available
    use_scheduler: bool | None = None
    check_fit: bool = True
    #: False (``--no-op-offload``): ops with host weights never move to a device
    op_offload: bool = True
    #: sliding-window layers keep the whole context instead of their window (llama.cpp's ``--swa-full``)
    swa_full: bool = False
    #: ``--fit``: context and offloaded layers chosen to fit each device's free memory (models/plan/fit.py)
    fit: FitParams = field(default_factory=FitParams)
    #: what ``--split-mode auto`` optimises for: prompt and generated tokens (models/plan/autosplit.py)
    workload: Workload = field(default_factory=Workload)

    @property
    def cache_type_k(self) -> str:
        """The K cache type."""
        return self.type_k or self.kv_type

    @property
    def cache_type_v(self) -> str:
        """The V cache type."""
        return self.type_v or self.kv_type

    @property
    def planned_flash_attn(self) -> bool:
        """Flash attention as plans size it: ``-fa auto`` (None) counts as off, except with a quantized V cache,
        which only flash attention reads (the run refuses it if auto turns flash attention off)."""
        if self.flash_attn is not None:
            return self.flash_attn
        return self.cache_type_v not in ("f32", "f16", "bf16")


def default_n_ctx(hp: HParams) -> int:
    """The context size used when none is given: the training context, at most 4096."""
    return min(hp.n_ctx_train, 4096)


def check_context(n_prompt: int, n_predict: int, n_ctx: int) -> None:
    """ValueError unless a prompt of ``n_prompt`` tokens and ``n_predict`` generated ones fit ``n_ctx`` cells.

    The last generated token is sampled, never decoded, so it needs no cell.
    """
    if n_predict < 0:
        raise ValueError(f"--n-predict must be >= 0, got {n_predict}")
    if n_prompt + max(n_predict - 1, 0) > n_ctx:
        raise ValueError(
            f"{n_prompt} prompt token{'s' * (n_prompt != 1)} + {n_predict} to generate do not fit in the "
            f"{n_ctx}-cell context "
            f"(use --ctx-size {n_prompt + max(n_predict - 1, 0)} or more, or a smaller --n-predict)"
        )
