"""Malformed GGUF files: each gives a GGUFError naming the file and the field, quickly — never a hang, a huge
allocation or a crash. Hand-made cases for every field, every truncation of a small file, and hypothesis-fuzzed
mutations of a valid tiny model."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import TinyConfig, random_weights, write_and_close, write_model

from ggml_core import GGUFError
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf, read_header

CFG = TinyConfig(n_vocab=32, n_embd=32, n_layer=1, n_head=2, n_head_kv=1, n_ff=32, n_ctx=16)
PARAMS = ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=16, progress=False)


@pytest.fixture(scope="module")
def valid(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A tiny q8_0 model with a small SentencePiece vocabulary (string and number arrays in its header)."""
    from gguf import GGUFWriter

    d = tmp_path_factory.mktemp("gguf")
    w = random_weights(CFG, 0)
    f = open_gguf(write_model(d / "plain.gguf", CFG, w, "q8_0"))
    path = d / "valid.gguf"
    writer = GGUFWriter(str(path), "llama")
    for key in f.keys:
        if key != "general.architecture":
            v = f.get(key)
            (writer.add_float32 if isinstance(v, float) else writer.add_uint32)(key, v)
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "ab"] + [f"<0x{i:02X}>" for i in range(24)]
    writer.add_string("tokenizer.ggml.model", "llama")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.scores", [float(i) for i in range(len(tokens))])
    writer.add_array("tokenizer.ggml.token_type", [2, 3, 3, 1, 1, 1, 1, 1] + [6] * 24)
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    for info in f.tensors:
        rows = int(np.prod(info.ne[1:]))
        writer.add_tensor(info.name, f.tensor_bytes(info.name).reshape(rows, -1), raw_dtype=_gtype(info.type))
    write_and_close(writer)
    return path.read_bytes()


def _gtype(t: object) -> object:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(int(t))  # type: ignore[call-overload]


def _write(tmp_path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _str(s: bytes | str) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(raw)) + raw


def _kv_u32(key: str, value: int) -> bytes:
    return _str(key) + struct.pack("<II", 4, value)


def _tensor_info(name: str, ne: list[int], type_id: int, offset: int) -> bytes:
    return (
        _str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", type_id, offset)
    )


def _expect(path: Path, field: str, message: str) -> GGUFError:
    t0 = time.perf_counter()
    with pytest.raises(GGUFError) as err:
        open_gguf(path)
    assert time.perf_counter() - t0 < 5.0
    text = str(err.value)
    assert text.startswith(str(path)), text
    assert field in text and message in text, text
    return err.value


def _pad(data: bytes, align: int = 32) -> bytes:
    return data + b"\0" * ((-len(data)) % align)


# ------------------------------------------------------------------------------------------------ hand-made cases


def test_the_valid_file_loads(tmp_path: Path, valid: bytes) -> None:
    with Model.load(_write(tmp_path, valid, "ok.gguf"), PARAMS) as m:
        assert m.decode([1, 2]).shape == (1, CFG.n_vocab)
        assert m.tokenizer.decode(m.tokenizer.encode("ab a")) == "ab a"


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        (b"", "header", "shorter than a GGUF header"),
        (b"GGML" + bytes(20), "header.magic", "not a GGUF file"),
        (_header(0, 0, version=1), "header.version", "version 1 is not supported"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "header.version", "big-endian"),
        (_header(2**62, 0), "header.n_tensors", "cannot fit"),
        (_header(0, 2**64 - 1), "header.n_kv", "cannot fit"),
        (_header(0, 1) + struct.pack("<Q", 2**60) + bytes(16), "metadata entry 0 key", "over the limit"),
        (_header(0, 1) + _str("k") + struct.pack("<I", 99) + bytes(8), "metadata 'k' type", "unknown value type 99"),
        (_header(0, 1) + _str("k") + struct.pack("<IQ", 8, 2**40) + bytes(8), "metadata 'k'", "needs 1099511627776"),
        (_header(0, 1) + _str("k") + struct.pack("<IIQ", 9, 4, 2**61), "metadata 'k'", "runs past the end"),
        (_header(0, 1) + _str("k") + struct.pack("<IIQ", 9, 8, 2**40), "metadata 'k'", "strings cannot fit"),
        (_header(0, 1) + _str("k") + struct.pack("<IIQ", 9, 9, 1) + bytes(16), "metadata 'k'", "arrays of arrays"),
        (_header(0, 1) + _str(b"\xff\xfe") + struct.pack("<IB", 0, 1), "metadata entry 0 key", "not valid UTF-8"),
        (_header(0, 2) + _kv_u32("a", 1) + _kv_u32("a", 2), "metadata 'a'", "appears twice"),
        (_header(0, 1) + _str("k") + struct.pack("<IB", 7, 5) + bytes(16), "metadata 'k'", "neither 0 nor 1"),
        (_header(0, 1) + _kv_u32("general.alignment", 3) + bytes(16), "general.alignment", "power of two"),
        (_header(1, 0) + _tensor_info("t", [], 0, 0) + bytes(16), "tensor 't' n_dims", "0 dimensions"),
        (_header(1, 0) + _tensor_info("t", [1] * 5, 0, 0) + bytes(16), "tensor 't' n_dims", "5 dimensions"),
        (_header(1, 0) + _tensor_info("t", [4], 4, 0) + bytes(16), "tensor 't' type", "unknown ggml type id 4"),
        (_header(1, 0) + _tensor_info("t", [33], 8, 0) + bytes(64), "tensor 't' ne[0]", "block size 32"),
        (_header(1, 0) + _tensor_info("t", [2**63], 0, 0) + bytes(16), "tensor 't' ne[0]", "over ggml's limit"),
        (_pad(_header(1, 0) + _tensor_info("t", [8], 0, 64)) + bytes(32), "tensor 't' offset", "outside the data"),
        (_pad(_header(1, 0) + _tensor_info("t", [2**40, 2**20], 0, 0)) + bytes(32), "tensor 't' offset", "outside"),
        (_pad(_header(1, 0) + _tensor_info("t", [8], 0, 8)) + bytes(64), "tensor 't' offset", "multiple of the align"),
        (
            _pad(_header(2, 0) + _tensor_info("a", [16], 0, 0) + _tensor_info("b", [8], 0, 32)) + bytes(96),
            "tensor 'b' offset",
            "overlaps tensor 'a'",
        ),
        (
            _pad(_header(2, 0) + _tensor_info("a", [8], 0, 0) + _tensor_info("a", [8], 0, 32)) + bytes(96),
            "tensor 'a'",
            "appears twice",
        ),
        (_header(1, 0) + _tensor_info("x" * 80, [8], 0, 0), "tensor info 0 name", "over the limit of 63"),
    ],
)
def test_malformed_header_fields(tmp_path: Path, data: bytes, field: str, message: str) -> None:
    _expect(_write(tmp_path, data), field, message)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    _expect(tmp_path / "nope.gguf", "file", "cannot be read")
    _expect(tmp_path, "file", "cannot be read")


