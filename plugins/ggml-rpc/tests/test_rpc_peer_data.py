"""What a server answers is data: names and descriptions made safe on receipt, numbers out of range refused.

Each server here is scripted (:class:`rpc_helpers.ScriptedServer`): it lies in one answer and is otherwise plain.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from rpc_helpers import ScriptedServer

from ggml_core import Context, alloc_ctx_tensors
from ggml_rpc import RPCDevice, RPCError, RPCReg
from ggml_rpc.protocol import Cmd

#: a device name that would set the terminal's title, clear the screen and forge a second device line
_HOSTILE = "GPU\x1b]0;pwned\x07\x1b[2J\r\n  RPC9: forged device (99999 MiB)\u202e" + "A" * 10_000


def _info(**fields: object) -> bytes:
    return json.dumps(fields).encode()


def test_device_names_and_descriptions_are_sanitised_on_receipt() -> None:
    with ScriptedServer({Cmd.EXT_DEVICE_INFO: _info(name=_HOSTILE, description=_HOSTILE, type=_HOSTILE)}) as srv:
        (dev,) = RPCReg(srv.address).devices
        assert isinstance(dev, RPCDevice)
        texts = [dev.description, *dev.info.values()]
        for text in texts:
            assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in text), repr(text[:80])
            assert len(text) < 400
        assert dev.info["name"].startswith("GPU\\x1b]0;pwned\\x07\\x1b[2J\\r\\n  RPC9")  # shown, escaped
        assert "10,0" in dev.info["name"]  # cut, saying how long it was
        assert dev.props().extra["remote_device"] == dev.info


def test_a_device_info_that_is_not_an_object_is_ignored() -> None:
    for raw in [b"[1, 2]", b"\xff\xfe", b"[" * 60_000, _info(name=5, description=None)]:
        with ScriptedServer({Cmd.EXT_DEVICE_INFO: raw}) as srv:
            (dev,) = RPCReg(srv.address).devices
            assert set(dev.info) <= {"type"} and "\x1b" not in dev.description


def test_a_buffer_base_near_2_64_is_a_protocol_error_naming_the_server() -> None:
    with ScriptedServer({Cmd.BUFFER_GET_BASE: struct.pack("<Q", 2**64 - 16)}) as srv:
        (dev,) = RPCReg(srv.address).devices
        ctx = Context()
        t = ctx.new_tensor("f32", (256,))
        with pytest.raises(RPCError, match=rf"RPC server {srv.address}: .*address 0xfffffffffffffff0.*64-bit"):
            alloc_ctx_tensors(ctx, dev.init_backend())
            t.set_data(np.ones(256, np.float32))  # (where the base was taken as it came: struct.error here)


@pytest.mark.parametrize(
    ("cmd", "answer", "match"),
    [
        (Cmd.GET_ALIGNMENT, struct.pack("<Q", 3), r"GET_ALIGNMENT with 3 for device 0"),
        (Cmd.GET_ALIGNMENT, struct.pack("<Q", 2**63), r"GET_ALIGNMENT with 9223372036854775808"),
        (Cmd.DEVICE_COUNT, struct.pack("<I", 2**32 - 1), r"DEVICE_COUNT with 4294967295 devices"),
    ],
)
def test_discovery_answers_out_of_range_leave_the_server_out_with_the_reason(
    cmd: Cmd, answer: bytes, match: str
) -> None:
    with ScriptedServer({cmd: answer}) as srv:
        reg = RPCReg(srv.address)
        assert reg.devices == []
        assert isinstance(reg.error, RPCError) and reg.unavailable_reason is not None
        assert srv.address in reg.unavailable_reason
        with pytest.raises(RPCError, match=match):
            raise reg.error


def test_an_alloc_size_past_the_largest_buffer_is_a_protocol_error() -> None:
    with ScriptedServer({Cmd.GET_ALLOC_SIZE: struct.pack("<Q", 2**64 - 1)}) as srv:
        (dev,) = RPCReg(srv.address).devices
        ctx = Context()
        t = ctx.new_tensor("q4_0", (32, 4))  # quantized rows not a multiple of 512: the client asks the server
        with pytest.raises(RPCError, match=r"GET_ALLOC_SIZE with 18446744073709551615 bytes"):
            dev.buffer_type().alloc_size(t)
