"""``ggml-core run`` and ``ggml-core plan`` end to end: the embedded default model, tiny GGUF models against the
numpy reference through ``--logits-out``, JSON fields, split runs, clear errors."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from cli_errors import cli_error
from tiny_models import TinyConfig, random_weights, reference_logits, write_model

from ggml_core import DeviceNotFoundError, get_registry
from ggml_core.cli import main
from ggml_core.models import scheduler_available

CFG = TinyConfig(n_layer=3)
TOKENS = [1, 5, 9, 3, 7, 2, 11]


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    rc = main(list(argv))
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def _tiny(tmp_path: Path, wtype: str = "f32") -> tuple[Path, dict[str, np.ndarray]]:
    w = random_weights(CFG, 3)
    return write_model(tmp_path / f"tiny-{wtype}.gguf", CFG, w, wtype), w


def test_default_model_is_placed_like_any_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """llama.cpp's default device list (GPUs and RPC devices; the CPU is the host): CPU-backed devices such as PoCL
    or lavapipe are not used unless named, so on a machine without a GPU everything runs on the CPU plugin."""
    from ggml_core.models.plan.placement import default_devices

    info = _json(capsys, "run", "--json", "--temp", "0", "-n", "5", "--ignore-eos")
    names = {d["name"] for d in info["devices"] if d["layers"]}
    offload = {d.name for d in default_devices()}
    assert names <= offload | {"CPU"} and (names == {"CPU"}) == (not offload)
    assert sum(d["layers"] for d in info["devices"]) == 4


def test_default_model_runs_on_every_device_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    every = ",".join(d.name for d in get_registry().devices())
    info = _json(capsys, "run", "--json", "--temp", "0", "-n", "5", "--ignore-eos", "--device", every)
    assert info["default_model"] and Path(info["model"]).parent == tmp_path / "cache"
    for key in ("prompt_tokens_per_s", "gen_tokens_per_s", "n_splits", "devices", "tokens"):
        assert key in info
    assert len(info["tokens"]) == 5 and info["prompt_tokens"][0] == 1  # BOS
    assert info["prompt_tokens_per_s"] > 0 and info["gen_tokens_per_s"] > 0
    names = [d["name"] for d in info["devices"]]
    assert set(names) == {d.name for d in get_registry().devices()}
    assert all({"name", "layers", "MB"} <= set(d) for d in info["devices"])
    assert sum(d["layers"] for d in info["devices"]) == 4
    if len(names) > 1 and scheduler_available():
        assert info["n_splits"] >= 2


def test_default_model_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--device", "CPU", "-n", "4", "--seed", "7", "--prompt", "the ggml core"]) == 0
    out = capsys.readouterr().out
    assert "embedded default model" in out and "CPU" in out and "the ggml core" in out
    assert "tokens/s" in out and "seed 7" in out


def test_logits_out_matches_the_numpy_reference(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, w = _tiny(tmp_path)
    npy = tmp_path / "logits.npy"
    tokens = ",".join(map(str, TOKENS))
    args = ["run", str(path), "--tokens", tokens, "--device", "CPU", "--kv-type", "f32", "--temp", "0"]
    info = _json(capsys, *args, "-n", "3", "--logits-out", str(npy), "--json", "--batch-size", "3")
    got = np.load(npy)
    ref = reference_logits(CFG, w, TOKENS)
    assert got.dtype == np.float32 and got.shape == (len(TOKENS), CFG.n_vocab)
    assert np.abs(got - ref).max() < 2e-6 * np.abs(ref).max()
    seq = list(TOKENS)
    for _ in range(3):
        seq.append(int(np.argmax(reference_logits(CFG, w, seq)[-1])))
    assert info["tokens"] == seq[len(TOKENS) :]
    assert info["text"] is None  # no tokenizer in this file: ids only


@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_0", "q4_K"])
@pytest.mark.parametrize("kv_type", ["f16", "f32"])
def test_weight_types_through_the_cli(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, wtype: str, kv_type: str
) -> None:
    cfg = TinyConfig(n_embd=256, n_ff=256, n_head=4, n_head_kv=1, n_layer=2) if wtype == "q4_K" else CFG
    w = random_weights(cfg, 4)
    path = write_model(tmp_path / f"{wtype}.gguf", cfg, w, wtype)
    npy = tmp_path / "logits.npy"
    _json(capsys, "run", str(path), "--tokens", ",".join(map(str, TOKENS)), "--device", "CPU", "--kv-type", kv_type,
          "-n", "1", "--logits-out", str(npy), "--json")  # fmt: skip
    got, ref = np.load(npy), reference_logits(cfg, w, TOKENS, wtype, kv_type)
    # ggml's activation rounding is in the reference; a value on a rounding boundary may flip (see test_models_llama)
    assert float(((got - ref) ** 2).sum() / (ref**2).sum()) < 1e-7
    assert np.abs(got - ref).max() < 1e-3 * np.abs(ref).max()


def test_split_run_gives_the_cpu_logits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed")
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")
    path, _ = _tiny(tmp_path, "q8_0")
    tokens = ",".join(map(str, TOKENS))
    out = {}
    for name, dev, ts in (("cpu", "CPU", "1"), ("split", "CPU,OpenCL0", "1,1")):
        npy = tmp_path / f"{name}.npy"
        info = _json(capsys, "run", str(path), "--tokens", tokens, "--device", dev, "-ts", ts, "-n", "2", "--temp",
                     "0", "--logits-out", str(npy), "--json")  # fmt: skip
        out[name] = (np.load(npy), info)
    assert out["split"][1]["n_splits"] >= 2
    assert {d["name"] for d in out["split"][1]["devices"] if d["layers"]} == {"CPU", "OpenCL0"}
    assert np.abs(out["split"][0] - out["cpu"][0]).max() < 1e-5 * np.abs(out["cpu"][0]).max()
    assert out["split"][1]["tokens"] == out["cpu"][1]["tokens"]


def test_flash_attention_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, w = _tiny(tmp_path)
    npy = tmp_path / "fa.npy"
    info = _json(capsys, "run", str(path), "--tokens", "1,2,3,4", "--device", "CPU", "-fa", "-n", "1", "--json",
                 "--logits-out", str(npy))  # fmt: skip
    assert info["flash_attn"] and info["kv_type"] == "f16"
    ref = reference_logits(CFG, w, [1, 2, 3, 4], "f32", "f16")
    assert np.abs(np.load(npy) - ref).max() < 3e-3 * np.abs(ref).max()


def test_flash_attention_auto_is_on_where_every_layer_runs_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``-fa auto`` (llama.cpp's default): on for the CPU (it runs FLASH_ATTN_EXT), off when a layer's device does
    not run the op; ``-fa off`` is the default here."""
    from ggml_core import GGMLOp
    from ggml_core.models import Model, ModelParams, PlacementRequest

    path, _ = _tiny(tmp_path)
    run = ("run", str(path), "--tokens", "1,2", "--device", "CPU", "-n", "1", "--json")
    assert _json(capsys, *run, "-fa", "auto")["flash_attn"] is True
    assert _json(capsys, *run)["flash_attn"] is False
    assert _json(capsys, *run, "--flash-attn", "on")["flash_attn"] is True
    cpu = get_registry().get_device("CPU")
    plain = type(cpu).supports_op
    monkeypatch.setattr(type(cpu), "supports_op", lambda d, op: op.op != GGMLOp.FLASH_ATTN_EXT and plain(d, op))
    params = ModelParams(placement=PlacementRequest(devices=["CPU"]), flash_attn=None, n_ctx=16, progress=False)
    with Model.load(path, params) as m:
        assert m.params.flash_attn is False and m.kv.v_trans


