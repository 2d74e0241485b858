"""The summary table of device-check.sh: steps, test counts (conformance apart), failures, benchmark ratios.

Usage: ``python device_check_summary.py OUT_DIR STEPS_TSV`` (prints the table; device-check.sh saves it as
``summary.txt``). Reads ``env.txt``, ``pytest.xml`` and ``bench.json`` from OUT_DIR when present.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any

TARGET_F16 = 0.7
TARGET_MV = 0.6


def _tests(xml: Path) -> list[str]:
    if not xml.is_file():
        return ["tests: no pytest.xml (the test step did not finish)"]
    root = ET.parse(xml).getroot()
    counts: dict[str, Counter[str]] = {"conformance": Counter(), "gpu": Counter(), "other": Counter()}
    failures: list[str] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        group = "conformance" if "conformance" in name else ("gpu" if ".test_gpu_" in name else "other")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                msg = (child.get("message") or child.text or "").strip().splitlines()
                failures.append(f"  {name}: {msg[0][:200] if msg else child.tag}")
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[group][outcome] += 1
    lines = ["tests (pytest plugins/ggml-cuda/tests):"]
    for group, c in counts.items():
        lines.append(f"  {group:<12} passed {c['passed']:5d}   failed {c['failed']:4d}   skipped {c['skipped']:5d}")
    if failures:
        lines.append(f"failures ({len(failures)}, first 40):")
        lines.extend(failures[:40])
    return lines


def _verdict(ok: bool) -> str:
    return "meets target" if ok else "BELOW TARGET"


def _bench(path: Path) -> list[str]:
    if not path.is_file():
        return ["benchmarks: no bench.json (the benchmark step did not finish)"]
    r: dict[str, Any] = json.loads(path.read_text())
    lines = ["benchmarks (benchmarks/bench_cuda.py; CUDA events, medians):"]
    for wtype, g in r.get("gemm", {}).items():
        target = f"  {_verdict(g['ratio'] >= TARGET_F16)} (>= {TARGET_F16}x)" if wtype == "f16" else ""
        lines.append(
            f"  GEMM 4096^3 {wtype:<4} ours {g['ours_tflops']:7.1f} TFLOP/s   cuBLAS {g['cublas_tflops']:7.1f}"
            f"   ratio {g['ratio']:.2f}x{target}"
        )
    if "copy_gbps" in r:
        lines.append(f"  device copy bandwidth {r['copy_gbps']:.0f} GB/s (read + write)")
    for t, m in r.get("matvec", {}).items():
        lines.append(
            f"  matvec {t:<5} {m['gbps']:7.0f} GB/s = {100 * m['fraction_of_copy']:5.1f} % of copy"
            f"   {_verdict(m['fraction_of_copy'] >= TARGET_MV)} (>= {100 * TARGET_MV:.0f} %)"
        )
    for key, m in r.get("model", {}).items():
        if "error" in m:
            lines.append(f"  model {key:<22} FAILED: {m['error'][:160]}")
        else:
            lines.append(
                f"  model {key:<22} pp128 {m['pp128_tps']:9.1f} tok/s   tg {m['tg_tps']:8.1f} tok/s"
                f"   ({m['splits']} splits)"
            )
    return lines


def main(argv: list[str]) -> int:
    out, steps = Path(argv[1]), Path(argv[2])
    env = (out / "env.txt").read_text(errors="replace").splitlines() if (out / "env.txt").is_file() else []
    gpu = next((ln for ln in env if ln.startswith("GPU ")), "GPU: unknown")
    lines = ["ggml-cuda device check", gpu, "", f"{'step':<52} {'result':<26} seconds"]
    for row in steps.read_text().splitlines()[1:]:
        name, result, secs = ([*row.split("\t"), "", "", ""])[:3]
        lines.append(f"{name:<52} {result:<26} {secs}")
    lines += ["", *_tests(out / "pytest.xml"), "", *_bench(out / "bench.json")]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
