"""Layer sensitivity of a precision recipe: the mismatch when only one unit at a time is put under it.

    from admitcheck import io
    from admitcheck.measurement.sensitivity import SensitivityConfig, sensitivity, plot_sensitivity
    cfg = io.load_config("examples/toy_sensitivity.yaml", SensitivityConfig)
    rep = sensitivity(cfg)
    rep.units[0].name, rep.units[0].excess          # most sensitive unit first ("kv.1", nats/token above the floor)
    rep.sum_excess, rep.all_excess                  # Σ per-unit excess vs the whole recipe's excess
    png = plot_sensitivity(rep)                     # bar chart (None without matplotlib)

Units (`units: [kv, attn, mlp]`): layer i's KV cache (the recipe's KV dtype, every other layer skipped), layer i's
attention projections (q|k|v, o under the recipe's weight format, everything else excluded), layer i's MLP
(gate|up, down). A unit's rollout config is the recipe restricted to it through `exclude` globs, `exclude_layers`
and `kv_cache.skip_layers`, so `screen` and vLLM read it as they read any recipe. Units the recipe already keeps in
the engine dtype are left out; embeddings are never a unit (vLLM keeps them in BF16).

Measurement: one engine (the HF engine is re-configured in place between units, its clean weights kept) and one
reference pass per unit, every unit on the same probes and seeds (coupled sampling: differences between units are
not sampling noise). excess = k3(unit) − k3(floor), the floor being the engine in its dtype with no recipe, so the
engine dtype's own rounding is not counted once per unit; its interval is the unit's k3 interval minus the floor's
point estimate. If units act independently and weakly, Σ excess ≈ the whole recipe's excess (`sum_ratio`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from admitcheck.config import (
    CapacityConfig,
    KVCacheConfig,
    PairConfig,
    PolicyConfig,
    ProbeConfig,
    ReferenceConfig,
    RolloutConfig,
    SamplingConfig,
    ScreenProbeConfig,
    Strict,
)

UnitKind = Literal["kv", "attn", "mlp"]
_GLOB = {"attn": "model.layers.{i}.self_attn.*", "mlp": "model.layers.{i}.mlp.*"}  # HF Llama/Qwen module names
_OTHER = {"attn": "*.mlp.*", "mlp": "*.self_attn.*"}  # what a weight unit excludes besides the other layers


class SensitivityConfig(Strict):
    """`admitcheck sensitivity`: per-unit mismatch of `recipe` on the probe set."""

    kind: Literal["sensitivity"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    pair: PairConfig
    probe: ProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    rollout: RolloutConfig  # the whole recipe, e.g. FP8 weights + FP8 KV cache (a measure config's key)
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None  # decoder layers to test; default all
    full_logprobs: bool = False  # also kl_exact per unit; costs (B, T, V) memory
    confidence: float = Field(0.95, gt=0, lt=1)


@dataclass(frozen=True)
class Unit:
    kind: UnitKind
    layer: int

    @property
    def name(self) -> str:
        return f"{self.kind}.{self.layer}"


def plain_rollout(recipe: RolloutConfig) -> RolloutConfig:
    """The recipe's engine with every unit in the engine dtype (weights unquantized, KV cache "auto"); noise and
    weights_from are kept: they are not units."""
    return recipe.model_copy(update={"weights": None, "kv_cache": KVCacheConfig()})


def recipe_units(recipe: RolloutConfig, num_layers: int, kinds=("kv", "attn", "mlp"), layers=None) -> list[Unit]:
    """The units the recipe puts under low precision, among `kinds` and `layers` (default all layers)."""
    w, kv = recipe.weights, recipe.kv_cache
    out = []
    for i in layers if layers is not None else range(num_layers):
        for k in kinds:
            if k == "kv" and (kv.dtype == "auto" or i in kv.skip_layers):
                continue
            if k != "kv" and (w is None or i in w.exclude_layers):
                continue
            out.append(Unit(k, i))
    return out


def unit_rollout(recipe: RolloutConfig, unit: Unit, num_layers: int) -> RolloutConfig:
    """The recipe restricted to one unit (everything else in the engine dtype)."""
    others = [j for j in range(num_layers) if j != unit.layer]
    if unit.kind == "kv":
        skip = sorted(set(recipe.kv_cache.skip_layers) | set(others))
        return recipe.model_copy(
            update={"weights": None, "kv_cache": KVCacheConfig(dtype=recipe.kv_cache.dtype, skip_layers=skip)}
        )
    w = recipe.weights
    weights = w.model_copy(
        update={
            "exclude": [*w.exclude, _OTHER[unit.kind]],
            "exclude_layers": sorted(set(w.exclude_layers) | set(others)),
            "include_embeddings": False,
        }
    )
    return recipe.model_copy(update={"weights": weights, "kv_cache": KVCacheConfig()})


def without_units(recipe: RolloutConfig, returned: list[Unit], num_layers: int) -> RolloutConfig:
    """The recipe with `returned` units back in the engine dtype (what `recipe` search builds at each step)."""
    kv, w = recipe.kv_cache, recipe.weights
    skip = sorted(set(kv.skip_layers) | {u.layer for u in returned if u.kind == "kv"})
    kv = (
        KVCacheConfig()
        if kv.dtype == "auto" or len(skip) >= num_layers
        else KVCacheConfig(dtype=kv.dtype, skip_layers=skip)
    )
    if w is not None:
        globs = [_GLOB[u.kind].format(i=u.layer) for u in returned if u.kind != "kv"]
        left = recipe_units(recipe.model_copy(update={"kv_cache": KVCacheConfig()}), num_layers, ("attn", "mlp"))
        gone = {u.name for u in returned}
        w = None if all(u.name in gone for u in left) else w.model_copy(update={"exclude": [*w.exclude, *globs]})
    return recipe.model_copy(update={"weights": w, "kv_cache": kv})


@dataclass(frozen=True)
class UnitSensitivity:
    """One unit's mismatch (nats/token, k3) when only it is under the recipe."""

    name: str
    kind: UnitKind
    layer: int
    k3: float
    k3_interval: tuple[float, float]
    excess: float  # k3 − floor k3
    excess_interval: tuple[float, float]
    num_tokens: int
    kl_exact: float | None = None


