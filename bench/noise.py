"""Where one calibration run's quality spread comes from, and what cuts it (issue 36): a noise decomposition.

    python bench/noise.py --pair toy --seeds 4 --jobs 2 --out bench/results/noise_toy.json
    python bench/noise.py --pair smollm2 --seeds 4 --jobs 1 --out bench/results/noise_smollm2.json   # GPU host

For replicates r = 0 … seeds−1 of the pair's shipped calibration (the ledger's own run seeds), paired OPD runs under
the pair's shipped recipe (examples/<pair>_calibrate.yaml, unchanged: same steps, batch, evaluation): the baseline
and one weight-noise level (by default the shipped level with the most replicates), each with the training rollouts
drawn by inverse-CDF (today's coupling) and by Gumbel-max (rollout/sampling.py). Every run records:
- the tokens its rollouts sampled at steps 1, 5, 10, 30, 100, … and its weights there: how fast a level run and its
  paired baseline diverge (token agreement of the coupled samples; relative weight distance);
- its final weights scored with K eval seeds under both eval couplings (evaluation variance: the same weights, other
  eval draws), per-prompt KL sums for the clustered standard errors, and the tokens of the shipped eval seed;
- EMAs of its weights (decays `--ema`, from θ0) scored with the shipped eval seed under both couplings.
Then: the sd of one run's quality across seeds (trajectory + evaluation), the evaluation sd, the paired cost
(level − baseline) per seed, its sd and correlation, all in τ (the shipped calibration's tolerance), for every
(training coupling, eval coupling, weights: last iterate or EMA) option; and "before" figures from the shipped ledger
(today's protocol over all its seeds). The inverse-CDF runs use the shipped seeds and recipe, so their quality must
equal the ledger's (`shipped_reproduced`: today's defaults unchanged). Nothing here depends on the pair beyond
`--pair` (its shipped config, artifact and ledger); the SmolLM2 pair needs its GPU host (reference.device cuda).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COUPLINGS = ("inverse_cdf", "gumbel")
CHECK_STEPS = (1, 5, 10, 30, 100, 200, 300, 500)  # steps whose rollout tokens and weights are kept (those ≤ steps)


def _pair_files(pair: str) -> tuple[Path, Path, Path]:
    return (
        ROOT / "examples" / f"{pair}_calibrate.yaml",
        ROOT / "calibrations" / f"{pair}.yaml",
        ROOT / "calibrations" / f"{pair}.ledger.jsonl",
    )


def _recipe_steps(cfg_path: Path) -> int:
    return int(yaml.safe_load(cfg_path.read_text())["train"]["steps"])


def _eval_seeds(base: int, k: int) -> list[int]:
    return [base] + [base + 1000 * (i + 1) for i in range(k - 1)]  # the shipped eval seed first


def one_run(args: tuple) -> dict:
    """One OPD run (level, seed, training coupling) under the shipped recipe, with the records above."""
    pair, level_std, seed, coupling, k_eval, emas, work, steps, eval_couplings, big_samples = args
    os.chdir(ROOT)
    import torch

    from admitcheck import io
    from admitcheck.calibration import opd
    from admitcheck.calibration.levels import Level, _engine, load_context, one_thread
    from admitcheck.config import CalibrateConfig, SamplingConfig

    cfg_path = _pair_files(pair)[0]
    config = io.load_config(cfg_path, CalibrateConfig)
    train = {"sampling_coupling": coupling} | ({"steps": steps} if steps else {})
    config = config.model_copy(update={"train": config.train.model_copy(update=train)})
    ctx = load_context(config, str(cfg_path))
    level = Level("baseline", "baseline") if level_std == 0 else Level("noise", "noise", relative_std=level_std)
    tag = f"{coupling}-{'base' if level_std == 0 else 'level'}-{seed}"
    tokens_at: dict[int, torch.Tensor] = {}
    weights_at: dict[int, torch.Tensor] = {}

    class Recording:  # the engine, with the tokens of the kept steps recorded
        def __init__(self, engine) -> None:
            self.engine, self.calls = engine, 0

        def sample(self, *a, **kw):
            ro = self.engine.sample(*a, **kw)
            self.calls += 1
            if self.calls in CHECK_STEPS:
                tokens_at[self.calls] = ro.token_ids.masked_fill(~ro.mask, -1)  # (B, T), -1 past the end
            return ro

        def load_weights(self, *a, **kw):
            return self.engine.load_weights(*a, **kw)

    emas_state: dict[float, opd.EMAWeights] = {}

    def on_step(k: int, student) -> None:
        for d in emas:
            emas_state[d].update(student)
        if k in CHECK_STEPS:
            weights_at[k] = torch.cat([p.detach().flatten() for p in student.parameters()]).clone()

    with one_thread():
        torch.manual_seed(seed)
        student = __import__("copy").deepcopy(ctx.student)
        emas_state.update({d: opd.EMAWeights(student, d) for d in emas})
        engine = _engine(ctx, student, level.engine_rollout(config.rollout, seed))
        t0 = time.perf_counter()
        try:
            result = opd.train(
                student, ctx.teacher, Recording(engine), ctx.train_ids, config.train, None, seed=seed, on_step=on_step
            )
        finally:
            engine.close()
        seconds_train = time.perf_counter() - t0
        sampling = SamplingConfig(temperature=config.train.temperature)
        evals, seconds_eval = [], []
        for ec in eval_couplings:
            ev_cfg = config.eval.model_copy(update={"sampling_coupling": ec})
            ev = opd.QualityEvaluator(
                ctx.teacher, ctx.eval_ids, None, ev_cfg, ctx.tokens, sampling, config.reference, config.rollout
            )
            variants = [("last", student, s) for s in _eval_seeds(config.eval.seed, k_eval)]
            variants += [(f"ema{d}", emas_state[d].model, config.eval.seed) for d in emas]
            for weights, model, eseed in variants:
                t1 = time.perf_counter()
                q = ev(model, config.train.steps, seed=eseed)
                seconds_eval.append(time.perf_counter() - t1)
                evals.append(
                    {
                        "eval_coupling": ec,
                        "weights": weights,
                        "eval_seed": eseed,
                        "quality": q.reverse_kl,
                        "se_draws": q.standard_error,
                        "se_prompts": q.prompt_clustered_error,
                        "samples": q.samples,
                        "kl_by_response": [round(k, 7) for k in q.kl_by_response],
                        "tokens_by_response": list(q.tokens_by_response),
                    }
                )
        # the larger evaluation of the final weights, here while they are in memory: a run's record is then whole, and
        # a campaign that loses its machine resumes from the records alone (the weights never leave the machine)
        big = []
        if big_samples:
            big = _big_eval(ctx, config, student, config.train.steps, big_samples, tag, eval_couplings)
    # tokens (small: collected with the records, so the divergence survives a lost machine) apart from the weights
    torch.save(tokens_at, Path(work) / f"{tag}.tokens.pt")
    torch.save(weights_at, Path(work) / f"{tag}.weights.pt")
    return {
        "tag": tag,
        "coupling": coupling,
        "level": "baseline" if level_std == 0 else "level",
        "relative_std": level_std,
        "seed": seed,
        "big_evals": big,
        "seconds_train": seconds_train,
        "seconds_eval_mean": float(np.mean(seconds_eval)),
        "seconds_by_phase": result.seconds(),
        "in_run_k3_mean": float(np.mean([s.k3 for s in result.steps])),
        "evals": evals,
    }


def _big_eval(ctx, config, student, steps: int, samples: int, tag: str, eval_couplings) -> list[dict]:
    """Final weights scored by a larger evaluation: `samples` responses per prompt at the shipped eval seed, under
    each eval coupling."""
    import time as _t

    from admitcheck.calibration import opd
    from admitcheck.config import SamplingConfig

    out = []
    sampling = SamplingConfig(temperature=config.train.temperature)
    for ec in eval_couplings:
        ev_cfg = config.eval.model_copy(update={"sampling_coupling": ec, "samples": samples})
        ev = opd.QualityEvaluator(
            ctx.teacher, ctx.eval_ids, None, ev_cfg, ctx.tokens, sampling, config.reference, config.rollout
        )
        t1 = _t.perf_counter()
        q = ev(student, steps)
        out.append(
            {
                "tag": tag,
                "eval_coupling": ec,
                "samples": samples,
                "seconds": _t.perf_counter() - t1,
                "quality": q.reverse_kl,
                "se_draws": q.standard_error,
                "kl_by_response": [round(k, 7) for k in q.kl_by_response],
                "tokens_by_response": list(q.tokens_by_response),
            }
        )
    return out


def one_eval(args: tuple) -> list[dict]:
    """A finished run's final weights (kept at its last check step, on this machine) scored by a larger evaluation
    (records made before runs did it themselves)."""
    pair, tag, steps, samples, work, eval_couplings = args
    os.chdir(ROOT)
    import torch

    from admitcheck import io
    from admitcheck.calibration.levels import load_context, one_thread
    from admitcheck.config import CalibrateConfig

    cfg_path = _pair_files(pair)[0]
    config = io.load_config(cfg_path, CalibrateConfig)
    ctx = load_context(config, str(cfg_path))
    weights = _tensors(Path(work), tag, "weights")[steps]
    with one_thread():
        student = __import__("copy").deepcopy(ctx.student)
        torch.nn.utils.vector_to_parameters(weights, student.parameters())
        return _big_eval(ctx, config, student, steps, samples, tag, eval_couplings)


def _tensors(work: Path, tag: str, what: str) -> dict | None:
    """A run's kept tokens or weights by step: `{tag}.{what}.pt`, or the one file runs wrote before 2026-12-06;
    None where they are not on this machine (weights never leave the machine that made them)."""
    import torch

    if (work / f"{tag}.{what}.pt").exists():
        return torch.load(work / f"{tag}.{what}.pt")
    if (work / f"{tag}.pt").exists():
        return torch.load(work / f"{tag}.pt")[what]
    return None


def larger_eval(rows: list[dict], big: list[dict], tau: float) -> list[dict]:
    """Paired cost sd per (training coupling, eval coupling) under the larger evaluation."""
    from admitcheck.calibration.quality_error import paired_difference_error

    idx = {(b["tag"], b["eval_coupling"]): b for b in big}
    out = []
    for c in _present(r["coupling"] for r in rows):
        for ec in _present(b["eval_coupling"] for b in big):
            seeds = sorted({r["seed"] for r in rows if r["coupling"] == c})
            base, lev, cost, se, secs = [], [], [], [], []
            for s in seeds:
                b, x = idx.get((f"{c}-base-{s}", ec)), idx.get((f"{c}-level-{s}", ec))
                if b is None or x is None:
                    continue
                base.append(b["quality"])
                lev.append(x["quality"])
                d = paired_difference_error(
                    x["kl_by_response"], x["tokens_by_response"], b["kl_by_response"], b["tokens_by_response"],
                    samples=x["samples"],
                )  # fmt: skip
                cost.append(d.value)
                se.append(d.draws)
                secs += [b["seconds"], x["seconds"]]
            if not cost:
                continue
            out.append(
                {
                    "train_coupling": c,
                    "eval_coupling": ec,
                    "weights": "last",
                    "samples_per_prompt": big[0]["samples"],
                    "pairs": len(cost),
                    "paired_cost": cost,
                    "run_sd_tau": math.sqrt(float(np.mean([_sd(base) ** 2, _sd(lev) ** 2]))) / tau,
                    "run_se_draws_tau": float(np.sqrt(np.mean([b["se_draws"] ** 2 for b in big]))) / tau,
                    "paired_cost_mean_tau": float(np.mean(cost)) / tau,
                    "paired_cost_sd_tau": _sd(cost) / tau,
                    "paired_cost_sd_ci95_tau": _sd_interval(cost, tau),
                    "paired_correlation": _corr(lev, base),
                    "paired_se_draws_tau": float(np.sqrt(np.mean(np.square(se)))) / tau,
                    "paired_trajectory_sd_tau": _floor(cost, se) / tau,
                    "seconds_per_eval": float(np.mean(secs)),
                }
            )
    return out


def _present(values) -> list[str]:
    """The couplings these records were made with, in COUPLINGS' order (a run made only some of them)."""
    have = set(values)
    return [c for c in COUPLINGS if c in have]


