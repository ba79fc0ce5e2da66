"""The `calibrate` kind: the training recipe (`TrainConfig`, GRPO's options), the held-out eval, the mismatch
levels (auto noise grid, adaptive rounds), the tolerance and the resources of a run.

    cfg = io.load_config("examples/toy_calibrate.yaml", CalibrateConfig)
    cfg.train.loss, cfg.levels.replicates, cfg.tolerance.relative
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_serializer, model_validator

from admitcheck.config.base import NOISE_SWITCHES, MetricName, Strict, without_defaults
from admitcheck.config.sections import PairConfig, ProbeConfig, ReferenceConfig, RolloutConfig, SamplingConfig


class GRPOConfig(Strict):
    """The RL objective of `train.loss: grpo` (admitcheck.calibration.grpo, docs/rl.md): G rollouts per prompt, a
    verifiable reward, group-normalised advantages (r − mean_g)/(std_g + eps), a clipped importance ratio, an optional
    rollout correction. Defaults are verl's (clip 0.2/0.2, dual-clip 3, TIS cap 2) and prime-rl's MIS range."""

    # toy_reversal: 1 when the response is the prompt's digits reversed, else 0 (the toy pair's prompts);
    # answer_in_reply: 1 when the train prompt's "answer" appears in the reply as a whole word (any pair whose train
    # prompts carry answers: SmolLM2's checkable ones; the recipe trains on those prompts only); eval.accuracy contains
    reward: Literal["toy_reversal", "answer_in_reply"] = "toy_reversal"
    group_size: int = Field(8, ge=2)  # G rollouts per prompt; train.batch_size = prompts per step × G
    std_normalize: bool = True  # divide by the group std (GRPO, verl default); false = Dr. GRPO (mean only)
    std_epsilon: float = Field(1e-6, gt=0)  # added to the unbiased group std (verl compute_grpo_outcome_advantage)
    clip_ratio_low: float = Field(0.2, gt=0, lt=1)  # PPO clip: ratio kept in [1 − low, 1 + high]
    clip_ratio_high: float = Field(0.2, gt=0)
    clip_ratio_c: float = Field(3.0, gt=1)  # dual-clip bound for negative advantages (verl clip_ratio_c)
    correction: Literal["none", "tis", "mis"] = "none"  # none: PPO clip on π_θ/μ; tis: min(w, cap); mis: mask
    correction_level: Literal["token", "sequence"] = "token"  # weight/mask per token, or per whole response
    tis_cap: float = Field(2.0, gt=0)  # TIS: weight min(π/μ, cap) (verl rollout_is_threshold)
    mis_low: float = Field(0.125, ge=0)  # MIS: tokens (sequences) with π/μ outside [low, high] are masked
    mis_high: float = Field(8.0, gt=0)  # (prime-rl token_mask_low/high defaults 0.125 and 8)

    @model_validator(mode="after")
    def _range(self) -> GRPOConfig:
        if self.mis_low >= self.mis_high:
            raise ValueError("mis_low must be less than mis_high")
        return self


class TrainConfig(Strict):
    """The OPD training recipe of every calibration run (REFERENCE §1, §3.6): the budget belongs to this recipe."""

    prompts: str  # JSONL train prompts
    steps: int = Field(100, gt=0)  # optimizer steps per run
    batch_size: int = Field(32, gt=0)  # rollouts per step
    max_new_tokens: int = Field(32, gt=0)  # response cap during training, tokens
    lr: float = Field(3e-4, gt=0)  # AdamW learning rate
    lr_schedule: Literal["constant", "cosine"] = "constant"  # cosine: lr · ½(1 + cos(π·step/steps)), to 0 at the end
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float | None = Field(1.0, gt=0)  # global grad-norm clip; null = off
    loss: Literal["pg", "gkd_reverse_kl", "grpo"] = "pg"  # sampled-token PG, full-vocab reverse KL, or RL (GRPO)
    student_logprobs: Literal["trainer", "rollout"] = "trainer"  # advantage from trainer recompute (verl) or engine
    tis_cap: float | None = Field(None, gt=0)  # truncated importance sampling: weight min(pi/mu, C); null = plain ratio
    temperature: float = Field(1.0, gt=0)  # rollout sampling temperature during training
    grpo: GRPOConfig | None = None  # the RL objective's settings (loss: grpo only; filled with defaults there)
    # How (not what) a run with staleness k >= 1 executes: "async" samples batch t+k on a background thread while
    # step t trains (bit-identical to "sync", which samples each batch at the start of its step from the kept
    # snapshot). Staleness 0 has nothing to sample ahead: both are the synchronous loop. Never dumped: out of
    # ledger headers, run keys and the artifact's recipe, so a calibration may switch it and resume.
    rollouts: Literal["sync", "async"] = Field("sync", exclude=True)
    # --- issue 36: less noise per run; left out of dumps (headers, run keys, recipes) at their defaults
    sampling_coupling: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"  # training rollouts (SamplingConfig.coupling)
    ema: float | None = Field(None, gt=0, lt=1)  # final quality on an EMA of the weights, decay per step; null = off

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return without_defaults(self, handler(self), NOISE_SWITCHES)

    @model_validator(mode="before")
    @classmethod
    def _grpo_defaults(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("loss") == "grpo" and data.get("grpo") is None:
            return {**data, "grpo": {}}
        return data

    @model_validator(mode="after")
    def _grpo_fields(self) -> TrainConfig:
        if self.loss != "grpo" and self.grpo is not None:
            raise ValueError("a grpo section needs loss: grpo")
        if self.loss == "grpo":
            if self.tis_cap is not None:
                raise ValueError("loss grpo: set the correction under grpo (correction: tis, tis_cap), not tis_cap")
            if self.batch_size % self.grpo.group_size:
                raise ValueError(f"batch_size {self.batch_size} must be a multiple of grpo.group_size")
        return self


class EvalConfig(Strict):
    """Quality: held-out reverse KL student->teacher per token on the student's own samples (reference precision)."""

    prompts: str  # JSONL eval prompts
    num_prompts: int = Field(128, gt=0)
    samples: int = Field(1, gt=0)  # responses sampled per prompt (the quality is their token mean: less eval noise)
    max_new_tokens: int = Field(32, gt=0)
    batch_size: int = Field(64, gt=0)
    every: int = Field(0, ge=0)  # also evaluate every N steps (0 = only start and end)
    seed: int = 12345  # eval sampling seed, the same for every run
    sampling_coupling: Literal["inverse_cdf", "gumbel"] = "inverse_cdf"  # issue 36; left out of dumps at default
    # the accuracy beside the quality (a GRPO recipe's quality is 1 − it): exact = the whole reply is the answer;
    # contains = the answer appears in the reply as a whole word (grpo.reward answer_in_reply); out of dumps at exact
    accuracy: Literal["exact", "contains"] = "exact"
    # When (not what) the every-N evaluations run: true scores snapshots of the weights after the run's last step, so
    # no evaluation runs while asynchronous rollouts sample ahead and the steps' seconds are the training's alone
    # (time-to-quality, docs/plan.md). The same values either way. Never dumped, like train.rollouts.
    deferred: bool = Field(False, exclude=True)

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        return without_defaults(self, handler(self), NOISE_SWITCHES | {"accuracy": "exact"})


