"""The screen's output (`ScreenReport`) as frozen pydantic models, read by attribute, beside `BacktestReport`.

    report = screen(cfg)                                  # a ScreenReport; report.exit_code is 0, 1 or 3
    report.calibration.budget, report.floor["hf"].k3, report.policy.max_looks, report.verdicts[0].decision
    doc = report.to_dict()                                # the `admitcheck screen --json` document (before null-ing)
    again = load_screen_report("screen.json")             # that document read back: ConfigError naming the field

One verdict per candidate (`sequential.Verdict`), the calibration it was judged against, the noise floor per engine
kind, the policy with what it came to (confidence per look, looks at most), the source (engine or logs), timings (s),
the candidates whose engine failed (no verdict), and each candidate's diagnostics. Mismatch in nats/token.

The JSON document writes non-finite numbers as null (strict JSON has none); read back, a null where a number stands
is NaN. `all_admitted` and `exit_code` follow from the verdicts and failures: written, never read back.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    field_validator,
    model_serializer,
    model_validator,
)

from admitcheck.admission.sequential import BudgetKind, Verdict
from admitcheck.config import PolicyConfig
from admitcheck.errors import ConfigError, EngineError
from admitcheck.measurement.prefix_shift_report import PrefixShiftReport


def _nan_if_null(v: Any) -> Any:
    return math.nan if v is None else v


Number = Annotated[float, BeforeValidator(_nan_if_null)]  # a float the JSON document may hold as null (non-finite)


def _version() -> str:
    from admitcheck import __version__

    return __version__


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RecipeSummary(Section):
    """The calibration's training recipe, the fields a reader of a screen needs to know which budget it was."""

    loss: Literal["pg", "gkd_reverse_kl", "grpo"]
    student_logprobs: Literal["trainer", "rollout"]
    lr: float
    tis_cap: float | None
    temperature: float


class CalibrationSummary(Section):
    """The calibration a screen judged against (`checks.calibration_summary`)."""

    path: str
    pair: str
    metric: str
    budget: Number  # B, nats/token
    budget_interval: tuple[Number, Number]
    budget_kind: BudgetKind
    tolerance: Number  # τ, quality units
    recipe: RecipeSummary | None = None


# Measured only where the floor's engine gave them: a key absent stays absent (k3 always, kl_exact with full rows).
_FLOOR_OPTIONAL = ("k3", "kl_exact", "k3_interval", "kl_exact_interval")