def sampling_cost(pair: str, repeats: int = 10, big_samples: int = 0, couplings=COUPLINGS) -> dict:
    """CPU seconds (process time, 1 thread) of one training batch's rollout under each coupling, and of one EMA
    update, alternating couplings so that machine load falls on both alike: the per-run cost of the switches."""

    from admitcheck import io
    from admitcheck.calibration import opd
    from admitcheck.calibration.levels import _engine, load_context, one_thread
    from admitcheck.config import CalibrateConfig, SamplingConfig

    cfg_path = _pair_files(pair)[0]
    config = io.load_config(cfg_path, CalibrateConfig)
    ctx = load_context(config, str(cfg_path))
    train = config.train
    batch = [ctx.train_ids[i % len(ctx.train_ids)] for i in range(train.batch_size)]
    cpu = {c: [] for c in couplings}
    with one_thread():
        engine = _engine(ctx, ctx.student, config.rollout)
        for r in range(repeats):
            for c in couplings:
                t = time.process_time()
                engine.sample(batch, SamplingConfig(temperature=train.temperature, coupling=c), r, train.max_new_tokens)
                cpu[c].append(time.process_time() - t)
        engine.close()
        ema = opd.EMAWeights(ctx.student, 0.9)
        t = time.process_time()
        for _ in range(repeats):
            ema.update(ctx.student)
        ema_s = (time.process_time() - t) / repeats
        student = __import__("copy").deepcopy(ctx.student)  # today's run, in CPU seconds: 10 steps (x steps/10)
        engine = _engine(ctx, student, config.rollout)
        t = time.process_time()
        opd.train(student, ctx.teacher, engine, ctx.train_ids, train, None, seed=0, stop_after=10)
        train_s = (time.process_time() - t) * train.steps / 10
        engine.close()
        eval_s = {}
        for n in sorted({config.eval.samples, big_samples or config.eval.samples}):
            ev_cfg = config.eval.model_copy(update={"samples": n})
            sampling = SamplingConfig(temperature=train.temperature)
            ev = opd.QualityEvaluator(
                ctx.teacher, ctx.eval_ids, None, ev_cfg, ctx.tokens, sampling, config.reference, config.rollout
            )
            t = time.process_time()
            ev(student, 0)
            eval_s[n] = time.process_time() - t
    per_batch = {c: float(np.median(v)) for c, v in cpu.items()}
    return {
        "rollout_cpu_s_per_batch": per_batch,
        "gumbel_over_inverse_cdf": per_batch["gumbel"] / per_batch["inverse_cdf"] if len(per_batch) == 2 else None,
        "extra_cpu_s_per_run": (
            (per_batch["gumbel"] - per_batch["inverse_cdf"]) * train.steps if len(per_batch) == 2 else None
        ),
        "ema_update_cpu_s": ema_s,
        "ema_extra_cpu_s_per_run": ema_s * train.steps,
        "repeats": repeats,
        "run_train_cpu_s": train_s,  # 10 steps measured, scaled to the recipe's steps
        "eval_cpu_s_by_samples": {str(k): v for k, v in eval_s.items()},
        "today_run_cpu_s": train_s + 2 * eval_s[config.eval.samples],  # a run evaluates at step 0 and the end
    }


