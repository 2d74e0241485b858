"""The hostile-plugin suite: one throw-away plugin package per failure class, installed beside the first-party ones.

Each case is written as a real installed distribution (package + ``*.dist-info`` with ``entry_points.txt``) into its
own target directory and exercised in a fresh interpreter: ``devices``, ``devices --json``, ``plugins``,
``plugins --json`` and ``run --device CPU`` must all succeed, the first-party CPU device must still be there, and
the culprit must be named in a recorded problem that every listing shows. Cases whose device is accepted and
misbehaves later also run ``test-ops`` (and ``run`` on that device, which must fail with a one-line error).
Two cases go through ``pip install`` and the real ``ggml-core`` entry in separate processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hostile_plugins.cases import CASES, PREAMBLE, REGISTER, Case, install
from plugin_packages import pip_install, plugin_package

DRIVER = Path(__file__).parents[1] / "hostile_plugins" / "driver.py"
RUN_CPU = ["run", "--device", "CPU", "-n", "1", "--temp", "0", "--no-warmup", "--tokens", "1,2", "--json"]
BASE = [["devices"], ["devices", "--json"], ["plugins"], ["plugins", "--json"], RUN_CPU]


def _env(site: Path, cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    env["GGML_CORE_CACHE"] = str(cache)
    env.update(extra or {})
    return env


def _commands(case: Case) -> list[list[str]]:
    cmds = list(BASE)
    if case.test_ops:
        cmds.append(["test-ops", "-o", "SQR", "-q", "--progress", "off"])
    if case.run_error:
        cmds.append(["run", "--device", "Hostile0", "-n", "1", "--no-warmup", "--tokens", "1,2", "--json"])
    return cmds


def _run_case(case: Case, root: Path, cache: Path) -> list[dict[str, Any]]:
    site = root / case.id
    install(case, site)
    spec, out = root / f"{case.id}.commands.json", root / f"{case.id}.results.json"
    spec.write_text(json.dumps(_commands(case)))
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(spec), str(out)],
        capture_output=True,
        text=True,
        env=_env(site, cache, case.env),
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or not out.exists():
        return [{"argv": ["<driver>"], "rc": proc.returncode, "out": proc.stdout, "err": proc.stderr, "exc": "died"}]
    results: list[dict[str, Any]] = json.loads(out.read_text())
    return results


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for every case, holding the embedded default model (written once, here)."""
    cache = tmp_path_factory.mktemp("cache")
    code = "from ggml_core.models.default_model import write_default_model; write_default_model()"
    subprocess.run([sys.executable, "-c", code], env=_env(cache, cache), check=True, timeout=300)
    return cache


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> dict[str, list[dict[str, Any]]]:
    """Every case, two at a time (one interpreter each)."""
    root = tmp_path_factory.mktemp("hostile")
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = pool.map(lambda c: (c.id, _run_case(c, root, cache)), CASES)
        return dict(done)


