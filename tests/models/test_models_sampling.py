"""Sampling: greedy is argmax, top-k and top-p keep the right candidates, temperature reshapes the distribution,
and a seed reproduces a run."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_core.models import Sampler, SamplerParams

LOGITS = np.array([2.0, 1.0, 0.5, 3.0, -1.0, 0.0], dtype=np.float32)


def _draws(params: SamplerParams, n: int = 4000, logits: np.ndarray = LOGITS) -> np.ndarray:
    s = Sampler(params)
    return np.bincount([s.sample(logits) for _ in range(n)], minlength=logits.size) / n


def test_greedy_is_argmax() -> None:
    s = Sampler(SamplerParams(temperature=0.0))
    assert s.sample(LOGITS) == 3
    assert s.sample(np.array([1.0, np.nan, 1.0, -np.inf])) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_greedy_in_the_logits_own_type_treats_nan_as_minus_infinity(dtype: type) -> None:
    """Greedy argmax runs on the logits as they are (float32 from a model): a NaN is never chosen, +inf is, and
    the first of equal maxima wins; nothing finite or +inf is an error, in float32 as in float64."""
    s = Sampler(SamplerParams(temperature=0.0))
    assert s.sample(np.array([np.nan, 2.0, 3.0, 3.0], dtype)) == 2
    assert s.sample(np.array([-np.inf, np.nan, -1.0], dtype)) == 2
    assert s.sample(np.array([1.0, np.inf, np.nan, np.inf], dtype)) == 1
    assert s.sample(np.array([[0.5, 7.0], [1.0, 2.0]], dtype)) == 1  # one row of logits, flattened
    for bad in ([np.nan, np.nan], [-np.inf, np.nan], [-np.inf, -np.inf]):
        with pytest.raises(ValueError, match="nothing to sample"):
            s.sample(np.array(bad, dtype))


def test_temperature_follows_the_softmax() -> None:
    for temp in (0.5, 1.0, 2.0):
        freq = _draws(SamplerParams(temperature=temp, top_k=0, top_p=1.0, seed=1))
        p = np.exp(LOGITS / temp - (LOGITS / temp).max())
        p /= p.sum()
        # 4000 draws: each frequency within 5 standard deviations of its probability
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / 4000) + 1e-3), (temp, freq, p)


def test_top_k_keeps_the_k_largest() -> None:
    freq = _draws(SamplerParams(temperature=1.0, top_k=2, top_p=1.0, seed=2))
    assert set(np.nonzero(freq)[0]) == {0, 3}
    p = np.exp([2.0, 3.0]) / np.exp([2.0, 3.0]).sum()
    assert abs(freq[3] - p[1]) < 0.04


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    p = np.exp(LOGITS - LOGITS.max())
    p /= p.sum()  # sorted: 3 (0.61), 0 (0.22), 1 (0.08), 2 (0.05), ...
    freq = _draws(SamplerParams(temperature=1.0, top_k=0, top_p=0.8, seed=3))
    assert set(np.nonzero(freq)[0]) == {3, 0}  # 0.61 < 0.8 <= 0.61 + 0.22
    freq = _draws(SamplerParams(temperature=1.0, top_k=0, top_p=0.5, seed=3))
    assert set(np.nonzero(freq)[0]) == {3}


def test_seed_reproduces() -> None:
    params = SamplerParams(temperature=1.0, top_k=0, top_p=1.0, seed=42)
    s1, s2, s3 = Sampler(params), Sampler(params), Sampler(SamplerParams(temperature=1.0, top_k=0, top_p=1.0, seed=43))
    runs = [[s.sample(LOGITS) for _ in range(50)] for s in (s1, s2, s3)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert Sampler(SamplerParams(seed=-1)).seed >= 0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"top_k": -1}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": np.inf}, "finite"),
    ],
)
def test_bad_parameters(kw: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplerParams(**kw)  # type: ignore[arg-type]


def test_nothing_to_sample() -> None:
    with pytest.raises(ValueError, match="nothing to sample"):
        Sampler(SamplerParams(seed=0)).sample(np.full(4, -np.inf))
