"""``ggml-core new-plugin NAME``: write a ready backend plugin package (device ``NAME0``, numpy kernels, tests).

The package installs as is (``pip install ./ggml-name``), passes ``ggml-core devices --check`` and the conformance
suite on the ops it declares (``--ops``, default ADD,MUL,SCALE), and has the shape of every device plugin: checks
(``_platform.py``) → kernels (``ops/``, one module per op family, registered in a ``KernelTable``) → buffers →
device and backend → registration (``plugin.py``, through ``PluginHooks``). It is a starting point: replace the
numpy kernels with your hardware's.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_OPS", "add_parser", "run", "write_plugin"]

DEFAULT_OPS = ("ADD", "MUL", "SCALE")

#: device family names the first-party plugins use; a generated plugin may not take them
_RESERVED = {"cpu", "cuda", "opencl", "rpc", "example"}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,31}\Z")


class NewPluginError(ValueError):
    """The name, ops or target directory of ``new-plugin`` is unusable; the message says which and why."""


def add_parser(sub: Any, name: str) -> None:
    """Register the command."""
    from ggml_core.cli._plugin_template import OP_SNIPPETS

    p = sub.add_parser(
        name,
        help="write a ready backend plugin package (numpy device, tests) to start from",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", metavar="NAME", help="device family name, e.g. Toy (device Toy0, package ggml-toy)")
    p.add_argument("--dir", "-d", default=".", metavar="D", help="where to create ggml-NAME/ (default: here)")
    p.add_argument(
        "--ops",
        default=",".join(DEFAULT_OPS),
        metavar="OP[,OP]",
        help=f"ops the device computes (default {','.join(DEFAULT_OPS)}; from {','.join(OP_SNIPPETS)})",
    )
    p.set_defaults(func=run)


def write_plugin(name: str, directory: Path, ops: list[str]) -> Path:
    """Write the package ``directory/ggml-<name>`` and return its path; :class:`NewPluginError` on bad input."""
    from ggml_core.cli._plugin_template import (
        BUFFERS,
        DEVICE,
        INIT,
        OP_SNIPPETS,
        OPS_ARRAYS,
        OPS_INIT,
        PLATFORM,
        PLUGIN,
        PYPROJECT,
        README,
        TEST_CONFORMANCE,
        TEST_DEVICE,
    )

    if not _NAME.match(name):
        raise NewPluginError(f"NAME {name!r} must be a letter then up to 31 letters or digits, e.g. Toy")
    if name.lower() in _RESERVED:
        raise NewPluginError(f"NAME {name!r} is a first-party backend's name; pick another")
    ops = list(dict.fromkeys(op.strip().upper() for op in ops if op.strip()))
    unknown = [op for op in ops if op not in OP_SNIPPETS]
    if unknown or not ops:
        raise NewPluginError(
            f"--ops: {', '.join(unknown) or 'none given'} not available; choose from {', '.join(OP_SNIPPETS)}"
        )
    lower = name.lower()
    root = directory / f"ggml-{lower}"
    if root.exists() and any(root.iterdir()):
        raise NewPluginError(f"{root} already exists and is not empty; remove it or choose another --dir")
    families = _family_modules(ops)
    one_line = "[" + ", ".join(f'"{op}"' for op in ops) + "]"
    ops_list = one_line if len(one_line) < 60 else "[\n" + "".join(f'    "{op}",\n' for op in ops) + "]"
    subst = {
        "@@NAME@@": name,
        "@@LOWER@@": lower,
        "@@OPS@@": ",".join(ops),
        "@@OPS_LIST@@": ops_list,
        "@@OPS_WRAPPED@@": textwrap.fill(", ".join(ops), 116),
        "@@FAMILIES@@": ", ".join(sorted(families)),
    }
    package = f"ggml_{lower}"
    files = {
        f"{package}/__init__.py": INIT,
        f"{package}/_platform.py": PLATFORM,
        f"{package}/ops/__init__.py": OPS_INIT,
        f"{package}/ops/_arrays.py": OPS_ARRAYS,
        **{f"{package}/ops/{family}.py": text for family, text in families.items()},
        f"{package}/_buffers.py": BUFFERS,
        f"{package}/_device.py": DEVICE,
        f"{package}/plugin.py": PLUGIN,
        "pyproject.toml": PYPROJECT,
        "README.md": README,
        "tests/test_conformance.py": TEST_CONFORMANCE,
        "tests/test_device.py": TEST_DEVICE,
    }
    for rel, text in files.items():
        for key, value in subst.items():
            text = text.replace(key, value)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _family_modules(ops: list[str]) -> dict[str, str]:
    """family → the text of its module in ``ops/``: a support check and a kernel per op, registered in KERNELS."""
    from ggml_core.cli._plugin_template import FAMILY, FAMILY_DOCS, OP_SNIPPETS

    bodies: dict[str, list[str]] = {}
    for op in ops:
        family, check, kernel = OP_SNIPPETS[op]
        fn = op.lower()
        body = textwrap.indent(kernel, "    ")
        args = "a, b = operands(node)" if re.search(r"\bb\b", check) else "a = node.src[0]"
        bodies.setdefault(family, []).append(
            f"\n\ndef _{fn}_supported(node: Tensor) -> bool:\n"
            f"    {args}\n"
            f"    return bool({check})\n"
            f"\n\n@KERNELS.kernel(GGMLOp.{op}, supports=_{fn}_supported)\n"
            f"def {fn}(node: Tensor) -> np.ndarray:\n{body}\n"
        )
    out = {}
    for family, parts in bodies.items():
        code = "".join(parts)
        used = [
            n for n in ("f32", "operands", "param", "repeat", "shape", "values") if re.search(rf"(?<![\w.]){n}\(", code)
        ]
        imports = ", ".join(["KERNELS", *used])
        text = FAMILY.replace("@@DOC@@", FAMILY_DOCS[family]).replace("@@IMPORTS@@", imports)
        out[family] = text.replace("@@KERNELS@@", code)
    return out


def run(args: argparse.Namespace) -> int:
    """Write the package and say how to use it."""
    try:
        root = write_plugin(args.name, Path(args.dir), args.ops.split(","))
    except (NewPluginError, OSError) as exc:
        print(f"ggml-core {args.command}: error: {exc}", file=sys.stderr)
        return 2
    device = f"{args.name}0"
    print(f"wrote {root} (device {device})")
    print(f"  pip install -e {root}")
    print("  ggml-core devices --check")
    print(f"  ggml-core test-ops -b {device} -o {','.join(o.strip().upper() for o in args.ops.split(','))}")
    print(f"  pytest {root / 'tests'}")
    return 0
