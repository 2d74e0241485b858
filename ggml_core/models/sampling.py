"""Choosing the next token from logits: greedy, or seeded sampling with top-k, top-p and temperature.

The chain follows llama.cpp's default order: top-k, then top-p (on the probabilities of the untempered logits),
then temperature, then a draw from the remaining distribution with a seeded generator. ``temperature <= 0`` is
greedy (argmax; the first index among ties).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Sampler", "SamplerParams"]


@dataclass(frozen=True)
class SamplerParams:
    """Sampling settings (llama.cpp's defaults; ``temperature=0`` is greedy)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    #: None or negative: a random seed (reported by :attr:`Sampler.seed`)
    seed: int | None = None

    def __post_init__(self) -> None:
        if not np.isfinite(self.temperature):
            raise ValueError(f"temperature must be finite, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        """True when sampling is argmax."""
        return self.temperature <= 0.0


class Sampler:
    """Stateful sampler: one seeded random generator for the whole generation."""

    def __init__(self, params: SamplerParams | None = None) -> None:
        self.params = params or SamplerParams()
        seed = self.params.seed
        if seed is None or seed < 0:
            seed = int(np.random.SeedSequence().entropy % 2**32)  # type: ignore[operator]
        self.seed = int(seed)
        self._rng = np.random.default_rng(self.seed)

    def sample(self, logits: np.ndarray) -> int:
        """The next token id from one row of logits."""
        if self.params.greedy:
            flat = np.asarray(logits).reshape(-1)
            if flat.size:
                # argmax in the logits' own type (no float64 copy of a 262k vocabulary per token). numpy's argmax
                # returns the first NaN when there is one, and -inf only when every logit is -inf: both take the
                # full path below (NaN counts as -inf; nothing finite is an error)
                best = int(np.argmax(flat))
                if not np.isnan(flat[best]) and flat[best] != -np.inf:
                    return best
        x = np.asarray(logits, dtype=np.float64).reshape(-1)
        if x.size == 0:
            raise ValueError("cannot sample from empty logits")
        if not np.isfinite(x).any():
            raise ValueError("every logit is -inf or NaN; nothing to sample")
        x = np.where(np.isnan(x), -np.inf, x)
        p = self.params
        if p.greedy:
            return int(np.argmax(x))
        ids = np.arange(x.size)
        if 0 < p.top_k < x.size:
            keep = np.argpartition(-x, p.top_k - 1)[: p.top_k]
            ids, x = ids[keep], x[keep]
        order = np.argsort(-x, kind="stable")
        ids, x = ids[order], x[order]
        if p.top_p < 1.0:
            probs = _softmax(x)
            cum = np.cumsum(probs)
            # keep the smallest prefix whose mass reaches top_p (at least one token)
            n = int(np.searchsorted(cum, p.top_p) + 1)
            ids, x = ids[: max(1, min(n, x.size))], x[: max(1, min(n, x.size))]
        probs = _softmax((x - x[0]) / p.temperature)  # x[0] is the largest: a tiny temperature cannot overflow
        return int(ids[self._rng.choice(ids.size, p=probs)])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()
