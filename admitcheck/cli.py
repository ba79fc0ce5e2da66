"""The command line: each command parses, calls the library, renders, and picks the exit code.

    admitcheck demo                         # toy pair end to end
    admitcheck measure examples/toy_measure.yaml --json

Exit codes: 0 success / all admitted, 1 a candidate rejected, 2 bad input, 3 runtime failure.
Heavy imports (torch, transformers, vllm) happen inside the commands, so `--help` and `validate` are instant.
Only this module prints to the terminal or chooses exit codes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from admitcheck.errors import AdmitcheckError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Mismatch budgets for on-policy distillation: calibrate how much training-inference mismatch a "
    "student/teacher pair tolerates, then admit or reject rollout configs against it.",
)
err = Console(stderr=True)
out = Console()

ConfigArg = Annotated[Path, typer.Argument(help="Path to the YAML config file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]


def _guard(fn: Callable[[], int | None]) -> None:
    """Run a command body; user errors become one red panel and exit 2 (or 3 for engine failures)."""
    try:
        code = fn() or 0
    except AdmitcheckError as exc:
        _stop_bars()  # before the panel, so a live bar does not overwrite it
        err.print(Panel(str(exc), title=f"admitcheck: {type(exc).__name__}", border_style="red", expand=False))
        raise typer.Exit(exc.exit_code) from None
    except MemoryError:
        _stop_bars()
        err.print(Panel("out of memory", title="admitcheck: runtime failure", border_style="red", expand=False))
        raise typer.Exit(3) from None
    finally:
        _stop_bars()
    raise typer.Exit(code)


def _stop_bars() -> None:
    while _active_bars:
        _active_bars.pop().stop()


class _ProgressBars:
    """A rich progress bar per label (probe batches, calibration runs) on stderr; silent when stderr is no terminal."""

    def __init__(self) -> None:
        self.bars = None
        self.tasks: dict[str, Any] = {}

    def __call__(self, label: str, done: int, total: int) -> None:
        if self.bars is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self.bars = Progress(*columns, console=err, transient=True)
            self.bars.start()
        if label not in self.tasks:
            self.tasks[label] = self.bars.add_task(label, total=total)
        self.bars.update(self.tasks[label], completed=done, total=total)
        if all(t.finished for t in self.bars.tasks):  # done: clear the bars before the command prints its tables
            self.stop()

    def stop(self) -> None:
        if self.bars is not None:
            self.bars.stop()
        self.bars, self.tasks = None, {}


_active_bars: list[_ProgressBars] = []


def _progress() -> Callable[[str, int, int], None]:
    bars = _ProgressBars()
    _active_bars.append(bars)
    return bars


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x != x:
            return "nan"
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e4:
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}"
    return str(x)


def _interval(ci: tuple[float, float] | None) -> str:
    return f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "-"


# --------------------------------------------------------------------------------------------------- measure

_MEASURE_ROWS = (
    "k3",
    "k1",
    "k2",
    "kl_exact",
    "abs_diff_mean",
    "abs_diff_p99",
    "abs_diff_max",
    "mult_prob_error",
    "prob_diff_max",
    "chi2_token",
    "is_frac_outside",
    "ess",
    "seq_log_ratio_mean",
)


def render_measure(report) -> None:
    table = Table(title="mismatch against the reference (nats/token unless noted)")
    table.add_column("metric")
    cols = [("candidate", report.candidate)] + ([("floor", report.floor)] if report.floor else [])
    for name, _ in cols:
        table.add_column(name, justify="right")
        table.add_column(f"{name} 95% CI", justify="right")
    for key in _MEASURE_ROWS:
        if key not in report.candidate.metrics.values:
            continue
        row = [key]
        for _, m in cols:
            row += [_fmt(m.metrics.values.get(key)), _interval(m.metrics.intervals.get(key))]
        table.add_row(*row)
    out.print(table)
    buckets = Table(title="candidate k3 by response position")
    for c in ("positions", "tokens", "k3", "k3 95% CI"):
        buckets.add_column(c, justify="right")
    for b in report.candidate.metrics.position_buckets:
        buckets.add_row(f"{b.start}-{b.end - 1}", str(b.num_tokens), _fmt(b.k3), _interval(b.k3_interval))
    out.print(buckets)
    if "prefix_shift" in report.diagnostics:
        render_prefix_shift("candidate", report.diagnostics["prefix_shift"])
    c = report.candidate
    out.print(
        f"{c.num_sequences} sequences, {c.num_tokens} tokens; engine start {c.seconds_engine_start:.1f} s, "
        f"measurement {c.seconds_measure:.1f} s; total {report.seconds_total:.1f} s"
    )


def render_prefix_shift(name: str, d: dict) -> None:
    """The prefix-shift diagnostic in a few lines (coupled sampling against the reference engine)."""
    q = d["divergence_quantiles"]
    out.print(
        f"[bold]prefix shift ({name})[/bold]: {100 * d['diverged_share']:.0f}% of responses diverge "
        f"(first divergence p10/p50/p90 at {_fmt(q.get('p10'))}/{_fmt(q.get('p50'))}/{_fmt(q.get('p90'))}); "
        f"{100 * d['share_after_divergence']:.0f}% of tokens come after the divergence.\n"
        f"  teacher log-lik of the prefixes reached, candidate − reference: {_fmt(d['prefix_gap'])} nats/token; "
        f"with TIS weights min(r, {d['tis_cap']:g}): {_fmt(d['prefix_gap_tis'])} (TIS cannot move prefixes); "
        f"per-token gap {_fmt(d['token_gap'])} → {_fmt(d['token_gap_tis'])} with TIS."
    )


@app.command()
def measure(config: ConfigArg, as_json: JsonOpt = False) -> None:
    """Measure a rollout config's mismatch against the reference on the probe set, beside the noise floor."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import MeasureConfig
        from admitcheck.measure import measure as run_measure

        cfg = io.load_config(config, MeasureConfig)
        report = run_measure(cfg, config_file=str(config), progress=_progress())
        if as_json:
            print(json.dumps(report.to_dict(), indent=2))
        else:
            render_measure(report)
        return 0

    _guard(body)


