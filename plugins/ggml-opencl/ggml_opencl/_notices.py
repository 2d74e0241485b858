"""Notices on stderr: a kernel build that takes a while, the first tuning on a device, and what was tuned (at exit).

Devices are named by their registry name (``OpenCL0``, given by :func:`label_device`) rather than the driver's
description.
"""

from __future__ import annotations

import atexit
import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, Final

__all__ = ["SLOW_BUILD_S", "announce_tuning", "announced_if_slow", "device_label", "label_device", "record_tuning"]

#: seconds a kernel build may take before stderr says what is going on (a build the driver has cached is quicker)
SLOW_BUILD_S: Final = 2.0

#: the registry's name of each device (``OpenCL0``), by its ``cl_device_id``, for the notices
_LABELS: dict[int, str] = {}
#: (device, shape class, seconds) of every tuning this process ran, for the summary at exit
_TUNED_HERE: list[tuple[str, str, float]] = []
_NOTICE_LOCK = threading.Lock()


def label_device(cl_device: Any, name: str) -> None:
    """Name a device in the notices (its registry name, ``OpenCL0``, rather than the driver's description)."""
    _LABELS[int(cl_device.int_ptr)] = name


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed (at exit, or by an embedding program)
        print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def announced_if_slow(message: str, after_s: float = SLOW_BUILD_S) -> Iterator[None]:
    """Print ``message`` on stderr when the block is still running after ``after_s`` seconds; nothing when it is
    quicker (a kernel build the driver has cached). The driver's build releases the GIL, so the timer runs."""
    timer = threading.Timer(after_s, _say, (message,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def device_label(cl_device: Any, default: str) -> str:
    """The registry name :func:`label_device` gave ``cl_device``, else ``default``."""
    return _LABELS.get(int(cl_device.int_ptr), default)


def announce_tuning(label: str, message: str) -> None:
    """The first tuning a process runs on a device says so on stderr (tuning is skipped, and silent, when every
    shape class it needs is cached); the process's exit says what was tuned and how long it took."""
    with _NOTICE_LOCK:
        if any(dev == label for dev, _, _ in _TUNED_HERE):
            return
        if not _TUNED_HERE:
            atexit.register(_tuning_summary)
        _TUNED_HERE.append((label, "", 0.0))
    _say(message)


def record_tuning(label: str, shape: str, seconds: float) -> None:
    """Note that ``shape`` was tuned on device ``label`` in ``seconds``, for the summary at exit."""
    with _NOTICE_LOCK:
        _TUNED_HERE.append((label, shape, seconds))


def _tuning_summary() -> None:
    for label in dict.fromkeys(dev for dev, _, _ in _TUNED_HERE):
        done = [(shape, s) for dev, shape, s in _TUNED_HERE if dev == label and shape]
        if done:
            names = ", ".join(shape for shape, _ in done)
            _say(f"ggml-opencl: tuned {len(done)} kernel shapes on {label} in {sum(s for _, s in done):.1f} s: {names}")
