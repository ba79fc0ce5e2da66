"""bench/cross_card.py (issue 38: the same candidate runs made on another card) on a copy of the shipped SmolLM2
backtest ledger: `drop` takes out the first finished run of each engine kind and nothing else, keeps the header,
refuses to run twice; `compare` sets a re-made run beside the one taken out (bit-identical, difference in τ) and
says which were not re-made. The re-make itself (a backtest resumed on the copy) was run on this machine's CPU with
the toy backtest (2026-12-06: 4 runs re-made bit for bit); here the ledger lines stand in for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "cross_card.py"
LEDGER = ROOT / "calibrations" / "smollm2.backtest.ledger.jsonl"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120)


def test_drop_takes_one_run_per_kind_then_compare_reads_the_remade_ones(tmp_path):
    ledger, aside, out = tmp_path / "b.ledger.jsonl", tmp_path / "aside.jsonl", tmp_path / "cc.json"
    ledger.write_text(LEDGER.read_text())
    before = LEDGER.read_text().splitlines()
    got = _run("drop", "--ledger", str(ledger), "--aside", str(aside))
    assert got.returncode == 0, got.stderr
    taken = [json.loads(x) for x in aside.read_text().splitlines()]
    kept = ledger.read_text().splitlines()
    assert kept[0] == before[0]  # the header
    assert len(taken) == 4 and len(kept) == len(before) - 4
    # every line accounted for: kept or taken out
    assert {json.dumps(json.loads(x)) for x in before[1:]} == {json.dumps(json.loads(x)) for x in kept[1:]} | {
        json.dumps(t) for t in taken
    }
    first_of_kind = {}  # the first finished run of each kind in ledger order: blind to quality
    sys.path.insert(0, str(BENCH.parent))
    from cross_card import _kind

    for line in before[1:]:
        rec = json.loads(line)
        if rec.get("kind") == "run" and _kind(rec) and _kind(rec) not in first_of_kind:
            first_of_kind[_kind(rec)] = rec["key"]
    assert {_kind(t): t["key"] for t in taken} == first_of_kind
    assert set(first_of_kind) == {"dtype", "fp8_weights", "fp8_kv", "staleness"}
    again = _run("drop", "--ledger", str(ledger), "--aside", str(aside))
    assert again.returncode != 0 and "taken out already" in again.stderr
    # stand-ins for the re-made runs: one as it was, one 0.01 nats/token worse; two not re-made
    same, moved = dict(taken[0]), dict(taken[1]) | {"quality": taken[1]["quality"] + 0.01}
    ledger.write_text(ledger.read_text() + json.dumps(same) + "\n" + json.dumps(moved) + "\n")
    got = _run("compare", "--ledger", str(ledger), "--aside", str(aside), "--card", "test",
               "--calibration", str(ROOT / "calibrations" / "smollm2.yaml"), "--out", str(out))  # fmt: skip
    assert got.returncode == 0, got.stderr
    doc = json.loads(out.read_text())
    rows = doc["runs"]
    tau = doc["tau"]
    assert 0.02 < tau < 0.06  # the shipped SmolLM2 calibration's τ (0.0370)
    assert rows[0]["remade"] and rows[0]["bit_identical"] and rows[0]["difference_tau"] == 0.0
    assert rows[1]["remade"] and not rows[1]["bit_identical"]
    assert abs(rows[1]["difference_tau"] - 0.01 / tau) < 1e-9
    assert [r["remade"] for r in rows[2:]] == [False, False]
    assert abs(doc["max_abs_difference_tau"] - 0.01 / tau) < 1e-9
