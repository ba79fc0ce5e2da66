"""Screening: measure candidate rollout configs sequentially and ADMIT or REJECT each against the budget B.

    from admitcheck import io
    from admitcheck.config import ScreenConfig
    from admitcheck.admission.screen import ScreenSession, screen, validate
    cfg = io.load_config("examples/toy_screen.yaml", ScreenConfig)
    validate(cfg)                                      # inputs + calibration compatibility, loads no model
    result = screen(cfg, candidates=["fp8_kv"])        # ScreenResult; result.exit_code is 0 or 1
    v = result.verdicts[0]; v.decision, v.estimator, v.mismatch, v.mismatch_interval, v.decided_by, v.margin
    screen(cfg, from_logs="rollouts.jsonl")            # one verdict from a pipeline's logged log-probs
    session = ScreenSession(cfg); session.screen_candidate(cfg.candidates[0])   # one reference, many candidates

This module orchestrates; the decision rule (look plan, per-look level, heavy-tail rule, the budget's interval,
verdict) is `admitcheck.admission.sequential`, pure; the measurement is the one probe loop,
`admitcheck.measurement.probe`. Batch i samples
probe prompts [i·bs, (i+1)·bs) with seed probe.seed + i, as `measure` does; after the batch that reaches
probe.min_prompts and after every later one, the studentized-bootstrap interval of the decision estimator (kl_exact
where the engine gives full rows, else the calibration's metric) over all sequences so far is one look of
`admission.look`, until decided or probe.num_prompts. A staleness-k candidate's mismatch is KL(π_θ0 ‖ π_θk) on
tokens the start weights sample, θk = the student after k real OPD steps with the calibration's recipe. One
reference model and one noise floor per engine kind (on the first-look probes) serve every candidate.

A candidate whose engine fails (EngineError: vLLM would not start, out of memory) does not lose the others: the rest
are screened, then `screen` raises an EngineError (exit 3) naming the first failed candidate, with the partial
ScreenResult (verdicts obtained, `failures` by name) in its `partial` attribute, for the reports.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

from admitcheck import fingerprint, io
from admitcheck.admission.sequential import (
    Decision,
    Evidence,
    Verdict,
    budget_band,
    confidence_per_look,
    decision_estimator,
    look,
    looks_plan,
    verdict,
)
from admitcheck.config import CandidateConfig, RolloutConfig, ScreenConfig
from admitcheck.errors import AdmitcheckWarning, CalibrationError, ConfigError, EngineError

# Re-exported: the verdict and the look plan were defined here before `admission` (cli, report, bench use them).
__all__ = ["Decision", "ScreenResult", "ScreenSession", "Verdict", "looks_plan", "screen", "validate"]

Progress = Callable[[str, int, int], None]  # (label, batches done, batches at most)


@dataclass(frozen=True)
class ScreenResult:
    """`screen`'s result: one verdict per candidate, the calibration used, the noise floor, timings (s)."""

    verdicts: list[Verdict]
    calibration: dict[str, Any]  # path, pair, metric, budget, budget_interval, budget_kind, tolerance, recipe
    floor: dict[str, dict[str, Any]]  # per engine kind: dtype, k3, k3_interval, probes, tokens, seconds
    policy: dict[str, Any]
    source: Literal["engine", "logs"]
    seconds_setup: float  # tokenizer, reference model
    seconds_total: float
    failures: dict[str, str] = field(default_factory=dict)  # candidate name -> its engine failure (no verdict)
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)  # candidate -> {"prefix_shift": {...}}

    @property
    def all_admitted(self) -> bool:
        return not self.failures and all(v.admitted for v in self.verdicts)

    @property
    def exit_code(self) -> int:
        """0 when every candidate is admitted, 1 when any is rejected, 3 when any candidate's engine failed."""
        return 3 if self.failures else 0 if self.all_admitted else 1

    def to_dict(self) -> dict[str, Any]:
        from admitcheck import __version__

        return asdict(self) | {
            "admitcheck": __version__,
            "all_admitted": self.all_admitted,
            "exit_code": self.exit_code,
        }


