"""``ggml-core bench``: prompt and generation speed as llama.cpp's ``llama-bench`` measures it.

Every combination of the list flags (models, devices, -ngl, threads, flash attention, cache type) is loaded once and
runs each test: ``ppN`` (an N-token prompt), ``tgN`` (N single-token decode steps) and ``ppN+tgM``. A test is run
once untimed first (kernel compilation, graph planning and weight repacking happen there), then ``-r`` times timed,
each time from an empty cache; the table gives the mean and the sample standard deviation of the tokens per second.
Tokens are random ids from a seeded generator, as llama-bench's.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ggml_core.cli._llama_args import KV_TYPES
from ggml_core.cli._placement_args import n_gpu_layers
from ggml_core.cli.args import INT32_MAX, MAX_THREADS, input_file, int_in, int_list

__all__ = ["FIELDS", "BenchResult", "add_parser", "format_results", "run"]

#: the fields of a result, as llama-bench names them in its csv, json and jsonl output
FIELDS = (
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "devices",
    "n_threads",
    "n_gpu_layers",
    "split_mode",
    "tensor_split",
    "type_k",
    "type_v",
    "flash_attn",
    "n_batch",
    "n_prompt",
    "n_gen",
    "test_time",
    "avg_ns",
    "stddev_ns",
    "avg_ts",
    "stddev_ts",
    "samples_ns",
    "samples_ts",
)


def _pairs(text: str) -> list[tuple[int, int]]:
    """``-pg 512,128``: one prompt,generation pair."""
    parse = int_in(1, INT32_MAX)
    parts = text.split(",")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected PROMPT,GEN such as 512,128, got {text!r}")
    return [(parse(parts[0]), parse(parts[1]))]


def _device_lists(text: str) -> list[tuple[str, ...]]:
    """``-dev A,B/C``: runs on A, then on B and C together (llama-bench's '/')."""
    out = [tuple(d.strip() for d in item.split("/") if d.strip()) for item in text.split(",") if item.strip()]
    if not out or any(not d for d in out):
        raise argparse.ArgumentTypeError(f"expected devices such as CPU,OpenCL0 or OpenCL0/CPU, got {text!r}")
    return out


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="measure prompt and generation speed (as llama-bench)",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", "-m", action="append", type=input_file, help="GGUF file; repeat for several (default: the "
        "embedded default model)"
    )  # fmt: skip
    p.add_argument(
        "--n-prompt", "-p", action="append", type=int_list(0, INT32_MAX, "prompt size"), help="prompt sizes, "
        "e.g. 128,512 (default 512; 0 = no prompt test)"
    )  # fmt: skip
    p.add_argument(
        "--n-gen", "-n", action="append", type=int_list(0, INT32_MAX, "generation size"), help="generation "
        "sizes (default 128; 0 = no generation test)"
    )  # fmt: skip
    p.add_argument("-pg", action="append", type=_pairs, metavar="PROMPT,GEN", help="a prompt then a generation")
    p.add_argument("--repetitions", "-r", type=int_in(1, 10_000), default=5, help="timed runs per test (default 5)")
    p.add_argument("--threads", "-t", action="append", type=int_list(1, MAX_THREADS, "thread count"))
    p.add_argument("--n-gpu-layers", "-ngl", action="append", type=_ngl_list, help="layers to offload, e.g. 0,99")
    p.add_argument(
        "--device", "-dev", action="append", type=_device_lists, help="devices, e.g. CPU,OpenCL0 (a run each) "
        "or OpenCL0/CPU (one run over both)"
    )  # fmt: skip
    p.add_argument(
        "--split-mode", "-sm", action="append", type=_split_modes, help="none, layer or auto; e.g. layer,auto"
    )
    p.add_argument(
        "--tensor-split", "-ts", action="append", type=_tensor_splits, help="shares per device, e.g. 3/1 (several: "
        "3/1,1/1)"
    )  # fmt: skip
    p.add_argument("--flash-attn", "-fa", action="append", type=int_list(0, 1, "flash attention"), help="0,1")
    p.add_argument(
        "--cache-type-k", "-ctk", action="append", type=_kv_types, help=f"K cache types ({', '.join(KV_TYPES)})"
    )
    p.add_argument("--cache-type-v", "-ctv", action="append", type=_kv_types, help="V cache types (quantized: -fa 1)")
    p.add_argument("--batch-size", "-b", type=int_in(1, INT32_MAX), default=512, help="prompt tokens per batch")
    p.add_argument("--output", "-o", choices=["md", "csv", "json", "jsonl"], default="md", help="output format")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="seed of the random token ids")
    p.set_defaults(func=run)


def _ngl_list(text: str) -> list[int | None]:
    return [n_gpu_layers(x) for x in text.split(",") if x.strip()]


