"""Names that resolve (issue 41), beside tests/test_layout.py; read from the source with `ast` (the schemas' fields,
for the second rule, from the imported models):

1. every top-level definition of admitcheck/ (function, class, assigned name) is used: its name is read (loaded, an
   attribute, imported, or a string such as an `__all__` entry) somewhere in admitcheck/ or bench/ outside its own
   definition, or it is in `PUBLIC` with the reason it is kept (a library entry point that a user or a test calls).
   A decorated definition (a typer command, a registered function) is used by its decorator. An entry of `PUBLIC`
   that the package itself uses, or that no longer exists, fails: the list only shrinks.
2. every backticked `module.name` (or `module.name(...)`) in a docstring, a comment, docs/*.md or README.md resolves:
   `module` is an admitcheck module by its dotted path or a suffix of it (`calibration.fit`, `fit`; a suffix two
   modules end in, such as `measure`, may mean either) and `name` is a top-level name of it, defined or imported
   there (a re-export); or the whole is a module; or it is a field path
   of the package's schemas (`probe.num_prompts`: a field holding a model, then a field of that model; `config.`
   and the file-valued fields in `FILE_FIELDS` lead into their schema). `AMBIGUOUS` first words are not modules
   there (`model.generate` is a torch module's method, `vllm.LLM` the vllm package's). `STALE`, the names allowed
   not to resolve, is empty.

Each rule has a test with a planted violation.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
import re
import typing
from collections import defaultdict
from pathlib import Path

import pydantic

from tests.test_layout import modules

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "admitcheck"
USERS = (PACKAGE, ROOT / "bench")  # where a use counts (a test's use alone does not make a name part of the package)

# Top-level names the package and its benches do not read, kept on purpose: name -> why.
PUBLIC: dict[str, str] = {
    "admitcheck.rollout.background.worker_threads": "the live background workers: how a caller (and the async "
    "tests) checks that every BackgroundRollouts closed its threads",
    "admitcheck.rollout.engines.vllm.attention_scales": "run inside a vLLM worker by `llm.apply_model`: reads back "
    "the scales the kernels use (the calibrated-scales test compares them with the HF engine's)",
    "admitcheck.calibration.opd.run_mismatch": "the run-averaged mismatch of a recipe replayed with a candidate's "
    "engine (docs/calibration.md): the library call behind a budget on `levels.x: run`",
    "admitcheck.admission.sequential.decision_estimator": "the decision estimator of a calibration that states no "
    "functional (kl_exact where full rows give it, else the metric): for reading reports written before #35",
    "admitcheck.measurement.probe.probe_all": "every probe batch into one ProbeRun: the one-call form of "
    "`probe_batches` for a notebook or a test",
    "admitcheck.measurement.logs.COLUMNS": "the admitcheck log format's two log-prob columns, for a pipeline that "
    "writes them",
    "admitcheck.measurement.logs.write_measurement_logs": "a measurement's log-probs written as logs: what "
    "`--from-logs` reads back (the library call behind docs/pipelines.md's round trip)",
    "admitcheck.calibration.curve._percentile_interval": "curve.py is being rewritten on the budget-gate branch; "
    "remove this entry with the function there",
}
# First words that are not the admitcheck module of that name in a backticked path: what each one is instead.
AMBIGUOUS = {
    "model": "a torch module or a budget's model (calibration.model is named by its dotted path)",
    "vllm": "the vllm package (the engine module is `engines.vllm`)",
    "record": "a RunRecord (the module is `calibration.record`)",
}
# Fields that hold the path of a file of another schema: a field path continues into that schema.
FILE_FIELDS = {
    "calibration": "admitcheck.calibration.schema.CalibrationArtifact",
    "calibrate_config": "admitcheck.config.CalibrateConfig",
    "screen_result": "admitcheck.admission.screen_report.ScreenReport",
}
# Config fields that were removed, named where a doc says a config holding them is refused (docs/calibration.md
# "Schema 1"): each must stay unknown to the schemas.
REMOVED_FIELDS = {"levels.baseline_seeds", "levels.seeds"}
STALE: set[str] = set()  # backticked `module.name`s allowed not to resolve: none
FILE_SUFFIXES = {"json", "jsonl", "yaml", "yml", "md", "png", "py", "txt", "toml", "sh", "xml", "csv", "safetensors"}
BACKTICKED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")


# ------------------------------------------------------------------------------------------ rule 1: used


def definitions(tree: ast.Module) -> list[tuple[str, int]]:
    """(name, line) of the module's top-level definitions; decorated ones are used by their decorator."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.decorator_list:
            out.append((node.name, node.lineno))
        elif isinstance(node, ast.Assign):
            out += [(t.id, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.lineno))
    return [(n, line) for n, line in out if not (n.startswith("__") and n.endswith("__"))]


