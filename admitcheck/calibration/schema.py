# long module: the calibration artifact's schema, one frozen model per section of its YAML, read by attribute
"""The calibration artifact (schema 2) as frozen pydantic models: `calibrations/<name>.yaml` section by section.

    cal = artifact.load_calibration("calibrations/toy.yaml")   # a CalibrationArtifact
    cal.budget.value, cal.budget.interval, cal.budget.kind      # nats/token
    cal.tolerance.value, cal.recipe.loss, cal.runs[0].quality_cost
    cal.predict_cost(0.01)                                      # quality cost the stored fit predicts, nats/token

Sections, in the order they are written: schema_version; name; metric; pair (model config and weight hashes of
student and teacher, tokenizer hash, prompt-set hashes, the behavioural fingerprint); protocol (the mismatch
measurement: sampling, probe, reference dtype, and `x`: which mismatch the budget is in, "start" or "run", with
`run_window`); recipe (the training recipe the budget belongs to: `TrainConfig`'s fields, its base rollout and seed);
quality (definition, eval, baseline); tolerance (value, rule); levels; level_report (per level: replicates, x, paired
cost with interval, fitted cost, decided_budget); auto_noise (the grid measurement); runs (level, replicate, seed,
x_start, x_run, quality, paired quality_cost); curve (form "isotonic": points x, cost); budget (value, kind,
interval, confidence, x, rule, decided_by, bootstrap draws and quantiles, the adaptive protocol that stopped; `by_x`:
the budget fitted under each x from the same runs, each with its interval, method and lack-of-fit verdict, and
`by_x_missing`: an x without one and why);
provenance (versions, created_at, the resolved config with paths relative to the artifact). Units: mismatch and
quality in nats/token (quality: 1 − task reward for a GRPO recipe).

A key present on disk is present after a load and a dump, a key absent stays absent (older artifacts lack some:
`curve.offset`, `budget.warnings`), so `artifact.dump_calibration` writes back the bytes it read
(tests/test_artifact.py). Open-ended parts stay dicts: the model configs (`architecture`), `provenance.config`
and `.environment`, a rollout level's rollout config as it was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_serializer

from admitcheck import fingerprint
from admitcheck.calibration.curve import Budget, CurveFit, MonotoneFit
from admitcheck.calibration.record import LevelKind, RunMeasurements
from admitcheck.config import (
    EvalConfig,
    MetricName,
    ProbeConfig,
    ReferenceConfig,
    RolloutConfig,
    SamplingConfig,
    TrainConfig,
)
from admitcheck.errors import CalibrationError
from admitcheck.measurement.metrics import Functional

if TYPE_CHECKING:
    from admitcheck.measurement.logs import StoredProtocol

SCHEMA_VERSION = 2
BudgetKind = Literal["point", "lower_bound", "upper_bound"]
XMeasure = Literal["start", "run"]
RUN_X: XMeasure = "run"  # the run-averaged x (`BudgetEntry.run_averaged`)


class Section(BaseModel):
    """A fixed part of the artifact: unknown keys are errors, and nothing changes after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------------- pair


class ModelFingerprint(Section):
    architecture: dict[str, Any]  # canonical config.json (`fingerprint.model_fingerprint`)
    weights: str  # content digest of every tensor
    tensors: int | None = None
    parameters: int | None = None


class PromptHashes(Section):
    probe: str
    train: str | None = None
    eval: str | None = None


class Behaviour(Section):
    """Both models' log-probs on a few fixed sequences (`fingerprint.behaviour_fingerprint`)."""

    sequences: list[list[int]]
    student_logprobs: list[list[float]]
    teacher_logprobs: list[list[float]]
    drift_rule: str | None = None


class PairFingerprint(Section):
    student: ModelFingerprint
    teacher: ModelFingerprint
    tokenizer: str
    prompts: PromptHashes
    behaviour: Behaviour | None = None  # None in artifacts written before it


# --------------------------------------------------------------------------------------------------- protocol


class ProbeProtocol(ProbeConfig):
    """`ProbeConfig` as stored: without the prompt set (its hash is in the pair)."""

    prompts: None = Field(None, exclude=True)


