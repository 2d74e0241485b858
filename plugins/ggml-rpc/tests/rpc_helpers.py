"""Helpers of the RPC tests: a raw-socket client that speaks the wire format byte by byte, and tensor builders.

Everything runs on 127.0.0.1 with ephemeral ports, and every socket has a timeout.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ggml_core import Context, Device, GGMLType, alloc_ctx_tensors, build_graph, ops
from ggml_core.models import Model, ModelParams, PlacementRequest
from ggml_rpc.protocol import FIXED_RESPONSE_SIZE, GGML_CORE_MARK, NULL_TENSOR, RPC_TENSOR, Cmd

TOKENS = [1, 5, 9, 3, 7, 2, 11, 4]

__all__ = [
    "TOKENS",
    "RawClient",
    "ScriptedServer",
    "layer_graph",
    "layer_inputs",
    "raw_tensor",
    "rel",
    "rpc_env",
    "run_layer",
    "server_alive",
    "split_logits",
    "start_server_process",
    "streaming_run",
]

TIMEOUT = 10.0


def raw_tensor(
    *,
    id: int = 1,
    type: int = 0,
    buffer: int = 0,
    ne: Sequence[int] = (1, 1, 1, 1),
    nb: Sequence[int] | None = None,
    op: int = 0,
    op_params: Sequence[int] = (),
    flags: int = 0,
    src: Sequence[int] = (),
    view_src: int = 0,
    view_offs: int = 0,
    data: int = 0,
    name: bytes = b"t",
    use_count: int = 0,
) -> bytes:
    """One ``rpc_tensor`` built field by field (contiguous f32 strides unless ``nb`` is given)."""
    if nb is None:
        nb = (4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2])
    params = [*op_params, *[0] * (16 - len(op_params))]
    srcs = [*src, *[0] * (10 - len(src))]
    return RPC_TENSOR.pack(
        id, type, buffer, *ne, *nb, op, *params, flags, *srcs, view_src, view_offs, data, name, use_count
    )


class RawClient:
    """A plain socket that sends frames as ggml's client lays them out (no checks of its own)."""

    def __init__(self, address: str, *, hello: bool = True, timeout: float = TIMEOUT) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if hello:
            self.frame(Cmd.HELLO, bytes(24))
            self.hello = self.answer(28)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self, cmd: int, payload: bytes = b"", size: int | None = None) -> None:
        """Send ``cmd``, the payload size (or a lie about it) and the payload."""
        self.sock.sendall(struct.pack("<BQ", cmd, len(payload) if size is None else size) + payload)

    def answer(self, size: int) -> bytes:
        """Read one answer of ``size`` bytes (asserting the size header)."""
        head = self._exact(8)
        got = struct.unpack("<Q", head)[0]
        assert got == size, f"answer of {got} bytes, expected {size}"
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return out

    def closed_by_server(self) -> bool:
        """True when the server closed the connection (reads EOF or a reset within the timeout)."""
        try:
            self.sock.sendall(struct.pack("<BQ", Cmd.DEVICE_COUNT, 0))
            return self.sock.recv(64) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    # ---- typed commands ---------------------------------------------------------------------------------

    def device_count(self) -> int:
        self.frame(Cmd.DEVICE_COUNT)
        return struct.unpack("<I", self.answer(4))[0]

    def alloc(self, size: int, device: int = 0) -> tuple[int, int]:
        self.frame(Cmd.ALLOC_BUFFER, struct.pack("<IQ", device, size))
        return struct.unpack("<QQ", self.answer(16))

    def base(self, handle: int) -> int:
        self.frame(Cmd.BUFFER_GET_BASE, struct.pack("<Q", handle))
        return struct.unpack("<Q", self.answer(8))[0]

    def set_tensor(self, tensor: bytes, data: bytes, offset: int = 0, cache_flag: int = 0) -> None:
        self.frame(Cmd.SET_TENSOR, tensor + struct.pack("<BQ", cache_flag, offset) + data)

    def get_tensor(self, tensor: bytes, size: int, offset: int = 0) -> bytes:
        self.frame(Cmd.GET_TENSOR, tensor + struct.pack("<QQ", offset, size))
        return self.answer(size)

    def graph(self, nodes: Sequence[int], tensors: Sequence[bytes], device: int = 0) -> None:
        payload = struct.pack("<II", device, len(nodes)) + struct.pack(f"<{len(nodes)}Q", *nodes)
        payload += struct.pack("<I", len(tensors)) + b"".join(tensors)
        self.frame(Cmd.GRAPH_COMPUTE, payload)