def reads(tree: ast.AST) -> dict[str, list[int]]:
    """name -> lines where it is read: loaded, an attribute, imported by name, or a string that is an identifier."""
    out: dict[str, list[int]] = defaultdict(list)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out[node.id].append(node.lineno)
        elif isinstance(node, ast.Attribute):
            out[node.attr].append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            out.update({a.name: out[a.name] + [node.lineno] for a in node.names})
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            out[node.value].append(node.lineno)
    return out


def unused(package: Path, users: tuple[Path, ...], public: dict[str, str]) -> list[str]:
    """`module.name` of every top-level definition of `package` that nothing in `users` reads (its own definition's
    line aside) and `public` does not keep."""
    trees = {p: ast.parse(p.read_text()) for d in users for p in sorted(d.rglob("*.py"))}
    used: dict[str, set[tuple[Path, int]]] = defaultdict(set)
    for path, tree in trees.items():
        for name, lines in reads(tree).items():
            used[name] |= {(path, line) for line in lines}
    out = []
    for mod, path in modules(package).items():
        for name, line in definitions(ast.parse(path.read_text())):
            where = used.get(name, set()) - {(path, line)}
            if not where and f"{mod}.{name}" not in public:
                out.append(f"{mod}.{name}")
    return out


def test_every_top_level_definition_is_used_or_public():
    assert unused(PACKAGE, USERS, PUBLIC) == []


def test_public_only_keeps_names_that_exist_and_are_unused():
    """An entry whose name the package now reads, or that is gone, is removed from PUBLIC."""
    assert sorted(unused(PACKAGE, USERS, {})) == sorted(PUBLIC)


def test_an_unused_definition_is_found(tmp_path):
    pkg = tmp_path / "admitcheck"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def used():\n    pass\n\n\ndef dead():\n    pass\n\n\nX = used()\n")
    (pkg / "b.py").write_text("from admitcheck.a import X\n\nprint(X)\n")
    assert unused(pkg, (pkg,), {}) == ["admitcheck.a.dead"]
    assert unused(pkg, (pkg,), {"admitcheck.a.dead": "a library entry point"}) == []


# ------------------------------------------------------------------------------------------ rule 2: resolves


def _models_in(annotation: typing.Any) -> list[type[pydantic.BaseModel]]:
    if inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


def _import(dotted: str) -> typing.Any:
    mod, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(mod), name)


def field_pairs() -> tuple[set[str], set[tuple[str, str]]]:
    """(every field name of the package's pydantic models, every (field, field of the model it holds) pair)."""
    names, pairs = set(), set()
    for mod in modules():
        if mod.endswith("__main__"):
            continue
        for obj in vars(importlib.import_module(mod)).values():
            if inspect.isclass(obj) and issubclass(obj, pydantic.BaseModel) and obj.__module__ == mod:
                for f, info in obj.model_fields.items():
                    names.add(f)
                    pairs |= {(f, g) for m in _models_in(info.annotation) for g in m.model_fields}
    for f, dotted in FILE_FIELDS.items():
        pairs |= {(f, g) for g in _import(dotted).model_fields}
    from admitcheck.config import KINDS

    pairs |= {("config", g) for schema in KINDS.values() for g in schema.model_fields}
    return names | {"config"}, pairs