def test_plan_json_and_svg(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    if not scheduler_available():
        pytest.skip("the scheduler (ggml_core.sched) is not installed")
    path, _ = _tiny(tmp_path)
    svg = tmp_path / "plan.svg"
    info = _json(capsys, "plan", str(path), "--device", "CPU", "--json", "--svg", str(svg), "--n-tokens", "4")
    assert info["n_splits"] == len(info["splits"]) >= 1
    for s in info["splits"]:
        assert {"backend", "nodes", "inputs"} <= set(s) and s["nodes"]
    assert "<svg" in svg.read_text()
    assert main(["plan", str(path), "--device", "CPU"]) == 0
    assert "split" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt", "hi"], "tokenizer.ggml.model"),
        (["--tokens", "1,999"], "token id 999 is outside the vocabulary"),
        (["--tokens", "1", "--device", "CPUU"], "no device named 'CPUU'"),
        (["--tokens", "1", "--ctx-size", "2", "-n", "5"], "do not fit"),
    ],
)
def test_clear_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str) -> None:
    path, _ = _tiny(tmp_path)
    rc = main(["run", str(path), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err


def test_malformed_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + bytes(16))
    rc = main(["run", str(bad), "--tokens", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and str(bad) in err and "header.n_tensors" in err


def test_warmup_leaves_no_trace(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The warm-up batch compiles kernels and is then forgotten: same tokens and logits as without it."""
    path, _ = _tiny(tmp_path)
    runs = []
    for extra in ([], ["--no-warmup"]):
        out = tmp_path / f"logits{len(extra)}.npy"
        info = _json(
            capsys,
            "run",
            str(path),
            "--json",
            "--tokens",
            "1,5,9",
            "--temp",
            "0",
            "-n",
            "4",
            "--ignore-eos",
            "--logits-out",
            str(out),
            *extra,
        )
        runs.append((info, np.load(out)))
    (warm, warm_logits), (cold, cold_logits) = runs
    assert warm["warmup_s"] > 0 and cold["warmup_s"] == 0
    assert warm["tokens"] == cold["tokens"]
    assert np.array_equal(warm_logits, cold_logits)


# ------------------------------------------------------------------------------------------------ input checks


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--top-p", "5"], "argument --top-p: must be a finite number in (0.0, 1.0], got 5"),
        (["--top-p", "0"], "argument --top-p: must be a finite number in (0.0, 1.0], got 0"),
        (["--top-p", "nan"], "argument --top-p: must be a finite number"),
        (["--temp", "-1"], "argument --temp: must be a finite number in [0.0, inf], got -1"),
        (["--temp", "inf"], "argument --temp: must be a finite number"),
        (["--top-k", "-1"], "argument --top-k: must be an integer in 0..2147483647, got -1"),
        (["--seed", "-7"], "argument --seed: must be an integer in -1..4294967295 (-1 = random), got -7"),
        (["--seed", str(2**32)], "argument --seed: must be an integer in -1..4294967295"),
        (["-n", "-1"], "argument --n-predict/-n: must be an integer in 0..2147483647, got -1"),
        (["-ngl", "-3"], "argument --n-gpu-layers/-ngl: must be 0..2147483647 layers, -1, 'all' or 'auto'"),
        (["-ngl", str(2**31)], "argument --n-gpu-layers/-ngl: must be 0..2147483647 layers"),
        (["-ts", "nan,1"], "argument --tensor-split/-ts: shares must be finite and >= 0, got nan"),
        (["-ts", "inf,1"], "argument --tensor-split/-ts: shares must be finite and >= 0, got inf"),
        (["--tensor-split=-1,2"], "argument --tensor-split/-ts: shares must be finite and >= 0, got -1"),
        (["-ts", "0,0"], "argument --tensor-split/-ts: the shares must have a positive sum"),
        (["-mg", str(2**31)], "argument --main-gpu/-mg: must be an integer in -2147483648..2147483647"),
        (["-c", "-5"], "argument --ctx-size/-c: must be an integer in 0..2147483647 (0 = default), got -5"),
        (["-b", "0"], "argument --batch-size/-b: must be an integer in 1..2147483647, got 0"),
        (["-t", "0"], "argument --threads/-t: must be an integer in 1..1024, got 0"),
        (["-t", "x"], "argument --threads/-t: expected an integer, got 'x'"),
        (["--device", ","], "argument --device/-dev: expected comma-separated names, got ','"),
        (["--rpc", "localhost"], "argument --rpc: expected HOST:PORT with a port in 1..65535, got 'localhost'"),
        (["--rpc", "localhost:0"], "argument --rpc: expected HOST:PORT with a port in 1..65535"),
    ],
)
def test_bad_arguments_fail_at_parse_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    path, _ = _tiny(tmp_path)
    assert message in cli_error(capsys, ["run", str(path), "--tokens", "1", *argv])


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (str(2**63), f"argument --tokens: token id #1 is {2**63}, outside 0..2147483647"),
        ("1,-2", "argument --tokens: token id #2 is -2, outside 0..2147483647"),
        ("1,x", "argument --tokens: expected comma-separated integers, got '1,x'"),
        (",", "argument --tokens: expected comma-separated token id, got ','"),
    ],
)
def test_token_ids_are_checked_at_parse_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tokens: str, message: str
) -> None:
    path, _ = _tiny(tmp_path)
    assert message in cli_error(capsys, ["run", str(path), f"--tokens={tokens}"])


@pytest.fixture
def no_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any weight is loaded: the checks below must come first."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("weights were loaded before the bad input was refused")

    monkeypatch.setattr("ggml_core.models.runner.load_weights", refuse)


@pytest.mark.usefixtures("no_weights")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "1,64"], "--tokens: token id 64 is outside the vocabulary 0..63 of "),
        (["--tokens", "1,2", "-c", "2", "-n", "5"], "2 prompt tokens + 5 to generate do not fit in the 2-cell context"),
        (["--tokens", "1", "-c", "2", "-n", "5"], "1 prompt token + 5 to generate"),
        (["--tokens", "1", "--device", "CPUU"], "no device named 'CPUU'"),
        (["--tokens", "1", "--device", "CPU", "-ts", "1,1"], "--tensor-split has 2 values for 1 devices"),
        (["--tokens", "1", "--device", "CPU", "-sm", "none", "-mg", "3"], "--main-gpu 3 is outside the device list"),
    ],
)
def test_inputs_the_header_refutes_fail_before_the_weights_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    path, _ = _tiny(tmp_path)
    err = cli_error(capsys, ["run", str(path), *argv])
    assert message in err, err


@pytest.mark.usefixtures("no_weights")
def test_plan_checks_n_tokens_before_loading(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, _ = _tiny(tmp_path)
    assert "--n-tokens must be in 1..16 (the context size), got 17" in cli_error(
        capsys, ["plan", str(path), "-c", "16", "--n-tokens", "17"]
    )
    assert "argument --svg: " in cli_error(capsys, ["plan", str(path), "--svg", str(tmp_path)])


def test_model_path_must_be_a_regular_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A FIFO would block the open forever; a directory or device cannot be memory-mapped."""
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)

    def timeout(*_: object) -> None:
        raise TimeoutError("the CLI blocked on the FIFO")

    old = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    try:
        err = cli_error(capsys, ["run", str(fifo), "--tokens", "1"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert f"argument model: '{fifo}' is not a regular file (a FIFO, socket or device)" in err
    assert f"'{tmp_path}' is a directory" in cli_error(capsys, ["run", str(tmp_path), "--tokens", "1"])
    assert "'/dev/null' is not a regular file" in cli_error(capsys, ["run", "/dev/null", "--tokens", "1"])
    missing = tmp_path / "missing.gguf"
    assert f"cannot open '{missing}': No such file" in cli_error(capsys, ["run", str(missing), "--tokens", "1"])


def test_the_loader_refuses_a_fifo_too(tmp_path: Path) -> None:
    from ggml_core import GGUFError
    from ggml_core.models import open_gguf

    fifo = tmp_path / "m.gguf"
    os.mkfifo(fifo)
    with pytest.raises(GGUFError, match="is not a regular file"):
        open_gguf(fifo)


def test_logits_out_is_written_at_exactly_the_path_reported(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, _ = _tiny(tmp_path)
    err = cli_error(capsys, ["run", str(path), "--tokens", "1", "--logits-out", str(tmp_path)])
    assert f"argument --logits-out: '{tmp_path}' is a directory; give a file name" in err
    assert not (tmp_path.parent / f"{tmp_path.name}.npy").exists()
    err = cli_error(capsys, ["run", str(path), "--tokens", "1", "--logits-out", str(tmp_path / "no" / "x.npy")])
    assert "does not exist" in err
    target = tmp_path / "logits.bin"  # no .npy suffix: np.save alone would write logits.bin.npy
    assert main(["run", str(path), "--tokens", "1,2", "-n", "1", "--device", "CPU", "--logits-out", str(target)]) == 0
    out = capsys.readouterr().out
    assert f"logits of 2 prompt positions saved to {target}" in out
    assert np.load(target).shape == (2, CFG.n_vocab) and not (tmp_path / "logits.bin.npy").exists()


def test_bad_hyperparameters_name_the_file_and_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gguf import GGUFWriter

    empty = TinyConfig(n_layer=1, n_vocab=0)
    p0 = write_model(tmp_path / "vocab0.gguf", empty, random_weights(empty, 1))
    err = cli_error(capsys, ["run", str(p0), "--tokens", "0"])
    assert f"{p0}: tensor 'token_embd.weight': has 0 rows: the vocabulary is empty" in err
    # rope.freq_base as float64 1e300: finite, but ggml's op parameters are float32 (it would run with inf)
    f32 = GGUFWriter.add_float32

    def add_float(self: GGUFWriter, key: str, value: float) -> None:
        if key.endswith("rope.freq_base"):
            self.add_float64(key, 1e300)
        else:
            f32(self, key, value)

    monkeypatch.setattr(GGUFWriter, "add_float32", add_float)
    cfg = TinyConfig(n_layer=1)
    p1 = write_model(tmp_path / "base.gguf", cfg, random_weights(cfg, 1))
    err = cli_error(capsys, ["run", str(p1), "--tokens", "1"])
    assert f"{p1}: metadata 'llama.rope.freq_base': 1e+300 does not fit a float32" in err


def test_speed_line_grammar_and_rates() -> None:
    from ggml_core.cli.run import speed_text
    from ggml_core.models import GenerationResult

    pp, tg = speed_text(GenerationResult([1], [5], 2e-7, 1e-7))
    assert pp == "1 token in 0.2 µs (5,000,000.0 tokens/s)"
    assert tg == "1 token (sampled from the prompt's logits: no decode step to time)"
    pp, tg = speed_text(GenerationResult([1, 2, 3], [5, 6, 7], 0.5, 0.002))
    assert pp == "3 tokens in 500.0 ms (6 tokens/s)"
    assert tg == "3 tokens in 2.0 ms (1,000.0 tokens/s over 2 decode steps)"
    assert speed_text(GenerationResult([1], [], 1.5, 0.0))[1] == "0 tokens"
    slow = speed_text(GenerationResult([1], [4, 2], 1.5, 4.0))[1]
    assert slow == "2 tokens in 4.00 s (0.25 tokens/s over 1 decode step)"


def test_one_generated_token_has_no_rate_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path, _ = _tiny(tmp_path)
    info = _json(capsys, "run", str(path), "--tokens", "1", "-n", "1", "--device", "CPU", "--json")
    assert info["gen_tokens_per_s"] is None and len(info["tokens"]) == 1 and info["prompt_tokens_per_s"] > 0
