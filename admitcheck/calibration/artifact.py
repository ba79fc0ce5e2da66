"""The calibration artifact: `calibrations/<name>.yaml`, the `Calibration` that reads it, and compatibility checks.

    cal = load_calibration("calibrations/toy.yaml")      # CalibrationError naming file and field when unusable
    cal.budget.value, cal.budget.interval, cal.budget.kind  # nats/token (curve.Budget)
    cal.predict_cost(0.01)                                  # quality cost the stored fit predicts, nats/token
    cal.protocol, cal.pair_fingerprint                      # what a screen must match
    ok, reason = calibration_matches(calibrate_config, cal) # may a demo reuse it for this config?

Schema (version 2), written by `admitcheck.calibration.calibrate`: schema_version; name; metric; pair (model config and
weight hashes of student and teacher, tokenizer hash, prompt-set hashes); protocol (the mismatch measurement:
sampling, probe, reference dtype, and `x`: which mismatch the budget is in, "start" or "run", with `run_window`);
recipe (the OPD training recipe the budget belongs to); quality (definition, baseline); tolerance (value, rule);
levels; level_report (per level: replicates, x, paired cost with interval, fitted cost, decided_budget);
auto_noise (the grid measurement); runs (level, replicate, seed, x_start, x_run, quality, paired quality_cost);
curve (form "isotonic": points x, cost); budget (value, kind, interval, confidence, x, rule, decided_by,
bootstrap.draws and .quantiles, the adaptive protocol that stopped); provenance (versions, created_at, the resolved
config with paths relative to the artifact). Units: mismatch and quality in nats/token. Schema-1 artifacts are
refused with a message saying how to regenerate them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from admitcheck import fingerprint, io
from admitcheck.calibration.curve import Budget, CurveFit, MonotoneFit
from admitcheck.config import CalibrateConfig, PairConfig, ProbeConfig, ReferenceConfig, SamplingConfig
from admitcheck.errors import AdmitcheckError, CalibrationError
from admitcheck.plots import plot_calibration

SCHEMA_VERSION = 2
# Recipe fields that define the training recipe a budget belongs to (steps, levels and seeds are effort, not recipe).
RECIPE_KEYS = ("loss", "student_logprobs", "lr", "lr_schedule", "tis_cap", "temperature", "grad_clip",
               "weight_decay", "max_new_tokens")  # fmt: skip
_NUM = (int, float)
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema_version": int, "name": str, "metric": str,
    "pair.student.architecture": dict, "pair.student.weights": str, "pair.teacher.architecture": dict,
    "pair.teacher.weights": str, "pair.tokenizer": str, "pair.prompts.probe": str,
    "protocol": dict, "recipe": dict, "recipe.loss": str, "recipe.student_logprobs": str, "recipe.seed": int,
    "tolerance.value": _NUM, "runs": list,
    "curve.form": str,
    "budget.value": _NUM, "budget.kind": str, "budget.interval": list, "provenance": dict,
}  # fmt: skip


def fingerprint_pair(pair: PairConfig, probe: ProbeConfig | None = None) -> dict[str, Any]:
    """`fingerprint.pair_fingerprint`: canonical architecture and content hashes of student and teacher, the
    tokenizer, and the probe prompt set when `probe` is given."""
    return fingerprint.pair_fingerprint(pair, probe.prompts if probe is not None else None)


def protocol_keys(sampling: SamplingConfig, probe: ProbeConfig, reference: ReferenceConfig) -> dict[str, Any]:
    """The measurement protocol as flat keys: what changes the measured mismatch's expectation (the prompt set is
    in the pair fingerprint; probe count, batch size and seed change only its noise, so they are not here)."""
    return {
        "protocol.sampling.temperature": sampling.temperature,
        "protocol.sampling.top_p": sampling.top_p,
        "protocol.sampling.top_k": sampling.top_k,
        "protocol.probe.max_new_tokens": probe.max_new_tokens,
        "protocol.reference.dtype": reference.dtype,
    }


def protocol_of_screen(config: Any) -> dict[str, Any]:
    """`protocol_keys` of a ScreenConfig (or any config with sampling, probe and reference)."""
    return protocol_keys(config.sampling, config.probe, config.reference)


@dataclass(frozen=True)
class Calibration:
    """A calibration artifact (its YAML as `data`) and where it lives; accessors for screen and the CLI."""

    data: dict[str, Any]
    path: Path | None = None

    @property
    def name(self) -> str:
        return self.data["name"]

    pair_name = name

    @property
    def metric(self) -> str:
        return self.data["metric"]

    @property
    def protocol(self) -> dict[str, Any]:
        """Flat `protocol.*` keys, comparable with `protocol_of_screen`."""
        p = self.data["protocol"]
        return protocol_keys(
            SamplingConfig(**p["sampling"]), ProbeConfig(prompts="-", **p["probe"]), ReferenceConfig(**p["reference"])
        )

    @property
    def pair_fingerprint(self) -> dict[str, Any]:
        """student, teacher, tokenizer and probe_prompts hashes, as `fingerprint_pair(pair, probe)` gives them."""
        p = self.data["pair"]
        return {
            "student": p["student"],
            "teacher": p["teacher"],
            "tokenizer": p["tokenizer"],
            "probe_prompts": p["prompts"]["probe"],
        }

    @property
    def behaviour(self) -> dict[str, Any] | None:
        """Both models' log-probs on fixed sequences (`fingerprint.behaviour_fingerprint`), None in old artifacts."""
        return self.data["pair"].get("behaviour")

    @property
    def recipe(self) -> dict[str, Any]:
        return self.data["recipe"]

    @property
    def tolerance(self) -> float:
        return float(self.data["tolerance"]["value"])

    @property
    def runs(self) -> list[dict[str, Any]]:
        return self.data["runs"]

    @property
    def curve(self) -> MonotoneFit | CurveFit:
        """The fitted curve: "isotonic" (points x, cost), or a hand-made "log_logistic" (params) for tests."""
        c = self.data["curve"]
        if c["form"] == "log_logistic":
            return CurveFit(c["form"], {k: float(v) for k, v in c["params"].items()})
        xs, cost = tuple(float(v) for v in c["x"]), tuple(float(v) for v in c["cost"])
        return MonotoneFit(xs, cost, c["form"], float(c.get("offset", 0.0)))  # no offset: written before it

    @property
    def x_measure(self) -> str:
        """Which mismatch the budget is in: "start" (probe measurement at the start weights) or "run" (engine vs
        trainer k3 averaged over the first `protocol.run_window` training steps, `opd.run_mismatch`)."""
        return str(self.data.get("budget", {}).get("x", "start"))

    def budget_draws(self) -> list[float]:
        """The bootstrap draws of the budget (nats/token; 0 = below the smallest level, inf = above the largest)."""
        return [float(v) for v in self.data["budget"].get("bootstrap", {}).get("draws", [])]

    @property
    def budget(self) -> Budget:
        b = self.data["budget"]
        lo, hi = (float(v) for v in b["interval"])
        extra = (bool(b.get("extrapolated", False)), int(b.get("n_boot", 0)))
        return Budget(float(b["value"]), b["kind"], (lo, hi), self.tolerance, *extra)

    def predict_cost(self, x: Any) -> Any:
        """Quality cost (nats/token) the stored fit predicts at mismatch x (nats/token); 0 at x = 0."""
        return self.curve.predict(x)

    def train_prompts(self) -> Path:
        """The recipe's train prompt set (stored relative to the artifact), checked against its hash."""
        rel = self.recipe.get("prompts")
        path = Path(rel) if self.path is None or Path(rel).is_absolute() else (self.path.parent / rel).resolve()
        if not path.is_file() or fingerprint.prompts_fingerprint(path) != self.data["pair"]["prompts"].get("train"):
            raise CalibrationError(
                f"train prompts {path} missing or not the set this calibration trained on",
                file=str(self.path),
                field="recipe.prompts",
            )
        return path

    def summary_rows(self) -> list[tuple[str, str]]:
        """(field, value) rows for a table: the budget and what it belongs to."""
        b, r, q = self.budget, self.recipe, self.data["quality"]
        unit = "(1 − task reward)" if r.get("loss") == "grpo" else "nats/token"  # quality's unit (opd.quality_value)
        kind = {
            "point": "",
            "lower_bound": " (lower bound: no level reached τ)",
            "upper_bound": " (below the smallest level: add lower levels)",
        }[b.kind]
        bd = self.data["budget"]
        return [
            ("pair", self.name),
            (
                "recipe",
                f"loss={r['loss']} student_logprobs={r['student_logprobs']} lr={r['lr']:g} "
                f"({r.get('lr_schedule', 'constant')}) tis_cap={r['tis_cap']} steps={r['steps']} "
                f"batch={r['batch_size']}",
            ),
            (
                "baseline quality",
                f"{q['baseline_mean']:.4g} ± {q['baseline_std']:.2g} {unit} "
                f"({q['baseline_seeds']} replicates; start {q['start']:.4g}, "
                f"improvement {100 * q['improvement']:.0f}%)",
            ),
            ("tolerance τ", f"{self.tolerance:.4g} {unit} ({self.data['tolerance']['rule']})"),
            (f"budget ({self.metric})", f"{b.value:.3g} nats/token{kind}"),
            (f"{100 * self.data['budget']['confidence']:.0f}% interval", f"[{b.interval[0]:.3g}, {b.interval[1]:.3g}]"),
            ("x (mismatch fitted)", f"{bd.get('x', 'start')}: {bd.get('x_reason', '')}"),
            ("decided by", ", ".join(bd.get("decided_by", [])) or "-"),
            ("runs", str(len(self.runs))),
        ] + [
            (f"level {lv['level']}", f"{lv['replicates']} pairs, x {lv['x']:.3g}, paired cost {lv['paired_cost']:+.3g} "
             + (f"[{lv['paired_cost_interval'][0]:+.3g}, {lv['paired_cost_interval'][1]:+.3g}]"
                if lv.get("paired_cost_interval") else "(held out)")
             + f", fit {lv['fitted_cost']:+.3g}" + (" *" if lv.get("decided_budget") else ""))
            for lv in self.data.get("level_report", []) if lv["kind"] != "baseline"
        ] + [("WARNING", w) for w in self.warnings]  # fmt: skip

    @property
    def warnings(self) -> list[str]:
        """What a user must know before gating on this budget (`calibrate.budget_warnings`): a lower bound of 0, a
        precision not reached at the run cap. Empty for artifacts written before these were recorded."""
        return [str(w) for w in self.data.get("budget", {}).get("warnings", [])]

    def run_rows(self) -> list[dict[str, Any]]:
        """One row per run: level, seed, mismatch (with interval), quality, quality cost."""
        keys = ("level", "seed", "mismatch", "mismatch_interval", "quality", "quality_cost", "steps")
        return [{k: r.get(k) for k in keys} for r in self.runs]

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, **self.data}


