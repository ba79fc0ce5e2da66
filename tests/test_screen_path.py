"""A screen's path from the CLI to the verdict, recorded once per screen with `sys.setprofile` (toy pair, two
candidates; and a screen of the shipped logs):

- issue 26: it enters each module from another one without coming back into a module that is still on the call stack
  (no ping-pong such as probe -> checks -> probe), at most twice per module;
- issue 41: its walk, the admitcheck functions in the order they are first called (a comprehension or nested
  function folded into the function around it; module and class bodies, which run at import, left out), comes back
  into `admission/session.py` at most 4 times after first entering it: the inputs are read once at the edge
  (`admission.inputs`), so the session only measures and judges.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
SESSION = "admitcheck.admission.session"
MAX_SESSION_REENTRIES = 4


def profile_calls(fn) -> list[tuple[str, str, tuple[str | None, ...]]]:
    """Every call of an admitcheck function during `fn()`: (module, qualname, the modules on the stack below it,
    None for frames outside admitcheck)."""
    stack: list[str | None] = []
    calls = []

    def profile(frame, event, _arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            module = name if name.startswith("admitcheck") else None
            if module:
                calls.append((module, frame.f_code.co_qualname, tuple(stack)))
            stack.append(module)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def reentries(calls) -> Counter:
    """Per admitcheck module: how often it was called from another admitcheck module while already on the stack."""
    counts: Counter = Counter()
    for module, _, stack in calls:
        caller = next((m for m in reversed(stack) if m), None)
        if caller and module != caller and module in stack:
            counts[module] += 1
    return counts


def walk(calls) -> list[tuple[str, str]]:
    """The (module, function) stops in the order of their first call; `f.<locals>.g` and `f.<listcomp>` are `f`'s,
    a module or class body (`<module>`, a qualname without a function) is no stop."""
    out, seen = [], set()
    for module, qualname, _ in calls:
        qualname = qualname.split(".<locals>")[0].split(".<")[0]
        if qualname.startswith("<") or ("." not in qualname and qualname[:1].isupper()):
            continue  # a module body, a class body (a function's qualname is lower case or has a dot)
        stop = (module, qualname)
        if stop not in seen:
            seen.add(stop)
            out.append(stop)
    return out


def reentries_into(module: str, stops: list[tuple[str, str]]) -> int:
    """How often the walk comes back into `module` after leaving it (its runs of consecutive stops, less one)."""
    runs = sum(1 for i, (m, _) in enumerate(stops) if m == module and (i == 0 or stops[i - 1][0] != module))
    return max(runs - 1, 0)


def _screen_calls(args: list[str]) -> list:
    from admitcheck.cli import app

    result = {}
    calls = profile_calls(lambda: result.update(out=CliRunner().invoke(app, ["screen", *args, "--json"])))
    assert result["out"].exit_code in (0, 1), result["out"].output
    return calls


@pytest.fixture(scope="module")
def engine_screen(tmp_path_factory) -> list:
    cfg = yaml.safe_load((ROOT / "examples" / "toy_screen.yaml").read_text())
    cfg["pair"] = {"name": "toy", "student": str(ROOT / "toy/student"), "teacher": str(ROOT / "toy/teacher")}
    cfg["calibration"] = str(ROOT / "calibrations/toy.yaml")
    cfg["probe"] |= {"prompts": str(ROOT / "toy/prompts/probe.jsonl"), "min_prompts": 32, "num_prompts": 64}
    cfg["candidates"] = [c for c in cfg["candidates"] if c["name"] in ("bf16", "stale_2")]
    assert len(cfg["candidates"]) == 2
    path = tmp_path_factory.mktemp("path") / "screen.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return _screen_calls([str(path)])


@pytest.mark.slow
def test_a_screen_reenters_no_module_more_than_twice(engine_screen) -> None:
    counts = reentries(engine_screen)
    assert max(counts.values(), default=0) <= 2, counts


@pytest.mark.slow
def test_a_screens_walk_comes_back_into_the_session_at_most_4_times(engine_screen) -> None:
    stops = walk(engine_screen)
    assert (SESSION, "ScreenSession.screen_candidate") in stops
    assert reentries_into(SESSION, stops) <= MAX_SESSION_REENTRIES, [s for s in stops if s[0] == SESSION]


@pytest.mark.slow
def test_a_logs_screens_walk_comes_back_into_the_session_at_most_4_times() -> None:
    stops = walk(_screen_calls([str(ROOT / "examples" / "toy_screen_logs.yaml")]))
    assert (SESSION, "ScreenSession.screen_logs") in stops
    assert reentries_into(SESSION, stops) <= MAX_SESSION_REENTRIES, [s for s in stops if s[0] == SESSION]


def test_the_walk_counts_the_returns_into_a_module():
    """Planted: a, then b, back to a (a comprehension of a's: no new stop), b again, a's new function: 2 re-entries
    into a; module and class bodies are no stops."""
    calls = [
        ("x.a", "<module>", ()),
        ("x.a", "Session", ()),
        ("x.a", "f", ()),
        ("x.b", "g", ()),
        ("x.a", "f.<locals>.<listcomp>", ()),
        ("x.a", "Session.h", ()),
        ("x.b", "g2", ()),
        ("x.a", "Session.h.<locals>.inner", ()),
        ("x.a", "k", ()),
    ]
    stops = walk(calls)
    assert stops == [("x.a", "f"), ("x.b", "g"), ("x.a", "Session.h"), ("x.b", "g2"), ("x.a", "k")]
    assert reentries_into("x.a", stops) == 2 and reentries_into("x.b", stops) == 1
