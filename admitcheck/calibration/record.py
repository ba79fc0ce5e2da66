"""The run record: one finished calibration (or backtest truth) run, as a worker returns it and a ledger line holds it.

    record = levels.run_task(config, config_file, level, seed)     # a RunRecord (kind "run", key "")
    line = record.keyed(run_key(level, seed)).line()               # the ledger line (dict, JSON-able)
    RunRecord.model_validate(json.loads(text))                     # a ledger line read back
    record.run_key.seed, record.run_key.level.kind                 # its key, typed (`RunKey`, `LevelSpec`)

Units: mismatch, k3, kl_exact and quality in nats/token (quality: 1 − task reward for a GRPO recipe); seconds are
wall-clock, cpu_seconds process time. A record holds what was measured; where it sits in a calibration (level,
replicate) and what the fit derives from it (paired cost, x, predicted cost) are `schema.RunEntry`'s. Ledger lines
are written with sorted keys (`io.append_jsonl`), so a record's field order is not part of the format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, with_config
from typing_extensions import TypedDict

LevelKind = Literal["baseline", "noise", "rollout", "staleness"]


@with_config(ConfigDict(extra="forbid"))
class StepSeconds(TypedDict, total=False):
    """The OPD steps' wall time by phase, summed over the run's steps (`runs.OPDResult.seconds`); their sum is the
    training time that `admission.step_time` splits into the rollouts' share. A dict, typed: a misspelt phase in a
    ledger line is an error."""

    rollout: float
    teacher: float
    backward: float
    sync: float


@dataclass(frozen=True)
class LevelSpec:
    """What determines a level's runs, not its name (`levels.Level.spec`): a run key's level, read by attribute.
    `dump` is its mapping in the key (`systematic` only when set: fresh noise keeps the older ledgers' keys)."""

    kind: LevelKind
    relative_std: float = 0.0  # weight noise of a noise level, relative to each tensor's RMS
    rollout: dict[str, Any] | None = None  # a rollout level's config as its key dump (`RolloutConfig.key_dump`)
    staleness: int = 0  # optimizer steps the engine lags behind (staleness levels)
    systematic: bool = False  # noise: the step-0 draw kept for the whole run

    def dump(self) -> dict[str, Any]:
        spec = {
            "kind": self.kind,
            "relative_std": self.relative_std,
            "rollout": self.rollout,
            "staleness": self.staleness,
        }
        return spec | {"systematic": True} if self.systematic else spec


@dataclass(frozen=True)
class RunKey:
    """A run's identity in a ledger: its level's spec and its seed. `encode` is the ledger's key string."""

    level: LevelSpec
    seed: int

    def encode(self) -> str:
        return json.dumps({"level": self.level.dump(), "seed": self.seed}, sort_keys=True)

    @classmethod
    def decode(cls, key: str) -> RunKey:
        data = json.loads(key)
        return cls(LevelSpec(**data["level"]), data["seed"])


class RunMeasurements(BaseModel):
    """What a run measured that both its ledger record (`RunRecord`) and its artifact entry (`schema.RunEntry`)
    hold: one base, so the two cannot drift apart (`measurements()` copies them from a record to an entry)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    relative_std: float | None = None  # weight noise of a noise level, relative to each tensor's RMS
    staleness: int | None = None  # optimizer steps the engine lags behind (staleness levels)
    mismatch: float | None = None  # start mismatch on the config's metric, nats/token
    mismatch_interval: tuple[float, float] | None = None
    kl_exact: float | None = None
    in_run_k3_mean: float | None = None
    quality: float  # final held-out quality
    reverse_kl: float | None = None
    quality_start: float | None = None
    accuracy: float | None = None
    accuracy_start: float | None = None
    steps: int | None = None

    def measurements(self) -> dict[str, Any]:
        """The shared fields by name (`RunEntry(level=…, **record.measurements())`)."""
        return {k: getattr(self, k) for k in RunMeasurements.model_fields}


class RunRecord(RunMeasurements):
    """One run: its start mismatch (None for the baseline, paired with itself), its OPD run's quality, per-step
    engine-vs-trainer k3 and learning curve, and its timings. Frozen; fields as in the shipped ledgers (the measured
    ones shared with the artifact's entry are `RunMeasurements`')."""

    kind: Literal["run"] = "run"  # the ledger line's kind (a header and the grid are the others)
    key: str = ""  # `RunKey.encode()` (`campaign.run_key(level, seed)`): the ledger's key; "" until it is filed
    k3: float | None = None
    probe_tokens: int = 0
    # --- issue 36: the final quality's evaluation standard error, clustered by prompt (nats/token; the same weights
    # scored with other eval draws would spread by this). None for GRPO's task error and in ledgers written before.
    quality_se: float | None = None
    evals: list[list[int | float | None]] = []  # [step, reverse KL, accuracy] per evaluation
    in_run_k3: list[float] = []  # engine-vs-trainer k3 of every step: the run-averaged x is a mean over a window
    loss_first: float | None = None
    loss_last: float | None = None
    seconds: float | None = None
    cpu_seconds: float = 0.0
    seconds_by_phase: StepSeconds = {}
    # -- where the rest of the run's time went, and the GPU's load (issue #37; absent from older ledger lines)
    seconds_setup: float | None = None  # pair loaded (a worker's first run only), engine built or retargeted
    seconds_probe: float | None = None  # the start-mismatch measurement (staleness: the stale student's steps too)
    seconds_evaluation: float | None = None  # every held-out quality evaluation
    gpu_utilization: float | None = None  # mean % of time a kernel ran on the run's GPU (NVML); None on CPU
    worker_run: int | None = None  # this run's ordinal in its worker process: 1 paid for loading the pair
    finished_at: float | None = None  # Unix time the run finished, on its worker's clock (a campaign's runs/minute)
    reused_from: str | None = None  # a backtest's copy of a calibration ledger's run: that ledger's file name

    @property
    def run_key(self) -> RunKey:
        """The key, typed (a filed record's only: "" is no key)."""
        return RunKey.decode(self.key)

    def keyed(self, key: str) -> RunRecord:
        """The record filed under `key` in a ledger."""
        return self.model_copy(update={"key": key})

    def reused(self, ledger_name: str) -> RunRecord:
        return self.model_copy(update={"reused_from": ledger_name})

    def line(self) -> dict[str, Any]:
        """The ledger line: the fields the record was made or read with (a worker's: all of them, null ones too; a
        line read back: exactly its keys), with its kind and key; `reused_from` only on a reused run."""
        return {"kind": self.kind, "key": self.key} | self.model_dump(mode="json", exclude_unset=True)
