"""Issue 26: a screen's path from the CLI to the verdict enters each module from another one without coming back into
a module that is still on the call stack (no ping-pong such as probe -> checks -> probe), at most twice per module."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]


def reentries_during(fn) -> Counter:
    """Per admitcheck module: how often it was called from another admitcheck module while already on the stack."""
    stack: list[str | None] = []
    counts: Counter = Counter()

    def profile(frame, event, _arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            module = name if name.startswith("admitcheck") else None
            caller = next((m for m in reversed(stack) if m), None)
            if module and caller and module != caller and module in stack:
                counts[module] += 1
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


@pytest.mark.slow
def test_a_screen_reenters_no_module_more_than_twice(tmp_path) -> None:
    from admitcheck.cli import app

    cfg = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    cfg["pair"] = {"name": "toy", "student": str(ROOT / "toy/student"), "teacher": str(ROOT / "toy/teacher")}
    cfg["calibration"] = str(ROOT / "calibrations/toy.yaml")
    cfg["probe"] |= {"prompts": str(ROOT / "toy/prompts/probe.jsonl"), "min_prompts": 32, "num_prompts": 64}
    cfg["candidates"] = [c for c in cfg["candidates"] if c["name"] in ("bf16", "stale_2")]
    assert len(cfg["candidates"]) == 2
    path = tmp_path / "screen.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = {}

    def screen() -> None:
        result["out"] = CliRunner().invoke(app, ["screen", str(path), "--json"])

    counts = reentries_during(screen)
    assert result["out"].exit_code in (0, 1), result["out"].output
    assert max(counts.values(), default=0) <= 2, counts
