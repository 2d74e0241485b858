"""``ggml-core test-ops`` (test / perf / support, console / json / csv, -j) and the docs generator."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

import pytest

import ggml_core.testing
from ggml_core.cli import main
from ggml_core.cli.test_ops import FIELDS
from ggml_core.testing import all_op_names, opsdocs, select


@pytest.fixture(autouse=True)
def _need_cpu() -> None:
    from ggml_core import DeviceNotFoundError, get_device

    try:
        get_device("CPU")
    except DeviceNotFoundError:
        pytest.skip("the ggml-cpu plugin is not installed")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(["test-ops", *argv, "--progress", "off"])
    return rc, capsys.readouterr().out


ADD_ONE = r"ADD\(type=f32,ne=\[10,5,4,3\],nr=\[1,1,1,1\],layout=cont\)"


def test_csv_has_test_backend_ops_fields(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "-b", "CPU", "-o", "ADD", "--output", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0
    assert tuple(rows[0]) == FIELDS
    assert len(rows) == len(select(ops="ADD"))
    assert {r["op_name"] for r in rows} == {"ADD"}
    assert all(r["passed"] == "yes" and r["test_mode"] == "test" and r["backend_name"] == "CPU" for r in rows)


def test_console_layout(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "-b", "CPU", "-p", ADD_ONE)
    assert rc == 0
    assert "Backend 1/1: CPU" in out and "Device description:" in out and "Reference: numpy" in out
    assert "  ADD(type=f32,ne=[10,5,4,3],nr=[1,1,1,1],layout=cont): OK [CPU]" in out
    assert "1/1 tests passed" in out and "Backend CPU: OK" in out and "1/1 backends passed" in out


def test_a_failing_case_fails_the_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    good = select(pattern=ADD_ONE)[0]
    bad = dataclasses.replace(good, reference=lambda a, b: a - b)
    monkeypatch.setattr(ggml_core.testing, "select", lambda **kw: [bad])
    rc, out = _run(capsys, "-b", "CPU")
    assert rc == 1
    assert "FAIL: vs numpy: NMSE" in out and "Failing tests:" in out and out.rstrip().endswith("FAIL")


def test_support_lists_every_op(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "support", "-b", "CPU", "--output", "json")
    rows = json.loads(out)
    assert rc == 0
    assert {r["op_name"] for r in rows} == set(all_op_names())
    assert len(all_op_names()) == 101 + 22 + 6
    untested = [r for r in rows if r["error_message"] == "no test case"]
    assert untested and all(not r["supported"] for r in untested)
    assert any(r["op_name"] == "MUL_MAT" and r["supported"] for r in rows)


def test_support_console_says_supported(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "support", "-b", "CPU", "-o", "RMS_NORM")
    assert rc == 0 and ": SUPPORTED [CPU]" in out


def test_perf_reports_time_and_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "perf", "-b", "CPU", "-p", ADD_ONE, "--perf-seconds", "0.01", "--output", "json")
    (row,) = json.loads(out)
    assert rc == 0 and row["test_mode"] == "perf"
    assert row["time_us"] > 0 and row["n_runs"] >= 1 and row["bandwidth_gb_s"] > 0 and row["gflops"] is None


def test_perf_reports_gflops_for_matrix_products(capsys: pytest.CaptureFixture[str]) -> None:
    pattern = r"MUL_MAT\(type_a=f32,type_b=f32,m=16,n=5,k=256,bs=\[1,1\],nr=\[1,1\]\)"
    rc, out = _run(capsys, "perf", "-b", "CPU", "-p", pattern, "--perf-seconds", "0.01")
    assert rc == 0 and "us/run" in out and "GFLOPS" in out


def test_parallel_workers_agree_with_serial(capsys: pytest.CaptureFixture[str]) -> None:
    _, serial = _run(capsys, "-b", "CPU", "-o", "ROPE", "--output", "json")
    _, parallel = _run(capsys, "-b", "CPU", "-o", "ROPE", "--output", "json", "-j", "2")
    assert json.loads(serial) == json.loads(parallel)


def test_list_ops_and_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(capsys, "--list-ops")
    assert rc == 0 and out.split() == all_op_names()
    rc, out = _run(capsys, "--show-coverage")
    assert rc == 0 and "Coverage:" in out and "MUL_MAT" in out


def test_unknown_device_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["test-ops", "-b", "NoSuchDevice0"])
    assert rc == 2 and "NoSuchDevice0" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ docs


def _csv(path: Path, rows: list[tuple[str, str, str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for dev, op, supported, msg in rows:
            w.writerow(
                {
                    "backend_name": dev,
                    "op_name": op,
                    "op_params": "x" if msg == "" else "",
                    "test_mode": "support",
                    "supported": supported,
                    "passed": supported,
                    "error_message": msg,
                }
            )


def test_ops_md_marks_all_some_none(tmp_path: Path) -> None:
    _csv(
        tmp_path / "A.csv",
        [
            ("A", "ADD", "yes", ""),
            ("A", "ADD", "yes", ""),
            ("A", "MUL", "yes", ""),
            ("A", "MUL", "no", ""),
            ("A", "DIV", "no", ""),
            ("A", "ROPE", "no", "no test case"),
        ],
    )
    _csv(
        tmp_path / "CPU.csv",
        [
            ("CPU", "ADD", "yes", ""),
            ("CPU", "ADD", "yes", ""),
            ("CPU", "MUL", "yes", ""),
            ("CPU", "MUL", "yes", ""),
            ("CPU", "DIV", "yes", ""),
        ],
    )
    md = opsdocs.render(sorted(tmp_path.glob("*.csv")))
    assert "| Op | cases | CPU | A |" in md  # the CPU column comes first
    assert "| ADD | 2 | ✅ | ✅ |" in md
    assert "| MUL | 2 | ✅ | 🟡 |" in md
    assert "| DIV | 1 | ✅ | ❌ |" in md
    assert "| ROPE | 0 | ❌ | ❌ |" in md
    assert opsdocs.COMMAND in md and 'id="plugins-testing"' in md and "conformance_suite(" in md


def test_opsdocs_writes_csv_and_markdown(tmp_path: Path) -> None:
    assert opsdocs.main(["--docs-dir", str(tmp_path), "-b", "CPU"]) == 0
    rows = list(csv.DictReader((tmp_path / "ops" / "CPU.csv").open(encoding="utf-8")))
    assert {r["op_name"] for r in rows} == set(all_op_names())
    md = (tmp_path / "ops.md").read_text(encoding="utf-8")
    assert "| MUL_MAT |" in md and "| GELU (unary) |" in md and "| SWIGLU (glu) |" in md
    assert opsdocs.main(["--docs-dir", str(tmp_path), "--from-csv"]) == 0


# ------------------------------------------------------------------------------------------------ pytest plugin


def _pytest(tmp_path: Path, *args: str) -> str:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return proc.stdout + proc.stderr


def test_pytest_option_runs_the_suite_on_a_device(tmp_path: Path) -> None:
    n = len(select(ops="RMS_NORM"))
    out = _pytest(tmp_path, "--ggml-device", "CPU", "--ggml-op", "RMS_NORM")
    assert f"{n} passed" in out, out[-2000:]


def test_a_suite_for_an_absent_device_skips_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "test_dev.py").write_text(
        "from ggml_core.testing import conformance_suite\n"
        "test_conformance = conformance_suite('NoSuchDevice9', ops='ADD1')\n",
        encoding="utf-8",
    )
    out = _pytest(tmp_path, "test_dev.py")
    assert f"{len(select(ops='ADD1'))} skipped" in out and "NoSuchDevice9 is not available" in out, out[-2000:]


def test_a_suite_names_each_case_and_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "test_dev.py").write_text(
        "import dataclasses\n"
        "from ggml_core import testing\n"
        "from ggml_core.testing import _suite\n"
        "case = testing.select(ops='ADD1')[0]\n"
        "bad = dataclasses.replace(case, reference=lambda a, b: a)\n"
        "_suite.select = lambda ops=None, pattern=None: [bad]\n"
        "test_conformance = _suite.conformance_suite('CPU')\n",
        encoding="utf-8",
    )
    out = _pytest(tmp_path, "test_dev.py")
    assert "1 failed" in out and "test_conformance[ADD1(" in out and "NMSE" in out, out[-2000:]


def test_op_filter_takes_full_case_names_with_commas(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = select(ops="ADD")[0].name, select(ops="MUL_MAT")[3].name
    rc, out = _run(capsys, "-b", "CPU", "-o", f"{a},{b}", "--output", "json")
    assert rc == 0 and [f"{r['op_name']}({r['op_params']})" for r in json.loads(out)] == [a, b]
