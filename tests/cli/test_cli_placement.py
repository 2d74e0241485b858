"""The llama.cpp placement flags on the command line: --list-devices, -ngl counting, -ot, --cpu-moe, --n-cpu-moe,
--no-op-offload, --no-kv-offload, each checked against llama.cpp's documented meaning (common/arg.cpp)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core import DeviceNotFoundError, get_registry
from ggml_core.cli import main
from ggml_core.models import Model, ModelParams, PlacementRequest, scheduler_available

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")


def _opencl_or_skip() -> None:
    try:
        get_registry().get_device("OpenCL0")
    except DeviceNotFoundError:
        pytest.skip("no OpenCL0 device (install ggml-opencl and an OpenCL platform such as PoCL)")


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--ctx-size", "64", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_list_devices_as_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--list-devices"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Available devices:"
    names = [d.name for d in get_registry().devices() if d.type.name != "CPU"]
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == (names or ["(none"])  # never the CPU
    for d in get_registry().devices():
        if getattr(d, "host_cpu", False):
            assert any(ln.startswith(f"  {d.name}:") and "used only when named" in ln for ln in lines)


def test_ngl_counts_offload_devices_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`-ngl 2 --device OpenCL0,CPU` offloads 2 slots (the last layer and the output) to OpenCL0."""
    _opencl_or_skip()
    cfg = TinyConfig(n_layer=4)
    path = str(write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 0), "f32"))
    out = _plan(capsys, path, "-ngl", "2", "--device", "OpenCL0,CPU")
    ocl = next(d for d in out["devices"] if d["name"] == "OpenCL0")
    assert ocl["layer_range"] == "layer 3 + output" and ocl["layers"] == 1
    for spelling in ("all", "auto", "-1"):
        every = _plan(capsys, path, "-ngl", spelling, "--device", "OpenCL0")
        assert next(d for d in every["devices"] if d["name"] == "OpenCL0")["layers"] == 4
    none = _plan(capsys, path, "--device", "none")
    assert [d["name"] for d in none["devices"]] == ["CPU"]


def test_cpu_moe_and_n_cpu_moe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _opencl_or_skip()
    cfg = TinyConfig(n_layer=2, n_expert=4, n_expert_used=2)
    path = str(write_model(tmp_path / "moe.gguf", cfg, random_weights(cfg, 1), "f32"))

    def where(*flags: str) -> dict[str, tuple[str, str]]:
        out = _plan(capsys, path, "--device", "OpenCL0", *flags)
        return {w["name"]: (w["device"], w["reason"]) for w in out["weights"]}

    exps = [f"blk.{i}.ffn_{k}_exps.weight" for i in range(2) for k in ("gate", "up", "down")]
    every = where("--cpu-moe")
    assert all(every[n][0] == "CPU" and "--cpu-moe" in every[n][1] for n in exps)
    assert every["blk.0.ffn_gate_inp.weight"][0] == "OpenCL0"  # the router is not an expert
    first = where("--n-cpu-moe", "1")
    assert [n for n in exps if first[n][0] == "CPU"] == exps[:3]
    ot = where("-ot", r"blk\.1\.ffn_up_exps=CPU,attn_q=CPU")
    assert {n for n, (d, _) in ot.items() if d == "CPU" and n != "token_embd.weight"} == {
        "blk.1.ffn_up_exps.weight",
        "blk.0.attn_q.weight",
        "blk.1.attn_q.weight",
    }


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (["-ot", "nobuft"], "is not PATTERN=BUFFER_TYPE"),
        (["-ot", "x=NoSuchBuft"], "unknown buffer type 'NoSuchBuft'"),
        (["--n-cpu-moe", "-3"], "--n-cpu-moe must be >= 0"),
        (["--main-gpu", "5", "-sm", "none", "--device", "none"], "outside"),
    ],
)
def test_bad_flags_are_one_line_errors(flags: list[str], text: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--tokens", "1,2", "-n", "1", *flags])
    err = capsys.readouterr().err.strip()
    assert code == 2 and text in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_no_op_offload_reaches_the_scheduler(tmp_path: Path) -> None:
    cfg = TinyConfig(n_layer=1)
    path = write_model(tmp_path / "m.gguf", cfg, random_weights(cfg, 2), "f32")
    for flag in (True, False):
        params = ModelParams(placement=PlacementRequest(devices=["none"]), n_ctx=32, progress=False, op_offload=flag)
        with Model.load(path, params) as m:
            assert m.executor.sched.op_offload is flag
