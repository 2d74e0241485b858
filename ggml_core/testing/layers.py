"""The import structure of the product code: cycles and private names imported across modules.

Reads every module of the core (``ggml_core``) and of each plugin's package (``plugins/*/ggml_*``) as source,
without importing anything, and follows every import: at module level, inside functions (a function-local import
that closes a loop is still a cycle) and under ``if TYPE_CHECKING:`` (so is a type-only one). Test folders are left
out; the ``testing`` packages the plugins and tests build on are product code and are read.

``python -m ggml_core.testing.layers [ROOT]`` prints each cycle with the imports that close it (``M`` module level,
``L`` function-local, ``T`` under TYPE_CHECKING) and each private name imported from another module; it exits 1 when
there is either.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ImportGraph", "PrivateImport", "read_imports"]


@dataclass(frozen=True)
class PrivateImport:
    """``name``, private to ``source``, imported by ``importer`` (``name`` is ``"(module)"`` when ``source`` is a
    private module of another package)."""

    importer: str
    source: str
    name: str


@dataclass
class ImportGraph:
    """Modules (dotted name → file), import edges with their kinds, and the private names imported across modules."""

    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    private: list[PrivateImport] = field(default_factory=list)

    def cycles(self) -> list[list[str]]:
        """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        for root in sorted(self.modules):
            if root in index:
                continue
            work = [(root, iter(sorted(self.edges.get(root, {}))))]
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            while work:
                v, it = work[-1]
                w = next(it, None)
                if w is not None:
                    if w not in index:
                        index[w] = low[w] = len(index)
                        stack.append(w)
                        on_stack.add(w)
                        work.append((w, iter(sorted(self.edges.get(w, {})))))
                    elif w in on_stack:
                        low[v] = min(low[v], index[w])
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on_stack.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
        return out

    def describe(self, cycle: list[str]) -> list[str]:
        """The imports inside one cycle, ``a -> b [kinds]``."""
        members = set(cycle)
        return [
            f"{a} -> {b} [{''.join(sorted(kinds))}]"
            for a in cycle
            for b, kinds in sorted(self.edges.get(a, {}).items())
            if b in members
        ]


def _packages(root: Path) -> dict[str, Path]:
    out = {"ggml_core": root / "ggml_core"}
    for pkg in sorted((root / "plugins").glob("*/ggml_*/__init__.py")):
        out[pkg.parent.name] = pkg.parent
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _kind(stack: list[ast.AST]) -> str:
    if any(isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test) for n in stack):
        return "T"
    if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in stack):
        return "L"
    return "M"


def read_imports(root: Path) -> ImportGraph:
    """The import graph of the product modules under the repository ``root``."""
    g = ImportGraph()
    for pkg, folder in _packages(root).items():
        for f in sorted(folder.rglob("*.py")):
            parts = [pkg, *f.relative_to(folder).with_suffix("").parts]
            if "tests" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            g.modules[".".join(parts)] = f

    def check_module(importer: str, module: str) -> None:
        """A private module of another package (``ggml_core._tensor`` from a plugin) is not the importer's to use."""
        top, *rest = module.split(".")
        if top != importer.split(".")[0] and module in g.modules and any(_private(p) for p in rest):
            g.private.append(PrivateImport(importer, module, "(module)"))

    def add(a: str, b: str, kind: str) -> None:
        if b in g.modules and a != b:
            g.edges.setdefault(a, {}).setdefault(b, set()).add(kind)

    for name, f in g.modules.items():
        is_pkg = f.name == "__init__.py"

        def visit(node: ast.AST, stack: list[ast.AST], name: str = name, is_pkg: bool = is_pkg) -> None:
            for child in ast.iter_child_nodes(node):
                here = [*stack, child]
                if isinstance(child, ast.ImportFrom):
                    if child.level:
                        base_parts = name.split(".") if is_pkg else name.split(".")[:-1]
                        base_parts = base_parts[: len(base_parts) - (child.level - 1)]
                        base = ".".join([*base_parts, *([child.module] if child.module else [])])
                    else:
                        base = child.module or ""
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        if sub in g.modules:
                            add(name, sub, _kind(here))
                            check_module(name, sub)
                            continue
                        add(name, base, _kind(here))
                        if _private(alias.name) and base in g.modules and base != name:
                            g.private.append(PrivateImport(name, base, alias.name))
                        else:
                            check_module(name, base)
                elif isinstance(child, ast.Import):
                    for alias in child.names:
                        target = alias.name
                        while target and target not in g.modules:
                            target = target.rpartition(".")[0]
                        if target:
                            add(name, target, _kind(here))
                            check_module(name, target)
                visit(child, here)

        visit(ast.parse(f.read_text(encoding="utf-8"), str(f)), [])
    return g


def main(argv: list[str] | None = None) -> int:
    """Print the cycles and private imports; exit 1 when there are any."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", type=Path, default=Path.cwd(), help="the repository (default: here)")
    args = ap.parse_args(argv)
    if not (args.root / "ggml_core").is_dir():
        print(f"{args.root}: no ggml_core/ here; give the repository's root", file=sys.stderr)
        return 2
    g = read_imports(args.root)
    cycles = g.cycles()
    for c in cycles:
        print(f"cycle of {len(c)} modules:")
        for line in g.describe(c):
            print(f"  {line}")
    for p in g.private:
        what = f"the private module {p.source}" if p.name == "(module)" else f"{p.name} from {p.source}"
        print(f"private name: {p.importer} imports {what}")
    print(
        f"{len(g.modules)} modules: {len(cycles)} import cycles, {len(g.private)} private names imported across modules"
    )
    return 1 if cycles or g.private else 0


if __name__ == "__main__":
    sys.exit(main())