def test_every_truncation_of_a_valid_file(tmp_path: Path, valid: bytes) -> None:
    """Cut the file at every length in its first 600 bytes, 300 more inside its header, 12 inside the data."""
    info = read_header(_write(tmp_path, valid, "full.gguf"))
    rng = np.random.default_rng(0)
    header = range(info.data_offset)
    cuts = list(header[:600]) + rng.choice(header[600:], min(300, len(header) - 600), replace=False).tolist()
    cuts += np.linspace(info.data_offset, len(valid) - 1, 12).astype(int).tolist()
    t0 = time.perf_counter()
    for n in cuts:
        p = _write(tmp_path, valid[:n], "cut.gguf")
        with pytest.raises(GGUFError) as err:
            open_gguf(p)
        assert str(err.value).startswith(str(p))
    assert time.perf_counter() - t0 < 60


def _set_metadata(tmp_path: Path, **overrides: object) -> Path:
    """A valid model whose named metadata values are replaced (written again with GGUFWriter)."""
    from gguf import GGUFWriter

    src = tmp_path / "src.gguf"
    w = random_weights(CFG, 0)
    write_model(src, CFG, w, "f32")
    f = open_gguf(src)
    out = tmp_path / "meta.gguf"
    writer = GGUFWriter(str(out), f.get_str("general.architecture"))
    for key in f.keys:
        if key in ("general.architecture", "GGUF.version"):
            continue
        value = overrides.pop(key, f.get(key))
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_uint32(key, int(value))  # type: ignore[call-overload]
    for key, value in overrides.items():
        writer.add_uint32(key, int(value))  # type: ignore[call-overload]
    for name, arr in w.items():
        writer.add_tensor(name, arr)
    write_and_close(writer)
    return out


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"general.architecture": "gpt5"}, "general.architecture", "not supported"),
        ({"llama.block_count": 10**9}, "llama.block_count", "over the limit"),
        ({"llama.embedding_length": 48}, "tensor 'token_embd.weight'", "expected [48, n_vocab]"),
        ({"llama.feed_forward_length": 2**31}, "tensor 'blk.0.ffn_gate.weight'", "expected"),
        ({"llama.attention.head_count": 0}, "llama.attention.head_count", "at least 1"),
        ({"llama.attention.head_count_kv": 3}, "llama.attention.head_count_kv", "does not divide"),
        ({"llama.rope.dimension_count": 3}, "llama.rope.dimension_count", "must be even"),
        ({"llama.rope.freq_base": "fast"}, "llama.rope.freq_base", "must be a number"),
        ({"llama.expert_count": 4, "llama.expert_used_count": 9}, "llama.expert_used_count", "must be in 1..4"),
    ],
)
def test_malformed_model_metadata(tmp_path: Path, overrides: dict[str, object], field: str, message: str) -> None:
    if "general.architecture" in overrides:
        from gguf import GGUFWriter

        p = tmp_path / "arch.gguf"
        writer = GGUFWriter(str(p), str(overrides["general.architecture"]))
        write_and_close(writer)
    else:
        p = _set_metadata(tmp_path, **overrides)
    with pytest.raises(GGUFError) as err:
        Model.plan(p, PARAMS)
    text = str(err.value)
    assert text.startswith(str(p)) and field in text and message in text, text


