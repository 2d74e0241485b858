"""``ggml-core run`` and ``ggml-core plan`` end to end: the embedded default model, tiny GGUF models against the
numpy reference through ``--logits-out``, JSON fields, split runs, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
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


def test_default_model_runs_on_every_device(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    info = _json(capsys, "run", "--json", "--temp", "0", "-n", "5", "--ignore-eos")
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
