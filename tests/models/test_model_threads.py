"""One Model shared by threads: calls are serialised, so two threads generating at once each get exactly what they
get alone — never each other's KV cache or inputs; a thread that would go on from a sequence another thread changed
gets a one-line ModelInUseError instead of a mixed answer."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import ModelInUseError
from ggml_core.models import GenerationResult, Model, ModelParams, PlacementRequest, Sampler, SamplerParams

PROMPTS = ([1, 5, 9, 3, 7, 2, 11, 4, 8, 60, 33, 12], [40, 2, 2, 17, 9, 31])
N_PREDICT = 12
ROUNDS = 10


CFG = TinyConfig()
WEIGHTS = random_weights(CFG, 0)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    path = write_model(tmp_path_factory.mktemp("threads") / "tiny.gguf", CFG, WEIGHTS, "f32")
    params = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=128, progress=False, kv_type="f32")
    with Model.load(path, params) as m:
        yield m


def _generate(m: Model, prompt: list[int]) -> GenerationResult:
    return m.generate(prompt, N_PREDICT, Sampler(SamplerParams(temperature=0.0)), prompt_logits=True)


def _alone(m: Model) -> list[GenerationResult]:
    out = []
    for p in PROMPTS:
        m.reset()
        out.append(_generate(m, p))
    return out


def test_the_single_thread_results_are_the_models(model: Model) -> None:
    """The reference the threads are held to is itself right: prompt logits as the numpy forward pass gives them."""
    for p, res in zip(PROMPTS, _alone(model), strict=True):
        ref = reference_logits(CFG, WEIGHTS, p)
        assert res.prompt_logits is not None
        assert np.abs(res.prompt_logits - ref).max() <= 1e-3 * np.abs(ref).max()


def _race(m: Model, hold_lock: bool) -> list[GenerationResult | BaseException]:
    got: list[GenerationResult | BaseException] = [RuntimeError("did not run")] * len(PROMPTS)
    start = threading.Barrier(len(PROMPTS))

    def run(i: int) -> None:
        start.wait()
        try:
            if hold_lock:
                with m.lock:
                    m.reset()
                    got[i] = _generate(m, PROMPTS[i])
            else:
                m.reset()
                got[i] = _generate(m, PROMPTS[i])
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            got[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return got


def _same(a: GenerationResult, b: GenerationResult) -> bool:
    assert a.prompt_logits is not None and b.prompt_logits is not None
    return a.tokens == b.tokens and np.array_equal(a.prompt_logits, b.prompt_logits)


def test_two_threads_generating_at_once_each_get_the_single_thread_result(model: Model) -> None:
    want = _alone(model)
    for _ in range(ROUNDS):
        got = _race(model, hold_lock=True)
        for g, w in zip(got, want, strict=True):
            assert isinstance(g, GenerationResult), g
            assert _same(g, w)


def test_unlocked_threads_never_mix_sequences(model: Model) -> None:
    """reset() then generate() from two threads without the lock: each call runs alone, and a generate() that would
    continue the other thread's sequence fails in one line instead of answering wrongly."""
    want = _alone(model)
    for _ in range(ROUNDS):
        for g, w in zip(_race(model, hold_lock=False), want, strict=True):
            if isinstance(g, BaseException):
                assert isinstance(g, ModelInUseError), repr(g)
                assert "another thread" in str(g) and "\n" not in str(g)
            else:
                assert _same(g, w)


def test_a_thread_continuing_its_own_sequence_is_not_refused(model: Model) -> None:
    model.reset()
    first = model.decode(PROMPTS[0][:4])
    rest = model.decode(PROMPTS[0][4:])  # the same thread goes on: allowed
    model.reset()
    whole = model.decode(PROMPTS[0], all_logits=True)
    assert np.allclose(rest[-1], whole[-1], atol=1e-4) and first.shape[-1] == whole.shape[-1]
    seen: list[BaseException | None] = []

    def other() -> None:
        try:
            model.decode([3])  # a thread that never used the model takes the sequence over: allowed
            seen.append(None)
        except BaseException as exc:  # noqa: BLE001
            seen.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [None]
    with pytest.raises(ModelInUseError):
        model.decode([4])  # this thread's own sequence was changed by the other
    model.reset()
    model.decode([4])
