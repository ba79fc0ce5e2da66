"""One screen's shared state (`ScreenSession`): the inputs read once at the edge (`inputs.ScreenInputs`: the
calibration, the pair, the probe prompts or the logs, the look plan), one reference and one noise floor per engine
kind, for many candidates. `screen` and the recipe search screen through it.

    session = ScreenSession(read_screen_inputs(cfg, config_file="screen.yaml"))
    verdict = session.screen_candidate(cfg.candidates[0])

Its walk enters it from `screen` and leaves it for the engines, the probe loop and the decision rule; the guards and
the estimator check are `checks`, the evidence of a run `sequential.Evidence.of_run` (tests/test_screen_path.py
counts the re-entries).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

from admitcheck.admission.checks import candidate_capacity, engine_call, engine_errors, functional_means
from admitcheck.admission.inputs import ScreenInputs
from admitcheck.admission.screen_report import FloorSummary
from admitcheck.admission.sequential import Evidence, Verdict, budget_band, look, verdict
from admitcheck.admission.staleness import stale_reference
from admitcheck.config import CandidateConfig, RolloutConfig
from admitcheck.errors import EngineError

Progress = Callable[[str, int, int], None]  # (label, batches done, batches at most)


class ScreenSession:
    """What every candidate of one screen shares: its inputs, one reference and one noise floor per engine kind.
    The recipe search screens its steps through one session.

        session = ScreenSession(read_screen_inputs(cfg, config_file="screen.yaml"))   # inputs read and checked
        v = session.screen_candidate(CandidateConfig(name="fp8_kv", rollout=...))   # a Verdict
    """

    def __init__(self, inputs: ScreenInputs) -> None:
        self.inputs, self.config, self.file = inputs, inputs.config, inputs.file
        self.pair, self.calibration = inputs.pair, inputs.calibration
        self.functional = self.calibration.functional  # what the budget's x is: the screen measures the same number
        self.plan, self.confidence = inputs.plan, inputs.confidence
        ref = self.config.reference
        self.reference: Any = self.pair.student(ref.dtype, ref.device) if inputs.logs is None else None
        self.floors: dict[str, FloorSummary] = {}
        self.failed_floors: dict[str, EngineError] = {}  # engine kind -> why its floor failed

    def _measure(self, rollout, name, reference, max_batches: int, decide: bool, progress, report_kv=False):
        """(ProbeRun, final look state, looks, the KV cache the engine allocated or None): the engine started,
        sampled, scored and looked at batch after batch until decided, closed."""
        from admitcheck.measurement.probe import ProbeRun, probe_batches
        from admitcheck.rollout.engines import build_engine

        cfg, tokens, run, state, looks = self.config, self.pair.tokens, ProbeRun(), "undecided", 0
        ids = {"eos_token_id": tokens.eos_token_id, "pad_token_id": tokens.pad_token_id}
        engine = engine_call(name, partial(build_engine, rollout, cfg.pair.student, **ids))
        try:
            loop = probe_batches(
                engine,
                reference,
                list(self.inputs.prompt_ids),
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
                x = functional_means(self.functional, run.sums(), name, self.file)
                alpha = (1.0 - self.confidence) / 2.0
                state = look(x, budget_band(self.calibration.gate_budget()), self.functional.kappa, alpha)
                if state in ("admit", "reject"):
                    break
            allocated = getattr(engine, "kv_cache_report", None)  # vLLM: what the engine really allocated
            allocated = allocated() if callable(allocated) and report_kv else None
        finally:
            engine.close()
        return run, state, looks, allocated

    def floor(self, rollout: RolloutConfig, progress: Progress | None = None) -> FloorSummary:
        """The engine in the reference's configuration on the first-look probes, measured once per engine kind."""
        from admitcheck.rollout.floor import floor_rollout

        fr = floor_rollout(rollout, self.config.reference)
        if fr.engine in self.failed_floors:  # failed once: every candidate of this engine kind fails the same way
            raise self.failed_floors[fr.engine]
        if fr.engine not in self.floors:
            t0, label = time.perf_counter(), f"floor ({fr.engine})"
            try:
                run, _, _, _ = self._measure(fr, label, self.reference, self.plan.first, False, progress)
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
        report_kv = cand.staleness is None
        run, state, looks, allocated = self._measure(
            rollout, cand.name, reference, self.plan.most, True, progress, report_kv
        )
        e = Evidence.of_run(run, self.functional, state, looks, self.plan.looks, self.confidence)
        capacity = candidate_capacity(self.config, cand)
        capacity = capacity.model_copy(update={"engine_allocated": allocated}) if allocated else capacity
        return self._verdict(cand.name, e, floor.mismatch, capacity, time.perf_counter() - t0, "engine")

    def screen_logs(self) -> Verdict:
        """One verdict from a pipeline's logged log-probs (`ScreenInputs.logs`): every sequence at once (one look),
        at the policy's confidence spent over `logs.gates` runs of the gate (1 − α/gates)."""
        from pathlib import Path

        import numpy as np

        from admitcheck.measurement.metrics import functional_value, mismatch_metrics, pareto_k, top_share

        t0, logs = time.perf_counter(), self.inputs.logs
        m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask, confidence=self.confidence)
        x = functional_means(self.functional, m.per_sequence, Path(logs.path).stem, self.file)
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
            max_looks=self.config.logs.gates,
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
        chosen = self.inputs.chosen
        one = chosen[0] if len(chosen) == 1 else None  # the logs belong to the one candidate selected, if any
        name, capacity = (one.name, candidate_capacity(self.config, one)) if one else (Path(logs.path).stem, None)
        return self._verdict(name, e, None, capacity, time.perf_counter() - t0, "logs")

    def _verdict(self, name, e: Evidence, floor, capacity, seconds: float, source) -> Verdict:
        cal, policy = self.calibration, self.config.policy.undecided
        extra = {"metric": cal.metric, "floor": floor, "capacity": capacity, "seconds": seconds, "source": source}
        return verdict(name, e, cal.gate_budget(), policy, cal.predict_cost, **extra)
