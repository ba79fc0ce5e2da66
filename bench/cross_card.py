"""Do two GPUs make the same candidate runs? (issue 38: the backtest's candidate runs were made on H100s, the issue
asks for the H200.) One finished run per engine kind is taken out of a copy of a backtest's ledger (`drop`); the
backtest resumed on the other card re-makes exactly those (same key, same seed: the ledger's missing runs); `compare`
then sets each re-made run beside the one taken out: final quality, its difference in τ, bit-identical or not.

    python bench/cross_card.py drop --ledger reports/smollm2/cal/smollm2.backtest.ledger.jsonl \
        --aside reports/smollm2/cross_card.aside.jsonl
    python -m admitcheck backtest out/smollm2_backtest.campaign.yaml --jobs 4     # re-makes the 4 runs
    python bench/cross_card.py compare --ledger … --aside … --calibration calibrations/smollm2.yaml \
        --card "$(nvidia-smi -L | head -1)" \
        --out reports/smollm2/cross_card.json

The engine kinds: a dtype candidate (rollout dtype bfloat16/float16, no FP8), FP8 weights, FP8 KV cache, staleness.
The first finished run of each (ledger order) is taken: the choice does not look at the quality.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def _kind(rec: dict) -> str | None:
    """The engine kind of a backtest run record (None: a baseline or a noise level)."""
    level = json.loads(rec["key"])["level"]
    if level is None or level.get("kind") == "baseline":
        return None
    if level.get("staleness", 0):
        return "staleness"
    r = level.get("rollout") or {}
    if (r.get("noise") or {}).get("relative_std", 0.0):
        return None
    if (r.get("kv_cache") or {}).get("dtype", "auto") != "auto":
        return "fp8_kv"
    if r.get("weights"):
        return "fp8_weights"
    if r.get("dtype") in ("bfloat16", "float16"):
        return "dtype"
    return None


def _records(path: Path) -> tuple[str, list[dict]]:
    lines = path.read_text().splitlines()
    return lines[0], [json.loads(x) for x in lines[1:] if x.strip()]


def drop(ledger: Path, aside: Path) -> None:
    if aside.exists():
        sys.exit(f"{aside} exists: the runs were taken out already (compare, or remove it to start over)")
    header, recs = _records(ledger)
    taken: dict[str, dict] = {}
    for r in recs:
        k = _kind(r) if r.get("kind") == "run" else None
        if k is not None and k not in taken:
            taken[k] = r
    keep = [r for r in recs if all(r is not t for t in taken.values())]
    aside.parent.mkdir(parents=True, exist_ok=True)
    aside.write_text("".join(json.dumps(r) + "\n" for r in taken.values()))
    tmp = ledger.with_suffix(".tmp")
    tmp.write_text(header + "\n" + "".join(json.dumps(r) + "\n" for r in keep))
    os.replace(tmp, ledger)
    print(f"took out {len(taken)} runs ({', '.join(taken)}); {len(keep)} records kept in {ledger}")


def compare(ledger: Path, aside: Path, tau: float, card: str, out: Path) -> None:
    _, recs = _records(ledger)
    by_key = {r["key"]: r for r in recs if r.get("kind") == "run"}
    rows = []
    for old in (json.loads(x) for x in aside.read_text().splitlines() if x.strip()):
        new = by_key.get(old["key"])
        row = {"kind": _kind(old), "seed": old["seed"], "quality_before": old["quality"]}
        if new is None:
            row["remade"] = False
        else:
            d = new["quality"] - old["quality"]
            row |= {"remade": True, "quality_after": new["quality"], "difference": d, "difference_tau": d / tau,
                    "bit_identical": new["quality"] == old["quality"], "mismatch_before": old["mismatch"],
                    "mismatch_after": new["mismatch"], "seconds_after": new.get("seconds")}  # fmt: skip
        rows.append(row)
    worst = max((abs(r["difference_tau"]) for r in rows if r["remade"]), default=None)
    doc = {"card": card, "ledger": str(ledger), "tau": tau, "runs": rows, "max_abs_difference_tau": worst}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["drop", "compare"])
    ap.add_argument("--ledger", type=Path, required=True)
    ap.add_argument("--aside", type=Path, required=True)
    ap.add_argument("--calibration", type=Path, default=None, help="the budget (its τ)")
    ap.add_argument("--card", default="")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    if a.action == "drop":
        drop(a.ledger, a.aside)
    else:
        if a.calibration is None or a.out is None:
            sys.exit("compare needs --calibration and --out")
        from admitcheck.calibration.artifact import load_calibration

        compare(a.ledger, a.aside, load_calibration(a.calibration).tau, a.card, a.out)


if __name__ == "__main__":
    main()