@dataclass(frozen=True)
class SensitivityReport:
    """Ranked per-unit sensitivities (most sensitive first), the floor, the whole recipe, and timings (s)."""

    units: list[UnitSensitivity]
    floor_k3: float  # the engine in its dtype, no recipe
    all_k3: float  # the whole recipe
    all_k3_interval: tuple[float, float]
    recipe: dict[str, Any]
    seconds_total: float
    seconds_per_pass: float  # mean seconds of one measurement pass (engine sampling + one reference pass)

    @property
    def all_excess(self) -> float:
        return self.all_k3 - self.floor_k3

    @property
    def sum_excess(self) -> float:
        return sum(u.excess for u in self.units)

    @property
    def sum_ratio(self) -> float:
        """Σ per-unit excess / whole-recipe excess (1 = additive)."""
        return self.sum_excess / self.all_excess if self.all_excess else float("nan")

    @property
    def top_to_median(self) -> float:
        ex = sorted(u.excess for u in self.units)
        mid = (ex[(len(ex) - 1) // 2] + ex[len(ex) // 2]) / 2
        return self.units[0].excess / mid if mid > 0 else float("inf")

    def to_dict(self) -> dict[str, Any]:
        keys = ("all_excess", "sum_excess", "sum_ratio", "top_to_median")
        return asdict(self) | {k: getattr(self, k) for k in keys}


def num_layers_of(student_dir: str | Path) -> int:
    cfg = json.loads((Path(student_dir) / "config.json").read_text(encoding="utf-8"))
    return int(cfg.get("text_config", cfg)["num_hidden_layers"])


def reconfigure(engine, rollout: RolloutConfig) -> None:
    """Put an HFEngine under another recipe of the same dtype and device, in place: its clean weights are restored
    and the new recipe applied (no reload, no copy). The KV dtype is read by every `sample` call."""
    if rollout.dtype != engine.rollout.dtype or rollout.device != engine.rollout.device:
        raise ValueError("reconfigure keeps the engine's dtype and device")
    engine.rollout = rollout
    engine._apply_recipe(noise_step=0)


def sensitivity(config: SensitivityConfig, *, config_file: str | None = None, progress=None) -> SensitivityReport:
    """Per-unit sensitivity of `config.rollout` (see the module docstring). HF engine only."""
    from admitcheck import io
    from admitcheck.errors import ConfigError
    from admitcheck.measurement.measure import load_pair_tokenizer, measure_engine, tokenize_prompts
    from admitcheck.rollout.engines.hf import HFEngine

    t0 = time.perf_counter()
    if config.rollout.engine != "hf":
        raise ConfigError(
            "sensitivity runs the hf engine (it re-configures one engine per unit)",
            file=config_file,
            field="rollout.engine",
        )
    tokens = load_pair_tokenizer(config.pair, file=config_file)
    prompt_ids = tokenize_prompts(tokens, io.read_prompts(config.probe.prompts, limit=config.probe.num_prompts))
    L = num_layers_of(config.pair.student)
    bad = [i for i in config.layers or [] if not 0 <= i < L]
    if bad:
        raise ConfigError(f"layers {bad} outside the student's {L} decoder layers", file=config_file, field="layers")
    units = recipe_units(config.rollout, L, tuple(config.units), config.layers)
    if not units:
        raise ConfigError(
            "the recipe puts no unit of these kinds and layers under low precision", file=config_file, field="units"
        )
    reference = io.load_causal_lm(
        config.pair.student, config.reference.dtype, config.reference.device, file=config_file
    )
    source = config.rollout.weights_from or config.pair.student  # stale weights, when the recipe names them
    student = io.load_causal_lm(source, "float32", "cpu", file=config_file)
    engine = HFEngine(
        student,
        plain_rollout(config.rollout),
        eos_token_id=tokens.eos_token_id,
        pad_token_id=tokens.pad_token_id,
        _owned=True,
    )
    passes: list[float] = []

    def run(label: str, rollout: RolloutConfig):
        t = time.perf_counter()
        reconfigure(engine, rollout)
        acc = measure_engine(
            engine,
            reference,
            prompt_ids,
            config.probe,
            config.sampling,
            full=config.full_logprobs,
            label=label,
            progress=progress,
        )
        passes.append(time.perf_counter() - t)
        return acc.metrics(config.confidence), acc.num_tokens

    try:
        floor, _ = run("floor", plain_rollout(config.rollout))
        whole, _ = run("all", config.rollout)
        rows = []
        for u in units:
            m, n = run(u.name, unit_rollout(config.rollout, u, L))
            k3, (lo, hi), f = m.values["k3"], m.intervals["k3"], floor.values["k3"]
            rows.append(
                UnitSensitivity(
                    u.name, u.kind, u.layer, k3, (lo, hi), k3 - f, (lo - f, hi - f), n, m.values.get("kl_exact")
                )
            )
    finally:
        engine.close()
    rows.sort(key=lambda r: -r.excess)
    return SensitivityReport(
        rows,
        floor.values["k3"],
        whole.values["k3"],
        whole.intervals["k3"],
        config.rollout.model_dump(mode="json"),
        time.perf_counter() - t0,
        sum(passes) / len(passes),
    )


def plot_sensitivity(report: SensitivityReport) -> bytes | None:
    """PNG bytes: excess k3 per unit with its interval, most sensitive on top (None without matplotlib)."""
    try:
        import io as _stdio

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = report.units[::-1]
    colors = {"kv": "tab:purple", "attn": "tab:blue", "mlp": "tab:green"}
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(rows) + 1.5), dpi=110)
    err = [
        [max(r.excess - r.excess_interval[0], 0) for r in rows],
        [max(r.excess_interval[1] - r.excess, 0) for r in rows],
    ]
    ax.barh([r.name for r in rows], [r.excess for r in rows], xerr=err, color=[colors[r.kind] for r in rows], capsize=2)
    ax.axvline(report.all_excess, color="black", ls="--", lw=1, label=f"whole recipe {report.all_excess:.3g}")
    ax.set_xlabel("k3 above the floor (nats/token)")
    ax.set_title(f"sensitivity: Σ units / whole = {report.sum_ratio:.2f}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = _stdio.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------------ recipe search


class RecipeConfig(Strict):
    """`admitcheck recipe`: the cheapest admitted restriction of `recipe`, screened against `calibration`."""

    kind: Literal["recipe"] | None = None  # optional: names the config kind (`validate` dispatches on it)
    name: str = Field("recipe", min_length=1)  # the candidate name in the YAML written for `screen`
    pair: PairConfig
    calibration: str
    probe: ScreenProbeConfig
    sampling: SamplingConfig = SamplingConfig()
    reference: ReferenceConfig = ReferenceConfig()
    policy: PolicyConfig = PolicyConfig()
    capacity: CapacityConfig = CapacityConfig()
    rollout: RolloutConfig  # the whole recipe the search starts from
    units: list[UnitKind] = Field(["kv", "attn", "mlp"], min_length=1)
    layers: list[int] | None = None


@dataclass(frozen=True)
class RecipeStep:
    """One screened candidate of the search: the units returned to the engine dtype so far, and its verdict."""

    returned: list[str]
    rollout: dict[str, Any]
    decision: str
    k3: float
    k3_interval: tuple[float, float]
    budget: float
    ratio_vs_bf16: float | None  # KV-capacity tokens against plain BF16 (capacity settings of the config)
    reason: str
    estimator: str = "k3"  # what decided (admission.decision_estimator)
    mismatch: float = float("nan")  # the estimator's value, nats/token
    mismatch_interval: tuple[float, float] = (float("nan"), float("nan"))
    error_control: bool = True  # False when policy.undecided = admit decided


@dataclass(frozen=True)
class RecipeResult:
    """`recipe`'s result. `chosen` is None when nothing is admitted (then `message` names the floor)."""

    chosen: RecipeStep | None
    steps: list[RecipeStep]  # in search order; the runner-ups are the others
    floor: RecipeStep  # every unit in the engine dtype
    ranking: list[str]  # units, most sensitive first
    vllm_args: dict[str, Any] | None
    screen_config: dict[str, Any] | None  # a ScreenConfig for `screen`, the chosen rollout as its one candidate
    message: str
    seconds_total: float
    recipes_tested_at_most: int = 1  # screens the search may run: the Bonferroni divisor
    confidence_per_recipe: float = 0.95  # each screen's policy.confidence (two-sided), the family's α split evenly

    @property
    def exit_code(self) -> int:
        return 0 if self.chosen is not None else 1

    def screen_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.screen_config, sort_keys=False) if self.screen_config else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"exit_code": self.exit_code}


