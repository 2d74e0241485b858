"""``ggml-core test-ops``: ggml's test-backend-ops — conformance (test), speed (perf) and support of every op.

``test`` runs every case on every device (or ``-b DEVICE``) inside guard bytes and judges it: the CPU device
against numpy references, other devices against the CPU device (``--reference`` changes that). ``perf`` times
each case; ``support`` lists which cases a device supports and every ggml op, tested or not. Output formats:
console (test-backend-ops' layout), json and csv with test-backend-ops' field names. Exit code 1 on any FAIL.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, Final

from ggml_core.backend.interfaces import Device
from ggml_core.cli.args import float_in, int_in, names, regex

__all__ = ["FIELDS", "add_parser", "result_rows", "run", "uncovered_rows"]

#: -j above this is a typo (each worker is a process)
MAX_JOBS: Final = 256
#: --perf-seconds above an hour per case is a typo
MAX_PERF_SECONDS: Final = 3600.0

#: CSV/JSON columns (test-backend-ops' names)
FIELDS: Final = (
    "backend_name",
    "op_name",
    "op_params",
    "test_mode",
    "supported",
    "passed",
    "error_message",
    "time_us",
    "flops",
    "gflops",
    "bandwidth_gb_s",
    "n_runs",
)


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    p = sub.add_parser(
        name,
        help="test, time or list the ops each device supports (ggml's test-backend-ops)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("mode", nargs="?", default="test", choices=("test", "perf", "support"), help="default: test")
    p.add_argument(
        "-b", "--backend", metavar="DEVICE[,DEVICE]", type=names, help="only these devices (default: every device)"
    )
    p.add_argument("-o", "--op", metavar="OP[,OP]", help="only these ops (or full OP(params) case names)")
    p.add_argument("-p", "--pattern", metavar="REGEX", type=regex, help="only cases whose full name matches the regex")
    p.add_argument("--output", choices=("console", "json", "csv"), default="console", help="default: console")
    p.add_argument(
        "-j", "--jobs", type=int_in(1, MAX_JOBS), default=1, metavar="N", help="worker processes (test/support)"
    )
    p.add_argument(
        "--reference",
        choices=("auto", "numpy", "cpu", "both"),
        default="auto",
        help="test mode: compare with numpy, the CPU device or both (auto: numpy for CPU, the CPU device otherwise)",
    )
    p.add_argument(
        "--perf-seconds",
        type=float_in(0.0, MAX_PERF_SECONDS, lo_open=True),
        default=0.25,
        metavar="S",
        help="perf: time each case this long",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="console: print only failures and the summary")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto", help="progress bar on stderr")
    p.add_argument("--list-ops", action="store_true", help="list every op name (ops, UNARY and GLU sub-ops)")
    p.add_argument("--show-coverage", action="store_true", help="which ops have conformance cases")
    p.set_defaults(func=run)


# ------------------------------------------------------------------------------------------------ rows


def result_rows(results: Sequence[Any]) -> list[dict[str, Any]]:
    """CSV/JSON rows of case results."""
    return [r.as_row() for r in results]


def _expanded(ops: str) -> set[str]:
    """The op names of ``-o``'s items, group names (UNARY, GLU) standing for their sub-ops."""
    from ggml_core.testing.cases import GROUPS

    out: set[str] = set()
    for o in ops.split(","):
        name = o.strip().upper()
        out |= set(GROUPS.get(name, (name,)))
    return out


def uncovered_rows(device: str, tested_ops: set[str], mode: str, ops_filter: set[str] | None) -> list[dict[str, Any]]:
    """One row per ggml op without a selected case (support mode lists every op)."""
    from ggml_core.testing import all_op_names

    rows = []
    for op in all_op_names():
        if op in tested_ops or (ops_filter is not None and op not in ops_filter):
            continue
        row: dict[str, Any] = dict.fromkeys(FIELDS)
        row.update(
            backend_name=device,
            op_name=op,
            op_params="",
            test_mode=mode,
            supported=False,
            passed=False,
            error_message="no test case",
        )
        rows.append(row)
    return rows


def _csv_value(v: Any) -> Any:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "" if v is None else v


# ------------------------------------------------------------------------------------------------ console


def _status_text(r: Any, mode: str) -> str:
    from ggml_core.testing import Status

    if mode == "support":
        if r.status == Status.SKIPPED:
            return f"NOT SUPPORTED ({r.message})"
        return "SUPPORTED" if r.status == Status.OK else "NOT SUPPORTED"
    if r.status == Status.OK:
        return "OK" if mode == "test" else _perf_text(r)
    if r.status == Status.FAIL:
        return f"FAIL: {r.message}" if mode == "test" else f"FAIL ({r.message})"
    if r.status == Status.SKIPPED:
        return f"not supported ({r.message})"
    return "not supported"


def _perf_text(r: Any) -> str:
    head = f"{r.n_runs} runs - {r.time_us:10.2f} us/run"
    if r.flops:
        return f"{head} - {r.flops / 1e6:10.2f} MFLOP/run - {r.gflops:8.2f} GFLOPS"
    return f"{head} - {r.bytes / 1024:8.1f} kB/run - {r.bandwidth_gb_s or 0.0:8.2f} GB/s"