def _sd(x) -> float:
    x = np.asarray(x, float)
    return float(x.std(ddof=1)) if len(x) > 1 else float("nan")


def _sd_interval(x, tau: float) -> list[float] | None:
    """95% χ² interval of an sd from len(x) values (normal model), in τ."""
    from scipy.stats import chi2

    n = len(x)
    if n < 3:
        return None
    sd, df = _sd(x), n - 1
    return [sd * math.sqrt(df / chi2.ppf(0.975, df)) / tau, sd * math.sqrt(df / chi2.ppf(0.025, df)) / tau]


def _floor(cost, se) -> float:
    """sqrt(max(sd(cost)² − mean SE², 0)): the paired sd without the evaluation's share, the trajectory's floor."""
    return math.sqrt(max(_sd(cost) ** 2 - float(np.mean(np.square(se))), 0.0))


def _corr(a, b) -> float:
    return float(np.corrcoef(a, b)[0, 1]) if len(a) > 2 else float("nan")


def shipped_figures(ledger: Path, level_std: float, tau: float) -> dict:
    """Today's protocol over the shipped ledger: baseline sd, the level's paired-cost sd and correlation (in τ)."""
    runs = [json.loads(x) for x in ledger.read_text().splitlines() if '"kind": "run"' in x or '"kind":"run"' in x]
    base = {r["seed"]: r["quality"] for r in runs if r.get("relative_std") is None and r.get("staleness") is None}
    lev = {r["seed"]: r["quality"] for r in runs if r.get("relative_std") == level_std}
    seeds = sorted(set(base) & set(lev))
    cost = [lev[s] - base[s] for s in seeds]
    return {
        "baseline_seeds": len(base),
        "baseline_sd": _sd(list(base.values())),
        "baseline_sd_tau": _sd(list(base.values())) / tau,
        "level_relative_std": level_std,
        "paired_seeds": len(seeds),
        "level_sd_tau": _sd([lev[s] for s in seeds]) / tau,
        "paired_cost_sd": _sd(cost),
        "paired_cost_sd_tau": _sd(cost) / tau,
        "paired_cost_sd_ci95_tau": _sd_interval(cost, tau),
        "paired_correlation": _corr([lev[s] for s in seeds], [base[s] for s in seeds]),
        "mean_seconds_per_run": float(np.mean([r["seconds"] for r in runs if r.get("seconds")])),
        "quality_by_seed": {"baseline": base, "level": lev},
    }


