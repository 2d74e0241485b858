"""The ggml-core command line: devices, plugins, argument errors."""

from __future__ import annotations

import json

import pytest

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
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


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
    ],
)
def test_test_ops_arguments_are_checked_before_any_case_runs(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_test_ops_unknown_device_fails_before_any_case_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-ops", "-b", "CPUX", "-o", "ADD"]) == 2
    out = capsys.readouterr()
    assert "no device named 'CPUX'; did you mean 'CPU'?" in out.err and out.out == ""
