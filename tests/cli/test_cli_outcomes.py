"""Outcomes that must not look like success when they are not: op filters that select nothing, group names, the
notes and advice ``run`` prints."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sched_plugin import SubsetDevice, SubsetPlugin
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core import GGMLOp, OpFilterError
from ggml_core.backend.registry import get_registry, reset_registry
from ggml_core.cli import main
from ggml_core.models import scheduler_available
from ggml_core.ops import GluOp, UnaryOp
from ggml_core.testing import conformance_suite
from ggml_core.testing.cases import all_cases, select

CFG = TinyConfig(n_layer=3)
OPS = (GGMLOp.MUL_MAT, GGMLOp.ADD, GGMLOp.MUL, GGMLOp.RMS_NORM, GGMLOp.SET_ROWS)


@pytest.mark.parametrize("argv", [["-o", "FOO"], ["-o", "ADD,FOO"], ["-o", "ADD", "-p", "no such case"]])
def test_test_ops_filter_matching_nothing_is_an_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "-b", "CPU", *argv]) == 2
    out = capsys.readouterr()
    assert "passed" not in out.out and "OK" not in out.out
    err = out.err.strip()
    assert err.startswith("ggml-core test-ops: error: op filter") and "\n" not in err
    assert ("FLOOR" in err) if "FOO" in argv[1] else ("the ops with cases are" in err and "MUL_MAT" in err)


@pytest.mark.parametrize(("group", "members"), [("UNARY", UnaryOp), ("GLU", GluOp)])
def test_group_names_select_every_case_of_their_sub_ops(group: str, members: type) -> None:
    want = [c for c in all_cases() if c.op in {m.name for m in members}]
    assert want and select(ops=group) == want
    assert select(ops=f"ADD,{group.lower()}") == [c for c in all_cases() if c.op == "ADD" or c in want]


def test_conformance_suite_expands_groups_and_refuses_unknown_names() -> None:
    suite = conformance_suite("CPU", ops="ADD,MUL,UNARY")
    params = {n for m in suite.pytestmark for n in m.args[1]}  # type: ignore[attr-defined]
    assert any(n.startswith("SILU(") for n in params) and any(n.startswith("ADD(") for n in params)
    with pytest.raises(OpFilterError, match=r"'UNARI'.*did you mean UNARY"):
        conformance_suite("CPU", ops="ADD,UNARI")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_CORE_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-layer model trained (per its header) on a 64-token context."""
    return write_model(tmp_path_factory.mktemp("outcomes") / "m.gguf", CFG, random_weights(CFG, 7), "f32")


@pytest.fixture()
def small_device() -> Iterator[SubsetDevice]:
    """Small0, a device with 1 GiB of memory (all of it within --fit-target's default 1024 MiB margin)."""
    reset_registry()
    dev = SubsetDevice("Small0", OPS, capacity=2**30)
    get_registry().register_plugin(SubsetPlugin([dev], "a 1 GiB device"), "small")
    yield dev
    reset_registry()


@pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")
def test_fit_says_why_it_offloads_fewer_layers_and_what_changes_it(
    tiny: Path, small_device: SubsetDevice, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", str(tiny), "--device", "Small0", "--tokens", "1,2", "-n", "1"]
    assert main(argv) == 0
    note = next(line for line in capsys.readouterr().out.splitlines() if "note: --fit:" in line)
    assert "-ngl 0 of 4" in note
    assert "-ngl 1 would need" in note and "on Small0, 0.0 MiB left after the 1024 MiB --fit-target keeps free" in note
    assert "-fitt" in note and "-ngl N" in note
    assert main([*argv, "-fitt", "0"]) == 0  # what the note says changes it does
    out = capsys.readouterr().out
    small = next(line for line in out.splitlines() if line.strip().startswith("Small0"))
    assert "layers 0-2 + output" in small


def test_a_context_too_large_names_the_flag_that_set_it(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny), "--device", "CPU", "--tokens", "1,2", "-n", "100000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "a smaller -n" in err and "--ctx-size" not in err
    assert main(["run", str(tiny), "--device", "CPU", "--tokens", "1,2", "-n", "8", "-c", "100000000"]) == 2
    assert "a smaller --ctx-size" in capsys.readouterr().err


def test_a_context_past_the_training_context_warns(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["run", str(tiny), "--device", "CPU", "--tokens", "1,2", "--temp", "0", "--ignore-eos"]
    assert main([*base, "-n", "100"]) == 0  # 256 cells > the 64 the header gives
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "256 cells" in warning[0] and "64 tokens" in warning[0]
    assert main([*base, "-n", "8", "-c", "64"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_auto_split_note_has_no_empty_brackets() -> None:
    from ggml_core.models.plan.autosplit import AutoChoice

    text = AutoChoice([get_registry().get_device("CPU")], [4], 100.0, 10.0).describe()
    assert "()" not in text and not text.endswith("measured ") and text.startswith("CPU 4 slots: predicted pp 100.0")


@pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")
def test_sizes_are_in_mib_throughout(
    tiny: Path, small_device: SubsetDevice, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(tiny), "--device", "Small0", "-fitt", "0", "--tokens", "1,2", "-n", "1"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "MiB: weights" in text and "MiB/s" in text  # the device lines and the upload line
    assert re.findall(r"\bMB\b", text) == []
    assert main(["run", str(tiny), "--device", "Small0", "-fitt", "0", "--tokens", "1,2", "-n", "1", "--json"]) == 0
    (upload,) = json.loads(capsys.readouterr().out)["uploads"]
    assert upload["device"] == "Small0" and 0 < upload["MiB"] * 2**20 < 2**20  # a 3-layer model: < 1 MiB


def test_a_tied_embedding_is_counted_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the output matrix tied to the token embeddings (Gemma 3), the weights on the CPU are the file's tensors
    (gguf-py's list of them), each once: the output layer reads token_embd.weight in place."""
    from gguf import GGUFReader

    cfg = CFG.with_(tied_output=True, n_vocab=512)
    path = write_model(tmp_path / "tied.gguf", cfg, random_weights(cfg, 3), "f32")
    in_file = GGUFReader(str(path)).tensors
    assert "output.weight" not in {t.name for t in in_file}
    want = sum(-(-int(t.n_bytes) // 64) * 64 for t in in_file)  # each padded to 64 bytes, as placed
    assert main(["run", str(path), "--device", "CPU", "--tokens", "1,2", "-n", "1", "--json"]) == 0
    (cpu,) = json.loads(capsys.readouterr().out)["devices"]
    assert round(cpu["weights_MB"] * 2**20) == pytest.approx(want, abs=2**20 * 1e-3)
    assert main(["plan", str(path), "--device", "CPU", "--json"]) == 0
    weights = {w["name"]: w for w in json.loads(capsys.readouterr().out)["weights"]}
    assert weights["output.weight"]["MB"] == 0 and weights["token_embd.weight"]["MB"] > 0