def vllm_args(rollout: RolloutConfig, model) -> dict[str, Any]:
    """vLLM arguments for a rollout: FP8 KV dtype and skipped layers; the quantization and its ignore list (Linear
    module names kept in the engine dtype, lm_head included, HF names as in a checkpoint's quantization_config)."""
    from admitcheck.rollout.precision import quantized_linear_names, weight_module_names

    out: dict[str, Any] = {"dtype": rollout.dtype}
    if rollout.kv_cache.dtype != "auto":
        out["kv_cache_dtype"] = rollout.kv_cache.dtype
        out["kv_cache_dtype_skip_layers"] = list(rollout.kv_cache.skip_layers)
    w = rollout.weights
    if w is not None:
        linear, embedding = weight_module_names(model)
        quantized = set(quantized_linear_names(model, w))
        out["quantization"] = f"fp8_per_{w.granularity}" if w.format.startswith("fp8") else w.format
        ignore = [n for n in [*linear, *embedding] if n not in quantized and n != "model.embed_tokens"]
        out["quantization_config"] = {"ignore": ignore}
    return out


def _step(returned: list[Unit], rollout: RolloutConfig, v) -> RecipeStep:
    ratio = (v.capacity or {}).get("ratio_vs_bf16")
    return RecipeStep(
        [u.name for u in returned],
        rollout.model_dump(mode="json"),
        v.decision,
        v.k3,
        tuple(v.k3_interval),
        v.budget,
        ratio,
        v.reason,
        v.estimator,
        v.mismatch,
        tuple(v.mismatch_interval),
        v.error_control,
    )


