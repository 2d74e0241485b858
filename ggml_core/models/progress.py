"""A small progress bar on stderr (redraws at most ~10 times a second; silent when disabled or not a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, "OpenCL0") as p: p.advance(n)``; prints the rate when done.

    ``cached``: bytes counted done that were not sent (the receiver already held them: an RPC server's cache), shown
    next to the bar and in the final line when there are any."""

    def __init__(
        self,
        total: int,
        label: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        cached: Callable[[], int] | None = None,
    ) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.cached = cached
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self.start = time.perf_counter()
        self._last_draw = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __enter__(self) -> Progress:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.finish()

    def advance(self, n: int) -> None:
        """Count ``n`` more bytes done."""
        self.done += n
        now = time.perf_counter()
        if self.enabled and self._tty and now - self._last_draw > 0.1:
            self._last_draw = now
            self._draw()

    def _draw(self) -> None:
        frac = self.done / self.total if self.total else 1.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        self.stream.write(f"\r  uploading to {self.label} [{bar}] {frac * 100:5.1f}%{self._cached_note()} ")
        self.stream.flush()

    def _cached_note(self) -> str:
        held = self.cached() if self.cached is not None else 0
        return f", {held / 2**20:.1f} MiB of it already held there (not sent)" if held > 0 else ""

    @property
    def seconds(self) -> float:
        """Seconds since the start."""
        return time.perf_counter() - self.start

    @property
    def mb_per_s(self) -> float:
        """Throughput so far in MB/s (10^6 bytes)."""
        return self.done / 1e6 / max(self.seconds, 1e-9)

    def finish(self) -> None:
        """Print the final line: MiB, seconds and MiB/s."""
        if not self.enabled:
            return
        if self._tty:
            self._draw()
            self.stream.write("\n")
        self.stream.write(
            f"  uploaded {self.done / 2**20:.1f} MiB to {self.label} in {self.seconds:.2f} s "
            f"({self.done / 2**20 / max(self.seconds, 1e-9):.1f} MiB/s){self._cached_note()}\n"
        )
        self.stream.flush()
