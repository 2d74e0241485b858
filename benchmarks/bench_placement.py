"""The default ``ggml-core run`` placement against the best placement chosen by hand, measured in the same run.

Each placement runs ``ggml-core run MODEL --tokens ... -n N --temp 0 --json`` in a fresh process (what a user
types), the placements alternating round by round so that the machine's load hits them alike, after one round that
is not counted (the file in the page cache, kernels compiled and their caches written for every placement). A
placement's time is its prompt time plus its generation time (warm-up excluded, as the CLI times them); medians over
the rounds. The
hand-chosen placements: ``--device none`` (the CPU alone), ``--device OpenCL0`` (every layer on OpenCL, PoCL on a
machine without a GPU), and splits between them (``-ngl`` half and a quarter of the slots on OpenCL0). Printed:
each placement's prompt and generation tokens/s and time, and ``default / best`` as a speed ratio (1.0: the default
is the best; the expectation is >= 0.9). Prints the CPU model and load average, which move every number here.

The model: Gemma 3 270M Q4_K_M from the tests' cache when present (tests/models/test_models_gemma3_real.py fetches it),
else the embedded default model. Usage: ``python benchmarks/bench_placement.py [--rounds 3] [--n-predict 32]
[--model FILE] [--json PATH]``; the results go to ``benchmarks/results/bench_placement.json`` as JSON (a bare
``--json`` prints them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _util import add_json_option, machine, write_json

GEMMA = Path.home() / ".cache" / "ggml-core" / "gemma3-270m" / "gemma-3-270m-q4_k_m.gguf"
#: 64 prompt tokens of the model's vocabulary (small ids exist in every vocabulary, the default model's 613 too)
TOKENS = ",".join(str(2 + (i * 37) % 600) for i in range(64))


def _has_opencl() -> bool:
    code = "from ggml_core.backend.registry import get_registry as g; g().get_device('OpenCL0')"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def _run(model: list[str], flags: list[str], n_predict: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "ggml_core.cli", "run", *model, "--tokens", TOKENS, "-n", str(n_predict)]
    argv += ["--temp", "0", "--json", "--no-progress", *flags]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(flags) or 'default'}: {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    return {
        "seconds": out["prompt_seconds"] + out["gen_seconds"],
        "pp": out["prompt_tokens_per_s"],
        "tg": out["gen_tokens_per_s"] or 0.0,
        "devices": {d["name"]: d["layer_range"] for d in out["devices"]},
        "split_mode": out["split_mode"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--model", type=Path, default=None)
    add_json_option(ap, "bench_placement")
    args = ap.parse_args()
    model_path = args.model or (GEMMA if GEMMA.exists() else None)
    model = [str(model_path)] if model_path else []
    info = machine()
    print(f"CPU: {info['cpu']} ({info['cores']} cores), load average {info['load_average']}")
    print(f"model: {model_path or 'the embedded default model'}; 64 prompt tokens, {args.n_predict} generated")
    placements: dict[str, list[str]] = {"default": [], "--device none": ["--device", "none"]}
    if _has_opencl():
        n_slots = 19 if model_path == GEMMA else 5
        placements["--device OpenCL0"] = ["--device", "OpenCL0"]
        for part in (n_slots // 2, n_slots // 4):
            placements[f"--device OpenCL0 -ngl {part}"] = ["--device", "OpenCL0", "-ngl", str(part)]
    else:
        print("no OpenCL0 device: only the CPU placements are compared")
    times: dict[str, list[dict[str, Any]]] = {k: [] for k in placements}
    for name in placements:  # a round not counted: page cache, compiled kernels and tuning caches warm for all
        _run(model, placements[name], 2)
    for r in range(args.rounds):
        order = list(placements) if r % 2 == 0 else list(placements)[::-1]
        for name in order:
            times[name].append(_run(model, placements[name], args.n_predict))
    rows = []
    for name, runs in times.items():
        secs = statistics.median(x["seconds"] for x in runs)
        rows.append(
            {
                "placement": name,
                "seconds": secs,
                "pp_tok_s": statistics.median(x["pp"] for x in runs),
                "tg_tok_s": statistics.median(x["tg"] for x in runs),
                "devices": runs[-1]["devices"],
                "split_mode": runs[-1]["split_mode"],
            }
        )
    hand = [r for r in rows if r["placement"] != "default"]
    best = min(hand, key=lambda r: r["seconds"])
    default = rows[0]
    print(f"{'placement':<28} {'pp tok/s':>9} {'tg tok/s':>9} {'seconds':>8}  where")
    for r in rows:
        where = ", ".join(f"{k}: {v}" for k, v in r["devices"].items())
        print(f"{r['placement']:<28} {r['pp_tok_s']:9.1f} {r['tg_tok_s']:9.1f} {r['seconds']:8.3f}  {where}")
    ratio = best["seconds"] / default["seconds"]
    print(f"default / best hand-chosen ({best['placement']}): {ratio:.2f}x the speed (expected >= 0.9)")
    write_json({"machine": info, "rows": rows, "ratio": ratio, "best": best["placement"]}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
