"""Error rates and power of the screen's verdict by simulation (issue #35's must-holds).

    nice -n 10 python bench/coverage.py --out bench/results/screen_coverage.json   # 2,000 screens per cell
    python bench/coverage.py --sims 300 --json          # quicker; tests/test_coverage.py runs a small version
    nice -n 10 python bench/coverage.py --toy toy       # regenerate the toy's real sums (bench/data/toy_sums.npz)

Each simulated screen runs the production rule (`admission.sequential.look_states`: two bettors on the calibration's
functional, `metrics.Functional` with κ = `metrics.WINSOR_KAPPA`, each at α = 2.5%) on per-sequence means X_i = s_i /
n_i (nats/token), looking after 32, 64, …, 256 sequences (examples/toy_screen.yaml's plan). The truth is the
functional of the distribution itself: T solving T = E[min(X, κ T)] (on 2,000,000 draws for the synthetic laws, exactly
on the population for resampled real sums). The budget B is exact (a point interval), so the table is the candidate
side's error alone; a calibration's interval adds the budget's own miss by the union bound (docs/statistics.md).

Distributions: per-sequence lognormal sums of σ 1, 1.5, 2; light (Gamma terms); the spike mixtures `heavy`,
`heavier`, `beyond_sigma2.5`, `beyond_rare` (a light bulk plus rare lognormal spikes per token carrying 80–90% of the
mean); `bimodal` (half the sequences 100× smaller) and `gamma0.3` (the statistics review's D1 laws); and resampled
real sums of the toy pair, drawn with replacement from 1,024 sequences (bench/data/toy_sums.npz: FP8 KV, FP8 W8A8,
heavy weight noise, kl_exact and k3; plus the review's own FP8-KV regeneration, fp8kv_sums.npz, copied there as
`review_fp8_kv`).

Cells: wrong ADMIT at a true functional of 1.05, 1.2, 1.5 and 2 × B; per look, the share of screens whose
confidence sequence has excluded the truth by then (upper side: the "below" bettor at b = T has reached 1/α; lower
side likewise) against the nominal α at every look; ADMIT power at B/3 and REJECT power at 3 × B by probes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from admitcheck.admission.sequential import look_states
from admitcheck.measurement.metrics import WINSOR_KAPPA, betting_log_capital, winsorized_mean

ROOT = Path(__file__).resolve().parent.parent
TOY_SUMS = ROOT / "bench" / "data" / "toy_sums.npz"

# name -> (spike probability per token, spike lognormal σ, share of the mean carried by the light terms)
SETTINGS = {
    "lognormal_1": (-1.0, 1.0, 0.0),  # per-sequence sums n·LN(−σ²/2, σ)
    "lognormal_1.5": (-1.0, 1.5, 0.0),
    "lognormal_2": (-1.0, 2.0, 0.0),
    "light": (0.0, 1.0, 1.0),  # a sum of n Gamma(0.5, 2) terms
    "bimodal": (-2.0, 0.0, 0.0),  # per-token mean 0.02 or 1.98 (prob 1/2) × LN(−0.045, 0.3): half 100× smaller
    "gamma0.3": (-3.0, 0.0, 0.0),  # per-sequence Gamma(0.3 n / 16): skewed, light-tailed
    "heavy": (0.01, 2.0, 0.2),
    "heavier": (0.005, 2.0, 0.1),
    "beyond_sigma2.5": (0.01, 2.5, 0.1),
    "beyond_rare": (0.003, 2.5, 0.1),
}
REAL = ("toy_fp8_kv", "toy_fp8_w8a8", "toy_heavy_noise", "review_fp8_kv")  # resampled real sums (kl_exact, k3)
# The power must-holds (ADMIT at B/3 ≥ 90% within 128 probes); validity must hold everywhere.
POWER_MUST_HOLD = ("lognormal_1", "lognormal_1.5", "bimodal", "gamma0.3", "light", "toy_fp8_w8a8", "toy_heavy_noise")
RATIOS = (1.05, 1.2, 1.5, 2.0)  # true functional / B where a wrong ADMIT is counted
POWER = (1 / 3, 3.0)  # truth / B: ADMIT power, REJECT power
PLAN = {"first": 32, "batch": 32, "most": 256, "confidence": 0.95}
ALPHA = (1.0 - PLAN["confidence"]) / 2.0  # each bettor's level, at every look


def looks() -> list[int]:
    return list(range(PLAN["first"], PLAN["most"] + 1, PLAN["batch"]))


def sequences(setting: str, sims: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """(sims, m) per-sequence means X = s / n of a synthetic law (lengths uniform in [16, 64] tokens)."""
    p, sigma, light = SETTINGS[setting]
    n = rng.integers(16, 65, size=(sims, m)).astype(np.float64)  # (S, m) tokens
    if p == -1.0:
        return rng.lognormal(-sigma * sigma / 2.0, sigma, size=(sims, m))
    if p == -2.0:
        level = np.where(rng.random((sims, m)) < 0.5, 0.02, 1.98)
        return level * rng.lognormal(-0.045, 0.3, (sims, m))
    if p == -3.0:
        k = 0.3 * n / 16.0
        return rng.gamma(k, 1.0 / k)
    base = rng.gamma(0.5 * n, 2.0) / n  # (S, m): the mean of n Gamma(0.5, 2) terms
    if p == 0:
        return base
    k = rng.binomial(n.astype(np.int64), p)  # (S, m) spikes per sequence
    spikes = np.zeros_like(n)
    for j in range(1, int(k.max()) + 1):
        spikes += np.where(k >= j, rng.lognormal(0.0, sigma, size=n.shape), 0.0)
    mean_spike = p * math.exp(sigma * sigma / 2.0)  # per token
    return light * base + (1.0 - light) * spikes / (mean_spike * n)


def real_population(name: str, key: str) -> np.ndarray:
    """The 1,024 per-sequence means of a resampled real setting (bench/data/toy_sums.npz)."""
    data = np.load(TOY_SUMS)
    return data[f"{name}.{key}"] / data[f"{name}.num_tokens"]


def truth_of(setting: str, key: str = "kl_exact", seed: int = 99) -> float:
    if setting in SETTINGS:
        big = sequences(setting, 1, 2_000_000, np.random.default_rng([seed, list(SETTINGS).index(setting)]))
        return float(winsorized_mean(big, WINSOR_KAPPA)[0])
    return float(winsorized_mean(real_population(setting, key)[None], WINSOR_KAPPA)[0])


def screens(x: np.ndarray, truth: float, budgets: tuple[float, ...]) -> dict:
    """The sequential rule on every row against each budget: outcome and probes used per budget; per look, whether
    the confidence sequence has excluded the truth (upper and lower side, running over the looks)."""
    sims = x.shape[0]
    plan = looks()
    outcome = {b: np.full(sims, "undecided", dtype=object) for b in budgets}
    probes = {b: np.full(sims, plan[-1]) for b in budgets}
    open_ = {b: np.ones(sims, bool) for b in budgets}
    for m in plan:
        for b in budgets:
            state = look_states(x[:, :m], (b, b), WINSOR_KAPPA, ALPHA)
            hit = open_[b] & np.isin(state, ["admit", "reject"])
            outcome[b][hit], probes[b][hit] = state[hit], m
            open_[b] &= ~hit
    thr = math.log(1.0 / ALPHA)
    idx = np.array(plan) - 1
    up = np.maximum.accumulate(betting_log_capital(x, truth, WINSOR_KAPPA, "below"), 1)[:, idx] >= thr  # (S, looks)
    down = np.maximum.accumulate(betting_log_capital(x, truth, WINSOR_KAPPA, "above"), 1)[:, idx] >= thr
    return {"outcome": outcome, "probes": probes, "miss_high": up, "miss_low": down}


def cell_rows(name: str, x: np.ndarray, truth: float, extra: dict | None = None) -> dict:
    """One setting's row: the rule run on `x` (S, 256) with budgets truth / ratio."""
    ratios = RATIOS + POWER
    res = screens(x / truth, 1.0, tuple(1.0 / t for t in ratios))  # scale-equivariant: the truth becomes 1
    row: dict = {"setting": name, "sims": x.shape[0], "truth": truth, **(extra or {})}
    over = np.clip(x - WINSOR_KAPPA * truth, 0.0, None).sum() / x.sum()
    row["capped_share"] = float(over)  # of the mean of the draws, above κ × truth
    for t in ratios:
        out, probes = res["outcome"][1.0 / t], res["probes"][1.0 / t]
        key = f"{t:.3g}B"
        row[f"admit@{key}"] = float(np.mean(out == "admit"))
        row[f"reject@{key}"] = float(np.mean(out == "reject"))
        right = out == ("admit" if t < 1 else "reject")
        row[f"median_probes_decided@{key}"] = float(np.median(probes[right])) if right.any() else math.nan
        row[f"decided_by_probes@{key}"] = {int(m): float(np.mean(right & (probes <= m))) for m in looks()}
    row["per_look_miss_high"] = {int(m): float(v) for m, v in zip(looks(), res["miss_high"].mean(0))}
    row["per_look_miss_low"] = {int(m): float(v) for m, v in zip(looks(), res["miss_low"].mean(0))}
    row["nominal_each_side_every_look"] = ALPHA
    return row