def top_level_names(path: Path) -> set[str]:
    """What `module.name` can name in a module: its definitions and its imports (a re-export), `if` blocks too."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        for n in [node, *(node.body + node.orelse if isinstance(node, (ast.If, ast.Try)) else [])]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.Assign):
                out |= {t.id for tgt in n.targets for t in ast.walk(tgt) if isinstance(t, ast.Name)}
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                out.add(n.target.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return out


def texts(package: Path, docs: list[Path]) -> list[tuple[Path, int, str]]:
    """(file, line, text) of every docstring, comment and doc file to read backticked names in."""
    out = [(p, 1, p.read_text()) for p in docs]
    for path in sorted(package.rglob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    out.append((path, node.body[0].lineno if node.body else 1, doc))
        for i, line in enumerate(source.splitlines(), 1):
            if "#" in line:
                out.append((path, i, line[line.index("#") :]))
    return out


def unresolved(package: Path, docs: list[Path], fields: tuple[set[str], set[tuple[str, str]]]) -> list[str]:
    """`file:line: module.name` of every backticked name that does not resolve (module docstring, rule 2)."""
    mods = modules(package)
    names, pairs = fields
    tops: dict[str, set[str]] = {}

    def module_of(parts: list[str]) -> tuple[list[str], list[str]]:
        """The admitcheck modules the longest prefix of `parts` names (a suffix such as `measure` names both
        `config.measure` and `measurement.measure`), and the rest of `parts`."""
        for k in range(len(parts), 0, -1):
            prefix = ".".join(parts[:k])
            hit = [m for m in mods if m == prefix or m.endswith("." + prefix)]
            if hit and (k > 1 or parts[0] not in AMBIGUOUS):
                return hit, parts[k:]
        return [], parts

    out = []
    for path, line, text in texts(package, docs):
        for match in BACKTICKED.finditer(text):
            dotted = match.group(1)
            parts = dotted.split(".")
            if parts[-1] in FILE_SUFFIXES or dotted in STALE or dotted in REMOVED_FIELDS:
                continue
            if parts[0] in names and all(p in pairs for p in itertools.pairwise(parts)):
                continue  # a field path
            hits, rest = module_of(parts)
            if not hits or not rest:
                continue  # not an admitcheck module (`json.dumps`, `cfg.probe`), or a module itself
            for mod in hits:
                if mod not in tops:
                    tops[mod] = top_level_names(mods[mod])
            if not any(rest[0] in tops[mod] for mod in hits):  # one of the modules the name may mean has it
                where = line + text[: match.start()].count("\n") if path.suffix == ".md" else line
                out.append(f"{path.relative_to(package.parent)}:{where}: {dotted}")
    return out


def test_every_backticked_module_name_resolves():
    docs = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    assert unresolved(PACKAGE, docs, field_pairs()) == []


def test_a_removed_field_stays_removed():
    _, pairs = field_pairs()
    assert not {tuple(f.split(".")) for f in REMOVED_FIELDS} & pairs


def test_a_stale_backticked_name_is_found(tmp_path):
    pkg = tmp_path / "admitcheck"
    (pkg / "calibration").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "calibration" / "__init__.py").write_text("")
    (pkg / "calibration" / "fit.py").write_text(
        '"""Fits: `fit.fit_runs` and `calibration.fit.gone()`, `probe.seed`, `model.generate`, `json.dumps`."""\n\n'
        "LIMIT = 3  # `fit.fit_runs` again; `fit.moved` is stale\n\n\n"
        "def fit_runs():\n    pass\n"
    )
    doc = tmp_path / "notes.md"
    doc.write_text("Read `calibration.fit` and `fit.fit_runs`;\nnot `fit.never_existed(x)`.\n")
    fields = ({"probe"}, {("probe", "seed")})
    assert unresolved(pkg, [doc], fields) == [
        "notes.md:2: fit.never_existed",
        "admitcheck/calibration/fit.py:1: calibration.fit.gone",
        "admitcheck/calibration/fit.py:3: fit.moved",
    ]


# ------------------------------------------------------------------------------------------ string-key reads

# Issue 41: the package's own outputs are read by attribute. Every `x["key"]` / `x.get("key")` read in admitcheck/ is
# one of three: a read of a dict that is a dict by nature (an input: a model's config.json, a log row, YAML before its
# schema, pydantic's error dicts, the environment), a read of a mapping keyed by a name (metric, term, phase or split
# name -> its numbers: a table, not a record), or a read of one of the package's own records built as a dict: those
# are counted, and their count only goes down (OUTPUT_READS). `typing.Literal[...]` is no read. The first two are
# listed below by module and receiver (the expression subscripted, as written), each group with why; an entry no
# read uses any more fails, so the lists only shrink.
INPUT = "a dict by nature, read at the edge"
NAMED = "a mapping keyed by a name (metric, term, phase, split): a table of numbers, not a record"
NOT_OUTPUTS: dict[str, dict[str, str]] = {
    # pydantic's error dicts (ValidationError.errors()): loc, msg, type
    "admission/screen_report.py": {"e": INPUT},
    "admission/checkpoint.py": {"e": INPUT},
    "calibration/artifact.py": {"err": INPUT, "data": INPUT},  # data: the YAML before its schema (schema_version)
    # line: a ledger line before its schema, each part by its one reader: the kind (`ledger.line_kind`), a header
    # (`LedgerHeader.read`), a grid line (`NoiseGrid.read`); a run line goes through `read_run`
    "calibration/ledger.py": {"err": INPUT, "line": INPUT},
    "config/base.py": {"e": INPUT, "item": INPUT},
    "io.py": {"err": INPUT, "cfg": INPUT, "text": INPUT, "row": INPUT, "os.environ": INPUT},  # + config.json, prompts
    # a config's YAML before its schema (`mode="before"` validators, kind detection, a report told from an artifact)
    "config/calibrate.py": {"data": INPUT},
    "config/kinds.py": {"data": INPUT},
    "config/sections.py": {"data": INPUT, "kv": INPUT},
    "calibration/compatibility.py": {"data": INPUT, "backtested": INPUT},
    "admission/backtest_report.py": {"data": INPUT},
    "calibration/record.py": {"data": INPUT},  # RunKey.decode: the key's JSON, the one reader of its format
    # a model's config.json, a safetensors header, a tokenizer's output or tokenizer.json, prompt rows, the environment
    "rollout/capacity.py": {"cfg": INPUT},
    "rollout/limits.py": {"text": INPUT, "r": INPUT},
    "rollout/engines/vllm.py": {"_text_config(model_path)": INPUT, "os.environ": INPUT},
    "fingerprint.py": {
        "cfg": INPUT,
        "params": INPUT,
        "out": INPUT,
        "info": INPUT,
        "row": INPUT,
        "value": INPUT,
        "tokenizer(text)": INPUT,
    },
    "measurement/sensitivity.py": {
        "text_config(cfg)": INPUT,
        "m.values": NAMED,
        "m.intervals": NAMED,
        "floor.values": NAMED,
        "whole.values": NAMED,
        "whole.intervals": NAMED,
    },
    "pairs/load.py": {"row": INPUT, "tokens.tokenizer(row['prompt'])": INPUT},
    "pairs/smollm2.py": {
        "cfg": INPUT,
        "rope": INPUT,
        "tj": INPUT,
        "r": INPUT,
        "row": INPUT,
        "tok(r['prompt'])": INPUT,
        "fast(probe)": INPUT,
        "fast(probe, add_special_tokens=False)": INPUT,
    },
    "pairs/toy.py": {"splits": NAMED},
    "calibration/levels.py": {"r": INPUT, "ids": NAMED, "sets": NAMED, "clock": NAMED, "m.values": NAMED},
    "calibration/grpo.py": {"r": INPUT},  # train prompt rows (their "answer": grpo.task_rows, task_of)
    # a pipeline's log rows (each format's columns), a bench's JSON results, Ray's node list
    # + sampling: the top_p / top_k the rows state (only those they state; presence is the information)
    "measurement/logs.py": {"obj": INPUT, "rec": INPUT, "rl": INPUT, "sampling": INPUT},
    # a backtest candidate's config as the user gave it, kept unvalidated in the report (`CandidateRow.candidate`)
    "admission/plan.py": {"cand": INPUT},
    "admission/step_time.py": {"bench": INPUT, "r": INPUT, "hit[0]": INPUT, "r.seconds_by_phase": NAMED},
    "calibration/executors.py": {"n": INPUT, "os.environ": INPUT},
    "cli.py": {"os.environ": INPUT},
    # m[v]: a backtest's confusion matrix row, truth label -> count
    "report.py": {"os.environ": INPUT, "v.metrics": NAMED, "v.metric_intervals": NAMED, "m[v]": NAMED},
    "numerics.py": {"sys.modules": INPUT, "env": INPUT, "PINS": NAMED},  # env: the process environment
    # metric and term tables: per-sequence sums, token means, intervals by metric name
    "measurement/metrics.py": {"mean": NAMED, "ps": NAMED, "sums": NAMED, "terms": NAMED},
    "measurement/dashboards.py": {"v": NAMED, "ps": NAMED, "options": NAMED},
    "measurement/probe.py": {"p": NAMED, "pooled.values": NAMED, "pooled.intervals": NAMED},
    "admission/sequential.py": {"self.metrics": NAMED, "self.metric_intervals": NAMED},
}
OUTPUT_READS = 0  # the package's own records read by string key (issue 41: 0); lower it as they go, never raise it


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def string_key_reads(package: Path) -> list[tuple[str, str, int]]:
    """(module path under the package, receiver as written, line) of every string-key read, `Literal[...]` aside."""
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                typed = isinstance(node.value, ast.Name) and node.value.id == "Literal"
                if _is_str(node.slice) and not typed:
                    out.append((rel, ast.unparse(node.value), node.lineno))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                out += [(rel, ast.unparse(node.func.value), node.lineno)] if node.args and _is_str(node.args[0]) else []
    return out


def output_reads(package: Path, not_outputs: dict[str, dict[str, str]]) -> list[str]:
    """`module:line: receiver` of every string-key read of the package's own records (not in `not_outputs`)."""
    return [f"{m}:{line}: {r}" for m, r, line in string_key_reads(package) if r not in not_outputs.get(m, {})]


def test_the_packages_own_outputs_are_read_by_attribute():
    reads = output_reads(PACKAGE, NOT_OUTPUTS)
    assert len(reads) <= OUTPUT_READS, "\n".join(reads)
    used = {(m, r) for m, r, _ in string_key_reads(PACKAGE)}
    stale = [f"{m}: {r}" for m, rs in NOT_OUTPUTS.items() for r in rs if (m, r) not in used]
    assert not stale, stale  # a listed receiver no read uses any more: remove it


def test_string_key_reads_are_told_apart(tmp_path):
    (tmp_path / "a.py").write_text(
        'd = {}\nx = d["k"], d.get("k"), d[0], d.get(k), cfg["hidden_size"]\nd["w"] = 1\ny: Literal["a"] = "a"\n'
    )
    reads = string_key_reads(tmp_path)
    assert [(r, line) for _, r, line in reads] == [("d", 2), ("d", 2), ("cfg", 2)]  # an int key, a write: none
    assert output_reads(tmp_path, {"a.py": {"cfg": INPUT}}) == ["a.py:2: d", "a.py:2: d"]