# --------------------------------------------------------------------------------------------------- toy pair


@app.command("toy-pair")
def toy_pair(
    directory: Annotated[Path, typer.Argument(help="Where to build the toy pair (teacher/, student/, prompts/).")],
    seed: Annotated[int, typer.Option(help="Seed for data, initialisation and training.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a matching build is cached.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the built-in toy student/teacher pair as standard HF model dirs plus prompt sets."""

    def body() -> int:
        from admitcheck.toy import build_toy_pair

        summary = build_toy_pair(directory, seed=seed, force=force)
        if as_json:
            print(json.dumps(summary.to_dict(), indent=2))
        else:
            render_toy(summary)
        return 0

    _guard(body)


def render_toy(summary) -> None:
    d = summary.to_dict()
    table = Table(title=f"toy pair in {d.get('directory', '')}")
    table.add_column("field")
    table.add_column("value", justify="right")
    for k, v in d.items():
        if k != "directory":
            table.add_row(k, _fmt(v) if not isinstance(v, dict) else json.dumps(v))
    out.print(table)


# --------------------------------------------------------------------------------------------------- calibrate


@app.command()
def calibrate(
    config: ConfigArg,
    jobs: Annotated[int, typer.Option("--jobs", help="Run levels in this many parallel processes.")] = 1,
    as_json: JsonOpt = False,
) -> None:
    """Run short OPD trainings at controlled mismatch levels and write the pair's mismatch budget (resumable)."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.calibrate import calibrate as run_calibrate
        from admitcheck.config import CalibrateConfig

        cfg = io.load_config(config, CalibrateConfig)
        cal = run_calibrate(cfg, config_file=str(config), jobs=jobs, progress=_progress())
        if as_json:
            print(json.dumps(cal.to_dict(), indent=2, default=str))
        else:
            render_calibration(cal)
        return 0

    _guard(body)


def render_calibration(cal) -> None:
    runs = Table(title="calibration runs (mismatch and quality in nats/token)")
    for c in ("level", "seed", "mismatch", "95% CI", "quality", "quality cost"):
        runs.add_column(c, justify="right" if c != "level" else "left")
    for r in cal.run_rows():
        runs.add_row(
            str(r["level"]),
            str(r["seed"]),
            _fmt(r["mismatch"]),
            _interval(r.get("mismatch_interval")),
            _fmt(r["quality"]),
            _fmt(r["quality_cost"]),
        )
    out.print(runs)
    summary = Table(title=f"mismatch budget: {cal.path}")
    summary.add_column("field")
    summary.add_column("value")
    for k, v in cal.summary_rows():
        summary.add_row(k, v)
    out.print(summary)


# --------------------------------------------------------------------------------------------------- compare

CalArg = Annotated[Path, typer.Argument(help="A calibration artifact (YAML).", show_default=False)]


@app.command()
def compare(first: CalArg, second: CalArg, as_json: JsonOpt = False) -> None:
    """Compare two calibrations' budgets (e.g. OPD and RL on one pair): both with intervals, and their ratio."""

    def body() -> int:
        from dataclasses import asdict

        from admitcheck.artifact import load_calibration
        from admitcheck.compare import compare_calibrations, level_rows

        cal_a, cal_b = load_calibration(first), load_calibration(second)
        cmp = compare_calibrations(cal_a, cal_b)
        if as_json:
            print(json.dumps({**asdict(cmp), "levels": level_rows(cal_a, cal_b)}, indent=2, default=str))
            return 0
        table = Table(title=f"mismatch budgets ({cal_a.metric}, nats/token)")
        table.add_column("")
        for side in (cmp.first, cmp.second):
            table.add_column(side.label)
        rows = [("objective (recipe.loss)", lambda s, c: s.objective),
                ("baseline quality", lambda s, c: f"{_fmt(c.data['quality']['baseline_mean'])} ± "
                                                  f"{_fmt(c.data['quality']['baseline_std'])}"),
                ("tolerance τ", lambda s, c: _fmt(s.tolerance)),
                ("budget", lambda s, c: _fmt(s.value) + ("" if s.kind == "point" else f" ({s.kind})")),
                (f"{100 * cmp.confidence:.0f}% interval", lambda s, c: _interval(s.interval))]  # fmt: skip
        for name, cell in rows:
            table.add_row(name, cell(cmp.first, cal_a), cell(cmp.second, cal_b))
        out.print(table)
        name = f"budget ratio {cmp.second.objective} / {cmp.first.objective}"
        if cmp.method == "bound":  # no point estimate: only the bound is claimed
            out.print(f"{name} within {_interval(cmp.ratio_interval)} (bound)", markup=False)
        else:
            out.print(f"{name} = {_fmt(cmp.ratio)}  {100 * cmp.confidence:.0f}% interval "
                      f"{_interval(cmp.ratio_interval)}  ({cmp.method})", markup=False)  # fmt: skip
        for note in cmp.notes:
            out.print(f"note: {note}", markup=False)
        levels = Table(title="per level: mean mismatch and mean quality cost in units of each τ (>1: over τ)")
        for c in ("level", f"{cal_a.metric} A", "cost/τ A", f"{cal_b.metric} B", "cost/τ B"):
            levels.add_column(c, justify="right" if c != "level" else "left")
        for r in level_rows(cal_a, cal_b):
            a, b = r["a"], r["b"]
            levels.add_row(r["level"], _fmt(a["mismatch"]), f"{a['cost_over_tau']:+.2f}", _fmt(b["mismatch"]),
                           f"{b['cost_over_tau']:+.2f}")  # fmt: skip
        out.print(levels)
        return 0

    _guard(body)


# --------------------------------------------------------------------------------------------------- screen


@app.command()
def screen(
    config: ConfigArg,
    as_json: JsonOpt = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write a JUnit XML report here (one testcase per candidate).")
    ] = None,
    markdown: Annotated[
        Path | None,
        typer.Option("--markdown", help="Write a Markdown report here (also appended to $GITHUB_STEP_SUMMARY)."),
    ] = None,
    candidate: Annotated[
        list[str] | None, typer.Option("--candidate", help="Screen only this candidate (repeatable).")
    ] = None,
    from_logs: Annotated[
        Path | None, typer.Option("--from-logs", help="Screen a pipeline's logged log-probs (JSONL or Parquet).")
    ] = None,
) -> None:
    """Admit or reject each candidate rollout config against the calibration's mismatch budget (exit 1: rejected)."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import ScreenConfig
        from admitcheck.errors import EngineError
        from admitcheck.report import to_json, verdict_table, write_reports
        from admitcheck.screen import screen as run_screen

        cfg = io.load_config(config, ScreenConfig)
        failure = None
        try:
            result = run_screen(
                cfg, config_file=str(config), candidates=candidate or None, from_logs=from_logs, progress=_progress()
            )
        except EngineError as exc:  # a candidate's engine failed: report the verdicts obtained, then exit 3
            result, failure = getattr(exc, "partial", None), exc
            if result is None:
                raise
        write_reports(result, junit_path=junit, markdown_path=markdown)
        if as_json:
            print(to_json(result))
        else:
            out.print(verdict_table(result))
            for name, diag in result.diagnostics.items():
                render_prefix_shift(name, diag["prefix_shift"])
        if failure is not None:
            raise failure
        return result.exit_code

    _guard(body)


# --------------------------------------------------------------------------------------------------- validate


def _schema_for(data: Any):
    from admitcheck.config import CalibrateConfig, MeasureConfig, ScreenConfig

    if isinstance(data, dict) and ("candidates" in data or "calibration" in data):
        return ScreenConfig
    if isinstance(data, dict) and "train" in data:
        return CalibrateConfig
    return MeasureConfig


@app.command()
def validate(
    config: ConfigArg,
    as_json: JsonOpt = False,
    candidate: Annotated[
        list[str] | None, typer.Option("--candidate", help="Check only this candidate (repeatable).")
    ] = None,
) -> None:
    """Check a measure, calibrate or screen config: schema, files, and calibration compatibility. Loads no model."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import ScreenConfig

        schema = _schema_for(io.read_yaml(config))
        cfg = io.load_config(config, schema)
        if schema is ScreenConfig:
            from admitcheck.screen import validate as validate_screen

            info = validate_screen(cfg, config_file=str(config), candidates=candidate or None)
        else:
            from admitcheck.measure import check_pair

            check_pair(cfg.pair, file=str(config))
            prompt_sets = [("probe.prompts", cfg.probe.prompts)]
            if hasattr(cfg, "train"):
                prompt_sets += [("train.prompts", cfg.train.prompts), ("eval.prompts", cfg.eval.prompts)]
            counts = {f: len(io.read_prompts(p, field=f)) for f, p in prompt_sets}
            info = {"kind": schema.__name__, "pair": cfg.pair.name or Path(cfg.pair.student).name, "prompts": counts}
        if as_json:
            print(json.dumps(info, indent=2, default=str))
        else:
            out.print(f"[green]ok[/green]: {config} ({schema.__name__.removesuffix('Config').lower()} config)")
            if isinstance(info, dict):
                for k, v in info.items():
                    if not isinstance(v, (dict, list)) or k in ("candidates", "prompts"):
                        out.print(f"  {k}: {v}")
        return 0

    _guard(body)


# --------------------------------------------------------------------------------------------------- sensitivity


@app.command()
def sensitivity(
    config: ConfigArg,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write a bar chart (PNG) here (needs matplotlib).")
    ] = None,
) -> None:
    """Mismatch of each unit (a layer's KV cache, attention, MLP) when only it is under the rollout's recipe."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.sensitivity import SensitivityConfig, plot_sensitivity
        from admitcheck.sensitivity import sensitivity as run_sensitivity

        rep = run_sensitivity(io.load_config(config, SensitivityConfig), config_file=str(config), progress=_progress())
        if plot is not None:
            png = plot_sensitivity(rep)
            if png is None:
                err.print("[yellow]no plot: matplotlib is not installed (pip install 'admitcheck[plot]')[/yellow]")
            else:
                io.write_bytes_atomic(plot, png)
        if as_json:
            print(json.dumps(rep.to_dict(), indent=2, default=str))
            return 0
        table = Table(title="sensitivity: k3 above the floor when only this unit is under the recipe (nats/token)")
        for c in ("rank", "unit", "excess k3", "95% CI", "k3"):
            table.add_column(c, justify="right" if c != "unit" else "left")
        for i, u in enumerate(rep.units, 1):
            table.add_row(str(i), u.name, _fmt(u.excess), _interval(u.excess_interval), _fmt(u.k3))
        out.print(table)
        out.print(
            f"floor k3 {_fmt(rep.floor_k3)}; whole recipe k3 {_fmt(rep.all_k3)}; "
            f"Σ unit excess / whole excess = {rep.sum_ratio:.2f}; top / median = {rep.top_to_median:.1f}x"
        )
        return 0

    _guard(body)


@app.command()
def recipe(
    config: ConfigArg,
    as_json: JsonOpt = False,
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the admitted recipe as a screen config (YAML) here.")
    ] = None,
) -> None:
    """Search the cheapest admitted recipe: return the most sensitive units to BF16 until the screen admits it."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.sensitivity import RecipeConfig
        from admitcheck.sensitivity import recipe as run_recipe

        res = run_recipe(io.load_config(config, RecipeConfig), config_file=str(config), progress=_progress())
        if output is not None and res.chosen is not None:
            io.write_text_atomic(output, res.screen_yaml())
        if as_json:
            print(json.dumps(res.to_dict(), indent=2, default=str))
            return res.exit_code
        table = Table(title="recipe search (units returned to the engine dtype, most sensitive first)")
        for c in ("step", "returned", "decision", "k3", "95% CI", "budget", "KV ratio vs BF16"):
            table.add_column(c, justify="right" if c not in ("returned", "decision") else "left")
        for i, st in enumerate(res.steps):
            table.add_row(
                str(i),
                ", ".join(st.returned) or "-",
                st.decision,
                _fmt(st.k3),
                _interval(st.k3_interval),
                _fmt(st.budget),
                _fmt(st.ratio_vs_bf16),
            )
        out.print(table)
        out.print(res.message)
        if res.vllm_args:
            out.print(f"vLLM arguments: {json.dumps(res.vllm_args)}")
        if output is not None and res.chosen is not None:
            out.print(f"screen config written to {output}")
        return res.exit_code

    _guard(body)


# --------------------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    directory: Annotated[Path, typer.Option("--dir", help="Where the toy pair is built (or reused).")] = Path("toy"),
    reports: Annotated[Path, typer.Option("--reports", help="Where the demo writes its reports.")] = Path("reports"),
    recalibrate: Annotated[
        bool, typer.Option("--recalibrate", help="Run the quick calibration even if the shipped one matches.")
    ] = False,
) -> None:
    """The built-in toy pair end to end: build, calibrate (or reuse calibrations/toy.yaml), screen 8 candidates."""

    def body() -> int:
        from admitcheck.demo import run_demo

        result = run_demo(directory, reports, recalibrate=recalibrate, say=err.print, progress=_progress())
        render_toy(result.toy)
        render_calibration(result.calibration)
        from admitcheck.report import verdict_table

        out.print(verdict_table(result.screen))
        out.print(f"reports: {', '.join(str(p) for p in result.report_paths)}")
        return 0

    _guard(body)


def main() -> None:  # pragma: no cover - console entry point
    app()