class ReferenceProtocol(ReferenceConfig):
    """`ReferenceConfig` as stored: the dtype only (the device changes no number)."""

    device: None = Field(None, exclude=True)  # type: ignore[assignment]


class FunctionalProtocol(Section):
    """Which number the levels' x is (`metrics.Functional`): a screen's mismatch is the same number."""

    estimator: Literal["kl_exact", "k3"]  # per-token term whose sequence means are aggregated
    kappa: float = Field(gt=1)  # each sequence counts at most κ × the value
    aggregate: Literal["sequence_mean"] = "sequence_mean"


class Protocol(Section):
    """How the mismatch was measured: what a screen must measure the same way."""

    metric: MetricName | None = None
    # absent: the x is the uncapped token mean of `metric` (artifacts written before issue #35); a screen refuses it
    functional: FunctionalProtocol | None = None
    sampling: SamplingConfig
    probe: ProbeProtocol
    reference: ReferenceProtocol
    x: XMeasure | None = None
    run_window: int | None = None  # steps the run-averaged x averages over (the first N of each run)

    def flat(self) -> dict[str, Any]:
        """Flat `protocol.*` keys, comparable with `artifact.protocol_of_screen`."""
        return protocol_keys(self.sampling, self.probe, self.reference)

    def stored(self) -> StoredProtocol:
        """The parts a logs screen is compared in, as the artifact stores them: a field it does not store (the
        model's default stands in for it) is None, `x` "start"."""
        from admitcheck.measurement.logs import StoredProtocol

        def kept(model: BaseModel, name: str) -> Any:
            return getattr(model, name) if name in model.model_fields_set else None

        return StoredProtocol(
            x=self.x if "x" in self.model_fields_set else "start",
            num_prompts=kept(self.probe, "num_prompts"),
            max_new_tokens=kept(self.probe, "max_new_tokens"),
            temperature=kept(self.sampling, "temperature"),
            top_p=kept(self.sampling, "top_p"),
            top_k=kept(self.sampling, "top_k"),
        )


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


# --------------------------------------------------------------------------------------------------- recipe, quality


