"""Layer sensitivity of a precision recipe: the mismatch when only one unit at a time is put under it.

    from admitcheck import io
    from admitcheck.measurement.sensitivity import sensitivity
    from admitcheck.config import SensitivityConfig
    from admitcheck.plots import plot_sensitivity
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from admitcheck.config import (
    KVCacheConfig,
    RolloutConfig,
    SensitivityConfig,
    UnitKind,
)

_GLOB = {"attn": "model.layers.{i}.self_attn.*", "mlp": "model.layers.{i}.mlp.*"}  # HF Llama/Qwen module names
_OTHER = {"attn": "*.mlp.*", "mlp": "*.self_attn.*"}  # what a weight unit excludes besides the other layers


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
        kv = recipe.kv_cache.model_copy(update={"skip_layers": skip})  # its backend and scales kept
        return recipe.model_copy(update={"weights": None, "kv_cache": kv})
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
        else kv.model_copy(update={"skip_layers": skip})  # the same FP8 recipe (backend, scales), more layers skipped
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
    from admitcheck.io import text_config

    cfg = json.loads((Path(student_dir) / "config.json").read_text(encoding="utf-8"))
    return int(text_config(cfg)["num_hidden_layers"])


def sensitivity(config: SensitivityConfig, *, config_file: str | None = None, progress=None) -> SensitivityReport:
    """Per-unit sensitivity of `config.rollout` (see the module docstring). HF engine only."""
    from admitcheck import io
    from admitcheck.errors import ConfigError
    from admitcheck.measurement.measure import measure_engine
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
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
        engine.reconfigure(rollout)
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


# ------------------------------------------------------------------------------------------------ recipe search