def _agreement(a, b) -> dict:
    """Token agreement of two coupled samples (B, T) (−1 past a response's end)."""
    import torch

    n = max(a.shape[1], b.shape[1])
    a, b = (torch.nn.functional.pad(t, (0, n - t.shape[1]), value=-1) for t in (a, b))  # (B, n), −1 past the end
    both = (a >= 0) & (b >= 0)
    same_seq = [ra == rb for ra, rb in zip(a.tolist(), b.tolist())]
    first = []  # position of the first differing token, per row (n when none)
    for ra, rb in zip(a.tolist(), b.tolist()):
        first.append(next((i for i, (x, y) in enumerate(zip(ra, rb)) if x != y), n))
    return {
        "tokens": float(((a == b) & both).sum() / max(int(both.sum()), 1)),
        "sequences": float(np.mean(same_seq)),
        "first_difference_mean": float(np.mean(first)),
    }


def analyse(rows: list[dict], work: Path, tau: float, shipped: dict, emas: list[float]) -> dict:

    by = {(r["coupling"], r["level"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    out: dict = {"options": [], "divergence": {}, "evaluation": {}, "seconds": {}}
    for c in _present(r["coupling"] for r in rows):
        runs = [r for r in rows if r["coupling"] == c]
        out["seconds"][c] = {
            "train_mean": float(np.mean([r["seconds_train"] for r in runs])),
            "eval_mean": float(np.mean([r["seconds_eval_mean"] for r in runs])),
            "rollout_mean": float(np.mean([r["seconds_by_phase"]["rollout"] for r in runs])),
        }
        # divergence of the paired training rollouts and weights
        div = {}
        for step in CHECK_STEPS:
            agree, dist = [], []
            for s in seeds:
                if (c, "level", s) not in by or (c, "baseline", s) not in by:
                    continue
                ta, tb = (_tensors(work, f"{c}-{lv}-{s}", "tokens") for lv in ("level", "base"))
                if ta is None or tb is None or step not in ta:
                    continue
                agree.append(_agreement(ta[step], tb[step]))
                wa, wb = (_tensors(work, f"{c}-{lv}-{s}", "weights") for lv in ("level", "base"))
                if wa is not None and wb is not None:
                    dist.append(float((wa[step] - wb[step]).norm() / wb[step].norm()))
            if agree:
                div[str(step)] = {
                    "pairs": len(agree),
                    "token_agreement": float(np.mean([x["tokens"] for x in agree])),
                    "sequence_agreement": float(np.mean([x["sequences"] for x in agree])),
                    "first_difference_mean": float(np.mean([x["first_difference_mean"] for x in agree])),
                    # None where the weights are not on this machine (they never leave the one that made them)
                    "relative_weight_distance": float(np.mean(dist)) if dist else None,
                    "weight_pairs": len(dist),
                }
        out["divergence"][c] = div
        for ec in _present(e["eval_coupling"] for r in runs for e in r["evals"]):
            # evaluation variance: the same final weights, K eval seeds
            ev_sd, se_draws, se_prompts = [], [], []
            for r in runs:
                last = [e for e in r["evals"] if e["eval_coupling"] == ec and e["weights"] == "last"]
                ev_sd.append(_sd([e["quality"] for e in last]))
                se_draws += [e["se_draws"] for e in last]
                se_prompts += [e["se_prompts"] for e in last]
            pooled = math.sqrt(float(np.mean(np.square(ev_sd))))
            out["evaluation"][f"{c}/{ec}"] = {
                "eval_sd_pooled": pooled,  # the same weights over K eval seeds, pooled over runs
                "eval_sd_pooled_tau": pooled / tau,
                "se_draws_rms": float(np.sqrt(np.mean(np.square(se_draws)))),  # what the record's quality_se says
                "se_prompts_rms": float(np.sqrt(np.mean(np.square(se_prompts)))),
                "runs": len(runs),
                "effective_df": len(
                    [e for e in runs[0]["evals"] if e["eval_coupling"] == ec and e["weights"] == "last"]
                )
                - 1,  # the runs share their K eval seeds: the pooled spread has K − 1 degrees of freedom
                "eval_seeds_per_run": len(
                    [e for e in runs[0]["evals"] if e["eval_coupling"] == ec and e["weights"] == "last"]
                ),
            }
            for weights in ["last"] + [f"ema{d}" for d in emas]:
                out["options"].append(_option(by, seeds, c, ec, weights, tau, out["evaluation"][f"{c}/{ec}"]))
    out["shipped"] = shipped
    return out


def _option(by: dict, seeds: list[int], c: str, ec: str, weights: str, tau: float, evaluation: dict) -> dict:
    """One (training coupling, eval coupling, weights) option at the shipped eval seed: the run and paired figures."""
    from admitcheck.calibration.quality_error import paired_difference_error

    def ev(key):
        r = by.get(key)
        if r is None:
            return None
        hits = [e for e in r["evals"] if e["eval_coupling"] == ec and e["weights"] == weights]
        return hits[0] if hits else None  # the shipped eval seed is the first

    base, lev, cost, se_pair, se_pair_prompts = [], [], [], [], []
    for s in seeds:
        b, x = ev((c, "baseline", s)), ev((c, "level", s))
        if b is None or x is None:
            continue
        base.append(b["quality"])
        lev.append(x["quality"])
        kw = {"samples": x["samples"]}
        d = paired_difference_error(
            x["kl_by_response"], x["tokens_by_response"], b["kl_by_response"], b["tokens_by_response"], **kw
        )
        cost.append(d.value)
        se_pair.append(d.draws)
        se_pair_prompts.append(d.prompts)
    # trajectory variance = one run's variance across seeds − its evaluation variance (the same weights, other
    # draws): the eval variance from the clustered SE (the K-seed spread has only K − 1 degrees of freedom, as
    # every run shares the same K eval seeds; both are given)
    run_var = float(np.mean([_sd(base) ** 2, _sd(lev) ** 2]))
    traj = max(run_var - evaluation["se_draws_rms"] ** 2, 0.0)
    traj_k = max(run_var - evaluation["eval_sd_pooled"] ** 2, 0.0)
    return {
        "train_coupling": c,
        "eval_coupling": ec,
        "weights": weights,
        "pairs": len(cost),
        "baseline_quality": base,
        "level_quality": lev,
        "paired_cost": cost,
        "run_sd_tau": math.sqrt(run_var) / tau,
        "trajectory_sd_tau": math.sqrt(traj) / tau,
        "trajectory_sd_tau_from_k_seeds": math.sqrt(traj_k) / tau if weights == "last" else None,
        "paired_cost_mean_tau": float(np.mean(cost)) / tau,
        "paired_cost_sd_tau": _sd(cost) / tau,
        "paired_cost_sd_ci95_tau": _sd_interval(cost, tau),
        "paired_correlation": _corr(lev, base),
        "paired_se_draws_tau": float(np.sqrt(np.mean(np.square(se_pair)))) / tau,  # eval draws, paired per response
        "paired_trajectory_sd_tau": _floor(cost, se_pair) / tau,  # what is left without evaluation noise
        "paired_se_prompts_tau": float(np.sqrt(np.mean(np.square(se_pair_prompts)))) / tau,  # clustered by prompt
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", choices=("toy", "smollm2"), default="toy")
    ap.add_argument("--seeds", type=int, default=4, help="replicates (the shipped ledger's first run seeds)")
    ap.add_argument("--level-std", type=float, default=None, help="default: the shipped level with most replicates")
    ap.add_argument("--eval-seeds", type=int, default=3, help="K: eval seeds per final weights")
    ap.add_argument("--ema", type=float, nargs="*", default=[0.9, 0.98])
    ap.add_argument("--couplings", nargs="*", default=list(COUPLINGS), help="training rollouts' couplings")
    ap.add_argument("--eval-couplings", nargs="*", default=list(COUPLINGS), help="the evaluations' couplings")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None, help="smoke tests only: not the shipped recipe's steps")
    ap.add_argument("--big-eval-samples", type=int, default=0, help="also score final weights with N samples/prompt")
    ap.add_argument("--work", default=None, help="per-run records and tensors (default /tmp/admitcheck-noise-PAIR)")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--analyse-only", action="store_true",
        help="no runs, evaluations or timings: analyse the records in --work (collected from where they were made)",
    )  # fmt: skip
    a = ap.parse_args()
    cfg_path, artifact_path, ledger = _pair_files(a.pair)
    artifact = yaml.safe_load(artifact_path.read_text())
    tau = float(artifact["tolerance"]["value"])
    from admitcheck.calibration.levels import replicate_seed

    runs = [json.loads(x) for x in ledger.read_text().splitlines() if '"run"' in x]
    runs = [r for r in runs if r.get("kind") == "run"]
    if a.level_std is None:
        counts: dict[float, int] = {}
        for r in runs:
            if r.get("relative_std") is not None:
                counts[r["relative_std"]] = counts.get(r["relative_std"], 0) + 1
        a.level_std = max(counts, key=lambda k: (counts[k], -k))
    base_seed = int(yaml.safe_load(cfg_path.read_text()).get("seed", 0))
    seeds = [replicate_seed(base_seed, r) for r in range(a.seeds)]
    work = Path(a.work or f"/tmp/admitcheck-noise-{a.pair}")
    work.mkdir(parents=True, exist_ok=True)
    done_file = work / "runs.jsonl"
    done = [json.loads(x) for x in done_file.read_text().splitlines()] if done_file.exists() else []
    have = {r["tag"] for r in done}
    tasks = []
    for s in seeds:  # paired runs next to each other: a partial result still has whole pairs
        for c in a.couplings:
            for std in (0.0, a.level_std):
                tag = f"{c}-{'base' if std == 0 else 'level'}-{s}"
                if tag not in have:
                    tasks.append(
                        (a.pair, std, s, c, a.eval_seeds, tuple(a.ema), str(work), a.steps, tuple(a.eval_couplings),
                         a.big_eval_samples)
                    )  # fmt: skip
    if a.analyse_only:
        tasks = []
    t0 = time.perf_counter()
    print(f"{len(tasks)} runs to do ({len(done)} done) in {work}", flush=True)
    with ProcessPoolExecutor(max_workers=max(1, min(a.jobs, len(tasks)))) as pool:
        for row in pool.map(one_run, tasks):
            done.append(row)
            with done_file.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{row['tag']}: {row['seconds_train']:.0f} s, {time.perf_counter() - t0:.0f} s in", flush=True)
    done = [r for r in done if r["seed"] in seeds and r["coupling"] in a.couplings]
    # a record names its level's size since 2026-12-06 (before: the default level, the same on the ledgers then)
    done = [r for r in done if r.get("relative_std") in (None, 0.0, a.level_std)]
    shipped = shipped_figures(ledger, a.level_std, tau)
    result = analyse(done, work, tau, shipped, a.ema)
    if a.big_eval_samples:
        big_file = work / f"evals_{a.big_eval_samples}.jsonl"
        big = [json.loads(x) for x in big_file.read_text().splitlines()] if big_file.exists() else []
        big += [b for r in done for b in r.get("big_evals", []) if b["samples"] == a.big_eval_samples]
        have_big = {b["tag"] for b in big}
        last_step = max(s for s in CHECK_STEPS if s <= (a.steps or _recipe_steps(cfg_path)))
        # runs recorded without it: scored here from their kept weights, where this machine has them
        todo = [
            (a.pair, r["tag"], last_step, a.big_eval_samples, str(work), tuple(a.eval_couplings))
            for r in done
            if r["tag"] not in have_big and _tensors(work, r["tag"], "weights") is not None and not a.analyse_only
        ]
        missing = [r["tag"] for r in done if r["tag"] not in have_big and r["tag"] not in {t[1] for t in todo}]
        print(f"{len(todo)} larger evaluations to do ({len(missing)} runs without one: weights elsewhere)", flush=True)
        with ProcessPoolExecutor(max_workers=max(1, min(a.jobs, len(todo)))) as pool:
            for rows in pool.map(one_eval, todo):
                big += rows
                with big_file.open("a") as f:
                    f.writelines(json.dumps(x) + "\n" for x in rows)
        result["larger_evaluation"] = larger_eval(done, big, tau)
        result["larger_evaluation_missing"] = missing
    if not a.analyse_only:
        result["sampling_cost"] = sampling_cost(a.pair, big_samples=a.big_eval_samples, couplings=a.couplings)
    reproduced = []
    for r in done:  # today's defaults: the inverse-CDF runs at the shipped seeds must give the ledger's quality
        if r["coupling"] == "inverse_cdf":
            q = next(e["quality"] for e in r["evals"] if e["eval_coupling"] == "inverse_cdf" and e["weights"] == "last")
            ship = shipped["quality_by_seed"]["baseline" if r["level"] == "baseline" else "level"].get(r["seed"])
            reproduced.append({"run": r["tag"], "quality": q, "ledger": ship, "equal": ship == q})
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    meta = {
        "pair": a.pair,
        "config": str(cfg_path.relative_to(ROOT)),
        "tau": tau,
        "level_relative_std": a.level_std,
        "seeds": seeds,
        "eval_seeds": a.eval_seeds,
        "ema_decays": a.ema,
        "check_steps": [s for s in CHECK_STEPS],
        "jobs": a.jobs,
        "torch_threads_per_run": 1,
        "analyse_only": a.analyse_only,  # the records were made elsewhere (their machine: docs/noise.md)
        "commit": commit.strip(),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python " + " ".join(sys.argv),
    }
    doc = {"meta": meta, "shipped_reproduced": reproduced} | result
    text = json.dumps(doc, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(json.dumps({k: doc[k] for k in ("meta", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
