"""No import cycles inside a package: the module graph, read from the source with `ast`, is acyclic.

Every `import` and `from ... import` counts, at module level or inside a function (a lazy import that
only exists to dodge a cycle is still a cycle in the design). `from pkg import name` is an edge to
`pkg.name` when that is a module, else to `pkg`. Importing `a.b.c` is an edge to `a.b.c` only: the parent
packages' `__init__` run first, but counting that would make every package that re-exports its own
submodules a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("workbench", "store", "screens")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            out[_module_name(path, root)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is one of our modules (None for outside imports)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """{module: modules of ours it imports}, for every .py file under the packages."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package holding this module, up level-1 more
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names
                ]
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != mod:
                    graph[mod].add(resolved)
    return graph


def find_cycle(graph: dict[str, set[str]], prefix: str) -> list[str] | None:
    """One cycle among the modules named `prefix` or `prefix.*`, as [a, b, ..., a]; None when acyclic."""
    inside = {m for m in graph if m == prefix or m.startswith(prefix + ".")}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for nxt in sorted(graph[m] & inside):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(inside):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def _assert_acyclic(prefix: str) -> None:
    cycle = find_cycle(import_graph(), prefix)
    assert cycle is None, f"import cycle in {prefix}/: " + " -> ".join(cycle or [])


def test_graph_sees_lazy_relative_and_from_package_imports(tmp_path):
    (tmp_path / "p" / "sub").mkdir(parents=True)
    files = {
        "p/__init__.py": "from p.sub import thing\n",
        "p/a.py": "import os\nfrom p import b\n\ndef f():\n    import p.sub.c\n",
        "p/b.py": "from . import a\nfrom .sub.c import x\n",
        "p/sub/__init__.py": "from .. import a\nthing = 1\n",
        "p/sub/c.py": "from ..b import y\nfrom . import thing\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert import_graph(tmp_path, ("p",)) == {
        "p": {"p.sub"},  # `from p.sub import thing`: not a module, so the package
        "p.a": {"p.b", "p.sub.c"},  # `from p import b` is the module; the lazy import counts; os is outside
        "p.b": {"p.a", "p.sub.c"},  # relative imports, resolved
        "p.sub": {"p.a"},
        "p.sub.c": {"p.b", "p.sub"},
    }
    assert find_cycle(import_graph(tmp_path, ("p",)), "p") == ["p.a", "p.b", "p.a"]
    assert find_cycle({"a": {"a.b"}, "a.b": {"a.c"}, "a.c": {"a"}}, "a") == ["a", "a.b", "a.c", "a"]
    assert find_cycle({"a": {"a.b"}, "a.b": set()}, "a") is None


def test_no_import_cycle_in_workbench():
    _assert_acyclic("workbench")


def test_no_import_cycle_in_store():
    _assert_acyclic("store")


def test_no_import_cycle_in_screens():
    _assert_acyclic("screens")
