"""Error rates of the screen's verdict by simulation, at three tail settings (issue #11's must-hold).

    nice -n 5 python bench/coverage.py                  # 2,000 screens per setting and truth (~minutes, 1 core)
    python bench/coverage.py --sims 300 --json          # quicker; tests/test_coverage.py runs a small version

Each simulated screen runs the production rule (`admission.look_states` on `metrics.bootstrap_t_bounds` with the
production resamples, the >10% top-share rule, α spent evenly over the looks) on synthetic per-sequence k3 sums:
lengths uniform in [16, 64] tokens; each token carries a light Gamma(0.5) term, and with probability `p` a rare
large perturbation, lognormal(0, σ) — what FP8 KV does on the toy, where one sequence carries ~31% of k3. Settings:
light (no spikes), heavy (the top sequence carries ~37% of k3 at n = 32, as in the issue), heavier (half as many
spikes carrying 90% of k3: ~48%), and two rows beyond what any sample-based bound can do (see SETTINGS). The true
k3 is 1 (nats/token, any unit) by construction; the budget B is exact (a point interval),
so the table is the candidate side's error alone: with the calibration's interval the rule adds the budget's own
miss rate by the union bound (docs/statistics.md).

Screen plan: examples/toy_screen.yaml's (first look at 32 probes, batches of 32, at most 256: K = 8 looks), two-sided
confidence 0.95. Must hold: at truth 1.5 × B wrong ADMITs ≤ nominal (2.5%) + 1 point; at 0.67 × B REJECTs decided by
the bound ≤ nominal + 1 point; the share still undecided at the cap is power, reported separately. The last columns
show the old rule (delta-method interval on the log scale, no share rule) on the same data.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.special import stdtrit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from admitcheck.admission import look_states
from admitcheck.metrics import (
    bootstrap_t_bounds,
    pareto_k,
    resample_counts,
    sequential_confidence,
)

# name -> (spike probability per token, spike lognormal σ, share of the mean carried by the light terms)
SETTINGS = {
    "light": (0.0, 1.0, 1.0),
    "heavy": (0.01, 2.0, 0.2),
    "heavier": (0.005, 2.0, 0.1),  # half as many spikes of the same law, carrying 90% of k3
    # Beyond the method (not must-holds; shown so the limit is on record): spikes of lognormal σ 2.5, whose mean sits
    # in values that a few hundred sequences rarely contain: no interval computed from the sample can know them.
    "beyond_sigma2.5": (0.01, 2.5, 0.1),
    "beyond_rare": (0.003, 2.5, 0.1),
}
MUST_HOLD = ("light", "heavy", "heavier")
PLAN = {"first": 32, "batch": 32, "most": 256, "confidence": 0.95}


def sequences(setting: str, sims: int, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(sims, m) per-sequence k3 sums and token counts; E[sum | n] = n exactly (true k3 = 1 nats/token)."""
    p, sigma, light = SETTINGS[setting]
    n = rng.integers(16, 65, size=(sims, m)).astype(np.float64)  # (S, m) tokens
    base = rng.gamma(0.5 * n, 2.0)  # (S, m): a sum of n Gamma(0.5, 2) terms, mean n
    if p == 0:
        return base, n
    k = rng.binomial(n.astype(np.int64), p)  # (S, m) spikes per sequence
    spikes = np.zeros_like(n)
    for j in range(1, int(k.max()) + 1):
        spikes += np.where(k >= j, rng.lognormal(0.0, sigma, size=n.shape), 0.0)
    mean_spike = p * math.exp(sigma * sigma / 2.0)  # per token
    return light * base + (1.0 - light) * spikes / mean_spike, n