def _header(i: int, n: int, dev: Device, mode: str, reference: str) -> None:
    props = dev.props()
    print(f"Backend {i}/{n}: {dev.name}")
    print(f"  Device description: {props.description}")
    print(f"  Device memory: {props.memory_total // 2**20} MiB ({props.memory_free // 2**20} MiB free)")
    if mode == "test":
        from ggml_core.backend.interfaces import DeviceType

        ref = reference
        if reference == "auto":
            ref = "numpy" if dev.type == DeviceType.CPU else "the CPU device (numpy where it lacks the op)"
        print(f"  Reference: {ref}")
    print()


# ------------------------------------------------------------------------------------------------ run


def _devices(spec: Sequence[str] | None) -> list[Device]:
    from ggml_core.backend.registry import get_registry

    reg = get_registry()
    if not spec:
        return reg.devices()
    return [reg.get_device(name) for name in spec]


def _list_ops(show_coverage: bool) -> int:
    from ggml_core.testing import all_cases, all_op_names

    if not show_coverage:
        for op in all_op_names():
            print(op)
        return 0
    from ggml_core.ops import GluOp, UnaryOp

    covered = {c.op for c in all_cases()}
    if covered & {u.name for u in UnaryOp}:
        covered.add("UNARY")  # the generic ops count through their sub-ops
    if covered & {g.name for g in GluOp}:
        covered.add("GLU")
    names = all_op_names()
    yes = [o for o in names if o in covered]
    no = [o for o in names if o not in covered]
    print(f"Ops with conformance cases ({len(yes)}):")
    print("  " + ", ".join(yes))
    print(f"Ops without ({len(no)}):")
    print("  " + ", ".join(no))
    print(f"Coverage: {len(yes)}/{len(names)} ({100.0 * len(yes) / len(names):.1f}%)")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the chosen mode on the chosen devices; 1 when any case FAILs."""
    from ggml_core.testing import Status, select
    from ggml_core.testing._session import Progress, run_many

    if args.list_ops or args.show_coverage:
        return _list_ops(args.show_coverage)
    devices = _devices(args.backend)  # an unknown name fails here, before any case runs
    cases = select(ops=args.op, pattern=args.pattern, perf=args.mode == "perf")
    console = args.output == "console"
    show_bar = args.progress == "on" or (
        args.progress == "auto" and sys.stderr.isatty() and (not console or args.quiet or not sys.stdout.isatty())
    )
    ops_filter = _expanded(args.op) if args.op and "(" not in args.op else None
    rows: list[dict[str, Any]] = []
    failing: list[str] = []
    backends_ok = 0
    for i, dev in enumerate(devices, 1):
        if console:
            _header(i, len(devices), dev, args.mode, args.reference)
        bar = Progress(len(cases), dev.name) if show_bar and cases else None

        def on_result(r: Any, bar: Progress | None = bar) -> None:
            if bar is not None:
                bar.update(r)
            if console and not (args.quiet and r.status != Status.FAIL):
                if bar is not None:
                    bar.stream.write("\r")
                print(f"  {r.case.name}: {_status_text(r, args.mode)} [{r.device}]", flush=True)

        results = run_many(
            cases,
            dev,
            args.mode,
            reference=args.reference,
            jobs=args.jobs,
            perf_seconds=args.perf_seconds,
            on_result=on_result,
        )
        if bar is not None:
            bar.close()
        rows += result_rows(results)
        if args.mode == "support":
            rows += uncovered_rows(dev.name, {c.op for c in cases}, args.mode, ops_filter)
        failed = [r for r in results if r.status == Status.FAIL]
        failing += [f"{r.case.name} [{dev.name}]" for r in failed]
        backends_ok += not failed
        if console:
            _footer(dev, results, args.mode, rows if args.mode == "support" else None)
    if args.output == "json":
        print(json.dumps(rows, indent=1))
    elif args.output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
    elif console:
        print(f"{backends_ok}/{len(devices)} backends passed")
        if failing:
            print("Failing tests:")
            for name in failing:
                print(f"  {name}")
        print("OK" if not failing else "FAIL")
    from ggml_core.backend.registry import get_registry

    for problem in get_registry().problems():  # what a plugin got wrong, on stderr (stdout may be json/csv)
        print(f"ggml-core test-ops: plugin problem: {problem}", file=sys.stderr)
    return 1 if failing else 0


def _footer(dev: Device, results: Sequence[Any], mode: str, rows: list[dict[str, Any]] | None) -> None:
    from ggml_core.testing import Status

    count: Callable[[Status], int] = lambda s: sum(r.status == s for r in results)  # noqa: E731
    ok, fail = count(Status.OK), count(Status.FAIL)
    unsupported, skipped = count(Status.NOT_SUPPORTED), count(Status.SKIPPED)
    if mode == "support":
        untested = [r["op_name"] for r in rows or () if r["backend_name"] == dev.name and r["op_params"] == ""]
        for op in untested:
            print(f"  {op}: NOT SUPPORTED (no test case) [{dev.name}]")
        print(f"  {ok}/{len(results)} cases supported; {len(untested)} ops have no test case")
    elif mode == "perf":
        print(f"  {ok}/{ok + fail} cases ran ({unsupported} not supported, {skipped} skipped)")
    else:
        print(
            f"  {ok}/{ok + fail} tests passed ({unsupported} not supported, {skipped} skipped: no builder, input "
            "generator or reference)"
        )
    print(f"  Backend {dev.name}: {'OK' if fail == 0 else 'FAIL'}")
    print()
