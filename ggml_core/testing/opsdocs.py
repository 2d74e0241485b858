"""Generate ``docs/ops.md``, the op support matrix, from ``test-ops support`` CSV files.

.. code-block:: console

    python -m ggml_core.testing.opsdocs              # support mode on every device here, then docs/ops.md
    python -m ggml_core.testing.opsdocs --from-csv   # only rebuild docs/ops.md from docs/ops/*.csv

Each device's CSV (``docs/ops/<DEVICE>.csv``) is exactly what ``ggml-core test-ops support -b DEVICE --output csv``
prints, so a device this machine lacks can be added from another machine. One row per op, one column per device:
✅ every case supported, 🟡 some, ❌ none.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["main", "render", "support_csv"]

COMMAND: Final = "python -m ggml_core.testing.opsdocs"

_PLUGINS_TESTING: Final = """
<a id="plugins-testing"></a>

## Testing a plugin (plugins-testing)

ggml-core ships the conformance suite of this table: every case of every op above (types, shapes, non-contiguous
and broadcast operands, op parameters), run on a device inside guard bytes and compared the way ggml's
`test-backend-ops` compares. A plugin gets the whole suite with **one line** in its tests:

```python
# tests/test_conformance.py of your plugin
from ggml_core.testing import conformance_suite

test_conformance = conformance_suite("OpenCL0")   # one test per case: test_conformance[OP(params)]
```

or with no file at all, from the pytest plugin that ggml-core installs (`--ggml-device` adds the suite to whatever
else pytest collects; `--ggml-op` and `--ggml-pattern` narrow only the conformance tests):

```console
pytest --ggml-device OpenCL0                       # the whole suite on OpenCL0
pytest --ggml-device OpenCL0 --ggml-op MUL_MAT,ADD # only these ops (--ggml-pattern REGEX: by case name)
pytest --ggml-device OpenCL0 --ggml-reference both # compare with the CPU device and with numpy
```

Every case passes, fails with the measured error, or **skips with its reason**: the device is absent, the device's
`supports_op` rejects a node, the op's builder does not exist yet, or an input type cannot be generated.
`conformance_suite(device, ops=..., pattern=..., reference=...)` narrows a suite the same way.

How a case is judged (as `test-backend-ops`):

- inputs are uniform in [-1, 1], with op-specific generators where an op needs them (row indices, positions,
  causal masks, rows of distinct values for ARGMAX/ARGSORT/TOP_K, positive inputs for SQRT/LOG);
- the CPU device is compared with numpy references written from each op's definition and ggml's measured CPU
  numerics; every other device is compared with the CPU device, node by node (`--ggml-reference` changes that);
- a NaN fails, infinities must match in sign, and the normalised error NMSE = Σ(a−b)²/Σa² must stay under the
  op's threshold: 1e-7 by default, 5e-4 for MUL_MAT, MUL_MAT_ID, OUT_PROD, CONV_2D, CONV_TRANSPOSE_1D and
  FLASH_ATTN_EXT, 1e-6 for SOFT_MAX, exact for ARGMAX, ARGSORT, COUNT_EQUAL and same-type copies, ggml's
  one-quantization-step estimate for quantizing CPY/SET_ROWS, and set equality per row for TOP_K;
- every tensor of a case gets its own slot in one device buffer between 1024 guard bytes of a random pattern;
  after the compute, any changed byte outside the elements of the graph's nodes (guards, inputs, gaps of strided
  views) fails the case and names the tensor it is next to.

The same suite from the command line:

```console
ggml-core test-ops -b OpenCL0                      # OK / FAIL (NMSE, threshold) / not supported; exit 1 on FAIL
ggml-core test-ops perf -b OpenCL0 -o MUL_MAT      # µs/run and GFLOP/s (matrix products) or GB/s
ggml-core test-ops support -b OpenCL0 --output csv > docs/ops/OpenCL0.csv
ggml-core test-ops -o ROPE -p 'type=f16' --output json -j 2
ggml-core test-ops --show-coverage                 # which ops have cases
```

`-o UNARY` and `-o GLU` stand for every sub-op (SILU, GELU, ...; SWIGLU, GEGLU, ...). A name that is no op, or a
filter that selects no case, is an error naming the closest op (exit 2), as is the same filter given to
`conformance_suite` or `--ggml-op` (an `OpFilterError`).