def test_there_are_at_least_thirty_failure_classes() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def _by_argv(res: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {" ".join(r["argv"]): r for r in res}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_host_survives(case: Case, results: dict[str, list[dict[str, Any]]]) -> None:
    res = _by_argv(results[case.id])
    assert "<driver>" not in res, res["<driver>"]
    for argv in BASE:
        r = res[" ".join(argv)]
        assert r["exc"] is None, f"{argv}: an exception escaped:\n{r['exc']}"
        assert r["rc"] == 0, f"{argv}: exit code {r['rc']}\n{r['out']}\n{r['err']}"
        assert "Traceback" not in r["err"], r["err"]
    listing = json.loads(res["devices --json"]["out"])  # parseable even when a plugin prints at import
    devices = {d["name"]: d for d in listing["devices"]}
    assert devices["CPU"]["type"] == "CPU" and devices["CPU"]["backend"] == "CPU"
    assert {b["name"]: b for b in listing["backends"]}["CPU"]["plugin"] == "cpu"  # the first-party CPU, kept
    for name in case.listed:
        assert name in devices, f"{name} missing from {list(devices)}"
    for name in case.absent:
        assert name not in devices, f"{name} should have been left out: {list(devices)}"
    run = json.loads(res[" ".join(RUN_CPU)]["out"])
    assert [d["name"] for d in run["devices"]] == ["CPU"] and len(run["tokens"]) == 1
    if case.expect and not case.test_ops:
        _assert_culprit_named(case, res, listing)
    if case.test_ops:
        r = res["test-ops -o SQR -q --progress off"]
        assert r["exc"] is None and "Traceback" not in r["err"], r["exc"] or r["err"]
        assert r["rc"] in (0, 1), r["out"] + r["err"]  # 1: the hostile device fails its cases, reported as FAIL
        assert "Backend CPU: OK" in r["out"]
        if case.expect:  # found while running: shown by test-ops
            assert case.plugin in r["err"] and case.expect in r["err"], r["err"]
    if case.run_error:
        r = res["run --device Hostile0 -n 1 --no-warmup --tokens 1,2 --json"]
        assert r["exc"] is None and r["rc"] == 2, r
        assert r["err"].count("\n") == 1 and case.run_error in r["err"] and "Hostile0" in r["err"], r["err"]


def _assert_culprit_named(case: Case, res: dict[str, dict[str, Any]], listing: dict[str, Any]) -> None:
    """The problem names the culprit plugin and says what is wrong: in both listings and their JSON, once."""
    for argv in ("devices", "plugins"):
        lines = [ln for ln in res[argv]["out"].splitlines() if case.plugin in ln and case.expect in ln]
        assert lines and len(set(lines)) == len(lines), f"{argv} should show each problem once:\n{res[argv]['out']}"
    assert any(p["plugin"] == case.plugin and case.expect in p["text"] for p in listing["problems"]), listing
    plugins = {p["name"]: p for p in json.loads(res["plugins --json"]["out"])}
    assert any(case.expect in p["text"] for p in plugins[case.plugin]["problems"]), plugins[case.plugin]


# ------------------------------------------------------------------------------------------------ separate processes


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_strict_mode_raises_on_a_recorded_problem(tmp_path: Path, cache: Path) -> None:
    case = next(c for c in CASES if c.id == "memory_raises")
    install(case, tmp_path / "site")
    proc = _cli(_env(tmp_path / "site", cache, {"GGML_STRICT_PLUGINS": "1"}), "devices")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "aaa_memory_raises" in proc.stderr and "driver gone" in proc.stderr


def test_isolated_probe_names_a_plugin_that_exits_the_interpreter(tmp_path: Path, cache: Path) -> None:
    """What in-process isolation cannot survive (os._exit, a hang, a non-daemon thread), named by --isolated."""
    exiting = Case("os_exit", "import os\nos._exit(7)")
    hanging = Case("gil_hang", "time.sleep(3600)")
    lingering = Case(
        "thread",
        "import threading\nthreading.Thread(target=time.sleep, args=(3600,), daemon=False).start()\n" + REGISTER,
    )
    site = tmp_path / "site"
    for case in (exiting, hanging, lingering):
        install(case, site)
    proc = _cli(_env(site, cache), "plugins", "--isolated", "--timeout", "20")
    assert proc.returncode == 0, proc.stderr
    lines = {ln.split(":")[0].strip(): ln for ln in proc.stdout.splitlines() if ":" in ln}
    assert "CRASHED" in lines["aaa_os_exit"] and "exit code 7" in lines["aaa_os_exit"], proc.stdout
    assert "HUNG" in lines["aaa_gil_hang"] and "no answer" in lines["aaa_gil_hang"], proc.stdout
    assert "HUNG" in lines["aaa_thread"] and "did not exit" in lines["aaa_thread"], proc.stdout
    assert "loaded in a child process (CPU)" in lines["cpu"], proc.stdout


def test_pip_installed_impostor_cpu_and_cpu_registry_adder(tmp_path: Path, cache: Path) -> None:
    """Through pip and the real CLI: a plugin named aaa_* claiming "CPU" and adding a device to the CPU registry."""
    code = PREAMBLE + textwrap.dedent("""
        @hookimpl
        def ggml_register_backends(register):
            d = Dev("CPU")
            d.type = DeviceType.CPU
            register(make_reg(d, name="Evil"))

        @hookimpl
        def ggml_register_devices(reg, register):
            if reg.name == "CPU":
                register(Dev("CPUExtra0"))
        """)
    target = tmp_path / "site"
    pip_install(target, plugin_package(tmp_path, "evil", code, entry="aaa_evil"))
    env = _env(target, cache)
    listing = _cli(env, "devices", "--json")
    assert listing.returncode == 0, listing.stderr
    out = json.loads(listing.stdout)
    devices = {d["name"]: d for d in out["devices"]}
    assert devices["CPU"]["description"] != "a hostile test device" and devices["CPU"]["backend"] == "CPU"
    assert "CPUExtra0" in devices
    assert any(
        p["plugin"] == "aaa_evil" and "reserved for the first-party distribution ggml-cpu" in p["text"]
        for p in out["problems"]
    )
    text = _cli(env, "plugins")
    assert text.returncode == 0 and "aaa_evil" in text.stdout and "reserved" in text.stdout, text.stdout
    run = _cli(env, *RUN_CPU)
    assert run.returncode == 0, run.stderr
    assert [d["name"] for d in json.loads(run.stdout)["devices"]] == ["CPU"]


def test_a_real_ctrl_c_still_interrupts_while_a_plugin_loads(tmp_path: Path, cache: Path) -> None:
    """KeyboardInterrupt raised by plugin code is the plugin's failure (see the cases); a real SIGINT still stops."""
    started = tmp_path / "started"
    case = Case("slow_import", f"open({str(started)!r}, 'w').close()\ntime.sleep(3600)")
    install(case, tmp_path / "site")
    env = _env(tmp_path / "site", cache, {"GGML_PLUGIN_TIMEOUT": "0"})  # no deadline: only Ctrl-C ends the wait
    proc = subprocess.Popen(
        [sys.executable, "-m", "ggml_core.cli", "devices"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        for _ in range(1200):  # the plugin runs in its worker thread once the file exists
            if started.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert started.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.strip() == "interrupted", (proc.returncode, out, err)