class TrainingRecipe(TrainConfig):
    """The training recipe the budget belongs to: `TrainConfig`'s fields, the base rollout, the seed, and the train
    prompt set relative to the artifact (written last)."""

    prompts: str | None = None  # type: ignore[assignment]
    loss: Literal["pg", "gkd_reverse_kl", "grpo"]
    student_logprobs: Literal["trainer", "rollout"]
    rollout: RolloutConfig
    seed: int

    @model_serializer(mode="wrap")
    def _prompts_last(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if "prompts" in data:
            data["prompts"] = data.pop("prompts")
        return data

    def train_config(self, prompts: str) -> TrainConfig:
        """The recipe as the `TrainConfig` its runs trained with (`prompts`: the resolved train prompt set)."""
        keep = set(TrainConfig.model_fields) - {"prompts"}
        return TrainConfig(prompts=prompts, **{k: getattr(self, k) for k in keep})


class EvalProtocol(EvalConfig):
    """`EvalConfig` as stored: without the prompt set (its hash is in the pair)."""

    prompts: None = Field(None, exclude=True)


class Quality(Section):
    definition: str | None = None
    eval: EvalProtocol | None = None
    start: float | None = None  # mean quality at the start weights
    baseline_mean: float | None = None
    baseline_std: float | None = None
    baseline_seeds: int | None = None
    improvement: float | None = None  # (start − baseline mean) / start


class ToleranceEntry(Section):
    value: float  # τ, in quality units
    rule: str | None = None
    relative: float | None = None
    absolute: float | None = None


# --------------------------------------------------------------------------------------------------- levels, runs


class LevelEntry(Section):
    """A level as `levels.Level.to_dict` writes it."""

    name: str
    kind: LevelKind
    fit: bool = True
    relative_std: float | None = None
    target: float | None = None  # the mismatch the auto grid aimed at, nats/token
    rollout: dict[str, Any] | None = None  # as written (an old FP8-KV recipe names no attention backend)
    staleness: int | None = None


class LevelReport(Section):
    level: str
    kind: LevelKind
    in_fit: bool
    replicates: int
    x: float | None
    x_start: float | None
    x_run: float | None
    paired_cost: float
    paired_cost_interval: tuple[float, float] | None
    paired_cost_sd: float | None
    fitted_cost: float
    decided_budget: bool


class AutoNoiseGrid(Section):
    relative_std: list[float]
    mismatch: list[float]  # k3 at each relative_std, nats/token


# The artifact's key order of a run (as written since schema 1): the measured fields among where the run sits and
# what the fit made of it. `CalibrationArtifact.dump` writes it (RunEntry's own fields come base first; a wrap
# serializer would put it there, but would also turn a nested ±inf or NaN into null under mode="json").
RUN_ENTRY_ORDER = (
    "level",
    "kind",
    "replicate",
    "seed",
    "in_fit",
    "relative_std",
    "staleness",
    "mismatch",
    "mismatch_interval",
    "kl_exact",
    "x_start",
    "x_run",
    "in_run_k3_mean",
    "fit_x",
    "quality",
    "reverse_kl",
    "quality_cost",
    "predicted_cost",
    "quality_start",
    "accuracy",
    "accuracy_start",
    "steps",
)


class RunEntry(RunMeasurements):
    """One run in the artifact: its `record.RunRecord`'s measurements (`RunMeasurements`), where it sits (level,
    replicate) and what the fit made of it (x_start, x_run, fit_x, the paired quality_cost, predicted_cost)."""

    level: str
    kind: LevelKind | None = None
    replicate: int | None = None
    in_fit: bool | None = None
    mismatch: float | None  # required here: a baseline's is null
    x_start: float | None = None
    x_run: float | None = None
    fit_x: float | None
    quality_cost: float
    predicted_cost: float | None = None


# --------------------------------------------------------------------------------------------------- curve, budget


class IsotonicCurve(Section):
    form: Literal["isotonic"]
    x: list[float]
    cost: list[float]
    offset: float | None = None  # None: written before it (0)
    x_measure: XMeasure | None = None
    points: int | None = None

    def fit(self) -> MonotoneFit:
        return MonotoneFit(tuple(self.x), tuple(self.cost), self.form, float(self.offset or 0.0))


class CurveParams(Section):
    plateau: float
    x50: float
    steepness: float


class LogLogisticCurve(Section):
    """A hand-made log-logistic curve (tests and benches)."""

    form: Literal["log_logistic"]
    params: CurveParams

    def fit(self) -> CurveFit:
        return CurveFit(self.form, self.params.plateau, self.params.x50, self.params.steepness)


class SeedPowerLawCurve(Section):
    """The budget's model (`model.fit_seed_power_law`): cost = τ·(x/B)^p, the seed effects fitted away."""

    form: Literal["seed_power_law"]
    tau: float  # quality units
    budget: float  # B, nats/token
    exponent: float  # p
    x_measure: XMeasure | None = None

    def fit(self) -> Any:
        return _PowerLaw(self.tau, self.budget, self.exponent)


class _PowerLaw:
    """τ·(x/B)^p as a curve (`predict`, `inverse`)."""

    def __init__(self, tau: float, budget: float, exponent: float) -> None:
        self.tau, self.budget, self.exponent = tau, budget, exponent

    def predict(self, x: Any) -> Any:
        import numpy as np

        out = self.tau * np.power(np.clip(np.asarray(x, dtype=np.float64), 0.0, None) / self.budget, self.exponent)
        return float(out) if out.ndim == 0 else out

    def inverse(self, cost: float) -> float:
        return 0.0 if cost <= 0 else self.budget * (cost / self.tau) ** (1.0 / self.exponent)


CURVE_FORMS = ("isotonic", "log_logistic", "seed_power_law")
Curve = Annotated[IsotonicCurve | LogLogisticCurve | SeedPowerLawCurve, Field(discriminator="form")]


class BudgetScore(Section):
    mean_z2: float  # mean squared z of the non-noise levels against the noise curve
    z: dict[str, float]


class LackOfFitEntry(Section):
    f: float | None  # None: the test had no degrees of freedom
    dof: tuple[int, int]
    p_value: float


class BudgetUnderX(Section):
    """The budget fitted from the same runs under one x (`budget.by_x`): "start" (the probe at the start weights,
    what a screen measures) or "run" (the engine-vs-trainer k3 averaged over the first `protocol.run_window` steps,
    what a pipeline's logged mismatch is). Older artifacts carry value, kind, interval and score only."""

    value: float
    kind: BudgetKind
    interval: tuple[float, float]
    score: BudgetScore | None = None
    method: Literal["model", "bracket"] | None = None  # how this x's budget was made (as `budget.method`)
    method_reason: str | None = None
    lack_of_fit: LackOfFitEntry | None = None  # the model's test under this x (None: no model fitted)
    lack_of_fit_x_known: LackOfFitEntry | None = None
    accepted: bool | None = None  # the model passed its gate's lack-of-fit tests under this x


class BootstrapDraws(Section):
    quantiles: dict[str, float] = {}
    draws: list[float] = []  # nats/token; 0 = below the smallest level, inf = above the largest


class AdaptiveProtocol(Section):
    """How the adaptive replicates stopped."""

    replicates: int
    rounds: int
    stopped: str
    interval_factor: float
    max_runs: int
    runs: int
    added_levels: list[str] | None = None
    # `levels.decide` (with `levels.decide_from`'s screens folded in): the candidates' bounds the rounds decided
    # around, nats/token; absent when none was named
    decide: list[float] | None = None


class BudgetModel(Section):
    """The seed-effect power law over every run (`model.ModelFit`)."""

    form: Literal["seed_power_law"]
    value: float  # B̂, nats/token (inf: no rising trend)
    interval: tuple[float, float]  # F-profile interval; 0 / inf: open (beyond the levels' range)
    exponent: float
    tau: float
    residual_sd: float | None
    dof: int
    runs: int
    seeds: int
    lack_of_fit: LackOfFitEntry
    accepted: bool
    x_log_se: float = 0.0  # rms of the levels' log-x standard errors, integrated out by the fit (errors in variables)
    lack_of_fit_x_known: LackOfFitEntry | None = None  # the same test with each level's x as known (both gate)
    x_run_share: float | None = None  # λ̂ of the run-x model (the gate's second tier); None: each run at its level's x


class BudgetBracket(Section):
    """The shape-free bracket (`curve.level_bracket`): valid for any non-decreasing curve."""

    interval: tuple[float, float]
    below: str | None
    above: str | None
    level_alpha: float
    rule: str


class BaselineCheck(Section):
    """The baseline runs' spread against the level runs' (`model.baseline_spread_check`)."""

    baseline_sd: float
    runs_sd: float
    f: float
    dof: tuple[int, int]
    p_value: float
    flagged: bool
    rule: str


class IsotonicBudget(Section):
    value: float
    kind: BudgetKind


class BudgetEntry(Section):
    value: float  # nats/token
    kind: BudgetKind
    interval: tuple[float, float]
    confidence: float = 0.95
    n_boot: int = 0
    x: XMeasure = "start"
    x_reason: str = ""
    rule: str | None = None
    decided_by: list[str] = []
    width_factor: float | None = None  # interval high / low; None when open
    by_x: dict[str, BudgetUnderX] = {}
    by_x_missing: dict[str, str] = {}  # an x with no budget, and why (a ledger recorded before `in_run_k3`)
    bootstrap: BootstrapDraws | None = None
    protocol: AdaptiveProtocol | None = None
    warnings: list[str] = []  # what a user must know before gating on it (`calibrate.budget_warnings`)
    method: Literal["model", "bracket"] | None = None  # None: written before the model (the isotonic bootstrap)
    method_reason: str | None = None
    model: BudgetModel | None = None
    bracket: BudgetBracket | None = None
    isotonic: IsotonicBudget | None = None
    baseline_check: BaselineCheck | None = None

    @property
    def run_averaged(self) -> BudgetUnderX | None:
        """The budget under the run-averaged x (`by_x`'s run entry); None when the artifact has none."""
        return self.by_x.get(RUN_X)

    @property
    def run_missing(self) -> str | None:
        """Why the artifact has no run-averaged budget (`by_x_missing`), when it says."""
        return self.by_x_missing.get(RUN_X)


class Provenance(BaseModel):
    """Versions, the time and the resolved config; open (a hand-made artifact may note more)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    admitcheck: str | None = None
    torch: str | None = None
    transformers: str | None = None
    vllm: str | None = None
    environment: dict[str, Any] = {}
    created_at: str | None = None
    torch_threads_per_run: int | None = None
    config: dict[str, Any] = {}  # the resolved calibrate config, paths relative to the artifact
    seconds: float | None = None
    run_cpu_seconds: float | None = None


# --------------------------------------------------------------------------------------------------- the artifact


class CalibrationArtifact(Section):
    """A calibration artifact and (once loaded or written) where it lives."""

    schema_version: int
    name: str
    metric: MetricName
    pair: PairFingerprint
    protocol: Protocol
    recipe: TrainingRecipe
    quality: Quality = Quality()
    tolerance: ToleranceEntry
    levels: list[LevelEntry] = []
    level_report: list[LevelReport] = []
    auto_noise: AutoNoiseGrid | None = None
    runs: list[RunEntry]
    curve: Curve
    budget: BudgetEntry
    provenance: Provenance
    _path: Path | None = PrivateAttr(None)

    def at(self, path: str | Path | None) -> CalibrationArtifact:
        """The same artifact, living at `path`."""
        out = self.model_copy()
        out._path = Path(path) if path is not None else None
        return out

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def tau(self) -> float:
        """τ, the quality cost allowed (quality units)."""
        return float(self.tolerance.value)

    @property
    def pair_fingerprint(self) -> dict[str, Any]:
        """student, teacher, tokenizer and probe_prompts hashes, as `artifact.fingerprint_pair(pair, probe)` gives
        them."""
        p = self.pair
        return {
            "student": p.student.model_dump(exclude_unset=True),
            "teacher": p.teacher.model_dump(exclude_unset=True),
            "tokenizer": p.tokenizer,
            "probe_prompts": p.prompts.probe,
        }

    @property
    def x_measure(self) -> XMeasure:
        """Which mismatch the budget is in: "start" (probe measurement at the start weights) or "run" (engine vs
        trainer k3 averaged over the first `protocol.run_window` training steps, `opd.run_mismatch`)."""
        return self.budget.x

    @property
    def functional(self) -> Functional | None:
        """What the budget's x is (`metrics.Functional`); None for an artifact written before issue #35 (its x is
        the uncapped token mean of `metric`)."""
        f = self.protocol.functional
        return Functional(f.estimator, f.kappa, f.aggregate) if f is not None else None

    def budget_draws(self) -> list[float]:
        """The bootstrap draws of the budget (nats/token; 0 = below the smallest level, inf = above the largest)."""
        return list(self.budget.bootstrap.draws) if self.budget.bootstrap is not None else []

    def gate_budget(self) -> Budget:
        """The budget as the screen's rule reads it (`curve.Budget`, with τ)."""
        b = self.budget
        return Budget(b.value, b.kind, (b.interval[0], b.interval[1]), self.tau, n_boot=b.n_boot)

    def predict_cost(self, x: Any) -> Any:
        """Quality cost (quality units) the stored fit predicts at mismatch x (nats/token); 0 at x = 0."""
        return self.curve.fit().predict(x)

    @property
    def quality_unit(self) -> str:
        return "1 − task reward" if self.recipe.loss == "grpo" else "nats/token"  # (opd.quality_value)

    def train_prompts(self) -> Path:
        """The recipe's train prompt set (stored relative to the artifact), checked against its hash."""
        rel = self.recipe.prompts
        path = Path(rel) if self.path is None or Path(rel).is_absolute() else (self.path.parent / rel).resolve()
        if not path.is_file() or fingerprint.prompts_fingerprint(path) != self.pair.prompts.train:
            raise CalibrationError(
                f"train prompts {path} missing or not the set this calibration trained on",
                file=str(self.path),
                field="recipe.prompts",
            )
        return path

    def summary_rows(self) -> list[tuple[str, str]]:
        """(field, value) rows for a table: the budget and what it belongs to."""
        b, r, q = self.budget, self.recipe, self.quality
        unit = "(1 − task reward)" if r.loss == "grpo" else "nats/token"
        kind = {
            "point": "",
            "lower_bound": " (lower bound: no level reached τ)",
            "upper_bound": " (below the smallest level: add lower levels)",
        }[b.kind]
        rows = [
            ("pair", self.name),
            (
                "recipe",
                f"loss={r.loss} student_logprobs={r.student_logprobs} lr={r.lr:g} ({r.lr_schedule}) "
                f"tis_cap={r.tis_cap} steps={r.steps} batch={r.batch_size}",
            ),
            (
                "baseline quality",
                f"{q.baseline_mean:.4g} ± {q.baseline_std:.2g} {unit} ({q.baseline_seeds} replicates; start "
                f"{q.start:.4g}, improvement {100 * q.improvement:.0f}%)",
            ),
            ("tolerance τ", f"{self.tau:.4g} {unit} ({self.tolerance.rule})"),
            (f"budget ({self.metric})", f"{b.value:.3g} nats/token{kind}"),
            (f"{100 * b.confidence:.0f}% interval", f"[{b.interval[0]:.3g}, {b.interval[1]:.3g}]"),
            *self._method_rows(),
            ("x (mismatch fitted)", f"{b.x}: {b.x_reason}"),
            *self._by_x_rows(),
            ("decided by", ", ".join(b.decided_by) or "-"),
            ("runs", str(len(self.runs))),
        ]
        for lv in self.level_report:
            if lv.kind == "baseline":
                continue
            ci = lv.paired_cost_interval
            cost = f"[{ci[0]:+.3g}, {ci[1]:+.3g}]" if ci else "(held out)"
            rows.append(
                (
                    f"level {lv.level}",
                    f"{lv.replicates} pairs, x {lv.x:.3g}, paired cost "
                    f"{lv.paired_cost:+.3g} {cost}, fit {lv.fitted_cost:+.3g}" + (" *" if lv.decided_budget else ""),
                )
            )
        return rows + [("WARNING", w) for w in self.budget.warnings]

    def _by_x_rows(self) -> list[tuple[str, str]]:
        """The budget under each x, fitted from the same runs (`budget.by_x`), and an x without one and why."""
        rows = []
        for w, v in self.budget.by_x.items():
            lof = f", lack of fit p {v.lack_of_fit.p_value:.3g}" if v.lack_of_fit is not None else ""
            how = f" ({v.method}{lof})" if v.method is not None else ""
            rows.append((f"budget, {w} x", f"{v.value:.3g} [{v.interval[0]:.3g}, {v.interval[1]:.3g}]{how}"))
        return rows + [(f"budget, {w} x", f"none: {why}") for w, why in self.budget.by_x_missing.items()]

    def _method_rows(self) -> list[tuple[str, str]]:
        """How the budget was made: the model (or why not) and the shape-free bracket beside it."""
        b = self.budget
        if b.method is None:
            return []
        rows = [("method", f"{b.method}: {b.method_reason}")]
        if b.model is not None:
            m = b.model
            lof = m.lack_of_fit
            rows.append(
                (
                    "model",
                    f"B {m.value:.3g} [{m.interval[0]:.3g}, {m.interval[1]:.3g}], p {m.exponent:.2f}, residual sd "
                    + (f"{m.residual_sd / m.tau:.2f} τ" if m.residual_sd is not None else "-")
                    + f", lack of fit p {lof.p_value:.3g}"
                    + (f" (x as known {m.lack_of_fit_x_known.p_value:.3g})" if m.lack_of_fit_x_known else ""),
                )
            )
        if b.bracket is not None:
            k = b.bracket
            rows.append(
                (
                    "shape-free bracket",
                    f"[{k.interval[0]:.3g}, {k.interval[1]:.3g}] (set by {k.below or '-'} / {k.above or '-'})",
                )
            )
        if b.baseline_check is not None and b.baseline_check.flagged:
            c = b.baseline_check
            rows.append(("baseline spread", f"sd {c.baseline_sd:.3g} vs runs' {c.runs_sd:.3g}: p {c.p_value:.2g}"))
        return rows

    def dump(self) -> dict[str, Any]:
        """The YAML's mapping: the keys it was read or built with, in the schema's order (JSON types)."""
        data = self.model_dump(mode="json", exclude_unset=True)
        if "runs" in self.model_fields_set:  # each run's keys in the order of RUN_ENTRY_ORDER
            runs = (r.model_dump(mode="json", exclude_unset=True) for r in self.runs)
            data["runs"] = [{k: r[k] for k in RUN_ENTRY_ORDER if k in r} for r in runs]
        return data

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path) if self.path else None, **self.dump()}