class FloorSummary(Section):
    """The floor engine (the candidate's engine in the reference's configuration) on the first-look probes."""

    dtype: str
    mismatch: Number | None  # the functional, the verdict's scale; None when this engine cannot measure it
    k3: Number | None = None  # token means, nats/token
    kl_exact: Number | None = None
    k3_interval: tuple[Number, Number] | None = None
    kl_exact_interval: tuple[Number, Number] | None = None
    probes: int
    tokens: int
    seconds: float

    @model_serializer(mode="wrap")
    def _absent_stays_absent(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        return {k: v for k, v in data.items() if k not in _FLOOR_OPTIONAL or k in self.model_fields_set}


class PolicySummary(PolicyConfig):
    """The screen's policy as configured, and what it came to."""

    confidence_per_look: float  # engine screens: the policy's confidence (a confidence sequence); logs: α over gates
    max_looks: int


class CandidateDiagnostics(Section):
    """`diagnostics: [prefix_shift]`: the prefix-shift diagnostic of an hf candidate."""

    prefix_shift: PrefixShiftReport


_VERDICT_NULLABLE = {f.name for f in dataclasses.fields(Verdict) if "None" in str(f.type) or f.type == "Any"}


def _nan_for_null(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _nan_for_null(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_nan_for_null(x) for x in v]
    return _nan_if_null(v)


class MeasuredWeights(Section):
    """Which student weights the mismatch was measured at: the pair's student (the start weights, where a
    calibration's start x is measured), a checkpoint of it (`checkpoint`), or what scored a pipeline's logs."""

    at: Literal["start", "checkpoint", "logs"]
    student: str | None  # the dir the reference (and every engine) loaded; logs: `logs.checkpoint` when given
    step: int | None = None  # the training step of a checkpoint (`checkpoint_step`) or of the logs (`logs.step`)

    def describe(self) -> str:
        step = f" (step {self.step})" if self.step is not None else ""
        if self.at == "start":
            return f"at the start weights ({self.student})"
        if self.at == "checkpoint":
            return f"at checkpoint {self.student}{step}"
        return f"from the logs{step}" + (f", scored by {self.student}" if self.student else "")


class ScreenReport(Section):
    """`screen`'s result: one verdict per candidate, the calibration used, the noise floor, timings (s)."""

    verdicts: list[Verdict]
    calibration: CalibrationSummary
    floor: dict[str, FloorSummary]  # per engine kind
    policy: PolicySummary
    source: Literal["engine", "logs"]
    seconds_setup: float  # tokenizer, reference model
    seconds_total: float
    failures: dict[str, str] = {}  # candidate name -> its engine failure (no verdict)
    diagnostics: dict[str, CandidateDiagnostics] = {}
    weights: MeasuredWeights | None = None  # None: a report written before it (the start weights)
    admitcheck: str = Field(default_factory=_version)  # the version that screened

    @model_validator(mode="before")
    @classmethod
    def _derived_not_read(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if k not in ("all_admitted", "exit_code")}
        return data

    @field_validator("verdicts", mode="before")
    @classmethod
    def _verdicts_from_json(cls, data: Any) -> Any:
        """JSON's null where a verdict's number stands is NaN (a field that may be None keeps its None)."""
        if not isinstance(data, list):
            return data
        return [
            {k: (x if k in _VERDICT_NULLABLE else _nan_for_null(x)) for k, x in v.items()} if isinstance(v, dict) else v
            for v in data
        ]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def all_admitted(self) -> bool:
        return not self.failures and all(v.admitted for v in self.verdicts)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        """0 when every candidate is admitted, 1 when any is rejected, 3 when any candidate's engine failed."""
        return 3 if self.failures else 0 if self.all_admitted else 1

    def to_dict(self) -> dict[str, Any]:
        """The JSON document before its non-finite numbers become null (`report.to_json`)."""
        return self.model_dump()


class PartialScreenError(EngineError):
    """A screen in which some candidates' engines failed (exit 3): `partial` is its report, the verdicts obtained
    and the failures by name, for the reports the CLI still writes."""

    def __init__(self, message: str, partial: ScreenReport, *, file: str | None = None, field: str | None = None):
        super().__init__(message, file=file, field=field)
        self.partial = partial


def load_screen_report(path: str | Path, *, config_file: str | None = None, field: str | None = None) -> ScreenReport:
    """`admitcheck screen --json` output read back; a ConfigError naming the file (or `config_file`'s `field`) and
    the first field that does not fit."""
    from admitcheck import io

    text = io.read_text(path)
    try:
        return ScreenReport.model_validate_json(text)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or "document"
        raise ConfigError(
            f"{path} is not `admitcheck screen --json` output ({where}: {e['msg']})",
            file=config_file if config_file is not None else str(path),
            field=field,
        ) from None


def screened_report(
    path: str | Path, metric: str, pair: str, *, config_file: str | None = None, field: str | None = None
) -> tuple[ScreenReport, list[float]]:
    """A screen report read once and the positive finite upper bounds of its verdicts (nats/token, their
    `mismatch_interval`'s upper end), for a calibration of `pair` on `metric` (`levels.decide_from`); a ConfigError
    naming the file or field when the report is not a screen's, measured another metric, or judged against another
    pair's calibration."""
    report = load_screen_report(path, config_file=config_file, field=field)
    where = {"file": config_file if config_file is not None else str(path), "field": field}
    other = sorted({v.metric for v in report.verdicts} - {metric})
    if other:
        raise ConfigError(f"{path} screened on {', '.join(other)}, this calibration's metric is {metric}", **where)
    if report.calibration.pair != pair:
        raise ConfigError(
            f"{path} screened against a calibration of pair {report.calibration.pair!r}, this one is {pair!r}", **where
        )
    uppers = (float(v.mismatch_interval[1]) for v in report.verdicts)
    return report, [u for u in uppers if math.isfinite(u) and u > 0]  # a null candidate's bound 0 decides nothing


def screened_upper_bounds(
    path: str | Path, metric: str, pair: str, *, config_file: str | None = None, field: str | None = None
) -> list[float]:
    """`screened_report`'s bounds alone."""
    return screened_report(path, metric, pair, config_file=config_file, field=field)[1]
