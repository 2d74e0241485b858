"""The GGUF loader on well-formed files: every ggml type and metadata type read as gguf-py reads them, CPU weights
used in place from the memory map, weights for other devices uploaded in chunks with a progress line."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter
from tiny_models import TinyConfig, random_weights, write_and_close, write_model

from ggml_core import BufferUsage, DeviceNotFoundError, GGMLType, get_registry
from ggml_core.models import Model, ModelParams, PlacementRequest, open_gguf
from ggml_core.models.arch import read_hparams, weight_specs
from ggml_core.models.plan.placement import Placement
from ggml_core.models.weights import UPLOAD_CHUNK, load_weights


def _shape(t: GGMLType) -> tuple[int, int]:
    return (3, t.block_size * 2)  # numpy (rows, elements per row)


def _gguf_py_agrees(t: GGMLType) -> bool:
    """gguf-py knows the type with ggml's block layout (0.19 lacks Q2_0 and still sizes Q8_1 blocks as 40 bytes)."""
    try:
        gt = GGMLQuantizationType(int(t))
    except ValueError:
        return False
    return GGML_QUANT_SIZES[gt] == (t.block_size, t.type_size)


def test_every_ggml_type_is_read_like_gguf_py(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = tmp_path / "types.gguf"
    w = GGUFWriter(str(path), "test")
    written: dict[str, tuple[GGMLType, bytes]] = {}
    for t in GGMLType:
        if not _gguf_py_agrees(t):
            continue  # covered by the hand-written file below
        rows, cols = _shape(t)
        raw = rng.integers(0, 256, (rows, cols // t.block_size * t.type_size), dtype=np.uint8)
        w.add_tensor(f"t_{t.name}", raw, raw_dtype=GGMLQuantizationType(int(t)))
        written[f"t_{t.name}"] = (t, raw.tobytes())
    write_and_close(w)
    f = open_gguf(path)
    ref = {rt.name: rt for rt in GGUFReader(str(path)).tensors}
    assert {t.name for t in f.tensors} == set(written) == set(ref)
    for name, (t, raw) in written.items():
        info = f.tensor_info(name)
        rows, cols = _shape(t)
        assert info.type == t and info.ne == (cols, rows)
        assert info.nbytes == len(raw) == ref[name].n_bytes
        assert info.offset == ref[name].data_offset
        assert f.tensor_bytes(name).tobytes() == raw


def test_types_gguf_py_lacks_or_sizes_differently(tmp_path: Path) -> None:
    """Types where gguf-py 0.19 has no entry (Q2_0) or an outdated block size (Q8_1): a hand-written file."""
    others = [t for t in GGMLType if not _gguf_py_agrees(t)]
    assert GGMLType.Q2_0 in others
    infos, blobs, offset = b"", b"", 0
    for t in others:
        name = f"t_{t.name}".encode()
        data = bytes((i * 7 + int(t)) % 256 for i in range(2 * t.type_size))
        infos += struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 2 * t.block_size, int(t), offset)
        blobs += data + b"\0" * ((-len(data)) % 32)
        offset = len(blobs)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(others), 0) + infos
    head += b"\0" * ((-len(head)) % 32)
    path = tmp_path / "others.gguf"
    path.write_bytes(head + blobs)
    f = open_gguf(path)
    for t in others:
        ti = f.tensor_info(f"t_{t.name}")
        assert ti.type == t and ti.ne == (2 * t.block_size,) and ti.nbytes == 2 * t.type_size
        assert f.tensor_bytes(ti.name).tobytes() == bytes((i * 7 + int(t)) % 256 for i in range(2 * t.type_size))


def test_metadata_values_match_gguf_py(tmp_path: Path) -> None:
    path = tmp_path / "meta.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_uint8("u8", 200)
    w.add_int8("i8", -100)
    w.add_uint16("u16", 60000)
    w.add_int16("i16", -30000)
    w.add_uint32("u32", 4_000_000_000)
    w.add_int32("i32", -2_000_000_000)
    w.add_float32("f32", 1.5)
    w.add_uint64("u64", 2**63 + 5)
    w.add_int64("i64", -(2**62))
    w.add_float64("f64", 2.25)
    w.add_bool("b", True)
    w.add_string("s", "héllo")
    w.add_array("a_i32", [1, -2, 3])
    w.add_array("a_f32", [0.5, 1.5])
    w.add_array("a_s", ["x", "yz", ""])
    write_and_close(w)
    f = open_gguf(path)
    ref = GGUFReader(str(path))
    for key in ("u8", "i8", "u16", "i16", "u32", "i32", "f32", "u64", "i64", "f64", "b", "s", "a_s"):
        assert f.get(key) == ref.fields[key].contents(), key
    np.testing.assert_array_equal(f.get("a_i32"), ref.fields["a_i32"].contents())
    np.testing.assert_array_equal(f.get("a_f32"), ref.fields["a_f32"].contents())
    assert f.get_int("u64") == 2**63 + 5 and f.get_str("s") == "héllo" and f.get_bool("b", False)
    assert f.get("missing", None) is None


def test_cpu_weights_are_used_in_place_from_the_mmap(tmp_path: Path) -> None:
    cfg = TinyConfig()
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 0), "q8_0")
    with Model.load(path, ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=32, progress=False)) as m:
        mm = m.file.memmap
        for name in ("token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight"):
            t = m.weights[name]
            assert t.buffer is not None and t.buffer.usage == BufferUsage.WEIGHTS
            assert t.buffer.buffer_type.name == "CPU_Mapped"
            host = t.buffer.host_array()
            assert host is not None and np.shares_memory(host, mm)
            assert host[t.data_offset : t.data_offset + t.nbytes].tobytes() == m.file.tensor_bytes(name).tobytes()
        assert m.weights.uploads == []