def screens(s: np.ndarray, n: np.ndarray, budget: float, plan: dict = PLAN) -> dict[str, np.ndarray]:
    """Run the sequential rule on every row: outcome ("admit" | "reject" | "undecided") and probes used, plus the
    old rule's outcome on the same rows."""
    sims = s.shape[0]
    looks = list(range(plan["first"], plan["most"] + 1, plan["batch"]))
    conf = sequential_confidence(plan["confidence"], len(looks))
    a = (1.0 - conf) / 2.0  # per side, per look
    outcome = np.full(sims, "undecided", dtype=object)
    probes = np.full(sims, looks[-1])
    old = np.full(sims, "undecided", dtype=object)
    open_, old_open = np.ones(sims, bool), np.ones(sims, bool)
    for m in looks:
        sm, nm = s[:, :m], n[:, :m]
        est, lo, hi = bootstrap_t_bounds(sm, nm, a, a, resample_counts(m))
        share = sm.max(1) / sm.sum(1)
        k_hat = np.array([pareto_k(row) for row in sm])  # (S,)
        state = look_states(lo, hi, share, k_hat, (budget, budget))
        hit = open_ & np.isin(state, ["admit", "reject"])
        outcome[hit], probes[hit] = state[hit], m
        open_ &= ~hit
        # the old rule: delta-method t interval, mapped to the log scale, no share rule
        resid = sm - est[:, None] * nm
        se = np.sqrt((resid * resid).sum(1) / (m * (m - 1))) / nm.mean(1)
        h = float(stdtrit(m - 1, 1 - a)) * se
        olo, ohi = est * np.exp(-h / est), est * np.exp(h / est)
        ostate = np.where(ohi < budget, "admit", np.where(olo > budget, "reject", "undecided"))
        hit = old_open & (ostate != "undecided")
        old[hit] = ostate[hit]
        old_open &= ~hit
    return {"outcome": outcome, "probes": probes, "old": old}


def run(sims: int, seed: int = 0, settings=tuple(SETTINGS), chunk: int = 500) -> list[dict]:
    rows = []
    for name in settings:
        rng = np.random.default_rng([seed, list(SETTINGS).index(name)])
        row: dict = {"setting": name, "sims": sims}
        for label, truth in (("over", 1.5), ("under", 0.67)):
            out, probes, old, share32 = [], [], [], []
            for c0 in range(0, sims, chunk):
                s, n = sequences(name, min(chunk, sims - c0), PLAN["most"], rng)
                r = screens(s, n, budget=1.0 / truth)
                out.append(r["outcome"]), probes.append(r["probes"]), old.append(r["old"])
                share32.append(s[:, :32].max(1) / s[:, :32].sum(1))
            out, probes, old = np.concatenate(out), np.concatenate(probes), np.concatenate(old)
            row[f"{label}_admit"] = float(np.mean(out == "admit"))
            row[f"{label}_reject"] = float(np.mean(out == "reject"))
            row[f"{label}_undecided"] = float(np.mean(out == "undecided"))
            row[f"{label}_median_probes"] = float(np.median(probes))
            row[f"{label}_old_admit"] = float(np.mean(old == "admit"))
            row[f"{label}_old_reject"] = float(np.mean(old == "reject"))
            row["top_share_32"] = float(np.mean(np.concatenate(share32)))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sims", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = run(args.sims, args.seed)
    nominal = (1 - PLAN["confidence"]) / 2
    ok = all(
        r["over_admit"] <= nominal + 0.01 and r["under_reject"] <= nominal + 0.01
        for r in rows
        if r["setting"] in MUST_HOLD
    )
    if args.json:
        print(json.dumps({"rows": rows, "nominal": nominal, "ok": ok, "seconds": time.perf_counter() - t0}))
        return 0 if ok else 1
    print(f"{args.sims} simulated screens per cell; nominal one-sided error {nominal:.1%}; looks at 32..256 by 32")
    head = (
        "| setting | top share @32 | wrong ADMIT @1.5B | undecided @1.5B | wrong REJECT @0.67B | undecided @0.67B "
        "| median probes (1.5B / 0.67B) | old rule: wrong ADMIT / wrong REJECT |"
    )
    print(head + "\n" + "|---" * 8 + "|")
    for r in rows:
        print(
            f"| {r['setting']} | {r['top_share_32']:.0%} | {r['over_admit']:.2%} | {r['over_undecided']:.1%} | "
            f"{r['under_reject']:.2%} | {r['under_undecided']:.1%} | {r['over_median_probes']:.0f} / "
            f"{r['under_median_probes']:.0f} | {r['over_old_admit']:.1%} / {r['under_old_reject']:.1%} |"
        )
    print(f"must hold (≤ {nominal + 0.01:.1%} each): {'met' if ok else 'NOT met'}; {time.perf_counter() - t0:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