def _split_modes(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in ("none", "layer", "auto")]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"split modes are none, layer and auto, got {text!r}")
    return out


def _tensor_splits(text: str) -> list[tuple[float, ...]]:
    """``-ts 3/1,1/1``: each item a '/'-separated list of shares (as llama-bench)."""
    from ggml_core.cli.args import shares

    return [tuple(shares(item.replace("/", ","))) for item in text.split(",") if item.strip()]


def _kv_types(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in KV_TYPES]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"cache types are {', '.join(KV_TYPES)}, got {text!r}")
    return out


def _flat(lists: Sequence[Sequence[Any]] | None, default: Sequence[Any]) -> list[Any]:
    if not lists:
        return list(default)
    return [x for sub in lists for x in sub]


@dataclass(frozen=True)
class _Test:
    n_prompt: int
    n_gen: int

    @property
    def name(self) -> str:
        if self.n_prompt and self.n_gen:
            return f"pp{self.n_prompt}+tg{self.n_gen}"
        return f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"


@dataclass
class BenchResult:
    """One test on one configuration: its samples and their statistics (llama-bench's fields)."""

    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, base: dict[str, Any], test: _Test, samples_ns: list[int]) -> BenchResult:
        """Mean and sample standard deviation of the times and of the rates (tokens per second of each sample)."""
        n_tokens = test.n_prompt + test.n_gen
        ts = [n_tokens * 1e9 / max(ns, 1) for ns in samples_ns]
        values = dict(base)
        values.update(
            n_prompt=test.n_prompt,
            n_gen=test.n_gen,
            avg_ns=int(statistics.fmean(samples_ns)),
            stddev_ns=int(statistics.stdev(samples_ns)) if len(samples_ns) > 1 else 0,
            avg_ts=statistics.fmean(ts),
            stddev_ts=statistics.stdev(ts) if len(ts) > 1 else 0.0,
            samples_ns=samples_ns,
            samples_ts=ts,
        )
        return cls(values)


