"""The package layout's three rules (issue 17), read from the source with `ast` (nothing is imported):

1. no import circles between admitcheck modules: every `import`/`from ... import` counts, at the top of a module and
   inside functions alike; only `if TYPE_CHECKING:` blocks are skipped (they never run). Importing
   `admitcheck.a.b` is an edge to `admitcheck.a.b` (not to the package `admitcheck.a` whose `__init__` runs first:
   a package's `__init__` that builds from its children is not a circle of the code the children run);
2. no module imports another module's private names: `from admitcheck.x import _name`, or `mod._name` where `mod`
   is an admitcheck module imported in that file, or `obj._name` on anything but `self` / `cls`;
3. no module over `MAX_LINES` lines unless its first line is a comment `# long module: <reason>`;
4. no arrow against the flow (issue 26): a module imports only from its own stage, an earlier one, or the input
   edges (`STAGES`: config, io, errors, fingerprint, formatting → pairs → rollout → measurement → calibration →
   admission → the outputs and commands), `if TYPE_CHECKING:` imports included (DESIGN.md). Every module has a
   stage (a new top-level module is placed in `STAGES` on purpose). The arrows still against the flow are listed
   in `AGAINST_THE_FLOW`, each with its reason; an entry whose arrow is gone fails, so the list only shrinks.
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


def _walk(tree: ast.AST, *, type_checking: bool = False):
    """ast.walk without the bodies of `if TYPE_CHECKING:` (with them when `type_checking`)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if _is_type_checking(node) and not type_checking:
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(
    name: str, path: Path, known: dict[str, Path], *, type_checking: bool = False
) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every admitcheck import in the module (`if TYPE_CHECKING:`
    ones too when `type_checking`)."""
    out = []
    for node in _walk(ast.parse(path.read_text()), type_checking=type_checking):
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


# The stages of the flow, left to right (DESIGN.md "Layout"): a top-level module's stage by its name, a subpackage's
# by the subpackage.
FLOW = [
    ("admitcheck", "config", "io", "errors", "fingerprint", "formatting", "numerics"),  # the input edges
    ("pairs",),
    ("rollout",),
    ("measurement",),
    ("calibration",),
    ("admission",),
    ("report", "plots", "terminal", "validation", "cli", "demo", "__main__"),  # the outputs and the commands
]
STAGES = {name: i for i, names in enumerate(FLOW) for name in names}

# (importer, imported): why the arrow is still there. Remove an entry when its arrow goes (the test says when).
AGAINST_THE_FLOW = {}


def stage(module: str) -> int | None:
    """The stage of an admitcheck module (None: not in `STAGES`)."""
    parts = module.split(".")
    return STAGES.get(parts[1] if len(parts) > 1 else parts[0])


def against_the_flow(known: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the lines where a module imports one of a later stage, type-only imports included."""
    out: dict[tuple[str, str], list[str]] = {}
    for name, path in known.items():
        for mod, _, line in imports(name, path, known, type_checking=True):
            mine, theirs = stage(name), stage(mod)
            if mine is not None and theirs is not None and theirs > mine:
                out.setdefault((name, mod), []).append(f"{name}:{line}")
    return out


def test_no_import_circles():
    known = modules()
    assert not cycles(import_graph(known))


def test_no_private_names_of_other_modules():
    assert not private_uses(modules())


def test_long_modules_say_why():
    assert not long_modules(modules())


def test_every_module_has_a_stage():
    assert [m for m in modules() if stage(m) is None] == []


def test_no_arrow_against_the_flow():
    found = against_the_flow(modules())
    assert {k: v for k, v in found.items() if k not in AGAINST_THE_FLOW} == {}


def test_the_allowed_arrows_against_the_flow_are_still_there():
    """An arrow in `AGAINST_THE_FLOW` that is gone: remove its entry (the list only shrinks)."""
    assert sorted(set(AGAINST_THE_FLOW) - set(against_the_flow(modules()))) == []


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


def test_the_flow_check_can_fail(tmp_path):
    """An import of a later stage is found, at the top, in a function and under `if TYPE_CHECKING:`; one of an
    earlier stage is not; a module outside `STAGES` has no stage."""
    pkg = tmp_path / "admitcheck"
    for sub in ("rollout", "admission"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "rollout" / "x.py").write_text(
        "from typing import TYPE_CHECKING\nfrom admitcheck import config\nif TYPE_CHECKING:\n"
        "    from admitcheck.admission import y\n\ndef f():\n    from admitcheck.cli import main\n"
    )
    (pkg / "admission" / "y.py").write_text("from admitcheck.rollout import x\n")
    (pkg / "config.py").write_text("")
    (pkg / "nowhere.py").write_text("")
    known = modules(pkg)
    assert against_the_flow(known) == {
        ("admitcheck.rollout.x", "admitcheck.admission.y"): ["admitcheck.rollout.x:4"],
        ("admitcheck.rollout.x", "admitcheck.cli"): ["admitcheck.rollout.x:7"],
    }
    assert stage("admitcheck.nowhere") is None and stage("admitcheck.rollout.x") == 2


@pytest.mark.parametrize("package", ["rollout", "measurement", "calibration", "admission", "pairs"])
def test_flow_packages_exist(package):
    assert (PACKAGE / package / "__init__.py").exists()
