"""GGUF models end to end: checked loading, placement across devices, LLaMA-family graphs, KV cache, sampling,
tokenizers, and the embedded default model.

- :mod:`.gguf_header` / :mod:`.gguf_file`: the bounded header walk (the reader itself), values from the memory map
- :mod:`.hparams`: hyperparameters from ``{arch}.*`` metadata
- :mod:`.placement`: which device holds which layer, and the fit check
- :mod:`.weights`: the weights' names and shapes; zero-copy CPU binding and streamed uploads
- :mod:`.kvcache`, :mod:`.llama`: the cache and the graph builder
- :mod:`.executor`: graphs to backends (scheduler, or the CPU alone)
- :mod:`.runner`: :class:`Model` — prompt processing and generation
- :mod:`.sampling`, :mod:`.tokenizer`, :mod:`.default_model`
"""

from ggml_core.models.executor import Executor, scheduler_available
from ggml_core.models.gguf_file import GGUFFile, open_gguf
from ggml_core.models.gguf_header import HeaderInfo, TensorInfo, read_header
from ggml_core.models.hparams import SUPPORTED_ARCHS, HParams, read_hparams
from ggml_core.models.kvcache import KV_TYPES, KVCache
from ggml_core.models.llama import BuiltGraph, build_llama_graph
from ggml_core.models.placement import SPLIT_MODES, DeviceShare, Placement, PlacementRequest, plan_placement
from ggml_core.models.runner import GenerationResult, Model, ModelParams
from ggml_core.models.sampling import Sampler, SamplerParams

__all__ = [
    "KV_TYPES",
    "SPLIT_MODES",
    "SUPPORTED_ARCHS",
    "BuiltGraph",
    "DeviceShare",
    "Executor",
    "GGUFFile",
    "GenerationResult",
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
    "build_llama_graph",
    "open_gguf",
    "plan_placement",
    "read_header",
    "read_hparams",
    "scheduler_available",
]
