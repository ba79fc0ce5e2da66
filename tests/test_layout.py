"""The package layout's three rules (issue 17), read from the source with `ast` (nothing is imported):

1. no import circles between admitcheck modules: every `import`/`from ... import` counts, at the top of a module and
   inside functions alike; only `if TYPE_CHECKING:` blocks are skipped (they never run). Importing
   `admitcheck.a.b` is an edge to `admitcheck.a.b` (not to the package `admitcheck.a` whose `__init__` runs first:
   a package's `__init__` that builds from its children is not a circle of the code the children run);
2. no module imports another module's private names: `from admitcheck.x import _name`, or `mod._name` where `mod`
   is an admitcheck module imported in that file, or `obj._name` on anything but `self` / `cls`;
3. no module over `MAX_LINES` lines unless its first line is a comment `# long module: <reason>`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "admitcheck"
MAX_LINES = 350
LONG_MARK = "# long module: "


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _walk(tree: ast.AST):
    """ast.walk without the bodies of `if TYPE_CHECKING:`."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every admitcheck import in the module."""
    out = []
    for node in _walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, "", node.lineno) for a in node.names if a.name.split(".")[0] == "admitcheck"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path).split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "admitcheck":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub, "", node.lineno) if sub in known else (target, alias.name, node.lineno))
    return out


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        graph[name] = {m for m, _, _ in imports(name, path, known) if m in known and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _private_definitions(path: Path) -> set[str]:
    """Private names a module defines: top-level functions, classes and assignments, methods, `self._x = ...`."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    out.add(target.id)
                elif isinstance(target, ast.Attribute):
                    out.add(target.attr)
    return {n for n in out if n.startswith("_") and not n.startswith("__")}


def private_uses(known: dict[str, Path]) -> list[str]:
    """`from admitcheck.x import _name`; `alias._name` on an imported admitcheck module; `obj._name` (obj not self
    or cls) where `_name` is private to another admitcheck module and not defined in this one."""
    defined = {name: _private_definitions(path) for name, path in known.items()}
    found = []
    for name, path in known.items():
        where = name
        elsewhere = set().union(*(d for m, d in defined.items() if m != name)) - defined[name]
        module_aliases = set()
        for mod, imported, line in imports(name, path, known):
            if imported.startswith("_") and not imported.startswith("__"):
                found.append(f"{where}:{line}: imports {mod}.{imported}")
        for node in _walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("admitcheck"):
                module_aliases |= {a.asname or a.name for a in node.names if f"{node.module}.{a.name}" in known}
            elif isinstance(node, ast.Import):
                module_aliases |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name in known}
        for node in _walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else None
            if owner in ("self", "cls"):
                continue
            if owner in module_aliases or node.attr in elsewhere:
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def long_modules(known: dict[str, Path]) -> list[str]:
    out = []
    for name, path in known.items():
        text = path.read_text()
        n = text.count("\n")
        if n > MAX_LINES and not (text.startswith(LONG_MARK) and len(text.split("\n", 1)[0]) > len(LONG_MARK) + 10):
            out.append(f"{name}: {n} lines")
    return out


def test_no_import_circles():
    known = modules()
    assert not cycles(import_graph(known))


def test_no_private_names_of_other_modules():
    assert not private_uses(modules())


def test_long_modules_say_why():
    assert not long_modules(modules())


def test_the_checks_can_fail(tmp_path):
    """Each rule finds its violation in a small package built here."""
    pkg = tmp_path / "admitcheck"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from admitcheck.sub import b\n_x = 1\n\nclass E:\n    def _y(self):\n        pass\n")
    (pkg / "sub" / "b.py").write_text(
        "def f(engine):\n    from admitcheck import a\n    from admitcheck.c import _hidden\n"
        "    engine._y()\n    return a._x\n"
    )
    (pkg / "c.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from admitcheck import a\n" + "x = 1\n" * 400
    )
    known = modules(pkg)
    assert cycles(import_graph(known)) == [["admitcheck.a", "admitcheck.sub.b"]]  # c's TYPE_CHECKING import: no edge
    uses = private_uses(known)
    assert sorted(u.split(": ", 1)[1] for u in uses) == ["a._x", "engine._y", "imports admitcheck.c._hidden"]
    assert [s.split(":")[0] for s in long_modules(known)] == ["admitcheck.c"]
    (pkg / "c.py").write_text(LONG_MARK + "a reason a reviewer can check\n" + "x = 1\n" * 400)
    assert long_modules(known) == []


@pytest.mark.parametrize("package", ["rollout", "measurement", "calibration", "admission", "pairs"])
def test_flow_packages_exist(package):
    assert (PACKAGE / package / "__init__.py").exists()
