"""GGUF models end to end: checked loading, placement across devices, a registry of families, KV cache, sampling,
tokenizers, and the embedded default model.

- :mod:`.gguf_header` / :mod:`.gguf_file`: the bounded header walk (the reader itself), values from the memory map
- :mod:`.hparams`: hyperparameters from ``{arch}.*`` metadata
- :mod:`.params`: :class:`ModelParams`, the request (placement, context, ``--fit``, ``--split-mode auto``)
- :mod:`.plan`: which device holds which layer and weight, ``--fit``, ``--split-mode auto``, the whole plan
- :mod:`.weights`: the weights' names and shapes; zero-copy CPU binding and streamed uploads
- :mod:`.kvcache`: the cache (full and sliding-window layer groups, as llama.cpp's iSWA)
- :mod:`.graph`, :mod:`.blocks`, :mod:`.arch`: the graph frame, the shared blocks, one module per family
- :mod:`.executor`: graphs to backends (scheduler, or the CPU alone)
- :mod:`.runner`: :class:`Model` — prompt processing and generation
- :mod:`.sampling`, :mod:`.tokenizer`, :mod:`.default_model`
"""

from ggml_core.models.arch import ARCHITECTURES, Architecture, get_architecture, read_hparams, supported_archs
from ggml_core.models.executor import Executor, scheduler_available
from ggml_core.models.gguf_file import GGUFFile, open_gguf
from ggml_core.models.gguf_header import HeaderInfo, TensorInfo, read_header
from ggml_core.models.graph import BuiltGraph, GraphBuilder, build_graph
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KV_TYPES, KVCache
from ggml_core.models.params import SPLIT_MODES, ModelParams, PlacementRequest
from ggml_core.models.plan.placement import DeviceShare, Placement, plan_placement
from ggml_core.models.runner import GenerationResult, Model
from ggml_core.models.sampling import Sampler, SamplerParams

__all__ = [
    "ARCHITECTURES",
    "KV_TYPES",
    "SPLIT_MODES",
    "Architecture",
    "BuiltGraph",
    "DeviceShare",
    "Executor",
    "GGUFFile",
    "GenerationResult",
    "GraphBuilder",
    "HParams",
    "HeaderInfo",
    "KVCache",
    "Model",
    "ModelParams",
    "Placement",
    "PlacementRequest",
    "Sampler",
    "SamplerParams",
    "TensorInfo",
    "build_graph",
    "get_architecture",
    "open_gguf",
    "plan_placement",
    "read_header",
    "read_hparams",
    "scheduler_available",
    "supported_archs",
]