In Python, `ggml_core.testing.select(ops=..., pattern=...)` gives the cases and
`ggml_core.testing.run_case(case, device, reference=...)` runs one (a `CaseResult` with status, message and error).
"""


def support_csv(device_name: str) -> str:
    """``test-ops support --output csv`` for one device, as text."""
    from ggml_core.backend.registry import get_registry
    from ggml_core.cli.test_ops import FIELDS, result_rows, uncovered_rows
    from ggml_core.testing import check_support, select

    dev = get_registry().get_device(device_name)
    cases = select()
    rows = result_rows([check_support(c, dev) for c in cases])
    rows += uncovered_rows(dev.name, {c.op for c in cases}, "support", None)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()


def _csv_value(v: object) -> object:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return "" if v is None else v


def _read(paths: Sequence[Path]) -> tuple[list[str], dict[str, dict[str, list[bool]]]]:
    """(devices, op → device → supported flag per case) from CSV files."""
    devices: list[str] = []
    table: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for path in paths:
        with path.open(encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                dev = row["backend_name"]
                if dev not in devices:
                    devices.append(dev)
                if row.get("error_message") == "no test case":
                    table[row["op_name"]].setdefault(dev, [])
                    continue
                table[row["op_name"]][dev].append(row["supported"] == "yes")
    devices.sort(key=lambda d: (d.upper() != "CPU", d))
    return devices, table


def _mark(flags: list[bool]) -> str:
    if flags and all(flags):
        return "✅"
    if any(flags):
        return "🟡"
    return "❌"


def render(paths: Sequence[Path]) -> str:
    """The text of docs/ops.md from support CSV files."""
    from ggml_core.ops import GluOp, UnaryOp
    from ggml_core.testing import all_op_names

    devices, table = _read(paths)
    unary = {u.name for u in UnaryOp}
    glu = {g.name for g in GluOp}
    for parent, subs in (("UNARY", unary), ("GLU", glu)):
        for dev in devices:
            table[parent][dev] = [f for op in subs for f in table.get(op, {}).get(dev, [])]
    lines = [
        "# Supported ops per device",
        "",
        f"Generated by `{COMMAND}` from `docs/ops/*.csv` — do not edit by hand. Each CSV is the output of",
        "`ggml-core test-ops support -b DEVICE --output csv`; to add a device this machine lacks, write its CSV on a",
        f"machine that has it into `docs/ops/`, then run `{COMMAND} --from-csv`.",
        "",
        "✅ every conformance case of the op is supported · 🟡 some cases · ❌ none (or no builder yet) ·",
        "*cases*: conformance cases of the op (0: no test yet). UNARY and GLU summarise their sub-ops, listed after",
        "the ops.",
        "",
        "| Op | cases | " + " | ".join(devices) + " |",
        "|---|---:|" + "---|" * len(devices),
    ]
    for op in all_op_names():
        per_dev = table.get(op, {})
        n_cases = max((len(per_dev.get(d, [])) for d in devices), default=0)
        name = f"{op} (unary)" if op in unary else f"{op} (glu)" if op in glu else op
        cells = " | ".join(_mark(per_dev.get(d, [])) for d in devices)
        lines.append(f"| {name} | {n_cases} | {cells} |")
    return "\n".join(lines) + "\n" + _PLUGINS_TESTING


def main(argv: Sequence[str] | None = None) -> int:
    """Write docs/ops/<DEVICE>.csv for every device here (unless --from-csv), then docs/ops.md."""
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs-dir", type=Path, default=Path("docs"), help="default: ./docs")
    p.add_argument("--from-csv", action="store_true", help="do not run support mode; use the CSVs already there")
    p.add_argument("-b", "--backend", metavar="DEVICE[,DEVICE]", help="only these devices (default: every device)")
    args = p.parse_args(argv)
    csv_dir = args.docs_dir / "ops"
    csv_dir.mkdir(parents=True, exist_ok=True)
    if not args.from_csv:
        from ggml_core.backend.registry import get_registry

        names = [d.name for d in get_registry().devices()]
        if args.backend:
            names = [n.strip() for n in args.backend.split(",") if n.strip()]
        for name in names:
            (csv_dir / f"{name}.csv").write_text(support_csv(name), encoding="utf-8")
            print(f"wrote {csv_dir / f'{name}.csv'}", file=sys.stderr)
    paths = sorted(csv_dir.glob("*.csv"))
    if not paths:
        print(f"no CSV files in {csv_dir}", file=sys.stderr)
        return 1
    out = args.docs_dir / "ops.md"
    out.write_text(render(paths), encoding="utf-8")
    print(f"wrote {out} ({len(paths)} device(s))", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