class _FakeAccelerator:
    """A stand-in for a device with its own memory: the CPU's buffer type under another name and type."""

    def __init__(self) -> None:
        from ggml_core import DeviceType

        cpu = get_registry().get_device("CPU")
        self.name, self.type, self.caps = "FakeGPU", DeviceType.GPU, cpu.caps
        self._buft = cpu.buffer_type()

    def buffer_type(self):  # duck-typed Device
        return self._buft


def test_other_devices_get_streamed_uploads(tmp_path: Path) -> None:
    cfg = TinyConfig()
    w = random_weights(cfg, 0)
    path = write_model(tmp_path / "m.gguf", cfg, w, "f32")
    f = open_gguf(path)
    hp = read_hparams(f)
    specs = weight_specs(f, hp)
    fake, cpu = _FakeAccelerator(), get_registry().get_device("CPU")
    slots = {-1: cpu, **{i: fake for i in range(hp.n_layer + 1)}}
    plan = Placement(hp.n_layer, slots, [], "layer")  # type: ignore[arg-type]
    out = io.StringIO()
    weights = load_weights(f, specs, plan, progress=True, stream=out)
    try:
        q = weights["blk.1.attn_q.weight"]
        assert q.buffer is not None and q.buffer.buffer_type.name == "CPU" and q.buffer.usage == BufferUsage.WEIGHTS
        np.testing.assert_array_equal(q.to_numpy().reshape(w["blk.1.attn_q.weight"].shape), w["blk.1.attn_q.weight"])
        assert weights["token_embd.weight"].buffer.buffer_type.name == "CPU_Mapped"  # type: ignore[union-attr]
        assert [u.device for u in weights.uploads] == ["FakeGPU"]
        assert "uploaded" in out.getvalue() and "MiB/s" in out.getvalue() and "FakeGPU" in out.getvalue()
    finally:
        weights.free()
    assert UPLOAD_CHUNK >= 2**20


def test_upload_to_opencl_with_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
    cfg = TinyConfig()
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 0), "q4_0")
    with Model.load(path, ModelParams(placement=PlacementRequest(devices=["OpenCL0"]), n_ctx=32)) as m:
        t = m.weights["blk.0.ffn_up.weight"]
        assert t.buffer is not None and t.buffer.buffer_type.device.name == "OpenCL0"  # type: ignore[union-attr]
        assert t.get_bytes() == m.file.tensor_bytes("blk.0.ffn_up.weight").tobytes()
        assert m.weights.uploads[0].device == "OpenCL0" and m.weights.uploads[0].nbytes > 0
    assert "MiB/s" in capsys.readouterr().err


def test_string_and_number_arrays_match_gguf_py(tmp_path: Path) -> None:
    """A vocabulary-sized file (unicode, empty and long strings) read by the walk and by gguf-py, the independent
    reference: same strings, same numbers; numeric arrays are views of the map, not copies."""
    rng = np.random.default_rng(3)
    alphabet = ["a", "▁", "é", "中", "😀", " ", "\n", "<0x0A>", "", "\x00"]
    tokens = ["".join(rng.choice(alphabet, int(rng.integers(0, 12)))) for _ in range(5000)] + ["x" * 3000]
    scores = rng.standard_normal(len(tokens)).astype(np.float32)
    path = tmp_path / "vocab.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.scores", scores.tolist())
    w.add_array("tokenizer.ggml.token_type", rng.integers(1, 7, len(tokens)).tolist())
    w.add_string("after", "still here")
    w.add_tensor("t", np.arange(64, dtype=np.float32))
    write_and_close(w)
    f = open_gguf(path)
    ref = GGUFReader(str(path))
    assert f.keys == [k for k in ref.fields if not k.startswith("GGUF.")]
    strings = f.get_string_array("tokenizer.ggml.tokens")
    assert len(strings) == len(tokens) and strings[5] == tokens[5] and strings[-1] == tokens[-1]
    assert f.get_strings("tokenizer.ggml.tokens") == ref.fields["tokenizer.ggml.tokens"].contents() == tokens
    assert f.get_raw_strings("tokenizer.ggml.tokens") == [t.encode() for t in tokens]
    got = f.get_numbers("tokenizer.ggml.scores")
    np.testing.assert_array_equal(got, ref.fields["tokenizer.ggml.scores"].contents())
    assert not got.flags.owndata and not got.flags.writeable
    np.testing.assert_array_equal(
        f.get_numbers("tokenizer.ggml.token_type"), ref.fields["tokenizer.ggml.token_type"].contents()
    )
    assert f.get("after") == "still here"
    assert f.tensor_bytes("t").view(np.float32).tolist() == list(range(64))
    assert f.data_offset == ref.data_offset and f.tensor_info("t").offset == ref.tensors[0].data_offset


def test_the_load_path_does_not_use_gguf_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gguf

    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("gguf-py's reader was used on the load path")

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr(gguf.gguf_reader, "GGUFReader", refuse)
    cfg = TinyConfig()
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 0), "q8_0")
    with Model.load(path, ModelParams(placement=PlacementRequest(devices=["CPU"]), n_ctx=32, progress=False)) as m:
        assert m.decode([1, 2]).shape == (1, cfg.n_vocab)