def _diagnostics(config: ScreenConfig, chosen: list[CandidateConfig], config_file: str | None) -> dict:
    """`diagnostics: [prefix_shift]`: coupled sampling of each hf rollout candidate against the reference."""
    if "prefix_shift" not in config.diagnostics:
        return {}
    from admitcheck.measurement.prefix_shift import prefix_shift_for

    return {
        c.name: {"prefix_shift": prefix_shift_for(config, c.rollout, config_file=config_file).to_dict()}
        for c in chosen
        if c.rollout is not None and c.rollout.engine == "hf"
    }


# ------------------------------------------------------------------------------------------ inputs and checks


def select_candidates(config: ScreenConfig, names: list[str] | None) -> list[CandidateConfig]:
    """The candidates `--candidate NAME` picks (all when None); an unknown name is a ConfigError listing the known."""
    known = {c.name: c for c in config.candidates}
    for n in names or []:
        if n not in known:
            raise ConfigError(f"unknown candidate {n!r} (known: {', '.join(known)})", field="--candidate")
    return [known[n] for n in dict.fromkeys(names)] if names else list(config.candidates)


def with_logs(config: ScreenConfig, path: str | Path, log_format: str = "auto") -> ScreenConfig:
    """The config with `source: logs` reading `path` in `log_format` (what `--from-logs FILE --format F` means)."""
    data = config.model_dump() | {"source": "logs", "logs": {"path": str(Path(path).resolve()), "format": log_format}}
    return ScreenConfig.model_validate(data)


def check_compatibility(config: ScreenConfig, calibration: Any, *, config_file: str | None = None) -> list[str]:
    """Whether the screen's pair and protocol are the calibration's. Returns warnings (strict fingerprint
    differences the behaviour check must settle); raises a CalibrationError naming the first field that makes the
    calibration unusable: the tokenizer, the probe prompt set or the protocol (sampling temperature, top_p, top_k,
    probe.max_new_tokens, reference.dtype). From logs, only the pair's models and tokenizer are compared (the logs
    come from the pipeline's own prompts and sampling).

    Architecture and weight hashes that differ are not refused here: a re-saved or rebuilt pair can be the same
    pair. `load_checked_calibration` then compares the models' behaviour (`fingerprint.check_behaviour`). The metric
    is the calibration's, whatever it is: the screen measures on its scale (`admission.decision_estimator`).
    """
    from admitcheck.calibration.artifact import fingerprint_pair, protocol_of_screen

    logs = config.source == "logs"
    present = fingerprint_pair(config.pair, None if logs else config.probe)
    diffs = fingerprint.strict_differences(calibration.pair_fingerprint, present)
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    if not logs:
        mine |= protocol_of_screen(config)
        theirs |= calibration.protocol
    blocking = [d for d in diffs if d.field in ("pair.tokenizer", "pair.probe_prompts")]
    blocking += [fingerprint.Difference(k, theirs.get(k), mine.get(k)) for k in sorted(set(mine) | set(theirs))
                 if theirs.get(k) != mine.get(k)]  # fmt: skip
    blocking.sort(key=lambda d: d.field != "metric")
    if blocking:
        d = blocking[0]
        name = "probe.prompts" if d.field == "pair.probe_prompts" else d.field.removeprefix("protocol.")
        raise CalibrationError(
            f"differs from the calibration {calibration.path}: it has {fingerprint.short_value(d.stored)}, this screen "
            f"{fingerprint.short_value(d.present)}; use a calibration of this pair and protocol, or screen with the "
            "calibration's settings",
            file=config_file,
            field=name,
        )
    return [str(d) for d in diffs if d.field not in ("pair.tokenizer", "pair.probe_prompts")]