def run(sims: int, seed: int = 0, settings=tuple(SETTINGS) + REAL, chunk: int = 500) -> list[dict]:
    rows = []
    for name in settings:
        keys = ("kl_exact", "k3") if name in REAL else (None,)
        for key in keys:
            rng = np.random.default_rng([seed, (list(SETTINGS) + list(REAL)).index(name), len(key or "")])
            if key is None:
                parts = [sequences(name, min(chunk, sims - c), PLAN["most"], rng) for c in range(0, sims, chunk)]
                x = np.concatenate(parts)
                truth = truth_of(name)
                extra = {}
            else:
                pop = real_population(name, key)
                x = pop[rng.integers(0, pop.size, size=(sims, PLAN["most"]))]
                truth = truth_of(name, key)
                extra = {"estimator": key, "population": int(pop.size), "uncapped_mean": float(pop.mean()),
                         "top_share_population": float(pop.max() / pop.sum())}  # fmt: skip
            rows.append(cell_rows(name if key is None else f"{name}.{key}", x, truth, extra))
    return rows


def kappa_choice(sims: int = 1000, seed: int = 1) -> list[dict]:
    """Why κ = 8: power at B/3 within 128 probes and the functional / mean on lognormal σ 1, 1.5, 2 for κ 4…10
    (the rule's bettor alone, on the sequences 1..128 and 1..256). κ was taken as the largest with ≥ 90% power at
    128 probes on σ 1.5, the hardest power must-hold, with a margin: a larger κ counts more of the tail."""
    rng = np.random.default_rng(seed)
    out = []
    thr = math.log(1.0 / ALPHA)
    for sigma in (1.0, 1.5, 2.0):
        big = rng.lognormal(-sigma * sigma / 2, sigma, (1, 2_000_000))
        x = rng.lognormal(-sigma * sigma / 2, sigma, (sims, 256))
        for kappa in (4.0, 5.0, 8.0, 10.0):
            t = float(winsorized_mean(big, kappa)[0])
            hit = np.maximum.accumulate(betting_log_capital(x, 3.0 * t, kappa, "below"), 1) >= thr
            power = {"admit@B/3_by128": float(hit[:, 127].mean()), "admit@B/3_by256": float(hit[:, 255].mean())}
            out.append({"sigma": sigma, "kappa": kappa, "functional_over_mean": t, **power})
    return out


