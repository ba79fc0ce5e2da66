"""`backtest --status`: where a backtest stands, from its ledger and kept screen, without running or loading a model.

    st = backtest_status(io.load_config("examples/smollm2_backtest.yaml", BacktestConfig), "examples/…")
    st.rows[0].pairs, st.rows[0].truth, st.rows[0].cost_interval      # a BacktestStatus

A backtest on a GPU runs for longer than one device session (SmolLM2: 18 candidates × 4–12 pairs), so its ledger is
read between sessions: per candidate the pairs made so far (a candidate run and the baseline run of the same seed),
the truth `truth.sequential_truth` gives them (None while the next look's pairs are missing), the mean paired cost
with its interval (the settled look's; else over every pair made so far, at the per-look confidence), the cost the
calibration's curve predicts at the runs' mean mismatch, and the verdict the kept screen
(`backtest.screen_cache_path`) gives, when it was kept. An interim cost is not the report's: the report is what
`backtest` writes once every truth is settled. Per source family, the interim mean residual with its interval by seed
(`truth.family_residual`: the candidates share their baselines) over the candidates with at least 2 pairs.

Baselines come from the backtest's ledger, else from the calibration's ledger when both ledgers carry the same header
(the pair and run-relevant config as fingerprinted where they were written) — what `backtest` reuses, less its
torch/transformers check (the runs were made on another machine; `backtest` itself checks it before reusing).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck import io
from admitcheck.admission import truth
from admitcheck.admission.backtest import candidate_level, family, output_path, read_kept_screen, screen_cache_path
from admitcheck.admission.backtest_report import Agreement
from admitcheck.calibration.artifact import load_calibration
from admitcheck.calibration.campaign import run_key
from admitcheck.calibration.ledger import LedgerHeader, header_difference, ledger_path, read_live
from admitcheck.calibration.levels import Level, replicate_seed
from admitcheck.calibration.record import RunRecord
from admitcheck.config import BacktestConfig, CalibrateConfig
from admitcheck.errors import ConfigError


@dataclass(frozen=True)
class CandidateStatus:
    """One candidate's truth runs so far."""

    name: str
    family: str
    runs: int  # candidate runs in the ledger at the replicate seeds
    pairs: int  # leading replicates with both the candidate's and the baseline's run (what a look reads)
    next_look: int | None  # pairs the next look needs; None once the truth is settled
    truth: str | None  # admit / reject / ambiguous once settled (`truth.sequential_truth`), else None
    cost: float | None  # mean paired cost, nats/token: the settled look's, else over all `pairs` (None below 2)
    cost_interval: tuple[float, float] | None  # Student's t at the per-look confidence
    look_confidence: float | None
    x: float | None  # mean start mismatch of the candidate's runs
    predicted_cost: float | None  # the calibration curve at x
    verdict: str | None  # the kept screen's decision (None: no screen kept yet)
    verdict_mismatch: float | None
    verdict_interval: tuple[float, float] | None  # the screen's final interval on the mismatch
    kv_tokens_vs_bf16: float | None  # the screen's KV tokens against BF16 at equal memory (its capacity summary)
    paired_costs: list[float] = field(default_factory=list)  # candidate − baseline quality at the replicate seeds

    @property
    def residual(self) -> float | None:
        return None if self.cost is None or self.predicted_cost is None else self.cost - self.predicted_cost


@dataclass(frozen=True)
class FamilySoFar:
    """A source family's interim mean residual (observed − predicted cost) with its interval by seed."""

    candidates: int
    mean: float
    interval: list[float]  # [lo, hi]
    se: float


@dataclass(frozen=True)
class BacktestStatus:
    ledger: Path
    calibration: Path
    tau: float
    budget: float
    baseline_runs: int  # at the replicate seeds, from either ledger
    baselines_from: str  # "backtest ledger", "calibration ledger", or both
    candidate_runs: int  # runs in the backtest's ledger
    screen_kept: bool
    rows: list[CandidateStatus] = field(default_factory=list)
    # per source family, over its candidates with ≥ 2 pairs: `truth.family_residual` (mean residual, interval by seed)
    families: dict[str, FamilySoFar] = field(default_factory=dict)

    @property
    def settled(self) -> int:
        return sum(r.truth is not None for r in self.rows)

    @property
    def agreement(self) -> Agreement | None:
        """The report's agreement (`truth.agreement`) over the truths settled so far that have a kept verdict; None
        when there is none yet."""
        done = [r for r in self.rows if r.truth is not None and r.verdict is not None]
        return Agreement(**truth.agreement([r.verdict for r in done], [r.truth for r in done])) if done else None

    def to_dict(self) -> dict[str, Any]:
        rows = [asdict(r) | {"residual": r.residual} for r in self.rows]
        head = {k: v for k, v in asdict(self).items() if k != "rows"}
        agreement = self.agreement  # a property: computed once here
        extra = {"ledger": str(self.ledger), "calibration": str(self.calibration),
                 "agreement": None if agreement is None else agreement.model_dump(mode="json")}  # fmt: skip
        return head | extra | {"rows": rows}