def check_inputs(config: ScreenConfig, chosen: list[CandidateConfig], file: str | None) -> None:
    """Files and dirs the screen needs exist (before any hashing or loading)."""
    for fld, d in (("pair.student", config.pair.student), ("pair.teacher", config.pair.teacher)):
        if not (Path(d) / "config.json").is_file():
            raise ConfigError(f"not a model dir (no config.json): {d}", file=file, field=fld)
    if config.source == "engine":
        _probe_prompts(config, file)  # a missing or empty prompt set is named before any hash comparison
    for c in chosen:
        if c.rollout is not None and c.rollout.weights_from and not Path(c.rollout.weights_from).is_dir():
            raise ConfigError(
                f"checkpoint dir not found: {c.rollout.weights_from}",
                file=file,
                field=f"candidates.{c.name}.rollout.weights_from",
            )
    cap = config.capacity.model_config_path
    if cap and not Path(cap).is_file():
        raise ConfigError(f"file not found: {cap}", file=file, field="capacity.model_config_path")


def load_checked_calibration(config: ScreenConfig, *, config_file: str | None = None, behaviour: bool = True):
    """`artifact.load_calibration(config.calibration)` after `check_compatibility`. When the strict fingerprints
    differ and `behaviour` is set, both models are loaded (float32, CPU) and their log-probs on the calibration's
    fixed sequences compared (`fingerprint.check_behaviour`: CalibrationError when they drifted); the strict
    differences are then issued as `PairRewrittenWarning`s."""
    from admitcheck.calibration.artifact import load_calibration

    calibration = load_calibration(config.calibration)
    if calibration.x_measure != "start":  # the screen's probe measurement is at the start weights (a stale candidate
        # too): comparing it with a budget fitted on run-averaged mismatch would compare two different quantities
        raise CalibrationError(
            f"the budget of {calibration.path} is in run-averaged mismatch (budget.x: {calibration.x_measure}), but "
            "screen measures at the start weights; re-fit it with `levels.x: start` in its calibrate config (the "
            "finished runs are reused from the ledger): both fits are in its budget.by_x",
            file=config_file,
            field="calibration",
        )
    notes = check_compatibility(config, calibration, config_file=config_file)
    if notes and behaviour:
        stored = calibration.behaviour
        if stored is None:
            raise CalibrationError(
                f"{notes[0]}; the calibration stores no behavioural fingerprint to settle it: re-run calibrate",
                file=config_file,
                field="pair",
            )
        student = io.load_causal_lm(config.pair.student, "float32", "cpu", file=config_file, field="pair.student")
        teacher = io.load_causal_lm(config.pair.teacher, "float32", "cpu", file=config_file, field="pair.teacher")
        drift = fingerprint.check_behaviour(stored, student, teacher, budget=calibration.budget.value, file=config_file)
        del student, teacher
        warnings.warn(
            PairRewrittenWarning(
                f"the pair's files differ from the calibration's ({'; '.join(notes[:3])}"
                f"{'; …' if len(notes) > 3 else ''}) but it behaves the same (log-prob drift student "
                f"{drift['student']:.2g}, teacher {drift['teacher']:.2g} nats/token, within "
                f"{fingerprint.BEHAVIOUR_TOLERANCE:g} × budget)"
            ),
            stacklevel=2,
        )
    elif notes:
        warnings.warn(
            PairRewrittenWarning(
                f"the pair's files differ from the calibration's ({'; '.join(notes[:3])}); screen compares the "
                "models' behaviour before measuring"
            ),
            stacklevel=2,
        )
    return calibration


class PairRewrittenWarning(AdmitcheckWarning):
    """The pair's strict fingerprints differ from the calibration's (the CLI prints these in yellow)."""


def _probe_prompts(config: ScreenConfig, file: str | None) -> list[dict]:
    prompts = io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts)
    if len(prompts) < config.probe.min_prompts:
        raise ConfigError(
            f"probe.min_prompts is {config.probe.min_prompts} but {config.probe.prompts} holds only "
            f"{len(prompts)} prompts",
            file=file,
            field="probe.min_prompts",
        )
    return prompts


