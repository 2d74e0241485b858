"""The ggml-core command line: devices, plugins, argument errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_errors import cli_error

from ggml_core.cli import main


def test_devices_json_lists_the_cpu_with_props(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cpu = {d["name"]: d for d in out["devices"]}["CPU"]
    assert cpu["type"] == "CPU" and cpu["memory_total"] > 0 and cpu["caps"]["buffer_from_host_ptr"] is True
    assert cpu["buffer_types"][0]["is_host"] is True and cpu["buffer_types"][0]["alignment"] >= 32
    assert {"name": "CPU", "plugin": "cpu"}.items() <= {b["name"]: b for b in out["backends"]}["CPU"].items()


def test_devices_check_passes_on_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["devices", "--check"]) == 0
    assert "check: PASS" in capsys.readouterr().out


def test_plugins_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    text = capsys.readouterr().out
    assert "cpu: loaded" in text and "ggml_register_backends" in text
    assert main(["plugins", "--json"]) == 0
    cpu = {p["name"]: p for p in json.loads(capsys.readouterr().out)}["cpu"]
    assert cpu["distribution"] == "ggml-cpu" and cpu["backends"][0]["name"] == "CPU"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["devces"], "unknown command 'devces'; did you mean 'devices'?"),
        (["devices", "--chek"], "'--chek' (did you mean '--check'?)"),
    ],
)
def test_argument_errors_are_one_line_with_the_fix(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert expected in cli_error(capsys, argv, at_parse=True)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("ggml-core ")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["test-ops", "-j", "0"], "argument -j/--jobs: must be an integer in 1..256, got 0"),
        (["test-ops", "-p", "("], "argument -p/--pattern: invalid regular expression '(': missing )"),
        (["test-ops", "perf", "--perf-seconds", "0"], "argument --perf-seconds: must be a finite number in (0.0, 3600"),
        (["test-ops", "perf", "--perf-seconds", "nan"], "argument --perf-seconds: must be a finite number"),
        (["test-ops", "-b", ","], "argument -b/--backend: expected comma-separated names, got ','"),
        (["rpc-server", "--port", "70000"], "argument --port/-p: must be an integer in 0..65535, got 70000"),
        (["rpc-server", "--threads", "0"], "argument --threads/-t: must be an integer in 1..1024, got 0"),
        (["rpc-server", "--max-clients", "0"], "argument --max-clients: must be an integer in 1..4096, got 0"),
        (["rpc-server", "--max-memory", "nan"], "argument --max-memory: must be a finite number in (0.0, inf]"),
        (["rpc-server", "--idle-timeout", "-1"], "argument --idle-timeout: must be a finite number in (0.0, inf]"),
    ],
)
def test_arguments_are_checked_before_anything_runs(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert expected in cli_error(capsys, argv, at_parse=True)


def test_test_ops_unknown_device_fails_before_any_case_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "-b", "CPUX", "-o", "ADD"]) == 2
    out = capsys.readouterr()
    assert "no device named 'CPUX'; did you mean 'CPU'?" in out.err and out.out == ""


def test_rpc_server_cache_dir_and_bind_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["rpc-server", "--cache-dir", str(afile)])
    assert exit_info.value.code == 2
    assert f"argument --cache-dir/-c: '{afile}' exists and is not a directory" in capsys.readouterr().err
    pytest.importorskip("ggml_rpc", reason="the bind check needs the ggml-rpc plugin")
    # 203.0.113.9 is TEST-NET-3 (RFC 5737): never an address of this machine, so the bind fails
    assert main(["rpc-server", "--host", "203.0.113.9", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "error: cannot listen on 203.0.113.9:0: " in err and "Traceback" not in err