def verdict_checks(rows: list[dict], sims: int) -> dict:
    """The must-holds, with a binomial allowance of 3.09 sd (a rule exactly at the level fails ~1 in 1,000)."""
    slack = 3.09 * math.sqrt(ALPHA * (1 - ALPHA) / sims)
    wrong = {r["setting"]: r["admit@1.05B"] for r in rows}
    worst_look = {r["setting"]: max(max(r["per_look_miss_high"].values()), max(r["per_look_miss_low"].values()))
                  for r in rows}  # fmt: skip
    power = {
        r["setting"]: r["decided_by_probes@0.333B"][128]
        for r in rows
        if r["setting"].split(".")[0] in POWER_MUST_HOLD or r["setting"] in POWER_MUST_HOLD
    }
    return {
        "wrong_admit_at_1.05B_max": max(wrong.values()),
        "wrong_admit_ok": all(v <= ALPHA + slack for v in wrong.values()),
        "per_look_miss_max": max(worst_look.values()),
        "per_look_ok": all(v <= ALPHA + slack for v in worst_look.values()),
        "power_at_B/3_by_128": power,
        "power_ok": all(v >= 0.9 for v in power.values()),
        "allowance": ALPHA + slack,
    }


# ------------------------------------------------------------------------------------------- the real toy pair

TOY_CANDIDATES = {"fp8_kv": "toy_fp8_kv", "fp8_w8a8_tensor": "toy_fp8_w8a8", "heavy_noise": "toy_heavy_noise"}


