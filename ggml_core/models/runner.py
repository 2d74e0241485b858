"""A loaded model and its session: prompt processing in batches, then token-by-token generation.

:meth:`Model.load` opens the GGUF (checked, memory-mapped), reads the hyperparameters, plans the placement and
checks it fits *before* allocating, then loads the weights (in place on the CPU, uploaded elsewhere), creates the KV
cache and the executor. :meth:`Model.decode` runs one batch; graphs are cached per (n_tokens, n_kv, outputs), and
``n_kv`` is padded to 256 cells as llama.cpp does, so every decode step of a generation reuses one graph (and the
scheduler's allocation of it) and only rewrites the inputs.
"""

from __future__ import annotations

import atexit
import functools
import gc
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Concatenate, Final, ParamSpec, TextIO, TypeVar

import numpy as np

from ggml_core._errors import ModelInUseError
from ggml_core.alloc import pad
from ggml_core.models.arch import Architecture, get_architecture, read_hparams, weight_specs
from ggml_core.models.executor import Executor
from ggml_core.models.gguf_file import GGUFFile, open_gguf
from ggml_core.models.graph import BuiltGraph, build_graph, graph_size_for
from ggml_core.models.hparams import HParams
from ggml_core.models.kvcache import KVCache, check_kv_types, swa_cache_size
from ggml_core.models.params import KV_PAD, ModelParams, check_context, default_n_ctx
from ggml_core.models.plan.placement import Placement
from ggml_core.models.plan.planner import flash_attn_auto, plan_model
from ggml_core.models.sampling import Sampler
from ggml_core.models.weights import ModelWeights, WeightSpec, load_weights

__all__ = ["GenerationResult", "Model"]

#: graphs kept allocated at once (a decode graph and a few prompt-chunk shapes)
GRAPH_CACHE: Final = 4
#: up to this many token ids are checked one by one in Python (numpy's temporaries cost ~10 µs a decode step)
_FEW_TOKENS: Final = 16
_exit_light: list[bool] = []


def _light_exit() -> None:
    """At interpreter exit, let the garbage collector skip its final walks over every live object (registered once,
    by the first load).

    With numba's and the drivers' modules loaded those walks were 0.25-0.4 s of a one-shot run's exit (a third of
    Python's share of open + first token). ``gc.freeze`` only moves the objects out of the collector's generations:
    they are still freed by reference counting as the modules are torn down, and the atexit handlers registered
    before this one still run after it. What it gives up: reference cycles still alive at exit are not collected,
    so their ``__del__`` does not run (Python does not promise it at exit either); the OS reclaims the memory.
    """
    if not _exit_light:
        _exit_light.append(True)
        atexit.register(gc.freeze)