def run(args: argparse.Namespace) -> int:
    """Measure every combination and print the results."""
    try:
        results = list(_measure_all(args, on_result=_progress))
    except BrokenPipeError:
        raise  # the CLI's main ends quietly
    except (ValueError, RuntimeError, OSError) as exc:  # the project's errors are ValueErrors too: main prints them
        from ggml_core._errors import GGMLError

        if isinstance(exc, GGMLError):
            raise
        print(f"ggml-core bench: error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(format_results(results, args.output))
    return 0


def _progress(r: BenchResult) -> None:
    v = r.values
    print(f"  {Path(v['model_filename']).name} {v['devices']} {_test_name(v)}: {v['avg_ts']:.2f} t/s", file=sys.stderr)


def _test_name(v: dict[str, Any]) -> str:
    return _Test(v["n_prompt"], v["n_gen"]).name


def _tests(args: argparse.Namespace) -> list[_Test]:
    out = [_Test(p, 0) for p in _flat(args.n_prompt, [512]) if p > 0]
    out += [_Test(0, n) for n in _flat(args.n_gen, [128]) if n > 0]
    out += [_Test(p, n) for p, n in _flat(args.pg, [])]
    if not out:
        raise ValueError("no test to run: every -p and -n is 0 and no -pg is given")
    return out


def _measure_all(args: argparse.Namespace, on_result: Callable[[BenchResult], None]) -> Any:
    from ggml_core.cli._model_args import resolve_model_path

    tests = _tests(args)
    if args.model:
        models = list(args.model)
    else:
        path, _ = resolve_model_path(argparse.Namespace(model=None))
        models = [path]
    combos = itertools.product(
        models,
        _flat(args.device, [None]),
        _flat(args.n_gpu_layers, [None]),
        _flat(args.split_mode, [None]),
        _flat(args.tensor_split, [None]),
        _flat(args.threads, [None]),
        _flat(args.flash_attn, [0]),
        _flat(args.cache_type_k, ["f16"]),
        _flat(args.cache_type_v, ["f16"]),
    )
    for path, devices, ngl, sm, ts, threads, fa, ctk, ctv in combos:
        config = _Config(devices, ngl, sm, ts, threads, bool(fa), ctk, ctv)
        for r in _measure(args, Path(path), config, tests):
            on_result(r)
            yield r


@dataclass(frozen=True)
class _Config:
    """One combination of the list flags."""

    devices: tuple[str, ...] | None
    ngl: int | None
    split_mode: str | None
    tensor_split: tuple[float, ...] | None
    threads: int | None
    flash_attn: bool
    type_k: str
    type_v: str

    def request(self) -> Any:
        """The PlacementRequest: a hand-chosen placement is split by layer (as run's), else --split-mode auto."""
        from ggml_core.models import PlacementRequest

        hand = self.devices is not None or self.ngl is not None or self.tensor_split is not None
        mode = self.split_mode or ("layer" if hand else "auto")
        devices = list(self.devices) if self.devices else None
        return PlacementRequest(devices=devices, n_gpu_layers=self.ngl, split_mode=mode, tensor_split=self.tensor_split)


def _measure(args: argparse.Namespace, path: Path, config: _Config, tests: list[_Test]) -> list[BenchResult]:
    import numpy as np

    from ggml_core.models import Model, ModelParams, open_gguf

    f = open_gguf(path)
    n_ctx = max(t.n_prompt + t.n_gen for t in tests)
    params = ModelParams(
        placement=config.request(),
        n_ctx=(n_ctx + 255) // 256 * 256,
        type_k=config.type_k,
        type_v=config.type_v,
        flash_attn=config.flash_attn,
        batch_size=args.batch_size,
        n_threads=config.threads,
        progress=False,
    )
    rng = np.random.default_rng(args.seed)
    out = []
    with Model.load(f, params) as m:
        used = [s.name for s in m.placement.shares if s.layers or s.has_output or s.has_input]
        base = {
            "model_filename": str(path),
            "model_type": f"{m.hp.arch} {_count(_n_params(f))}",
            "model_size": sum(t.nbytes for t in f.tensors),
            "model_n_params": _n_params(f),
            "devices": "/".join(used),
            "n_threads": config.threads or 0,
            "n_gpu_layers": _offloaded(m),
            "split_mode": m.placement.split_mode,
            "tensor_split": "/".join(f"{x:g}" for x in config.tensor_split) if config.tensor_split else "",
            "type_k": config.type_k,
            "type_v": config.type_v,
            "flash_attn": config.flash_attn,
            "n_batch": args.batch_size,
            "test_time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        n_vocab = m.hp.n_vocab
        for test in tests:
            _one(m, test, rng, n_vocab)  # untimed: compilation, planning and first-touch costs stay out
            samples = [_one(m, test, rng, n_vocab) for _ in range(args.repetitions)]
            out.append(BenchResult.from_samples(base, test, samples))
    return out


def _offloaded(m: Any) -> int:
    """Slots (layers and the output layer) on a device other than the host's CPU."""
    cpu = m.placement.slot_device[-1]
    return sum(1 for slot, dev in m.placement.slot_device.items() if slot >= 0 and dev is not cpu)


def _one(m: Any, test: _Test, rng: Any, n_vocab: int) -> int:
    """One run of a test from an empty cache; nanoseconds."""
    prompt = rng.integers(0, n_vocab, test.n_prompt).tolist()
    gen = rng.integers(0, n_vocab, test.n_gen).tolist()
    m.reset()
    t0 = time.perf_counter_ns()
    if prompt:
        m.process_prompt(prompt)
    for tok in gen:
        m.decode([tok])
    elapsed = time.perf_counter_ns() - t0
    m.reset()
    return elapsed


def _n_params(f: Any) -> int:
    total = 0
    for t in f.tensors:
        n = 1
        for d in t.ne:
            n *= int(d)
        total += n
    return total


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def format_results(results: Sequence[BenchResult], fmt: str) -> str:
    """The results as llama-bench prints them: a markdown table, csv, a json array or json lines."""
    rows: list[dict[str, Any]] = [{k: r.values.get(k) for k in FIELDS} for r in results]
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: (";".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()})
        return buf.getvalue()
    # the columns llama-bench shows, the split ones only when the rows differ in them
    columns: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("model", lambda v: str(v["model_type"])),
        ("size", lambda v: _size(v["model_size"])),
        ("params", lambda v: _count(v["model_n_params"])),
        ("devices", lambda v: str(v["devices"])),
        ("threads", lambda v: str(v["n_threads"] or "auto")),
        ("ngl", lambda v: str(v["n_gpu_layers"])),
        ("sm", lambda v: str(v["split_mode"])),
        ("ts", lambda v: str(v["tensor_split"])),
        ("type_k", lambda v: str(v["type_k"])),
        ("type_v", lambda v: str(v["type_v"])),
        ("fa", lambda v: str(int(v["flash_attn"]))),
        ("test", _test_name),
        ("t/s", lambda v: f"{v['avg_ts']:.2f} ± {v['stddev_ts']:.2f}"),
    ]
    columns = [(h, c) for h, c in columns if h not in ("sm", "ts") or len({c(v) for v in rows}) > 1]
    if all(v["type_v"] == "f16" for v in rows):  # as llama-bench: type_v shown when not the default
        columns = [(h, c) for h, c in columns if h != "type_v"]
    lines = ["| " + " | ".join(h for h, _ in columns) + " |"]
    lines.append("|" + "|".join("---:" if h == "t/s" else "---" for h, _ in columns) + "|")
    lines += ["| " + " | ".join(c(v) for _, c in columns) + " |" for v in rows]
    return "\n".join(lines) + "\n"