def check_engines(chosen: list[CandidateConfig], file: str | None) -> None:
    """A ConfigError naming `candidates.<name>.rollout...` when this machine's vLLM cannot run a candidate (vLLM
    candidates only; imports vllm, loads no model), so a screen stops before anything is measured."""
    for c in chosen:
        if c.rollout is None or c.rollout.engine != "vllm":
            continue
        from admitcheck.rollout.engines import vllm as vllm_engine

        check = getattr(vllm_engine, "check_rollout", None)
        if check is None:
            return
        try:
            check(c.rollout)
        except ConfigError as exc:
            where = f"candidates.{c.name}.{exc.field or 'rollout'}"
            raise ConfigError(exc.message, file=file, field=where) from None


def validate(
    config: ScreenConfig, *, config_file: str | None = None, candidates: list[str] | None = None
) -> dict[str, Any]:
    """Inputs on disk, calibration compatibility, engine support, logs file; no model loads. Returns what a screen
    would run."""
    chosen = select_candidates(config, candidates)
    check_inputs(config, chosen, config_file)
    calibration = load_checked_calibration(config, config_file=config_file, behaviour=False)
    if config.source == "logs":
        from admitcheck.measurement.logs import read_logs

        logs = read_logs(config.logs.path, format=config.logs.format)
        looks, probes = 1, logs.num_sequences
    else:
        check_engines(chosen, config_file)
        probes = len(_probe_prompts(config, config_file))
        looks = looks_plan(config, probes)[2]
    return {
        "calibration": _calibration_summary(calibration),
        "candidates": [c.name for c in chosen],
        "source": config.source,
        "probes_available": probes,
        "max_looks": looks,
        "confidence_per_look": confidence_per_look(config.policy.confidence, looks),
    }


# ------------------------------------------------------------------------------------------------ screening