def toy_sequences(toy: Path, passes: int = 4) -> dict[str, dict[str, np.ndarray]]:
    """Per-sequence sums of the toy candidates over `passes` × the 256 probe prompts (pass p samples with seeds
    offset by p × batches: fresh draws of the same prompts), through the one probe loop."""
    from admitcheck import io
    from admitcheck.config import ScreenConfig
    from admitcheck.measurement.probe import ProbeRun, probe_batches
    from admitcheck.pairs.load import load_pair_tokenizer, tokenize_prompts
    from admitcheck.rollout.engines import build_engine

    raw = io.read_yaml(ROOT / "examples" / "toy_screen.yaml")
    raw |= {"pair": {"name": "toy", "student": str(toy / "student"), "teacher": str(toy / "teacher")}}
    raw["probe"] |= {"prompts": str(toy / "prompts" / "probe.jsonl")}
    cfg = ScreenConfig.model_validate(raw)
    tokens = load_pair_tokenizer(cfg.pair)
    ids = tokenize_prompts(tokens, io.read_prompts(cfg.probe.prompts, limit=cfg.probe.num_prompts))
    reference = io.load_causal_lm(cfg.pair.student, cfg.reference.dtype, cfg.reference.device)
    batches = math.ceil(len(ids) / cfg.probe.batch_size)
    out = {}
    for cand in cfg.candidates:
        if cand.name not in TOY_CANDIDATES:
            continue
        engine = build_engine(cand.rollout, cfg.pair.student, eos_token_id=tokens.eos_token_id,
                              pad_token_id=tokens.pad_token_id)  # fmt: skip
        run = ProbeRun()
        for p in range(passes):
            for b in probe_batches(engine, reference, ids, cfg.probe, cfg.sampling, full=True, seed_offset=p * batches):
                run.add(b)
        engine.close()
        out[cand.name] = run.sums()
    return out


def save_toy_sums(toy: Path, review_npz: Path | None) -> dict:
    """Regenerate the toy's sums and write bench/data/toy_sums.npz (kl_exact, k3, num_tokens per setting)."""
    t0 = time.perf_counter()
    data = toy_sequences(toy)
    arrays = {}
    for cand, name in TOY_CANDIDATES.items():
        for key in ("kl_exact", "k3", "num_tokens"):
            arrays[f"{name}.{key}"] = data[cand][key]
    if review_npz is not None and review_npz.is_file():
        rv = np.load(review_npz)
        for key in ("kl_exact", "k3", "num_tokens"):
            arrays[f"review_fp8_kv.{key}"] = rv[key]
    TOY_SUMS.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(TOY_SUMS, **arrays)
    return {"written": str(TOY_SUMS.relative_to(ROOT)), "seconds": round(time.perf_counter() - t0, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON result here")
    ap.add_argument("--toy", type=Path, default=None, help="toy pair dir: regenerate bench/data/toy_sums.npz")
    ap.add_argument("--review-npz", type=Path, default=Path("/work/shared/review/fp8kv_sums.npz"))
    args = ap.parse_args(argv)
    if args.toy is not None:
        print(json.dumps(save_toy_sums(args.toy.resolve(), args.review_npz)))
        return 0
    t0 = time.perf_counter()
    settings = tuple(SETTINGS) + tuple(r for r in REAL if TOY_SUMS.is_file())
    rows = run(args.sims, args.seed, settings)
    checks = verdict_checks(rows, args.sims)
    result = {"rows": rows, "kappa": WINSOR_KAPPA, "alpha_each_side": ALPHA, "plan": PLAN, "checks": checks,
              "kappa_choice": kappa_choice(), "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip
    ok = checks["wrong_admit_ok"] and checks["per_look_ok"] and checks["power_ok"]
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    if args.json:
        print(json.dumps(result))
        return 0 if ok else 1
    print(f"{args.sims} screens per cell; κ {WINSOR_KAPPA:g}; each bettor at {ALPHA:.1%}, every look; looks 32..256")
    cols = " / ".join(f"{t:g}" for t in RATIOS)
    print(f"| setting | capped share | wrong ADMIT @ {cols} × B | worst per-look miss (high / low) | "
          "B/3: ADMIT by 64 / 128 / 256 | 3 × B: REJECT, median probes |")  # fmt: skip
    print("|---" * 6 + "|")
    for r in rows:
        errs = " / ".join(f"{r[f'admit@{t:.3g}B']:.2%}" for t in RATIOS)
        by = r["decided_by_probes@0.333B"]
        print(
            f"| {r['setting']} | {r['capped_share']:.0%} | {errs} | {max(r['per_look_miss_high'].values()):.2%} / "
            f"{max(r['per_look_miss_low'].values()):.2%} | {by[64]:.0%} / {by[128]:.0%} / {by[256]:.0%} | "
            f"{r['reject@3B']:.0%}, {r['median_probes_decided@3B']:.0f} |"
        )
    print(json.dumps(checks))
    print(f"{time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