@dataclass
class GenerationResult:
    """What :meth:`Model.generate` did."""

    prompt_tokens: list[int]
    tokens: list[int]
    prompt_seconds: float
    gen_seconds: float
    #: float32 [n_prompt, n_vocab] when asked for
    prompt_logits: np.ndarray | None = None
    stopped_at_eos: bool = False

    @property
    def prompt_tokens_per_s(self) -> float:
        """Prompt processing speed."""
        return len(self.prompt_tokens) / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def gen_tokens_per_s(self) -> float:
        """Generation speed (tokens decoded one at a time; the first comes from the prompt's logits)."""
        n = max(len(self.tokens) - 1, 0)
        return n / self.gen_seconds if self.gen_seconds > 0 and n else 0.0


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _one_thread(
    *, continues: bool
) -> Callable[[Callable[Concatenate[Model, _P], _R]], Callable[Concatenate[Model, _P], _R]]:
    """Run a :class:`Model` method holding the model's lock (one thread at a time; re-entrant).

    ``continues``: the method goes on from the cached sequence, so it fails with :class:`ModelInUseError` when another
    thread changed the sequence since this thread's last call (a non-empty cache it did not leave). Every such
    method, and ``reset``, counts as a change.
    """

    def wrap(method: Callable[Concatenate[Model, _P], _R]) -> Callable[Concatenate[Model, _P], _R]:
        @functools.wraps(method)
        def locked(self: Model, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            with self.lock:
                seen = getattr(self._seen, "changes", None)
                if continues and seen is not None and seen != self._changes and self.kv.n_past > 0:
                    raise ModelInUseError(f"model {self.file.path}")
                try:
                    return method(self, *args, **kwargs)
                finally:
                    self._changes += 1
                    self._seen.changes = self._changes

        return locked

    return wrap


class Model:
    """A model of a registered family loaded onto its devices, with one KV cache (one sequence).

    Threads may share a model: ``reset``, ``decode``, ``process_prompt``, ``generate``, ``warmup`` and ``close`` run
    one at a time under :attr:`lock`, and a thread that would go on from a sequence another thread changed since its
    own last call gets :class:`~ggml_core.ModelInUseError` rather than a mixed answer. A thread that makes one
    sequence with several calls (``reset`` then ``generate``) holds ``lock`` around them.
    """

    def __init__(
        self,
        file: GGUFFile,
        hp: HParams,
        params: ModelParams,
        specs: list[WeightSpec],
        placement: Placement,
        weights: ModelWeights,
        kv: KVCache,
        executor: Executor,
    ) -> None:
        self.file = file
        self.hp = hp
        self.params = params
        self.specs = specs
        self.placement = placement
        self.weights = weights
        self.kv = kv
        self.executor = executor
        self.arch: Architecture = get_architecture(hp.arch)
        self._graphs: OrderedDict[tuple[int, int, bool], BuiltGraph] = OrderedDict()
        self._tokenizer: Any = None
        #: held by the thread running the model (re-entrant: hold it across the calls that make one sequence)
        self.lock = threading.RLock()
        self._changes = 0  # sequence changes so far; each thread remembers the count its own last call left
        self._seen = threading.local()

    # --------------------------------------------------------------------------------------------- loading

    @classmethod
    def plan(
        cls, path: str | os.PathLike[str] | GGUFFile, params: ModelParams | None = None
    ) -> tuple[GGUFFile, HParams, Placement]:
        """Open the file and plan the placement (with the fit check), allocating nothing."""
        params = params or ModelParams()
        f = path if isinstance(path, GGUFFile) else open_gguf(path)
        hp = read_hparams(f)
        specs = weight_specs(f, hp)
        _params, placement = plan_model(f, hp, specs, params)
        return f, hp, placement

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | GGUFFile,
        params: ModelParams | None = None,
        *,
        stream: TextIO | None = None,
        upload: bool = True,
    ) -> Model:
        """Open, check, place and load a GGUF model; reserve the compute buffers for the largest batch.

        ``upload=False`` skips copying weights to non-CPU devices (for ``ggml-core plan``: nothing runs).
        """
        params = params or ModelParams()
        _light_exit()
        if params.batch_size <= 0:
            raise ValueError(f"--batch-size must be positive, got {params.batch_size}")
        f = path if isinstance(path, GGUFFile) else open_gguf(path)
        hp = read_hparams(f)
        specs = weight_specs(f, hp)
        if params.placement.split_mode == "tensor" and params.cache_type_v not in ("f16", "f32"):
            raise ValueError(
                f"--split-mode tensor reads V by rows without flash attention, so its V cache is f16 or f32, got "
                f"-ctv {params.cache_type_v}; quantize K only (-ctk), or use --split-mode layer"
            )
        params, placement = plan_model(f, hp, specs, params)
        state_of = None
        if placement.split_mode == "tensor":  # SOFT_MAX attention, V by rows: see models/tensor_parallel.py
            from ggml_core.models.tensor_parallel import split_states  # imported on use: it loads the scheduler

            state_of = split_states(f, hp, placement.tensor_shares)
            params = replace(params, flash_attn=False)
        if params.flash_attn is None:
            fa = flash_attn_auto(hp, placement, params.cache_type_k, params.cache_type_v)
            params = replace(params, flash_attn=fa)
        check_kv_types(hp, params.cache_type_k, params.cache_type_v, params.flash_attn)
        deferred = None if state_of is None else (lambda t: state_of(t) is not None)
        weights = load_weights(
            f, specs, placement, progress=params.progress, stream=stream, upload=upload, deferred=deferred
        )
        kv: KVCache | None = None
        executor: Executor | None = None
        try:
            n_ctx = params.n_ctx or default_n_ctx(hp)
            swa = n_ctx if params.swa_full else swa_cache_size(hp, n_ctx, min(params.batch_size, n_ctx), KV_PAD)
            v_trans = not params.flash_attn and state_of is None
            kv = KVCache.create(
                hp,
                placement,
                n_ctx,
                params.cache_type_k,
                type_v=params.cache_type_v,
                v_trans=v_trans,
                swa_size=swa,
                deferred=state_of is not None,
            )
            executor = Executor(
                placement.tensor_devices or placement.devices,
                n_threads=params.n_threads,
                graph_size=graph_size_for(hp) * 2,
                use_scheduler=params.use_scheduler,
                op_offload=params.op_offload,
                kv_offload=params.placement.kv_offload,
                split_state=state_of,
            )
            model = cls(f, hp, params, specs, placement, weights, kv, executor)
            model.reserve()
            if executor.tensor_parallel is not None:  # the first split allocated the shards: write them
                executor.tensor_parallel.attach(f, specs, weights, kv, upload, params.progress, stream)
        except BaseException:
            if executor is not None:
                executor.free()
            if kv is not None:
                kv.free()
            weights.free()
            raise
        return model

    def worst_case_graph(self) -> BuiltGraph:
        """The graph of the largest batch over the whole cache, with every position's logits."""
        n = min(self.params.batch_size, self.kv.kv_size)
        return build_graph(
            self.arch,
            self.hp,
            self.weights,
            self.kv,
            n,
            self.n_kv_for(self.kv.kv_size),
            all_logits=True,
            flash_attn=bool(self.params.flash_attn),
        )

    def reserve(self) -> None:
        """Size the compute buffers for the worst case now, so that running out of memory shows at load time."""
        if self.executor.uses_scheduler:
            self.executor.reserve(self.worst_case_graph())

    @_one_thread(continues=False)
    def close(self) -> None:
        """Free graphs, KV cache, weights and backends."""
        for bg in self._graphs.values():
            self.executor.release(bg)
        self._graphs.clear()
        self.kv.free()
        self.weights.free()
        self.executor.free()

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self.hp.n_vocab

    @property
    def n_ctx(self) -> int:
        """KV cache cells."""
        return self.kv.kv_size

    @property
    def tokenizer(self) -> Any:
        """The file's tokenizer (:class:`~ggml_core.models.tokenizer.Tokenizer`), loaded on first use."""
        if self._tokenizer is None:
            from ggml_core.models.tokenizer import load_tokenizer

            self._tokenizer = load_tokenizer(self.file)
        return self._tokenizer

    # --------------------------------------------------------------------------------------------- running

    @_one_thread(continues=False)
    def reset(self) -> None:
        """Forget the sequence (empty KV cache)."""
        self.kv.clear()

    def n_kv_for(self, n_cells: int) -> int:
        """The padded cache window for ``n_cells`` used cells."""
        return min(self.kv.kv_size, pad(n_cells, KV_PAD))

    def graph(self, n_tokens: int, n_kv: int, all_logits: bool) -> BuiltGraph:
        """The (cached) graph of one batch shape."""
        key = (n_tokens, n_kv, all_logits)
        bg = self._graphs.get(key)
        if bg is not None:
            self._graphs.move_to_end(key)
            return bg
        bg = build_graph(
            self.arch,
            self.hp,
            self.weights,
            self.kv,
            n_tokens,
            n_kv,
            all_logits=all_logits,
            flash_attn=bool(self.params.flash_attn),
        )
        self._graphs[key] = bg
        while len(self._graphs) > GRAPH_CACHE:
            _, old = self._graphs.popitem(last=False)
            self.executor.release(old)
        return bg

    def check_tokens(self, tokens: Sequence[int]) -> np.ndarray:
        """Token ids as int32, each checked against the vocabulary."""
        listed = tokens if type(tokens) is list else list(tokens)
        if len(listed) <= _FEW_TOKENS:  # a decode step's ids: plain ints checked in Python (no numpy temporaries)
            n_vocab = self.hp.n_vocab
            if all(type(t) is int and 0 <= t < n_vocab for t in listed):
                return np.array(listed, dtype=np.int32)
        try:
            ids = np.asarray(listed, dtype=np.int64)
        except (OverflowError, ValueError, TypeError):  # beyond int64, or not integers at all
            bad_item = next((t for t in listed if not isinstance(t, (int, np.integer)) or not 0 <= t < 2**63), None)
            raise ValueError(f"token id {bad_item!r} is outside the vocabulary 0..{self.n_vocab - 1}") from None
        bad = ids[(ids < 0) | (ids >= self.n_vocab)]
        if bad.size:
            raise ValueError(f"token id {int(bad[0])} is outside the vocabulary 0..{self.n_vocab - 1}")
        return ids.astype(np.int32)

    @_one_thread(continues=True)
    def decode(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Run one batch after the cached sequence; logits ``[n_tokens or 1, n_vocab]`` (float32)."""
        ids = self.check_tokens(tokens)
        n = int(ids.size)
        if n == 0:
            raise ValueError("decode needs at least one token")
        n_past = self.kv.n_past
        if n_past + n > self.kv.kv_size:
            raise ValueError(
                f"the context is full: {n_past} + {n} tokens exceed the {self.kv.kv_size} cells of the KV cache "
                "(use a larger --ctx-size)"
            )
        n_kv = self.n_kv_for(n_past + n)
        bg = self.graph(n, n_kv, all_logits or n == 1)
        pos = np.arange(n_past, n_past + n, dtype=np.int32)
        kv = self.kv
        kv.record(pos)

        def set_inputs(g: BuiltGraph) -> None:
            g.write_inputs(kv, ids, pos, flash_attn=bool(self.params.flash_attn))

        self.executor.compute(bg, set_inputs)
        self.kv.n_past = n_past + n
        return bg.read_logits(self.n_vocab)

    @_one_thread(continues=False)
    def warmup(self) -> float:
        """Run a 2-token batch and a 1-token batch, then forget them, as llama.cpp's warm-up does.

        The first compute of each graph shape compiles kernels (OpenCL programs, numba code, CUDA modules) and plans
        memory; doing it here keeps that one-time cost out of the prompt and generation timings. Returns seconds.
        """
        t0 = time.perf_counter()
        for n in sorted({min(2, self.kv.kv_size), 1}, reverse=True):
            self.reset()
            self.decode([0] * n)
        self.reset()
        return time.perf_counter() - t0

    @_one_thread(continues=True)
    def process_prompt(self, tokens: Sequence[int], *, all_logits: bool = False) -> np.ndarray:
        """Decode the prompt in batches of ``batch_size``; logits of every token or of the last one."""
        ids = self.check_tokens(tokens)
        if ids.size == 0:
            raise ValueError("the prompt is empty")
        bs = self.params.batch_size
        outs = []
        for start in range(0, ids.size, bs):
            chunk = ids[start : start + bs]
            last = start + bs >= ids.size
            if all_logits or last:
                outs.append(self.decode(chunk.tolist(), all_logits=all_logits))
            else:
                self.decode(chunk.tolist())
        return np.concatenate(outs, axis=0) if all_logits else outs[-1]

    @_one_thread(continues=True)
    def generate(
        self,
        prompt: Sequence[int],
        n_predict: int,
        sampler: Sampler,
        *,
        prompt_logits: bool = False,
        eos_ids: Sequence[int] = (),
        on_token: Callable[[int], None] | None = None,
    ) -> GenerationResult:
        """Process ``prompt`` then sample up to ``n_predict`` tokens (stopping at an end-of-sequence id)."""
        ids = self.check_tokens(prompt).tolist()
        check_context(len(ids), n_predict, self.kv.kv_size)
        t0 = time.perf_counter()
        logits = self.process_prompt(ids, all_logits=prompt_logits)
        t_prompt = time.perf_counter() - t0
        result = GenerationResult(ids, [], t_prompt, 0.0, logits if prompt_logits else None)
        last = logits[-1]
        t1 = time.perf_counter()
        eos = set(int(e) for e in eos_ids)
        for i in range(n_predict):
            tok = sampler.sample(last)
            result.tokens.append(tok)
            if on_token is not None:
                on_token(tok)
            if tok in eos:
                result.stopped_at_eos = True
                break
            if i + 1 < n_predict:
                last = self.decode([tok])[-1]
        result.gen_seconds = time.perf_counter() - t1
        return result
