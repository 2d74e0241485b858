"""A server host that dies or stops answering in the middle of a generation ends ``ggml-core run`` within the
client's deadline (``GGML_RPC_TIMEOUT``), with one line naming the server — never a hang, never a traceback.

The server is a ``ggml-core rpc-server`` process holding half the layers of the embedded model; once tokens are
streaming it is killed (SIGKILL: the connection closes) or stopped (SIGSTOP: it neither reads nor answers, as a
partitioned host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rpc_helpers import rpc_env, start_server_process, streaming_run

from ggml_core.models import scheduler_available
from ggml_core.models.default_model import write_default_model

pytestmark = [
    pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed"),
    pytest.mark.skipif(sys.platform == "win32", reason="SIGSTOP and SIGKILL are POSIX signals"),
]

#: the client's deadline for any answer in these tests (seconds)
DEADLINE = 5
#: generated characters seen before the server is made to fail (the run is then well past loading)
STREAMED = 200


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_default_model(tmp_path_factory.mktemp("model") / "default.gguf")


def _argv(model: Path, endpoint: str, n: int) -> list[str]:
    """``ggml-core run`` with layers split 1:1 between the CPU and the server's device."""
    return [sys.executable, "-m", "ggml_core.cli", "run", str(model), "--rpc", endpoint, "--device", "CPU,RPC0",
            "-ts", "1,1", "--tokens", "1,2,3", "-n", str(n), "-c", "4096", "--ignore-eos",
            "--no-progress"]  # fmt: skip


def _generate(model: Path, endpoint: str) -> subprocess.Popen[bytes]:
    """The run, generating far longer than the test lasts, with the short deadline, once it streams tokens. A first
    short run with a long deadline has the server compile its kernels (which may take minutes on a fresh cache), so
    that the short deadline only ever meets the failure."""
    warm = subprocess.run(_argv(model, endpoint, 2), capture_output=True, env=rpc_env(600), timeout=900)
    assert warm.returncode == 0, warm.stderr.decode()
    return streaming_run(_argv(model, endpoint, 4000), DEADLINE, STREAMED)[0]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_server_failing_mid_generation_ends_the_run_with_one_line(model_path: Path, sig: signal.Signals) -> None:
    server, endpoint = start_server_process()
    try:
        proc = _generate(model_path, endpoint)
        try:
            os.kill(server.pid, sig)
            failed_at = time.monotonic()
            proc.wait(timeout=DEADLINE + 60)  # the deadline, plus room for a loaded machine: not a hang
            took = time.monotonic() - failed_at
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
    finally:
        if sig == signal.SIGSTOP:
            os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.communicate(timeout=30)
    lines = [line for line in err.splitlines() if line.startswith("ggml-core run:")]
    assert proc.returncode == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"ggml-core run: error: RPC server {endpoint}: "), err
    if sig == signal.SIGKILL:
        assert "the server closed the connection" in lines[0], err
    else:
        assert f"no complete answer within {DEADLINE} s (GGML_RPC_TIMEOUT)" in lines[0], err
        assert took >= DEADLINE * 0.9  # it waited for the deadline (a stopped host is not a closed connection)