class ScreenSession:
    """What every candidate of one screen shares: the calibration, one reference, the probe prompts, the look plan
    and one noise floor per engine kind. The recipe search screens its steps through one session.

        session = ScreenSession(cfg, config_file="screen.yaml")     # inputs checked, calibration loaded
        v = session.screen_candidate(CandidateConfig(name="fp8_kv", rollout=...))   # a Verdict
    """

    def __init__(self, config: ScreenConfig, *, config_file: str | None = None, calibration: Any = None) -> None:
        self.config, self.file = config, config_file
        self.calibration = calibration or load_checked_calibration(config, config_file=config_file)
        self.metric = self.calibration.metric  # the budget's scale; `admission.decision_estimator` measures it
        self.tokens: Any = None
        self.prompt_ids: list[list[int]] = []
        self.reference: Any = None
        self.plan: tuple[int, int, int] = (1, 1, 1)  # batches before the first look, batches at most, looks K
        self.confidence = config.policy.confidence  # per look, once prepared
        self.floors: dict[str, dict[str, Any]] = {}
        self.failed_floors: dict[str, EngineError] = {}  # engine kind -> why its floor failed

    def prepare(self) -> None:
        """Tokenizer, probe prompts, look plan and the reference model (once)."""
        from admitcheck.measurement.measure import check_devices, load_pair_tokenizer, tokenize_prompts

        if self.reference is not None:
            return
        cfg, file = self.config, self.file
        check_devices(cfg, file=file)
        self.tokens = load_pair_tokenizer(cfg.pair, file=file)
        prompts = _probe_prompts(cfg, file)
        self.prompt_ids = tokenize_prompts(self.tokens, prompts, file=cfg.probe.prompts)
        self.plan = looks_plan(cfg, len(prompts))
        self.confidence = confidence_per_look(cfg.policy.confidence, self.plan[2])
        io.check_causal_lm(cfg.pair.teacher, file=file, field="pair.teacher")
        self.reference = io.load_causal_lm(cfg.pair.student, cfg.reference.dtype, cfg.reference.device, file=file)

    def _start_engine(self, rollout: RolloutConfig, name: str):
        from admitcheck.rollout.engines import build_engine

        ids = {"eos_token_id": self.tokens.eos_token_id, "pad_token_id": self.tokens.pad_token_id}
        return engine_call(name, partial(build_engine, rollout, self.config.pair.student, **ids))

    def _measure(self, name: str, engine, reference, max_batches: int, decide: bool, progress: Progress | None):
        """(ProbeRun, final look state, looks): sample, score and look batch after batch until decided."""
        from admitcheck.measurement.probe import ProbeRun, probe_batches

        cfg, run, state, looks = self.config, ProbeRun(), "undecided", 0
        loop = probe_batches(
            engine,
            reference,
            self.prompt_ids,
            cfg.probe,
            cfg.sampling,
            full=cfg.full_logprobs,
            max_batches=max_batches,
            guard=partial(engine_call, name),
            label=name,
            progress=progress,
        )
        for batch in loop:
            run.add(batch)
            if run.nonfinite:
                state = "nonfinite"
                break
            if not decide or batch.index + 1 < self.plan[0]:
                continue
            looks += 1
            pooled = run.pooled(self.confidence)
            est = decision_estimator(self.metric, pooled.values)
            state = look(*pooled.intervals[est], *run.tail(est), budget_band(self.calibration.budget))
            if state in ("admit", "reject"):
                break
        return run, state, looks

    def _evidence(self, run, state: str, looks: int, max_looks: int) -> Evidence:
        m = run.metrics(self.confidence)
        est = decision_estimator(self.metric, m.values)
        share, k = run.tail(est)
        counts = dict(looks=looks, probes=run.num_sequences, tokens=run.num_tokens, max_looks=max_looks)
        bad = dict(nonfinite=run.nonfinite, engine_nonfinite=run.engine_nonfinite)
        return Evidence(state, dict(m.values), dict(m.intervals), self.confidence, **counts, **bad, estimator=est,
                        top_share=share, tail_index=k)  # fmt: skip

    def floor(self, rollout: RolloutConfig, progress: Progress | None = None) -> dict[str, Any]:
        """The engine in the reference's configuration on the first-look probes, measured once per engine kind."""
        from admitcheck.measurement.measure import floor_rollout

        self.prepare()
        fr = floor_rollout(rollout, self.config.reference)
        if fr.engine in self.failed_floors:  # failed once: every candidate of this engine kind fails the same way
            raise self.failed_floors[fr.engine]
        if fr.engine not in self.floors:
            t0, label = time.perf_counter(), f"floor ({fr.engine})"
            try:
                engine = self._start_engine(fr, label)
                try:
                    run, _, _ = self._measure(label, engine, self.reference, self.plan[0], False, progress)
                finally:
                    engine.close()
            except EngineError as exc:
                self.failed_floors[fr.engine] = exc
                raise
            pooled = run.pooled(self.confidence)
            keys = [k for k in ("k3", "kl_exact") if k in pooled.values]
            self.floors[fr.engine] = {
                "dtype": fr.dtype,
                **{k: pooled.values[k] for k in keys},
                **{f"{k}_interval": pooled.intervals[k] for k in keys},
                "probes": run.num_sequences,
                "tokens": run.num_tokens,
                "seconds": time.perf_counter() - t0,
            }
        return self.floors[fr.engine]

    def screen_candidate(self, cand: CandidateConfig, progress: Progress | None = None) -> Verdict:
        """One candidate's Verdict (its engine started, measured sequentially, closed); EngineError on failure."""
        from admitcheck.calibration import opd
        from admitcheck.measurement.measure import floor_rollout

        self.prepare()
        rollout, reference = cand.rollout, self.reference
        if cand.staleness is not None:  # θ0 samples in the reference's configuration; θk is the reference
            rollout = floor_rollout(RolloutConfig(**self.calibration.recipe["rollout"]), self.config.reference)
        floor = self.floor(rollout, progress)
        t0 = time.perf_counter()
        if cand.staleness is not None:
            start = self.reference if self.config.reference.dtype == "float32" else None
            stale = partial(opd.stale_reference, self.calibration, self.config, cand.staleness, reference=start)
            reference = engine_call(cand.name, stale)
        engine = self._start_engine(rollout, cand.name)
        try:
            run, state, looks = self._measure(cand.name, engine, reference, self.plan[1], True, progress)
            allocated = getattr(engine, "kv_cache_report", None)  # vLLM: what the engine really allocated
            allocated = allocated() if callable(allocated) and cand.staleness is None else None
        finally:
            engine.close()
        e = self._evidence(run, state, looks, self.plan[2])
        capacity = self.capacity(cand) | ({"engine_allocated": allocated} if allocated else {})
        return self._verdict(cand.name, e, floor.get(e.estimator), capacity, time.perf_counter() - t0, "engine")

    def screen_logs(self, chosen: list[CandidateConfig]) -> Verdict:
        """One verdict from a pipeline's logged log-probs: every sequence at once (one look, nominal confidence)."""
        import numpy as np

        from admitcheck.measurement.logs import read_logs
        from admitcheck.measurement.metrics import mismatch_metrics, pareto_k, top_share

        t0 = time.perf_counter()
        logs = read_logs(self.config.logs.path, format=self.config.logs.format)
        self.confidence = self.config.policy.confidence
        m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask, confidence=self.confidence)
        est = decision_estimator(self.metric, m.values)
        sums = m.per_sequence[est]
        state = "nonfinite" if m.nonfinite else look(*m.intervals[est], top_share(sums), pareto_k(sums),
                                                       budget_band(self.calibration.budget))  # fmt: skip
        engine_bad = int((~np.isfinite(logs.rollout_logprobs) & logs.mask).sum())
        e = Evidence(state, dict(m.values), dict(m.intervals), self.confidence, 1, m.num_sequences, m.num_tokens,
                     1, m.nonfinite, engine_bad, est, top_share(sums), pareto_k(sums))  # fmt: skip
        one = chosen[0] if len(chosen) == 1 else None  # the logs belong to the one candidate selected, if any
        name, capacity = (one.name, self.capacity(one)) if one else (Path(logs.path).stem, None)
        return self._verdict(name, e, None, capacity, time.perf_counter() - t0, "logs")

    def capacity(self, cand: CandidateConfig) -> dict[str, Any]:
        """KV-cache capacity of the candidate on the configured GPU (staleness changes no memory: plain BF16)."""
        return _capacity(self.config, cand)

    def _verdict(self, name, e: Evidence, floor, capacity, seconds: float, source) -> Verdict:
        cal, policy = self.calibration, self.config.policy.undecided
        extra = {"metric": self.metric, "floor": floor, "capacity": capacity, "seconds": seconds, "source": source}
        return verdict(name, e, cal.budget, policy, cal.predict_cost, **extra)


