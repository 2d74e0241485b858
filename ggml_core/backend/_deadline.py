"""Plugin code under a deadline: each call runs in its own daemon thread and the host waits at most so long.

What this gives: a plugin that hangs (at import, in a hook, in device enumeration) is recorded as hung and the host
goes on; an exception of any kind raised by plugin code — ``KeyboardInterrupt`` and ``SystemExit`` included — is
caught in the worker thread and becomes that plugin's failure, while a real Ctrl-C, which Python delivers to the
main thread, still interrupts the wait; and text a plugin prints to stdout while it loads goes to stderr, so that
``--json`` output stays parseable. What it cannot give is described in docs/plugins.md ("What in-process isolation
cannot do"): a hung thread cannot be killed, only abandoned.
"""

from __future__ import annotations

import io
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO

__all__ = ["DEFAULT_TIMEOUT", "Outcome", "call", "plugin_timeout", "sigint_count", "watch_sigint"]

#: seconds a plugin's import or device enumeration may take (``GGML_PLUGIN_TIMEOUT`` changes it; 0: no limit)
DEFAULT_TIMEOUT: Final = 10.0
#: idents of the threads running plugin code (their stdout goes to stderr)
_plugin_threads: set[int] = set()
#: real SIGINTs received since :func:`watch_sigint` (a KeyboardInterrupt without one was raised by code)
_sigints = 0


def _on_sigint(signum: int, frame: object) -> None:
    global _sigints
    _sigints += 1
    raise KeyboardInterrupt


def watch_sigint() -> None:
    """Count real Ctrl-Cs, keeping Python's behaviour (KeyboardInterrupt); only over Python's own handler."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, _on_sigint)


def sigint_count() -> int | None:
    """How many real SIGINTs arrived since :func:`watch_sigint`; None when not counting (another handler)."""
    return _sigints if signal.getsignal(signal.SIGINT) is _on_sigint else None


@dataclass
class Outcome:
    """What a call under a deadline gave: its ``value``, or the exception it raised, or ``hung``."""

    value: Any = None
    exc: BaseException | None = None
    hung: bool = False

    @property
    def ok(self) -> bool:
        """Finished without raising."""
        return not self.hung and self.exc is None


def plugin_timeout(environ: Mapping[str, str]) -> tuple[float | None, str | None]:
    """The deadline from ``GGML_PLUGIN_TIMEOUT`` (seconds; 0 or ``none``: no deadline); (seconds, problem)."""
    text = environ.get("GGML_PLUGIN_TIMEOUT", "").strip()
    if not text:
        return DEFAULT_TIMEOUT, None
    if text.lower() in ("0", "none", "off"):
        return None, None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        return DEFAULT_TIMEOUT, f"GGML_PLUGIN_TIMEOUT={text!r} is not a number of seconds; using {DEFAULT_TIMEOUT:g}"
    return value, None


def call(fn: Callable[[], Any], timeout: float | None, name: str) -> Outcome:
    """Run ``fn()`` in a daemon thread; wait up to ``timeout`` seconds (None: no limit).

    A ``KeyboardInterrupt`` raised *by the wait* (a real Ctrl-C in the main thread) propagates; anything ``fn``
    raises is returned in :attr:`Outcome.exc`.
    """
    out = Outcome()
    done = threading.Event()

    def work() -> None:
        _plugin_threads.add(threading.get_ident())
        try:
            out.value = fn()
        except BaseException as exc:  # noqa: BLE001 - the plugin's failure, whatever it is
            out.exc = exc
        finally:
            _plugin_threads.discard(threading.get_ident())
            done.set()

    thread = threading.Thread(target=work, name=f"ggml-plugin {name}", daemon=True)
    with _stdout_to_stderr():
        thread.start()
        finished = done.wait(timeout)
    if not finished:
        return Outcome(hung=True)
    thread.join()
    return out


class _Router(io.TextIOBase):
    """sys.stdout while plugin code runs: writes from plugin threads go to stderr, the rest where they went."""

    def __init__(self, stdout: TextIO, stderr: TextIO) -> None:
        self.stdout, self.stderr = stdout, stderr

    def _target(self) -> TextIO:
        return self.stderr if threading.get_ident() in _plugin_threads else self.stdout

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self.stdout.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stdout, "encoding", "utf-8")


class _stdout_to_stderr:
    """Route plugin threads' stdout to stderr while a call runs; left in place if a thread is still running."""

    def __enter__(self) -> None:
        self.installed = not isinstance(sys.stdout, _Router)
        if self.installed:
            self.saved = sys.stdout
            sys.stdout = _Router(sys.stdout, sys.stderr)

    def __exit__(self, *exc: object) -> None:
        if self.installed and not _plugin_threads and isinstance(sys.stdout, _Router):
            sys.stdout = self.saved
