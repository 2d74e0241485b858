"""The product code's imports go one way: no import cycle (function-local and TYPE_CHECKING imports included) and no
private name imported from another module (docs/architecture.md, "Layers")."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ggml_core.testing.layers import PrivateImport, main, read_imports

ROOT = Path(__file__).resolve().parents[2]


def _tree(tmp: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    return tmp


def test_the_product_code_has_no_import_cycle_and_no_private_import() -> None:
    g = read_imports(ROOT)
    assert len(g.modules) > 200  # the core and every plugin were read
    assert {m.split(".")[0] for m in g.modules} >= {"ggml_core", "ggml_cpu", "ggml_opencl", "ggml_rpc"}
    assert [g.describe(c) for c in g.cycles()] == []
    assert g.private == []


def test_cycles_and_private_names_are_found_whatever_hides_them(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "ggml_core/__init__.py": "",
            "ggml_core/a.py": "from ggml_core.b import B\n",
            "ggml_core/b.py": "def f():\n    from ggml_core import a\n",
            "ggml_core/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ggml_core.d import D\n",
            "ggml_core/d.py": "from . import c\n",
            "ggml_core/e.py": "from ggml_core.a import _hidden\n",
            "plugins/ggml-x/ggml_x/__init__.py": "from ggml_x._k import _table\n",
            "ggml_core/_priv.py": "X = 1\n",
            "plugins/ggml-x/ggml_x/_k.py": "import ggml_core.a\nfrom ggml_core._priv import X\n",
            "plugins/ggml-x/tests/test_k.py": "from ggml_x import _k\n",
        },
    )
    g = read_imports(root)
    cycles = g.cycles()
    assert cycles == [["ggml_core.a", "ggml_core.b"], ["ggml_core.c", "ggml_core.d"]]
    assert g.describe(cycles[0]) == ["ggml_core.a -> ggml_core.b [M]", "ggml_core.b -> ggml_core.a [L]"]
    assert g.describe(cycles[1]) == ["ggml_core.c -> ggml_core.d [T]", "ggml_core.d -> ggml_core.c [M]"]
    assert g.private == [
        PrivateImport("ggml_core.e", "ggml_core.a", "_hidden"),
        PrivateImport("ggml_x", "ggml_x._k", "_table"),
        PrivateImport("ggml_x._k", "ggml_core._priv", "(module)"),
    ]
    assert main([str(root)]) == 1


def test_a_clean_tree_passes_and_a_wrong_root_is_refused(tmp_path: Path) -> None:
    root = _tree(tmp_path / "ok", {"ggml_core/__init__.py": "", "ggml_core/a.py": "from ggml_core import b\n",
                                   "ggml_core/b.py": "X = 1\n"})  # fmt: skip
    assert main([str(root)]) == 0
    assert main([str(tmp_path / "nowhere")]) == 2
