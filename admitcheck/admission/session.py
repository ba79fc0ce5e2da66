"""One screen's shared state (`ScreenSession`): the calibration, one reference, the probe prompts, the look plan and
one noise floor per engine kind, for many candidates. `screen` and the recipe search screen through it.

    session = ScreenSession(cfg, config_file="screen.yaml")
    verdict = session.screen_candidate(cfg.candidates[0])
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from admitcheck import io
from admitcheck.admission.checks import (
    candidate_capacity,
    engine_call,
    engine_errors,
    load_checked_calibration,
    probe_prompts,
)
from admitcheck.admission.screen_report import FloorSummary
from admitcheck.admission.sequential import (
    Evidence,
    LookPlan,
    Verdict,
    budget_band,
    confidence_per_look,
    look,
    looks_plan,
    verdict,
)
from admitcheck.admission.staleness import stale_reference
from admitcheck.calibration.schema import CalibrationArtifact
from admitcheck.config import CandidateConfig, RolloutConfig, ScreenConfig
from admitcheck.errors import CalibrationError, EngineError
from admitcheck.pairs.load import LoadedPair

# Re-exported: the verdict and the look plan were defined here before `admission` (cli, report, bench use them).

Progress = Callable[[str, int, int], None]  # (label, batches done, batches at most)


class ScreenSession:
    """What every candidate of one screen shares: the calibration, one reference, the probe prompts, the look plan
    and one noise floor per engine kind. The recipe search screens its steps through one session.

        session = ScreenSession(cfg, config_file="screen.yaml")     # inputs checked, calibration loaded
        v = session.screen_candidate(CandidateConfig(name="fp8_kv", rollout=...))   # a Verdict
    """

    def __init__(
        self,
        config: ScreenConfig,
        *,
        config_file: str | None = None,
        calibration: CalibrationArtifact | None = None,
        pair: LoadedPair | None = None,
    ) -> None:
        self.config, self.file = config, config_file
        self.pair = pair if pair is not None else LoadedPair(config.pair, file=config_file)  # read once, shared
        self.calibration = calibration or load_checked_calibration(config, config_file=config_file, pair=self.pair)
        self.metric = self.calibration.metric  # the budget's scale
        self.functional = self.calibration.functional  # what the budget's x is: the screen measures the same number
        self.tokens: Any = None
        self.prompt_ids: list[list[int]] = []
        self.reference: Any = None
        self.plan = LookPlan(1, 1, 1)  # batches before the first look, batches at most, looks K
        self.confidence = config.policy.confidence  # per look, once prepared
        self.floors: dict[str, FloorSummary] = {}
        self.failed_floors: dict[str, EngineError] = {}  # engine kind -> why its floor failed

    def prepare(self) -> None:
        """Tokenizer, probe prompts, look plan and the reference model (once)."""
        from admitcheck.pairs.load import check_devices, tokenize_prompts

        if self.reference is not None:
            return
        cfg, file = self.config, self.file
        check_devices(cfg, file=file)
        self.tokens = self.pair.tokens
        prompts = probe_prompts(cfg, file)
        self.prompt_ids = tokenize_prompts(self.tokens, prompts, file=cfg.probe.prompts)
        self.plan = looks_plan(cfg, len(prompts))
        self.confidence = cfg.policy.confidence  # a confidence sequence: valid at every look, no α split
        io.check_causal_lm(cfg.pair.teacher, file=file, field="pair.teacher")
        self.reference = self.pair.student(cfg.reference.dtype, cfg.reference.device)

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
            guard=partial(engine_errors, name),
            label=name,
            progress=progress,
        )
        for batch in loop:
            run.add(batch)
            if run.nonfinite:
                state = "nonfinite"
                break
            if not decide or batch.index + 1 < self.plan.first:
                continue
            looks += 1
            x = self._sequence_means(run.sums(), name)
            alpha = (1.0 - self.confidence) / 2.0
            state = look(x, budget_band(self.calibration.gate_budget()), self.functional.kappa, alpha)
            if state in ("admit", "reject"):
                break
        return run, state, looks

    def _sequence_means(self, sums: dict[str, Any], name: str) -> Any:
        """The functional's per-sequence means; a CalibrationError when this engine cannot measure its estimator."""
        est = self.functional.estimator
        if est not in sums:
            raise CalibrationError(
                f"the budget's x is {self.functional.describe()}, but candidate {name!r} gives no full-vocabulary "
                "rows (kl_exact): its mismatch would be another number; screen it against a calibration on k3",
                file=self.file,
                field="calibration.protocol.functional",
            )
        return self.functional.sequence_means(sums)

    def _evidence(self, run, state: str, looks: int, max_looks: int) -> Evidence:
        m = run.metrics(self.confidence)
        fv = run.functional(self.functional, self.confidence)
        share, k = run.tail(fv.estimator)
        counts = dict(looks=looks, probes=run.num_sequences, tokens=run.num_tokens, max_looks=max_looks)
        bad = dict(nonfinite=run.nonfinite, engine_nonfinite=run.engine_nonfinite)
        return Evidence(
            state,
            dict(m.values),
            dict(m.intervals),
            self.confidence,
            **counts,
            **bad,
            estimator=fv.estimator,
            top_share=share,
            tail_index=k,
            mismatch=fv.value,
            mismatch_interval=fv.interval,
            capped_share=fv.capped_share,
            kappa=fv.kappa,
            functional=self.functional.describe(),
        )

    def floor(self, rollout: RolloutConfig, progress: Progress | None = None) -> FloorSummary:
        """The engine in the reference's configuration on the first-look probes, measured once per engine kind."""
        from admitcheck.rollout.floor import floor_rollout

        self.prepare()
        fr = floor_rollout(rollout, self.config.reference)
        if fr.engine in self.failed_floors:  # failed once: every candidate of this engine kind fails the same way
            raise self.failed_floors[fr.engine]
        if fr.engine not in self.floors:
            t0, label = time.perf_counter(), f"floor ({fr.engine})"
            try:
                engine = self._start_engine(fr, label)
                try:
                    run, _, _ = self._measure(label, engine, self.reference, self.plan.first, False, progress)
                finally:
                    engine.close()
            except EngineError as exc:
                self.failed_floors[fr.engine] = exc
                raise
            pooled = run.pooled(self.confidence)
            keys = [k for k in ("k3", "kl_exact") if k in pooled.values]
            fv = run.functional(self.functional, self.confidence) if self.functional.estimator in keys else None
            self.floors[fr.engine] = FloorSummary(
                dtype=fr.dtype,
                mismatch=fv.value if fv else None,  # the functional, the verdict's scale
                **{k: pooled.values[k] for k in keys},
                **{f"{k}_interval": pooled.intervals[k] for k in keys},
                probes=run.num_sequences,
                tokens=run.num_tokens,
                seconds=time.perf_counter() - t0,
            )
        return self.floors[fr.engine]

    def screen_candidate(self, cand: CandidateConfig, progress: Progress | None = None) -> Verdict:
        """One candidate's Verdict (its engine started, measured sequentially, closed); EngineError on failure."""
        from admitcheck.rollout.floor import floor_rollout

        self.prepare()
        rollout, reference = cand.rollout, self.reference
        if cand.staleness is not None:  # θ0 samples in the reference's configuration; θk is the reference
            rollout = floor_rollout(self.calibration.recipe.rollout, self.config.reference)
        floor = self.floor(rollout, progress)
        t0 = time.perf_counter()
        if cand.staleness is not None:
            stale = partial(stale_reference, self.calibration, self.config, cand.staleness, self.pair)
            reference = engine_call(cand.name, stale)
            device = self.config.reference.device
            if device != "cpu":  # the GPU's memory goes back to the engines: the float32 teacher (and θ0) are large
                self.pair.release("teacher", "float32", device)
                if self.config.reference.dtype != "float32":  # else θ0 is the reference, kept for every candidate
                    self.pair.release("student", "float32", device)
        engine = self._start_engine(rollout, cand.name)
        try:
            run, state, looks = self._measure(cand.name, engine, reference, self.plan.most, True, progress)
            allocated = getattr(engine, "kv_cache_report", None)  # vLLM: what the engine really allocated
            allocated = allocated() if callable(allocated) and cand.staleness is None else None
        finally:
            engine.close()
        e = self._evidence(run, state, looks, self.plan.looks)
        capacity = self.capacity(cand) | ({"engine_allocated": allocated} if allocated else {})
        return self._verdict(cand.name, e, floor.mismatch, capacity, time.perf_counter() - t0, "engine")

    def screen_logs(self, chosen: list[CandidateConfig]) -> Verdict:
        """One verdict from a pipeline's logged log-probs: every sequence at once (one look), at the policy's
        confidence spent over `logs.gates` runs of the gate (1 − α/gates)."""
        import numpy as np

        from admitcheck.measurement.logs import read_logs
        from admitcheck.measurement.metrics import functional_value, mismatch_metrics, pareto_k, top_share

        t0 = time.perf_counter()
        logs = read_logs(self.config.logs.path, format=self.config.logs.format)
        gates = self.config.logs.gates  # a gate re-run on every checked step: α spent over the runs, as over looks
        self.confidence = confidence_per_look(self.config.policy.confidence, gates)
        m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask, confidence=self.confidence)
        x = self._sequence_means(m.per_sequence, Path(logs.path).stem)
        fv = functional_value(m.per_sequence, self.functional, self.confidence)
        sums = m.per_sequence[fv.estimator]
        alpha = (1.0 - self.confidence) / 2.0
        band = budget_band(self.calibration.gate_budget())
        state = "nonfinite" if m.nonfinite else look(x, band, self.functional.kappa, alpha)
        engine_bad = int((~np.isfinite(logs.rollout_logprobs) & logs.mask).sum())
        e = Evidence(
            state,
            values=dict(m.values),
            intervals=dict(m.intervals),
            confidence=self.confidence,
            looks=1,
            probes=m.num_sequences,
            tokens=m.num_tokens,
            max_looks=gates,
            nonfinite=m.nonfinite,
            engine_nonfinite=engine_bad,
            estimator=fv.estimator,
            top_share=top_share(sums),
            tail_index=pareto_k(sums),
            mismatch=fv.value,
            mismatch_interval=fv.interval,
            capped_share=fv.capped_share,
            kappa=fv.kappa,
            functional=self.functional.describe(),
        )
        one = chosen[0] if len(chosen) == 1 else None  # the logs belong to the one candidate selected, if any
        name, capacity = (one.name, self.capacity(one)) if one else (Path(logs.path).stem, None)
        return self._verdict(name, e, None, capacity, time.perf_counter() - t0, "logs")

    def capacity(self, cand: CandidateConfig) -> dict[str, Any]:
        """KV-cache capacity of the candidate on the configured GPU (staleness changes no memory: plain BF16)."""
        return candidate_capacity(self.config, cand)

    def _verdict(self, name, e: Evidence, floor, capacity, seconds: float, source) -> Verdict:
        cal, policy = self.calibration, self.config.policy.undecided
        extra = {"metric": self.metric, "floor": floor, "capacity": capacity, "seconds": seconds, "source": source}
        return verdict(name, e, cal.gate_budget(), policy, cal.predict_cost, **extra)