#: an answer: fixed bytes, or made from the request's payload (None: no answer)
Answer = bytes | Callable[[bytes], bytes | None]


class ScriptedServer:
    """A fake RPC server that answers each command from a script (a lying or broken peer for client tests).

    HELLO is answered as a ggml-core server (version 7.0.0, marked) unless ``answers`` has HELLO; every other
    command with an answer gets ``answers[cmd]`` or a plausible default; commands without one are read and dropped.
    """

    def __init__(self, answers: dict[Cmd, Answer] | None = None) -> None:
        self.answers: dict[Cmd, Answer] = {
            Cmd.HELLO: bytes([7, 0, 0, GGML_CORE_MARK]) + bytes(24),
            Cmd.DEVICE_COUNT: struct.pack("<I", 1),
            Cmd.GET_ALIGNMENT: struct.pack("<Q", 32),
            Cmd.GET_MAX_SIZE: struct.pack("<Q", 1 << 40),
            Cmd.GET_DEVICE_MEMORY: struct.pack("<QQ", 1 << 30, 1 << 30),
            Cmd.ALLOC_BUFFER: lambda p: struct.pack("<QQ", 1, struct.unpack("<IQ", p)[1]),
            Cmd.BUFFER_GET_BASE: struct.pack("<Q", 0x10000),
            Cmd.GET_ALLOC_SIZE: struct.pack("<Q", 0),
            Cmd.GET_TENSOR: lambda p: bytes(struct.unpack_from("<Q", p, len(p) - 8)[0]),
            Cmd.EXT_DEVICE_INFO: b'{"name": "FAKE", "description": "scripted", "type": "GPU"}',
            Cmd.EXT_SUPPORTS_OP: b"\x01",
            Cmd.SET_TENSOR_HASH: b"\x00",
            Cmd.COPY_TENSOR: b"\x01",
            **(answers or {}),
        }
        self._lst = socket.create_server(("127.0.0.1", 0))
        self._lst.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self.address = f"127.0.0.1:{self._lst.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._lst.accept()
            except OSError:
                continue
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(TIMEOUT)
        with conn, contextlib.suppress(OSError, EOFError):
            while not self._stop.is_set():
                head = _recv(conn, 9)
                cmd, size = struct.unpack("<BQ", head)
                payload = _recv(conn, size)
                answer = self.answers.get(Cmd(cmd))
                if callable(answer):
                    answer = answer(payload)
                if answer is None and (Cmd(cmd) in FIXED_RESPONSE_SIZE or cmd == Cmd.EXT_DEVICE_INFO):
                    return  # a command that needs an answer and has none here: hang up
                if answer is not None:
                    conn.sendall(struct.pack("<Q", len(answer)) + answer)

    def close(self) -> None:
        self._stop.set()
        self._lst.close()
        self._thread.join(5)

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _recv(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def start_server_process(args: Sequence[str] = ()) -> tuple[subprocess.Popen[str], str]:
    """``ggml-core rpc-server --port 0 --device CPU ARGS`` in its own process; (process, endpoint it printed)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ggml_core.cli", "rpc-server", "--port", "0", "--device", "CPU", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip().startswith("endpoint"):
            return proc, line.split(":", 1)[1].strip()
    proc.kill()
    raise AssertionError(f"the server did not start: {proc.communicate(timeout=10)}")


def rpc_env(timeout: float) -> dict[str, str]:
    """This environment without RPC settings, with the client's answer deadline ``timeout`` (seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_RPC_SERVERS", "GGML_BACKENDS")}
    return {**env, "GGML_RPC_TIMEOUT": str(timeout), "GGML_RPC_CONNECT_TIMEOUT": "10"}


def streaming_run(argv: list[str], timeout: float, chars: int = 200) -> tuple[subprocess.Popen[bytes], bytearray]:
    """``argv`` (a long ``ggml-core run``) started with the answer deadline ``timeout``, once it has streamed
    ``chars`` generated characters; (process, its stdout so far, still growing). The process is killed if it does
    not get there within 180 s."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=rpc_env(timeout))
    out = bytearray()

    def pump() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(4096):  # type: ignore[attr-defined]
            out.extend(chunk)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if len(bytes(out).partition(b"\ncontext ")[2]) > chars:
            return proc, out
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the run did not start generating: {bytes(out)[-500:]!r} {proc.communicate()[1]!r}")


def server_alive(address: str) -> bool:
    """A fresh client connects, says HELLO and gets a device count back."""
    with RawClient(address) as c:
        return c.device_count() >= 1


NULL = NULL_TENSOR


# ------------------------------------------------------------------------------------------------ graphs, models


def layer_graph(ctx: Context, wtype: str) -> tuple[list, object]:
    """A LLaMA-style block: rms_norm, matmuls with quantized weights, RoPE, soft_max attention, SwiGLU."""
    e, t, h, d = 64, 6, 4, 16
    x = ctx.new_tensor("f32", (e, t), name="x")
    wq, wk, wv = (ctx.new_tensor(wtype, (e, e), name=n) for n in ("wq", "wk", "wv"))
    wg, wu = ctx.new_tensor(wtype, (e, 96), name="wg"), ctx.new_tensor(wtype, (e, 96), name="wu")
    wd = ctx.new_tensor(wtype, (96, e), name="wd")
    pos = ctx.new_tensor("i32", (t,), name="pos")
    mask = ctx.new_tensor("f32", (t, t), name="mask")
    n = ops.rms_norm(x, 1e-5)
    q = ops.rope_ext(ops.reshape_3d(ops.mul_mat(wq, n), d, h, t), pos, None, d, 2, 0, 1e4, 1, 0, 1, 32, 1)
    k = ops.rope_ext(ops.reshape_3d(ops.mul_mat(wk, n), d, h, t), pos, None, d, 2, 0, 1e4, 1, 0, 1, 32, 1)
    v = ops.reshape_3d(ops.mul_mat(wv, n), d, h, t)
    kq = ops.soft_max_ext(ops.mul_mat(ops.cont(ops.permute(k, 0, 2, 1, 3)), ops.permute(q, 0, 2, 1, 3)), mask, 0.25)
    kqv = ops.mul_mat(ops.cont(ops.permute(v, 1, 2, 0, 3)), kq)
    att = ops.add(x, ops.cont_2d(ops.permute(kqv, 0, 2, 1, 3), e, t))
    out = ops.add(att, ops.mul_mat(wd, ops.swiglu_split(ops.mul_mat(wg, att), ops.mul_mat(wu, att))))
    return [x, wq, wk, wv, wg, wu, wd, pos, mask], out


def layer_inputs(tensors: list, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in tensors:
        if t.type == GGMLType.I32:
            out.append(np.arange(t.nelements, dtype=np.int32) * 3)
        elif t.name == "mask":
            out.append(np.triu(np.full((t.ne[1], t.ne[0]), -np.inf, np.float32), 1))
        else:
            out.append(rng.uniform(-1, 1, (t.ne[1], t.ne[0])).astype(np.float32))
    return out


def run_layer(device: Device, wtype: str, seeds: list[int]) -> list[np.ndarray]:
    ctx = Context()
    ins, out = layer_graph(ctx, wtype)
    be = device.init_backend()
    buf = alloc_ctx_tensors(ctx, be)
    g = build_graph(out)
    got = []
    for s in seeds:
        for t, v in zip(ins, layer_inputs(ins, s), strict=True):
            t.set_data(v)
        be.graph_compute(g)
        got.append(out.to_numpy())
    buf.free()
    return got


def split_logits(path: Path, devices: list[str], split: list[float] | None) -> tuple[np.ndarray, np.ndarray, Model]:
    """(prompt logits, token-by-token logits, the model) with layers over ``devices``."""
    params = ModelParams(
        placement=PlacementRequest(devices=devices, tensor_split=split), kv_type="f32", n_ctx=64, progress=False
    )
    with Model.load(path, params) as m:
        prompt = m.process_prompt(TOKENS, all_logits=True)
        m.reset()
        steps = np.concatenate([m.decode([t]) for t in TOKENS])
        return prompt, steps, m


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference relative to the largest reference value."""
    return float(np.abs(a - b).max() / np.abs(b).max())
