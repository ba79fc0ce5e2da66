"""The recipe search (`admitcheck recipe`): the cheapest precision recipe the screen admits, by returning the most
sensitive units to the engine dtype one at a time.

    from admitcheck import io
    from admitcheck.config import RecipeSearchConfig
    res = search_recipe(io.load_config("examples/toy_recipe.yaml", RecipeSearchConfig))
    res.chosen, res.steps, res.vllm_args, res.screen_yaml()     # exit_code 0 when a recipe is admitted

It screens through one public `ScreenSession` (one reference and one noise floor for every step) and ranks units
with `measurement.sensitivity`. `floor` in its result is the all-units-returned recipe (the plain engine dtype).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from admitcheck.config import ProbeConfig, RecipeSearchConfig, RolloutConfig, SensitivityConfig
from admitcheck.measurement.sensitivity import (
    Unit,
    num_layers_of,
    plain_rollout,
    recipe_units,
    sensitivity,
    without_units,
)
from admitcheck.rollout.engines.vllm import vllm_args


@dataclass(frozen=True)
class SearchStep:
    """One screened candidate of the search: the units returned to the engine dtype so far, and its verdict."""

    returned: list[str]
    rollout: dict[str, Any]
    decision: str
    k3: float
    k3_interval: tuple[float, float]
    budget: float
    ratio_vs_bf16: float | None  # KV-capacity tokens against plain BF16 (capacity settings of the config)
    reason: str
    estimator: str = "k3"  # what decided (sequential.decision_estimator)
    mismatch: float = float("nan")  # the estimator's value, nats/token
    mismatch_interval: tuple[float, float] = (float("nan"), float("nan"))
    error_control: bool = True  # False when policy.undecided = admit decided


@dataclass(frozen=True)
class RecipeSearchResult:
    """`recipe`'s result. `chosen` is None when nothing is admitted (then `message` names the floor)."""

    chosen: SearchStep | None
    steps: list[SearchStep]  # in search order; the runner-ups are the others
    floor: SearchStep  # every unit in the engine dtype
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


def _step(returned: list[Unit], rollout: RolloutConfig, v) -> SearchStep:
    ratio = v.capacity.ratio_vs_bf16 if v.capacity else None
    return SearchStep(
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


def search_recipe(config: RecipeSearchConfig, *, config_file: str | None = None, progress=None) -> RecipeSearchResult:
    """Screen every unit in the engine dtype (the floor: if even that is rejected, stop, exit 1); rank the units by
    `sensitivity`; then screen the whole recipe and return the most sensitive unit to the engine dtype one at a
    time, re-screening sequentially (screen's look plan, one `ScreenSession`: one reference and one floor for every
    step), until admitted. The first ADMIT wins, so each screen runs at 1 − α/(units + 1) (Bonferroni over the
    recipes the search may try): the chosen recipe keeps the policy's error rate.
    """
    from admitcheck.admission.inputs import read_screen_inputs
    from admitcheck.admission.session import ScreenSession
    from admitcheck.config import CandidateConfig, ScreenConfig

    t0 = time.perf_counter()
    L = num_layers_of(config.pair.student)
    plain = plain_rollout(config.rollout)
    # Bonferroni over the recipes the search may screen (the floor, the whole recipe and each restriction of it):
    # the first ADMIT wins, so the chance that any admitted step is wrong is ≤ Σ per-screen α = the policy's α.
    tries = len(recipe_units(config.rollout, L, tuple(config.units), config.layers)) + 1
    level = 1.0 - (1.0 - config.policy.confidence) / tries
    base = config.model_dump(include={"pair", "calibration", "probe", "sampling", "reference", "policy", "capacity"})
    policy = config.policy.model_dump() | {"confidence": level}  # base's policy, at the search's level
    cfg = ScreenConfig.model_validate(
        base | {"policy": policy, "candidates": [{"name": config.name, "rollout": plain}]}  # kl_exact decides
    )
    # files first, named by field; one reference model and one floor for every step (its engines start unchecked)
    session = ScreenSession(read_screen_inputs(cfg, config_file=config_file, engines=False))

    def screen_one(name: str, rollout: RolloutConfig):
        return session.screen_candidate(CandidateConfig(name=name, rollout=rollout), progress)

    floor = _step([], plain, screen_one("floor", plain))
    if floor.decision != "ADMIT":
        lo, hi = floor.k3_interval
        msg = (
            f"no recipe can be admitted: even with every unit in {plain.dtype} (the floor) k3 {floor.k3:.3g} "
            f"[{lo:.3g}, {hi:.3g}] is not under the budget {floor.budget:.3g} ({floor.reason})"
        )
        return RecipeSearchResult(None, [], floor, [], None, None, msg, time.perf_counter() - t0, tries, level)
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
    steps: list[SearchStep] = []
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
        return RecipeSearchResult(None, steps, floor, ranked, None, None, msg, time.perf_counter() - t0, tries, level)
    screen_config = base | {"candidates": [{"name": config.name, "rollout": chosen_rollout.model_dump(mode="json")}]}
    n = len(chosen.returned)
    msg = f"admitted with {n} unit(s) returned to {plain.dtype}: {', '.join(chosen.returned) or 'none'}"
    return RecipeSearchResult(
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