def plain(data: Any) -> Any:
    """Plain JSON/YAML types (str subclasses such as torch's version, tuples, numpy scalars become builtins)."""
    return json.loads(json.dumps(data, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


def dump_calibration(data: dict[str, Any]) -> str:
    return yaml.safe_dump(plain(data), sort_keys=False, allow_unicode=True, width=120)


def write_calibration(data: dict[str, Any], path: str | Path) -> Calibration:
    """Write the artifact atomically (and its PNG beside it when matplotlib is installed)."""
    path = Path(path)
    data = plain(data)
    io.write_text_atomic(path, dump_calibration(data))
    cal = Calibration(data, path)
    png = plot_calibration(cal)
    if png is not None:
        io.write_bytes_atomic(path.with_suffix(".png"), png)
    return cal


def load_calibration(path: str | Path) -> Calibration:
    """Read and check an artifact; a CalibrationError naming the file and the first missing or bad field."""
    path = Path(path)
    try:
        data = io.read_yaml(path)
    except AdmitcheckError as exc:
        raise CalibrationError(exc.message, file=str(path)) from None
    if not isinstance(data, dict):
        raise CalibrationError("not a calibration artifact (expected a mapping)", file=str(path), field="(top level)")
    version = data.get("schema_version")
    if version == 1:
        raise CalibrationError(
            "schema_version 1 (single unpaired runs, a Hill fit, τ grown by seed noise) is no longer read: "
            "regenerate it with `admitcheck calibrate CONFIG` (its config is under provenance.config; see "
            "docs/calibration.md)",
            file=str(path),
            field="schema_version",
        )
    if version is not None and version != SCHEMA_VERSION:
        raise CalibrationError(
            f"unsupported schema_version {version!r} (this admitcheck reads {SCHEMA_VERSION})",
            file=str(path),
            field="schema_version",
        )
    for key, kind in _REQUIRED.items():
        try:
            value = fingerprint.dotted_get(data, key)
        except KeyError:
            raise CalibrationError("required field is missing", file=str(path), field=key) from None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CalibrationError(
                f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}", file=str(path), field=key
            )
    curve = data["curve"]
    need = ("params.plateau", "params.x50", "params.steepness") if curve["form"] == "log_logistic" else ("x", "cost")
    for key in need:
        try:
            fingerprint.dotted_get(curve, key)
        except KeyError:
            raise CalibrationError("required field is missing", file=str(path), field=f"curve.{key}") from None
    if data["budget"]["kind"] not in ("point", "lower_bound", "upper_bound"):
        raise CalibrationError(f"unknown budget kind {data['budget']['kind']!r}", file=str(path), field="budget.kind")
    try:
        _ = Calibration(data, path).protocol
    except (TypeError, ValueError, KeyError) as exc:
        raise CalibrationError(
            f"bad measurement protocol: {exc}".split("\n")[0], file=str(path), field="protocol"
        ) from None
    for i, run in enumerate(data["runs"]):
        for key in ("level", "seed", "mismatch", "fit_x", "quality", "quality_cost"):
            if not isinstance(run, dict) or key not in run:
                raise CalibrationError("required field is missing", file=str(path), field=f"runs.{i}.{key}")
    return Calibration(data, path)


def prompt_hashes(config: CalibrateConfig) -> dict[str, str]:
    return {
        "probe": fingerprint.prompts_fingerprint(config.probe.prompts),
        "train": fingerprint.prompts_fingerprint(config.train.prompts),
        "eval": fingerprint.prompts_fingerprint(config.eval.prompts),
    }


def recipe_of(config: CalibrateConfig) -> dict[str, Any]:
    """The training recipe as stored (train prompts path excluded: `calibrate` stores it relative to the artifact)."""
    train = config.train.model_dump(mode="json", exclude={"prompts"})
    return {**train, "rollout": config.rollout.model_dump(mode="json"), "seed": config.seed}


def recipe_core(recipe: dict[str, Any]) -> dict[str, Any]:
    return {k: recipe.get(k) for k in RECIPE_KEYS} | {"rollout": recipe.get("rollout")}