def recipe(config: RecipeConfig, *, config_file: str | None = None, progress=None) -> RecipeResult:
    """Screen every unit in the engine dtype (the floor: if even that is rejected, stop, exit 1); rank the units by
    `sensitivity`; then screen the whole recipe and return the most sensitive unit to the engine dtype one at a
    time, re-screening sequentially (screen's look plan, one `ScreenSession`: one reference and one floor for every
    step), until admitted. The first ADMIT wins, so each screen runs at 1 − α/(units + 1) (Bonferroni over the
    recipes the search may try): the chosen recipe keeps the policy's error rate.
    """
    from admitcheck.admission.screen import ScreenSession, check_inputs
    from admitcheck.config import CandidateConfig, ScreenConfig

    t0 = time.perf_counter()
    L = num_layers_of(config.pair.student)
    plain = plain_rollout(config.rollout)
    # Bonferroni over the recipes the search may screen (the floor, the whole recipe and each restriction of it):
    # the first ADMIT wins, so the chance that any admitted step is wrong is ≤ Σ per-screen α = the policy's α.
    tries = len(recipe_units(config.rollout, L, tuple(config.units), config.layers)) + 1
    level = 1.0 - (1.0 - config.policy.confidence) / tries
    base = config.model_dump(include={"pair", "calibration", "probe", "sampling", "reference", "policy", "capacity"})
    policy = base["policy"] | {"confidence": level}
    cfg = ScreenConfig.model_validate(
        base | {"policy": policy, "candidates": [{"name": config.name, "rollout": plain}]}  # kl_exact decides
    )
    check_inputs(cfg, cfg.candidates, config_file)  # files first, named by field
    session = ScreenSession(cfg, config_file=config_file)  # one reference model and one floor for every step

    def screen_one(name: str, rollout: RolloutConfig):
        return session.screen_candidate(CandidateConfig(name=name, rollout=rollout), progress)

    floor = _step([], plain, screen_one("floor", plain))
    if floor.decision != "ADMIT":
        lo, hi = floor.k3_interval
        msg = (
            f"no recipe can be admitted: even with every unit in {plain.dtype} (the floor) k3 {floor.k3:.3g} "
            f"[{lo:.3g}, {hi:.3g}] is not under the budget {floor.budget:.3g} ({floor.reason})"
        )
        return RecipeResult(None, [], floor, [], None, None, msg, time.perf_counter() - t0, tries, level)
    probe = ProbeConfig(**config.probe.model_dump(exclude={"min_prompts"}))
    sens = SensitivityConfig(
        pair=config.pair,
        probe=probe,
        sampling=config.sampling,
        reference=config.reference,
        rollout=config.rollout,
        units=config.units,
        layers=config.layers,
    )
    ranking = [Unit(u.kind, u.layer) for u in sensitivity(sens, config_file=config_file, progress=progress).units]
    steps: list[RecipeStep] = []
    chosen, chosen_rollout = None, None
    for k in range(len(ranking) + 1):
        returned = ranking[:k]
        rollout = without_units(config.rollout, returned, L)
        if rollout == plain:  # everything returned: the floor, already screened
            step = replace(floor, returned=[u.name for u in returned])
        else:
            step = _step(returned, rollout, screen_one(f"step{k}", rollout))
        steps.append(step)
        if step.decision == "ADMIT":
            chosen, chosen_rollout = step, rollout
            break
    if chosen is None:  # units or layers left out of the search keep the recipe above the budget
        msg = (
            f"not admitted even with every searched unit ({', '.join(u.name for u in ranking)}) returned to "
            f"{plain.dtype}; the floor is admitted (k3 {floor.k3:.3g}): search more units or layers"
        )
        ranked = [u.name for u in ranking]
        return RecipeResult(None, steps, floor, ranked, None, None, msg, time.perf_counter() - t0, tries, level)
    screen_config = base | {"candidates": [{"name": config.name, "rollout": chosen_rollout.model_dump(mode="json")}]}
    n = len(chosen.returned)
    msg = f"admitted with {n} unit(s) returned to {plain.dtype}: {', '.join(chosen.returned) or 'none'}"
    return RecipeResult(
        chosen,
        steps,
        floor,
        [u.name for u in ranking],
        vllm_args(chosen_rollout, session.reference),
        screen_config,
        msg,
        time.perf_counter() - t0,
        tries,
        level,
    )
