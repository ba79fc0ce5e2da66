"""`admitcheck demo`: the embedded default end to end on the built-in toy pair.

    result = run_demo("toy", "reports")      # build (or reuse) the pair, calibrate (or reuse), screen, write reports
    result.screen.exit_code, result.report_paths

Steps: build the toy pair into `toy_dir` (cached); use the shipped `calibrations/toy.yaml` when it was made for this
very pair and protocol (same fingerprints: the toy build is deterministic), else run the quick calibration
(`examples/toy_calibrate_quick.yaml`, a few minutes on 2 cores) into `reports/`; screen the example candidates
(`examples/toy_screen.yaml`) against it; write the JSON and Markdown reports. The example configs live in the
repository (`examples/`), so the demo runs from a source checkout (`./dev.sh demo`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admitcheck import io
from admitcheck.errors import CalibrationError, ConfigError

if TYPE_CHECKING:
    from admitcheck.calibration.schema import CalibrationArtifact

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SHIPPED = ROOT / "calibrations" / "toy.yaml"


# The demo's exit status: 0 when it ran end to end, whatever the verdicts (the example candidates are chosen so that
# some are rejected: a demo that exits 1 would read as a failure). `admitcheck screen` is the gate: exit 1 on a REJECT.
EXIT_RULE = (
    "the demo exits 0 when it ran end to end, whatever the verdicts (some example candidates are meant to be "
    "rejected); `admitcheck screen examples/toy_screen.yaml` is the gate: exit 1 when any candidate is rejected"
)


@dataclass(frozen=True)
class DemoResult:
    toy: Any  # toy.ToyPairSummary
    calibration: CalibrationArtifact
    screen: Any  # screen_report.ScreenReport
    reused_calibration: bool
    report_paths: list[Path]
    reused_pair: bool = False  # the toy pair was a cache hit (its build_seconds are another run's)


def built_or_reused(directory: str | Path, build: Callable[[], Any]) -> tuple[Any, bool]:
    """(build(), whether it was a cache hit): the built-in pairs' builders rewrite their `*_pair.json` build record
    on every build and leave it untouched on a hit."""
    records = sorted(Path(directory).glob("*_pair.json"))
    before = {p: p.stat().st_mtime_ns for p in records}
    summary = build()
    after = {p: p.stat().st_mtime_ns for p in sorted(Path(directory).glob("*_pair.json"))}
    return summary, bool(before) and before == after


def _retarget(data: Any, toy_dir: Path) -> Any:
    """Point an example's `../toy/...` paths at `toy_dir`."""
    if isinstance(data, dict):
        return {k: _retarget(v, toy_dir) for k, v in data.items()}
    if isinstance(data, list):
        return [_retarget(v, toy_dir) for v in data]
    if isinstance(data, str) and data.startswith("../toy/"):
        return str(toy_dir / data.removeprefix("../toy/"))
    return data


def example_config(name: str, schema: type, toy_dir: Path, **overrides: Any):
    """An example config from examples/, retargeted at `toy_dir`, with top-level overrides."""
    path = EXAMPLES / name
    if not path.is_file():
        raise ConfigError("example config not found: run the demo from a source checkout of admitcheck", file=str(path))
    data = _retarget(io.read_yaml(path), toy_dir.resolve())
    data.update(overrides)
    return io.config_from_data(data, schema, base=EXAMPLES, file=str(path))


def run_demo(
    toy_dir: str | Path = "toy",
    reports_dir: str | Path = "reports",
    *,
    recalibrate: bool = False,
    say: Callable[[str], None] = lambda _: None,
    progress: Callable[[str, int, int], None] | None = None,
) -> DemoResult:
    from admitcheck.admission.screen import screen
    from admitcheck.calibration.artifact import load_calibration
    from admitcheck.calibration.calibrate import calibrate
    from admitcheck.calibration.compatibility import calibration_matches
    from admitcheck.config import CalibrateConfig, ScreenConfig
    from admitcheck.pairs.toy import build_toy_pair
    from admitcheck.report import write_calibration_chart, write_reports

    toy_dir, reports_dir = Path(toy_dir).resolve(), Path(reports_dir).resolve()
    say(f"[bold]1/3[/bold] toy pair in {toy_dir}")
    toy, reused_pair = built_or_reused(toy_dir, lambda: build_toy_pair(toy_dir))

    full = example_config("toy_calibrate.yaml", CalibrateConfig, toy_dir)
    if recalibrate or not SHIPPED.is_file():
        reuse, why = False, "--recalibrate" if recalibrate else f"{SHIPPED} not found"
    else:
        try:
            reuse, why = calibration_matches(full, SHIPPED)
        except CalibrationError as exc:  # e.g. a schema-1 artifact: recalibrate quickly instead
            reuse, why = False, exc.message
    if reuse:
        say(f"[bold]2/3[/bold] reusing the shipped calibration {SHIPPED} (same pair fingerprints and protocol)")
        cal_path = SHIPPED
        calibration = load_calibration(SHIPPED)
    else:
        cal_path = reports_dir / "toy_quick.yaml"
        say(f"[bold]2/3[/bold] quick calibration into {cal_path} (shipped one not used: {why})")
        quick = example_config("toy_calibrate_quick.yaml", CalibrateConfig, toy_dir, output=str(cal_path))
        calibration = calibrate(quick, config_file=str(EXAMPLES / "toy_calibrate_quick.yaml"), progress=progress)
        write_calibration_chart(calibration)

    say("[bold]3/3[/bold] screening the example candidates")
    cfg = example_config("toy_screen.yaml", ScreenConfig, toy_dir, calibration=str(cal_path))
    result = screen(cfg, config_file=str(EXAMPLES / "toy_screen.yaml"), progress=progress)
    paths = [reports_dir / "demo_screen.json", reports_dir / "demo_screen.md"]
    write_reports(result, json_path=paths[0], markdown_path=paths[1], step_summary=False)
    return DemoResult(toy, calibration, result, reuse, paths, reused_pair)


README_TABLE = ("<!-- demo table: start -->", "<!-- demo table: end -->")  # README's screening table, between these


def readme_table(result: DemoResult) -> str:
    """The verdict table the demo writes (its Markdown report's), without the seconds column (wall-clock time is
    the one thing two runs do not share): what README shows between `README_TABLE`'s markers (a test compares)."""
    from admitcheck.report import to_markdown

    rows = [line for line in to_markdown(result.screen).splitlines() if line.startswith("|") and "---" not in line]
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in rows]
    if cells and cells[0][-1] == "s":
        cells = [c[:-1] for c in cells]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join([lines[0], "|" + "---|" * len(cells[0]), *lines[1:]])