def _runs(path: Path) -> tuple[dict | None, dict[str, RunRecord]]:
    """A ledger's header line and its runs by key (none when there is no ledger yet)."""
    if not path.is_file():
        return None, {}
    header, runs = read_live(path)
    return header, {r.key: r for r in runs}


def backtest_status(config: BacktestConfig, config_file: str | None = None) -> BacktestStatus:
    """The backtest's progress (see the module docstring); ConfigError naming the field when its calibrate config or
    calibration is missing."""
    cal_file = config.calibrate_config
    if not Path(cal_file).is_file():
        raise ConfigError(f"file not found: {cal_file}", file=config_file, field="calibrate_config")
    cal_cfg = io.load_config(cal_file, CalibrateConfig)
    calibration = load_calibration(cal_cfg.output)
    out = output_path(config, calibration)
    mine_header, mine = _runs(ledger_path(out))
    theirs_header, theirs = _runs(ledger_path(calibration.path))

    reuse = theirs_header is not None and (
        mine_header is None or not header_difference(LedgerHeader.read(mine_header), LedgerHeader.read(theirs_header))
    )
    seeds = [replicate_seed(cal_cfg.seed, r) for r in range(config.truth.max_replicates)]
    base = Level("baseline", "baseline")
    baselines, sources = {}, set()
    for s in seeds:
        key = run_key(base, s)
        if key in mine:
            baselines[s] = mine[key]
            sources.add("backtest ledger")
        elif reuse and key in theirs:
            baselines[s] = theirs[key]
            sources.add("calibration ledger")
    verdicts = _kept_verdicts(screen_cache_path(out))
    counts = truth.look_counts(config.truth)
    rows = []
    for cand in config.candidates:
        lv = candidate_level(cand)
        runs = [mine.get(run_key(lv, s)) for s in seeds]
        pairs = 0
        while pairs < len(seeds) and runs[pairs] is not None and seeds[pairs] in baselines:
            pairs += 1
        diffs = [runs[r].quality - baselines[seeds[r]].quality for r in range(pairs)]
        settled, needed = truth.sequential_truth(diffs, calibration.tau, config.truth)
        cost = interval = conf = None
        if pairs >= 2:  # the settled look's, else all the pairs made so far at the per-look level (interim)
            conf = truth.confidence_per_look(config.truth.confidence, len(counts))
            t = settled or truth.truth_at(diffs, calibration.tau, conf)
            cost, interval = t.cost, t.interval
        xs = [r.mismatch for r in runs if r is not None and r.mismatch is not None and math.isfinite(r.mismatch)]
        x = float(np.mean(xs)) if xs else None
        v = verdicts.get(cand.name)
        rows.append(
            CandidateStatus(
                name=cand.name,
                family=family(cand),
                runs=sum(r is not None for r in runs),
                pairs=pairs,
                next_look=needed,
                truth=settled.label if settled is not None else None,
                cost=cost,
                cost_interval=interval,
                look_confidence=conf,
                x=x,
                predicted_cost=float(calibration.predict_cost(x)) if x is not None else None,
                verdict=v.decision if v is not None else None,
                verdict_mismatch=v.mismatch if v is not None else None,
                verdict_interval=tuple(v.mismatch_interval) if v is not None else None,
                kv_tokens_vs_bf16=v.capacity.ratio_vs_bf16 if v is not None and v.capacity is not None else None,
                paired_costs=diffs,
            )
        )
    families = {}
    for name in dict.fromkeys(r.family for r in rows):
        members = [r for r in rows if r.family == name and r.pairs >= 2 and r.predicted_cost is not None]
        if members:
            costs, predicted = [r.paired_costs for r in members], [r.predicted_cost for r in members]
            families[name] = FamilySoFar(**truth.family_residual(costs, predicted))
    return BacktestStatus(
        ledger=ledger_path(out),
        calibration=calibration.path,
        tau=calibration.tau,
        budget=calibration.budget.value,
        baseline_runs=len(baselines),
        baselines_from=" and ".join(sorted(sources)) or "none yet",
        candidate_runs=len(mine),
        screen_kept=bool(verdicts),
        rows=rows,
        families=families,
    )


def _kept_verdicts(path: Path) -> dict:
    """The kept screen's verdicts by candidate name (none when no screen was kept or it cannot be read)."""
    kept = read_kept_screen(path)
    return {} if kept is None else {v.name: v for v in kept.report.verdicts}
