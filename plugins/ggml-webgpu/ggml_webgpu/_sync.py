"""Waiting for submitted work: ``onSubmittedWorkDone`` through wgpu-native, or mapping a word as a fallback.

wgpu-py 0.32's ``queue.on_submitted_work_done_*`` cannot be called: its callback is declared with the older
three-argument signature, and cffi refuses it for the header's ``WGPUQueueWorkDoneCallback`` (status, message,
userdata1, userdata2). :class:`WorkDone` registers a callback of the right signature with
``wgpuQueueOnSubmittedWorkDone`` itself and waits by polling the device (``wgpuDevicePoll``), so an event waits
for the work submitted before it was recorded, not for later submissions, and can be asked whether it is done
without blocking. Where that binding is missing (another wgpu-py), waiting falls back to mapping one word of a
device buffer, which completes only after every earlier submission.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

__all__ = ["WorkDone", "WorkDoneToken"]

_SIGNATURE: Final = "void(WGPUQueueWorkDoneStatus, WGPUStringView, void *, void *)"


def _native() -> tuple[Any, Any] | None:
    """(ffi, lib) of wgpu-native when its work-done callback can be registered, else None."""
    try:
        from wgpu.backends.wgpu_native._ffi import ffi, lib

        ffi.callback(_SIGNATURE)(lambda *_: None)  # the header declares the four-argument callback
        if not hasattr(lib, "wgpuQueueOnSubmittedWorkDone") or not hasattr(lib, "wgpuDevicePoll"):
            return None
        return ffi, lib
    except Exception:  # noqa: BLE001 - any failure means the fallback
        return None


class WorkDoneToken:
    """One registered ``onSubmittedWorkDone``: ``done`` turns true (from the device's poll) when the work submitted
    before it has finished."""

    def __init__(self) -> None:
        self.done = False
        self.status = 0
        self._keep: tuple[Any, ...] = ()


class WorkDone:
    """Work-done notifications of one device's queue (see the module's docstring)."""

    def __init__(self, gpu: Any, fence: Any) -> None:
        self._gpu = gpu
        self._fence = fence
        self._native = _native()
        self._lock = threading.Lock()
        #: tokens whose callback has not come yet: kept here (not only by their event) so that a callback that
        #: wgpu-native still holds is never freed, even when its event is recorded again or dropped
        self._pending: list[WorkDoneToken] = []

    @property
    def native(self) -> bool:
        """True when events use ``onSubmittedWorkDone``; False when they map a word."""
        return self._native is not None

    def mark(self) -> WorkDoneToken | None:
        """A token for the work submitted so far (None with the fallback: waiting then waits for everything)."""
        if self._native is None:
            return None
        ffi, lib = self._native
        token = WorkDoneToken()

        def done(status: int, _msg: Any, _u1: Any, _u2: Any) -> None:
            token.status = int(status)
            token.done = True

        cb = ffi.callback(_SIGNATURE)(done)
        info = ffi.new("WGPUQueueWorkDoneCallbackInfo *")
        info.mode = lib.WGPUCallbackMode_AllowProcessEvents
        info.callback = cb
        token._keep = (cb, info, done)  # the callback must outlive the call
        with self._lock:
            self._pending.append(token)
            lib.wgpuQueueOnSubmittedWorkDone(self._gpu.queue._internal, info[0])
        return token

    def poll(self) -> None:
        """Run the device's callbacks without blocking."""
        if self._native is not None:
            _, lib = self._native
            with self._lock:
                lib.wgpuDevicePoll(self._gpu._internal, False, self._native[0].NULL)
                for t in [t for t in self._pending if t.done]:
                    t._keep = ()
                    self._pending.remove(t)

    def wait(self, token: WorkDoneToken | None) -> None:
        """Block until ``token``'s work is done (everything submitted, for None)."""
        if token is None:
            self.wait_all()
            return
        pause = 0.0
        while not token.done:
            self.poll()
            if token.done:
                break
            time.sleep(pause)
            pause = min(1e-3, pause * 2 + 2e-5)  # short waits stay short; long ones do not spin
        if token.status != 1:  # WGPUQueueWorkDoneStatus_Success
            raise RuntimeError(f"the queue reported status {token.status} for the submitted work")

    def wait_all(self) -> None:
        """Block until every submission so far has finished (mapping a word waits for them all)."""
        self._gpu.queue.read_buffer(self._fence, 0, 4)
        if self._pending:
            self.poll()  # their callbacks are due now: let them run and release them