class AutoNoiseLevels(Strict):
    """An automatic grid of weight-noise sizes whose measured mismatch spans [min_mismatch, max_mismatch]."""

    count: int = Field(6, ge=2)  # noise levels besides the baseline
    min_mismatch: float = Field(1e-4, gt=0)  # nats/token, k3
    max_mismatch: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> AutoNoiseLevels:
        if self.max_mismatch <= self.min_mismatch:
            raise ValueError("max_mismatch must be greater than min_mismatch")
        return self


class LevelConfig(Strict):
    """One extra calibration level: a named rollout config, a fixed noise size, or a staleness."""

    name: str = Field(min_length=1)
    rollout: RolloutConfig | None = None  # a real precision recipe
    relative_std: float | None = Field(None, gt=0)  # weight noise of this relative size
    staleness: int | None = Field(None, gt=0)  # rollouts from weights this many optimizer steps old
    systematic: bool = False  # relative_std only: one noise draw kept for the whole run (FP8-like), not one per sync
    fit: bool = True  # false: a held-out check, reported beside the curve's prediction but not fitted

    @model_validator(mode="after")
    def _exactly_one(self) -> LevelConfig:
        given = [k for k in ("rollout", "relative_std", "staleness") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a level sets exactly one of rollout, relative_std, staleness (got {given or 'none'})")
        if self.systematic and self.relative_std is None:
            raise ValueError("systematic: true needs relative_std (it keeps one weight-noise draw for the run)")
        return self


class LevelsConfig(Strict):
    """The levels, and the replicate pairs run at each (every replicate pairs a level run with a baseline run)."""

    auto_noise: AutoNoiseLevels | None = AutoNoiseLevels()  # null = no automatic grid
    extra: list[LevelConfig] = []
    replicates: int = Field(2, ge=2)  # paired replicates of every level (and of the baseline) before adapting
    interval_factor: float = Field(2.0, gt=1)  # stop adding replicates once the budget's interval hi/lo is below
    max_runs: int = Field(30, gt=0)  # cap on all runs (baseline, levels, checks) including adaptive replicates
    pairs_per_round: int = Field(1, ge=1)  # replicate pairs each adaptive round adds at each wanted level: a round is
    # one wave of parallel runs, so more pairs per round fill more workers (the budget depends on it, not on --jobs)
    x: Literal["auto", "start", "run"] = "auto"  # the mismatch fitted: at the start weights, run-averaged, or chosen
    run_window: int = Field(20, gt=0)  # steps averaged for the run x (the first N of each run; a screen replays them)
    # candidates whose verdicts the rounds should decide: each one's screened mismatch upper bound (nats/token, the
    # calibration's functional: a screen report's `upper`); the model's pairs go where B's interval leaves one undecided
    decide: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = []
    # screens whose candidates the rounds should decide: `admitcheck screen --json` outputs (.json) or screen configs
    # (.yaml, screened once by `admitcheck calibrate`, the report kept beside the output); each verdict's screened
    # upper bound (its `mismatch_interval`'s upper end, on the calibration's metric) joins `decide`
    # (`decide_from.screened_decide`)
    decide_from: list[str] = []

    @model_validator(mode="after")
    def _not_empty(self) -> LevelsConfig:
        if self.auto_noise is None and not self.extra:
            raise ValueError("no levels: set auto_noise or list levels under extra")
        names = [lv.name for lv in self.extra]
        if len(set(names)) != len(names):
            raise ValueError("level names under extra must be unique")
        return self


class ToleranceConfig(Strict):
    """τ, the quality cost allowed: the user's goal, relative to the baseline quality or absolute (never from noise)."""

    relative: float = Field(0.05, gt=0)  # τ = relative × mean baseline quality
    absolute: float | None = Field(None, gt=0)  # nats/token; overrides relative


class ResourcesConfig(Strict):
    """What one calibration run asks of a Ray cluster (`--executor ray`; the local executor ignores it)."""

    num_cpus: float = Field(1.0, gt=0)  # CPUs per run (fractions allowed)
    num_gpus: float = Field(0.0, ge=0)  # GPUs per run; a fraction (0.25) lets several small-pair runs share a GPU


class CalibrateConfig(Strict):
    """`admitcheck calibrate`: short OPD runs at controlled mismatch levels -> curve -> budget."""

    kind: Literal["calibrate"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    probe: ProbeConfig  # how each level's mismatch is measured: a screen must use the same protocol
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    metric: MetricName = "k3"  # the budget's scale; screen measures on it (k3/kl_exact: kl_exact where full rows exist)
    rollout: RolloutConfig = RolloutConfig(dtype="float32")  # the unperturbed engine the levels perturb
    train: TrainConfig
    eval: EvalConfig
    levels: LevelsConfig = LevelsConfig()
    tolerance: ToleranceConfig = ToleranceConfig()
    bootstrap: int = Field(500, ge=50)  # bootstrap resamples for the budget interval
    confidence: float = Field(0.95, gt=0, lt=1)
    output: str | None = None  # artifact path; default calibrations/<pair name>.yaml next to the config
    seed: int = 0  # base seed of the runs (run seed = seed + replicate index)
    resources: ResourcesConfig = ResourcesConfig()  # per run, on Ray; where runs execute never changes their numbers

    @model_validator(mode="after")
    def _staleness_within_the_run(self) -> CalibrateConfig:
        for lv in self.levels.extra:
            if lv.staleness is not None and lv.staleness >= self.train.steps:
                raise ValueError(
                    f"levels.extra.{lv.name}.staleness {lv.staleness} is at or beyond train.steps {self.train.steps}: "
                    "the rollouts would come from weights older than the run; use a staleness below train.steps"
                )
        return self

    @model_validator(mode="after")
    def _reward_and_accuracy_agree(self) -> CalibrateConfig:
        # a GRPO recipe's quality is 1 − the held-out accuracy: it must score what the training reward scores
        grpo = self.train.grpo
        if grpo is not None and (grpo.reward == "answer_in_reply") != (self.eval.accuracy == "contains"):
            raise ValueError(
                f"train.grpo.reward {grpo.reward} needs eval.accuracy "
                f"{'contains' if grpo.reward == 'answer_in_reply' else 'exact'} (got {self.eval.accuracy}): the "
                "held-out task reward must be the training's"
            )
        return self

    @model_validator(mode="after")
    def _coupling_needs_the_hf_engine(self) -> CalibrateConfig:
        # Gumbel-max coupling (issue 36) lives in the HF engine's decode loop; vLLM draws its own random numbers
        if self.train.sampling_coupling == "gumbel" and self.rollout.engine != "hf":
            raise ValueError(
                f"train.sampling_coupling gumbel needs rollout.engine hf (rollout.engine is {self.rollout.engine}, "
                "which samples with its own random numbers)"
            )
        return self
