"""Choosing the next token from logits: greedy, or seeded sampling with repetition penalties, top-k, top-p, min-p
and temperature.

The chain follows llama.cpp's default order (``src/llama-sampler.cpp``): the penalties over the last
``penalty_last_n`` tokens seen, then top-k, then top-p (on the probabilities of the untempered logits), then min-p,
then temperature, then a draw from the remaining distribution with a seeded generator. ``temperature <= 0`` is
greedy: the argmax (the first index among ties) of the penalized logits.

The tokens "seen" are those the sampler returned plus those given to :meth:`Sampler.accept` (a prompt, as
llama-cli accepts every prompt token into its sampler before generating).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["Sampler", "SamplerParams"]


@dataclass(frozen=True)
class SamplerParams:
    """Sampling settings (llama.cpp's defaults but ``min_p``, off here and 0.05 in llama.cpp and ``ggml-core run``;
    ``temperature=0`` is greedy)."""

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    #: None or negative: a random seed (reported by :attr:`Sampler.seed`)
    seed: int | None = None
    #: keep the tokens whose probability is at least ``min_p`` times the largest one; 0 = off
    min_p: float = 0.0
    #: how many of the last tokens seen the penalties look at; 0 = off
    penalty_last_n: int = 64
    #: a seen token's logit is divided by this (multiplied when <= 0); 1 = off
    penalty_repeat: float = 1.0
    #: subtracted from a seen token's logit once per occurrence; 0 = off
    penalty_freq: float = 0.0
    #: subtracted once from the logit of every seen token; 0 = off
    penalty_present: float = 0.0

    def __post_init__(self) -> None:
        for name in ("temperature", "penalty_freq", "penalty_present"):
            if not np.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite, got {getattr(self, name)}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.penalty_last_n < 0:
            raise ValueError(f"penalty_last_n must be >= 0 (0 disables the penalties), got {self.penalty_last_n}")
        if not (np.isfinite(self.penalty_repeat) and self.penalty_repeat > 0 and np.isfinite(1 / self.penalty_repeat)):
            raise ValueError(f"penalty_repeat must be finite and > 0, got {self.penalty_repeat}")

    @property
    def penalized(self) -> bool:
        """True when the penalties change logits (llama.cpp's test: a window and a non-neutral penalty)."""
        neutral = self.penalty_repeat == 1.0 and self.penalty_freq == 0.0 and self.penalty_present == 0.0
        return self.penalty_last_n > 0 and not neutral

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
        self._seen: deque[int] = deque(maxlen=self.params.penalty_last_n)

    def accept(self, tokens: Iterable[int]) -> None:
        """Count ``tokens`` as seen by the penalties (the sampler's own choices are counted by :meth:`sample`)."""
        if self.params.penalty_last_n > 0:
            self._seen.extend(int(t) for t in tokens)

    def reset(self) -> None:
        """Forget the tokens seen (the random generator goes on)."""
        self._seen.clear()

    def sample(self, logits: np.ndarray) -> int:
        """The next token id from one row of logits; it counts as seen by the penalties."""
        tok = self._choose(logits)
        self.accept((tok,))
        return tok

    def _penalize(self, x: np.ndarray) -> np.ndarray:
        """llama.cpp's penalties on float64 logits ``x`` (a copy): each token seen ``c > 0`` times in the window
        has its logit divided by ``penalty_repeat`` (multiplied when <= 0), then less ``c * freq + present``."""
        p = self.params
        if not p.penalized or not self._seen:
            return x
        seen, counts = np.unique(np.fromiter(self._seen, dtype=np.int64), return_counts=True)
        inside = (seen >= 0) & (seen < x.size)
        seen, counts = seen[inside], counts[inside]
        v = x[seen]
        v = np.where(v <= 0, v * p.penalty_repeat, v / p.penalty_repeat)
        x = x.copy()
        x[seen] = v - (counts * p.penalty_freq + p.penalty_present)
        return x

    def _choose(self, logits: np.ndarray) -> int:
        if self.params.greedy and not self.params.penalized:
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
        x = self._penalize(np.where(np.isnan(x), -np.inf, x))
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
        if p.min_p > 0.0:  # x is sorted: keep the prefix within log(min_p) of the largest (at least one token)
            n = int(np.count_nonzero(x >= x[0] + np.log(p.min_p)))
            ids, x = ids[: max(1, n)], x[: max(1, n)]
        probs = _softmax((x - x[0]) / p.temperature)  # x[0] is the largest: a tiny temperature cannot overflow
        return int(ids[self._rng.choice(ids.size, p=probs)])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()
