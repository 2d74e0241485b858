"""The repetition penalties and min-p against a numpy definition written from llama.cpp's ``src/llama-sampler.cpp``:
penalties over the last ``penalty_last_n`` tokens seen (prompt and sampled), before top-k; min-p after top-p."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ggml_core.models import Sampler, SamplerParams


def _penalized(
    logits: np.ndarray, seen: list[int], last_n: int, repeat: float, freq: float, present: float
) -> np.ndarray:
    """The definition: every token id counted ``c`` times among the last ``last_n`` seen gets
    ``l / repeat if l > 0 else l * repeat``, then ``- c * freq - present``."""
    out = logits.astype(np.float64).copy()
    if last_n == 0:
        return out
    for tid, c in Counter(seen[-last_n:]).items():
        v = out[tid]
        v = v / repeat if v > 0 else v * repeat
        out[tid] = v - c * freq - present
    return out


@pytest.mark.parametrize(
    ("last_n", "repeat", "freq", "present"),
    [(64, 1.3, 0.0, 0.0), (8, 1.0, 0.4, 0.0), (8, 1.0, 0.0, 0.9), (5, 1.7, 0.25, 0.5), (0, 2.0, 1.0, 1.0)],
)
def test_greedy_picks_the_argmax_of_the_penalized_logits(
    last_n: int, repeat: float, freq: float, present: float
) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        logits = rng.normal(0, 2, 50).astype(np.float32)
        history = [int(t) for t in rng.integers(0, 50, int(rng.integers(0, 20)))]
        params = SamplerParams(
            temperature=0.0, penalty_last_n=last_n, penalty_repeat=repeat, penalty_freq=freq, penalty_present=present
        )
        s = Sampler(params)
        s.accept(history)
        want = int(np.argmax(_penalized(logits, history, last_n, repeat, freq, present)))
        assert s.sample(logits) == want


def test_the_sampled_token_counts_for_the_next_one() -> None:
    """Greedy with a strong repeat penalty never picks the same token twice in a row within the window."""
    logits = np.array([3.0, 2.9, 2.8, -1.0], dtype=np.float32)
    s = Sampler(SamplerParams(temperature=0.0, penalty_last_n=2, penalty_repeat=10.0))
    assert [s.sample(logits) for _ in range(5)] == [0, 1, 2, 0, 1]  # the window of 2 forgets the oldest
    s.reset()
    assert s.sample(logits) == 0


def test_penalized_distribution_follows_the_softmax_of_the_definition() -> None:
    logits = np.array([2.0, 1.0, 0.5, 3.0, -1.0, 0.0])
    history = [3, 3, 0, 4]
    kw = {"penalty_last_n": 64, "penalty_repeat": 1.5, "penalty_freq": 0.2, "penalty_present": 0.3}
    n = 4000
    counts = np.zeros(logits.size)
    s = Sampler(SamplerParams(temperature=1.0, top_k=0, top_p=1.0, seed=5, **kw))  # type: ignore[arg-type]
    for _ in range(n):
        s.reset()
        s.accept(history)
        counts[s.sample(logits)] += 1
    x = _penalized(logits, history, 64, 1.5, 0.2, 0.3)
    p = np.exp(x - x.max())
    p /= p.sum()
    assert np.all(np.abs(counts / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-3), (counts / n, p)


@pytest.mark.parametrize("min_p", [0.05, 0.2, 0.5])
def test_min_p_keeps_tokens_within_min_p_of_the_most_likely(min_p: float) -> None:
    logits = np.array([2.0, 1.0, 0.5, 3.0, -1.0, 0.0, 2.5])
    p = np.exp(logits - logits.max())
    p /= p.sum()
    keep = p >= min_p * p.max()  # the definition: p_i >= min_p * p_max
    s = Sampler(SamplerParams(temperature=1.0, top_k=0, top_p=1.0, min_p=min_p, seed=9))
    n = 4000
    freq = np.bincount([s.sample(logits) for _ in range(n)], minlength=logits.size) / n
    assert set(np.nonzero(freq)[0]) == set(np.nonzero(keep)[0])
    q = np.where(keep, p, 0.0)
    q /= q.sum()
    assert np.all(np.abs(freq - q) <= 5 * np.sqrt(q * (1 - q) / n) + 1e-3)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"min_p": 1.5}, "min_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"penalty_last_n": -1}, "penalty_last_n"),
        ({"penalty_repeat": 0.0}, "penalty_repeat"),
        ({"penalty_repeat": float("nan")}, "penalty_repeat"),
        ({"penalty_freq": float("inf")}, "finite"),
        ({"penalty_present": float("nan")}, "finite"),
    ],
)
def test_bad_penalty_parameters(kw: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplerParams(**kw)  # type: ignore[arg-type]
