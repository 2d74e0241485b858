"""Partial-op plugins installed beside the first-party ones leave ``ggml-core run`` working with the CPU's results.

Two plugins are pip-installed into a folder and the CLI runs in a fresh interpreter, as a user's would: the docs'
example plugin (``Example0``: ADD, MUL, SCALE in f32) and ``Tiny0``, a 3-op device built on it that also declines
the no-op ops (NONE and views), as a device written from docs/plugins.md may. Both are GPU-type devices, so the
default placement offloads layers to them; their weights must land only where the consuming op runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from plugin_packages import EXAMPLE, pip_install, plugin_package
from tiny_models import TinyConfig, random_weights, write_model

from ggml_core.models import scheduler_available

pytestmark = pytest.mark.skipif(not scheduler_available(), reason="the scheduler (ggml_core.sched) is not installed")

TOKENS = "1,5,9,3,7,2"


def _tiny_package(where: Path) -> Path:
    return plugin_package(
        where,
        "tiny3",
        textwrap.dedent(
            '''
            """A 3-op device (ADD, MUL, SCALE in f32) that declines every other op, NONE and views included."""
            from ggml_core import API_VERSION, BackendReg, hookimpl
            from ggml_example import SUPPORTED, ExampleBufferType, ExampleDevice, supports


            class TinyDevice(ExampleDevice):
                def __init__(self):
                    super().__init__()
                    self.name, self.description = "Tiny0", "three ops, nothing else"
                    self._buft = ExampleBufferType("Tiny0", self, alignment=32)

                def supports_op(self, op):
                    return op.op in SUPPORTED and supports(op)


            @hookimpl
            def ggml_api_version():
                return API_VERSION


            @hookimpl
            def ggml_register_backends(register):
                register(BackendReg("Tiny", [TinyDevice()], description="a 3-op device"))
            '''
        ),
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("partial")
    target = tmp / "site"
    pip_install(target, EXAMPLE, _tiny_package(tmp))
    return target


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cfg = TinyConfig(n_layer=3)
    return write_model(tmp_path_factory.mktemp("m") / "m.gguf", cfg, random_weights(cfg, 5), "f32")


def _cli(site: Path, *args: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    for k in ("GGML_BACKENDS", "GGML_STRICT_PLUGINS", "GGML_RPC_SERVERS"):
        env.pop(k, None)
    # the example devices report 64 MiB: --fit's default 1024 MiB margin (llama.cpp's) would leave them nothing
    proc = subprocess.run(
        [sys.executable, "-m", "ggml_core.cli", *args, "--fit-target", "0", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout), proc


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("which", ["default model", "gguf file"])
def test_default_run_works_and_matches_the_cpu(site: Path, model: Path, tmp_path: Path, which: str) -> None:
    path = [] if which == "default model" else [str(model)]
    base = ["run", *path, "--tokens", TOKENS, "-n", "3", "--temp", "0", "--kv-type", "f32", "--no-warmup"]
    # -sm layer: llama.cpp's default list and split (the default, --split-mode auto, may leave slow devices out)
    got, _ = _cli(site, *base, "-sm", "layer", "--logits-out", str(tmp_path / "got.npy"))
    ref, _ = _cli(site, *base, "--device", "none", "--logits-out", str(tmp_path / "ref.npy"))
    chosen, _ = _cli(site, *base, "--logits-out", str(tmp_path / "auto.npy"))
    n_slots = sum(d["layers"] for d in ref["devices"]) + 1  # the layers and the output layer
    assert chosen["split_mode"] == "auto" and sum(chosen["auto_split"]["slots"].values()) == n_slots
    assert _rel(np.load(tmp_path / "auto.npy"), np.load(tmp_path / "ref.npy")) < 1e-5
    held = {d["name"]: d for d in got["devices"]}
    # both partial devices really were offload targets and hold weights they can use (the norms' MUL)
    assert {"Example0", "Tiny0"} <= set(held), held
    assert all(held[n]["weights_MB"] > 0 for n in ("Example0", "Tiny0"))
    assert got["n_splits"] > 1 and {d["name"] for d in ref["devices"]} == {"CPU"}
    # the same arithmetic in the same order on the CPU and on numpy behind the devices: float32 rounding
    assert _rel(np.load(tmp_path / "got.npy"), np.load(tmp_path / "ref.npy")) < 1e-5


def test_plan_says_where_each_weight_went_and_why(site: Path, model: Path) -> None:
    out, _ = _cli(site, "plan", str(model), "--device", "Tiny0", "--ctx-size", "64")
    weights = {w["name"]: w for w in out["weights"]}
    q, norm = weights["blk.0.attn_q.weight"], weights["blk.0.attn_norm.weight"]
    assert (norm["device"], norm["buffer_type"]) == ("Tiny0", "Tiny0")
    assert q["device"] == "CPU" and "Tiny0 does not run MUL_MAT" in q["reason"]
    assert weights["token_embd.weight"]["device"] == "CPU"
    # Tiny0 cannot write a KV cache in place (no SET_ROWS): every cache is in host memory
    assert any("cannot write a f16 KV cache" in n for n in out["notes"])
    tiny = next(d for d in out["devices"] if d["name"] == "Tiny0")
    assert tiny["kv_MB"] == 0 and tiny["layers"] == 3


def test_a_device_running_nothing_of_a_layer_gets_none_of_it(site: Path, tmp_path: Path) -> None:
    """With bias-free layers whose norms are f16, Tiny0 (f32 only) runs nothing of them: it holds no layer."""
    cfg = TinyConfig(n_layer=2)
    path = write_model(tmp_path / "q.gguf", cfg, random_weights(cfg, 2), "q8_0")
    out, _ = _cli(site, "plan", str(path), "--device", "Example0", "--ctx-size", "64")
    assert all(w["device"] in ("Example0", "CPU") for w in out["weights"])
    ex = next((d for d in out["devices"] if d["name"] == "Example0"), None)
    norms = [w for w in out["weights"] if w["name"].endswith("norm.weight")]
    assert ex is not None and all(w["device"] == "Example0" for w in norms)
    assert all(w["device"] == "CPU" for w in out["weights"] if w["name"].endswith("attn_q.weight"))