def screen(
    config: ScreenConfig,
    *,
    config_file: str | None = None,
    candidates: list[str] | None = None,
    from_logs: str | Path | None = None,
    log_format: str = "auto",
    progress: Progress | None = None,
) -> ScreenResult:
    """Verdicts for the chosen candidates (all by default) against `config.calibration`; see the module docstring.
    `from_logs` (+ `log_format`, see `logs.read_logs`) screens a pipeline's logged log-probs instead of sampling."""
    t0 = time.perf_counter()
    config = with_logs(config, from_logs, log_format) if from_logs is not None else config
    chosen = select_candidates(config, candidates)
    check_inputs(config, chosen, config_file)
    session = ScreenSession(config, config_file=config_file)
    verdicts: list[Verdict] = []
    failures: dict[str, str] = {}
    if config.source == "logs":
        verdicts, setup = [session.screen_logs(chosen)], 0.0
    else:
        check_engines(chosen, config_file)
        session.prepare()
        setup = time.perf_counter() - t0
        for c in chosen:
            try:
                verdicts.append(session.screen_candidate(c, progress))
            except EngineError as exc:  # this candidate has no verdict; the others keep theirs
                failures[c.name] = _failure_message(exc, c.name)
    result = ScreenResult(
        verdicts,
        _calibration_summary(session.calibration),
        session.floors,
        config.policy.model_dump() | {"confidence_per_look": session.confidence, "max_looks": session.plan[2]},
        config.source,
        setup,
        time.perf_counter() - t0,
        failures,
        _diagnostics(config, chosen, config_file) if config.source == "engine" else {},
    )
    if failures:
        raise _partial_failure(result, config_file)
    return result