# ------------------------------------------------------------------------------------------------ fuzzing

_EXTREMES = [0, 1, 3, 2**31 - 1, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


@settings(
    max_examples=120, deadline=3000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_fuzzed_files_fail_cleanly_or_load(tmp_path: Path, valid: bytes, data: st.DataObject) -> None:
    """Random damage to the header (bytes, 32/64-bit fields set to extremes, truncation): a GGUFError naming the
    file within a time bound, or a model that loads."""
    info_end = read_header(_write(tmp_path, valid, "ref.gguf")).data_offset
    buf = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4), label="n_mutations")):
        kind = data.draw(st.sampled_from(["bytes", "u64", "u32", "truncate"]), label="kind")
        pos = data.draw(st.integers(0, info_end - 1), label="pos")
        if kind == "bytes":
            chunk = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
            buf[pos : pos + len(chunk)] = chunk
        elif kind in ("u64", "u32"):
            fmt = "<Q" if kind == "u64" else "<I"
            value = data.draw(st.sampled_from(_EXTREMES), label="value") % (2**64 if kind == "u64" else 2**32)
            packed = struct.pack(fmt, value)
            buf[pos : pos + len(packed)] = packed
        else:
            del buf[pos:]
    p = _write(tmp_path, bytes(buf), "fuzz.gguf")
    t0 = time.perf_counter()
    try:
        with Model.load(p, PARAMS) as m:
            m.decode([0])
            tok = m.tokenizer
            tok.decode(tok.encode("ab a"))
    except GGUFError as exc:
        assert str(exc).startswith(str(p))
    except ValueError as exc:
        # damage that leaves a well-formed file with absurd but checked values (e.g. a token id the damaged vocab
        # no longer has) is reported as a plain value error naming what is wrong
        assert str(exc)
    assert time.perf_counter() - t0 < 3.0


# ------------------------------------------------------------------------------------------------ size bombs

#: peak Python/numpy allocations while opening a file and reading every value, as a multiple of the file's size
#: (what is kept per entry: a dict slot and a small int for each key or tensor name, 8-byte offsets for strings;
#: reading an array of strings back as a list adds one Python object per element)
BOMB_MEMORY_FACTOR = 12


def _bomb(kind: str) -> bytes:
    n = 200_000
    if kind == "array_1.6M":
        return _header(0, 1) + _str("a") + struct.pack("<IIQ", 9, 0, 1_600_000) + bytes(1_600_000)
    if kind == "array_4.8M":
        return _header(0, 1) + _str("a") + struct.pack("<IIQ", 9, 0, 4_800_000) + bytes(4_800_000)
    if kind == "keys_200k":
        return _header(0, n) + b"".join(_str(f"k{i}") + struct.pack("<IB", 0, 1) for i in range(n))
    if kind == "empty_strings_200k":
        return _header(0, 1) + _str("s") + struct.pack("<IIQ", 9, 8, n) + bytes(8 * n)
    assert kind == "zero_tensors_200k"
    return _pad(_header(n, 0) + b"".join(_tensor_info(f"t{i}", [0], 0, 0) for i in range(n)))


@pytest.mark.parametrize("kind", ["array_1.6M", "array_4.8M", "keys_200k", "empty_strings_200k", "zero_tensors_200k"])
def test_size_bombs_open_in_bounded_memory_and_are_rejected_as_models(tmp_path: Path, kind: str) -> None:
    """The header walk is the reader: arrays stay views of the map, strings are offsets, entries are table rows.
    gguf-py's reader spent 5-23 s and 0.5-1.3 GB on these (and a MemoryError traceback on 4.8M elements)."""
    import tracemalloc

    data = _bomb(kind)
    p = _write(tmp_path, data, f"{kind}.gguf")
    t0 = time.perf_counter()
    tracemalloc.start()
    try:
        f = open_gguf(p)
        for key in f.keys:
            f.get(key)
        for i in range(0, len(f.tensors), 997):
            assert f.tensors[i].nbytes == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= BOMB_MEMORY_FACTOR * len(data), f"{peak / 1e6:.1f} MB for a {len(data) / 1e6:.1f} MB file"
    if kind.startswith("array"):
        arr = f.get("a")
        assert arr.size == int(kind[6:-1].replace(".", "")) * 100_000 and not arr.flags.owndata  # a view of the map
    elif kind == "empty_strings_200k":
        assert len(f.get_string_array("s")) == 200_000 and f.get_string_array("s")[-1] == ""
    # not models: one clear error, never a traceback from deep inside
    with pytest.raises(GGUFError, match=r"general\.architecture") as err:
        Model.load(p, PARAMS)
    assert str(err.value).startswith(str(p)) and "\n" not in str(err.value)
    assert time.perf_counter() - t0 < 60  # a hang guard (tracemalloc slows allocation several-fold), not a timing
