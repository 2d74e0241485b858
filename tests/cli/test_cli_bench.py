"""``ggml-core bench`` (llama-bench): one result per configuration and test, statistics of the timed samples
against numpy, warm-up outside them, the four output formats."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core.cli import main
from ggml_core.cli.bench import FIELDS

CFG = TinyConfig(n_layer=2)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("bench")
    return [write_model(d / f"m{i}.gguf", CFG, random_weights(CFG, i), "f32") for i in range(2)]


def _bench(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["bench", "--device", "CPU", *argv]) == 0
    return capsys.readouterr().out


def test_statistics_are_those_of_the_samples(models: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    rows = json.loads(_bench(capsys, "-m", str(models[0]), "-p", "8", "-n", "4", "-pg", "4,2", "-r", "3", "-o", "json"))
    assert [(r["n_prompt"], r["n_gen"]) for r in rows] == [(8, 0), (0, 4), (4, 2)]
    for r in rows:
        ns = np.array(r["samples_ns"], dtype=np.float64)
        assert ns.size == 3 and (ns > 0).all()
        ts = (r["n_prompt"] + r["n_gen"]) * 1e9 / ns
        np.testing.assert_allclose(r["samples_ts"], ts, rtol=1e-12)
        assert r["avg_ns"] == int(ns.mean()) and r["stddev_ns"] == int(ns.std(ddof=1))
        np.testing.assert_allclose([r["avg_ts"], r["stddev_ts"]], [ts.mean(), ts.std(ddof=1)], rtol=1e-9)
        assert r["model_filename"] == str(models[0]) and r["devices"] == "CPU" and r["n_gpu_layers"] == 0
        assert r["model_n_params"] == sum(int(np.prod(w.shape)) for w in random_weights(CFG, 0).values())


def test_one_untimed_run_precedes_the_timed_ones(
    models: list[Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggml_core.models import Model

    calls: list[tuple[str, int]] = []
    prompt, decode = Model.process_prompt, Model.decode

    def spy_prompt(self: Any, tokens: Any, **kw: Any) -> Any:
        calls.append(("pp", len(tokens)))
        return prompt(self, tokens, **kw)

    def spy_decode(self: Any, tokens: Any, **kw: Any) -> Any:
        calls.append(("tg", len(tokens)))
        return decode(self, tokens, **kw)

    monkeypatch.setattr(Model, "process_prompt", spy_prompt)
    monkeypatch.setattr(Model, "decode", spy_decode)
    rows = json.loads(_bench(capsys, "-m", str(models[0]), "-p", "8", "-n", "3", "-r", "2", "-o", "json"))
    assert [len(r["samples_ns"]) for r in rows] == [2, 2]  # the first run of each test is not among the samples
    assert calls.count(("pp", 8)) == 3 and calls.count(("tg", 1)) >= 3 * 3  # warm-up + 2 timed, each


def test_every_combination_of_the_lists(models: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-m", str(models[0]), "-m", str(models[1]), "-t", "1,2", "-p", "4", "-n", "0", "-r", "1", "-o", "jsonl"]
    rows = [json.loads(line) for line in _bench(capsys, *argv).splitlines()]
    got = [(Path(r["model_filename"]).name, r["n_threads"]) for r in rows]
    assert got == [("m0.gguf", 1), ("m0.gguf", 2), ("m1.gguf", 1), ("m1.gguf", 2)]


def test_csv_and_markdown(models: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["-m", str(models[0]), "-p", "4", "-n", "2", "-r", "2"]
    table = list(csv.DictReader(io.StringIO(_bench(capsys, *argv, "-o", "csv"))))
    assert len(table) == 2 and tuple(table[0]) == FIELDS and len(table[0]["samples_ns"].split(";")) == 2
    md = _bench(capsys, *argv).splitlines()
    assert md[0].startswith("| model | size | params | devices") and md[0].endswith("| test | t/s |")
    assert len(md) == 4 and "| pp4 |" in md[2] and "| tg2 |" in md[3] and " ± " in md[3]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["-p", "0", "-n", "0"], "no test to run"), (["-pg", "5"], "expected PROMPT,GEN"), (["-r", "0"], "-r")],
)
def test_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = main(["bench", *argv])
    except SystemExit as exc:
        rc = int(exc.code or 0)
    assert rc == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_split_lists_add_rows_and_columns(models: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    """-sm and -ts are lists too (llama-bench's '/' between the shares of one split); the table shows them only when
    the rows differ in them."""
    argv = ["-m", str(models[0]), "-p", "4", "-n", "0", "-r", "1", "-sm", "none,layer", "-ts", "1"]
    rows = [json.loads(line) for line in _bench(capsys, *argv, "-o", "jsonl").splitlines()]
    assert [(r["split_mode"], r["tensor_split"]) for r in rows] == [("none", "1"), ("layer", "1")]
    md = _bench(capsys, *argv).splitlines()
    assert "| sm |" in md[0] and "| ts |" not in md[0] and "| none |" in md[2] and "| layer |" in md[3]