def _failure_message(exc: EngineError, name: str) -> str:
    """The engine error on one line, with where it happened when that is not the candidate itself (its floor)."""
    where = (exc.field or "").removeprefix(f"candidates.{name}").lstrip(".").removeprefix("candidates.")
    return f"{where}: {exc.message}" if where else exc.message


def _partial_failure(result: ScreenResult, file: str | None) -> EngineError:
    """EngineError (exit 3) naming the first failed candidate; `partial` carries the result for the reports."""
    name, message = next(iter(result.failures.items()))
    others = [n for n in result.failures if n != name]
    kept = ", ".join(v.name for v in result.verdicts) or "none"
    also = f"; also failed: {', '.join(others)}" if others else ""
    exc = EngineError(f"{message}{also} (verdicts obtained: {kept})", file=file, field=f"candidates.{name}")
    exc.partial = result  # what was measured survives the failure
    return exc


def engine_call(name: str, fn: Callable[[], Any]) -> Any:
    """Run an engine (or reference) call; out-of-memory and crashes become an EngineError (exit 3) naming the
    candidate. User errors (AdmitcheckError) pass through; bugs other than RuntimeError keep their traceback."""
    import torch

    try:
        return fn()
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise EngineError(f"out of memory: {exc}".split("\n")[0], field=f"candidates.{name}") from exc
    except RuntimeError as exc:
        raise EngineError(f"engine failed: {exc}".split("\n")[0], field=f"candidates.{name}") from exc


def _capacity(config: ScreenConfig, cand: CandidateConfig) -> dict[str, Any]:
    """KV-cache capacity of the candidate on the configured GPU (staleness changes no memory: plain BF16)."""
    import json

    from admitcheck.admission.capacity import kv_capacity

    cap, gib = config.capacity, 2**30
    path = Path(cap.model_config_path or Path(config.pair.student) / "config.json")
    try:
        c = kv_capacity(
            json.loads(path.read_text(encoding="utf-8")),
            cand.rollout or RolloutConfig(),
            int(cap.gpu_memory_gib * gib),
            cap.utilization,
            int(cap.activation_reserve_gib * gib),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot size the KV cache from this model config ({type(exc).__name__}: {exc})",
            file=str(path),
            field="capacity.model_config_path",
        ) from None
    keys = (
        "ratio_vs_bf16",
        "kv_ratio_equal_memory",
        "num_tokens",
        "num_tokens_bf16",
        "bytes_per_token",
        "weight_bytes",
        "fits",
    )
    return {k: getattr(c, k) for k in keys} | {"gpu_memory_gib": cap.gpu_memory_gib}


def _calibration_summary(calibration) -> dict[str, Any]:
    b, r = calibration.budget, calibration.recipe
    return {
        "path": str(calibration.path),
        "pair": calibration.pair_name,
        "metric": calibration.metric,
        "budget": b.value,
        "budget_interval": tuple(b.interval),
        "budget_kind": b.kind,
        "tolerance": b.tolerance,
        "recipe": {k: r.get(k) for k in ("loss", "student_logprobs", "lr", "tis_cap", "temperature")},
    }
