"""The backtest report `<calibration stem>.backtest.yaml` as frozen pydantic models, read by attribute.

    report = load_backtest("calibrations/toy.backtest.yaml")    # CalibrationError naming file and field when unusable
    report.agreement.fraction, report.candidates[0].truth.label
    dump_backtest(report)                                        # the YAML it was read from, byte for byte

Written by `admission.backtest` (schema 1): the calibration it backtested (path, budget, τ, the curve sampled for the
plot), the truth rule, the agreement of verdicts with truths (confusion matrix, Clopper–Pearson interval), each source
family's mean residual (observed − predicted cost), one row per candidate (its verdict, the truth of its full runs,
the cost the calibration predicts at its mismatch) and provenance. Costs in quality units (nats/token for OPD),
mismatch in nats/token. Keys are kept as read (absent stays absent), in the order `backtest` writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr

from admitcheck.calibration.artifact import check_version, dump_yaml, read_output, validated
from admitcheck.errors import CalibrationError

SCHEMA_VERSION = 1


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SampledCurve(Section):
    x: list[float]  # mismatch, nats/token (a log grid spanning the budget and the candidates)
    cost: list[float]  # the calibration curve's predicted cost there


class CalibrationRef(Section):
    path: str  # relative to the report
    name: str
    metric: str
    budget: float
    budget_interval: tuple[float, float]
    tolerance: float  # τ
    quality: str  # the quality's definition
    curve: SampledCurve


class TruthRule(Section):
    replicates: int
    step: int
    max_replicates: int
    looks: list[int]
    confidence: float
    confidence_per_look: float
    rule: str


class Agreement(Section):
    decided_truths: int
    ambiguous: int
    agree: int
    disagree: int
    fraction: float | None  # None with no decided truth
    interval: tuple[float, float]  # Clopper–Pearson
    confidence: float
    confusion: dict[str, dict[str, int]]  # verdict -> truth label -> count
    decided_verdicts: Agreement | None = None  # the same over the verdicts that were not marginal


class FamilyResidual(Section):
    candidates: int
    mean: float
    interval: tuple[float, float]
    se: float
    agree: int
    disagree: int
    ambiguous: int


class VerdictSummary(Section):
    decision: Literal["ADMIT", "REJECT"]
    marginal: bool
    decided_by: str
    estimator: str
    mismatch: float
    mismatch_interval: tuple[float, float]
    k3: float
    ratio_to_budget: float
    probes: int
    reason: str


class TruthEntry(Section):
    label: str  # "admit" | "reject" | "ambiguous"
    cost: float  # mean paired cost
    interval: tuple[float, float]
    sd: float
    n: int
    confidence: float
    paired_costs: list[float]


class CandidateRow(Section):
    name: str
    family: str  # one of `backtest.FAMILIES`
    candidate: dict[str, Any]  # the candidate config as given (an old FP8-KV recipe names no attention backend)
    verdict: VerdictSummary
    x: float  # the truth runs' mean start mismatch
    x_runs: list[float]
    within_factor_3: bool
    predicted_cost: float
    truth: TruthEntry
    residual: float
    residual_over_tau: float
    agrees: bool | None  # None: the truth is ambiguous
    why: str | None


class BacktestProvenance(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    environment: dict[str, Any] = {}
    config: dict[str, Any] = {}  # the backtest config, paths relative to the report
    runs: int | None = None
    runs_reused: int | None = None
    run_cpu_seconds: float | None = None
    seconds: float | None = None


class BacktestReport(Section):
    schema_version: int
    kind: Literal["backtest"]
    calibration: CalibrationRef
    truth_rule: TruthRule
    agreement: Agreement
    within_factor_3: int
    families: dict[str, FamilyResidual]
    candidates: list[CandidateRow]
    provenance: BacktestProvenance
    _path: Path | None = PrivateAttr(None)

    def at(self, path: str | Path) -> BacktestReport:
        out = self.model_copy()
        out._path = Path(path)
        return out

    @property
    def path(self) -> Path | None:
        return self._path

    @property
    def rows(self) -> list[CandidateRow]:
        return self.candidates

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True)

    def to_dict(self) -> dict[str, Any]:
        return self.dump()


def load_backtest(path: str | Path) -> BacktestReport:
    """Read a backtest report; a CalibrationError naming the file and the first missing or bad field."""
    path = Path(path)
    data = read_output(path, "backtest report")
    if data.get("kind") != "backtest":
        raise CalibrationError("not a backtest report (kind: backtest)", file=str(path), field="kind")
    check_version(data.get("schema_version"), SCHEMA_VERSION, path)
    return validated(BacktestReport, data, path)


def dump_backtest(report: BacktestReport) -> str:
    """The report's YAML (`artifact.dump_yaml`: key order kept)."""
    return dump_yaml(report.dump())
