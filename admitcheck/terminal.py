# long module: one renderer per command, in --help order, beside the consoles, panels and progress bars they share
"""What admitcheck prints on a terminal: tables, panels, progress bars, on the consoles `out` and `err`.

    from admitcheck.terminal import render_calibration
    render_calibration(load_calibration("calibrations/toy.yaml"))   # the tables `admitcheck calibrate` prints

One `render_<command>` for each command's tables, in --help order; `cli.py` picks what to render and the exit code.
Only this module and `cli.py` (its `--json` documents) print to the terminal.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from admitcheck.errors import AdmitcheckWarning
from admitcheck.formatting import fmt, fmt_interval

if TYPE_CHECKING:
    from admitcheck.admission.backtest_report import BacktestReport
    from admitcheck.admission.screen_report import ScreenReport
    from admitcheck.calibration.schema import CalibrationArtifact
    from admitcheck.measurement.prefix_shift_report import PrefixShiftReport

# Not a terminal (a CI log, a pipe): rich would cut tables to 80 columns and every number to "0.…"; render at the
# tables' natural width instead (NO_WIDTH: wide enough for any table, and tables never stretch to fill it).
NO_WIDTH = 10_000
err = Console(stderr=True, width=None if sys.stderr.isatty() else NO_WIDTH)
out = Console(width=None if sys.stdout.isatty() else NO_WIDTH)


def render_error(title: str, message: str) -> None:
    """One red panel on stderr (the message is not markup: "pip install 'admitcheck[ray]'" prints its brackets)."""
    stop_bars()  # before the panel, so a live bar does not overwrite it
    err.print(Panel(escape(message), title=title, border_style="red", expand=False))


def render_warning(message: object) -> None:
    err.print(f"[yellow]warning:[/yellow] {escape(str(message))}", highlight=False)  # text, not markup: keeps "[x]"


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` for the commands: admitcheck's own warnings in yellow, others as Python prints them."""
    if issubclass(category, AdmitcheckWarning):
        stop_bars()
        render_warning(message)
    else:
        err.print(warnings.formatwarning(message, category, filename, lineno, line).rstrip(), highlight=False)


def stop_bars() -> None:
    while _active_bars:
        _active_bars.pop().stop()


class ProgressBars:
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


_active_bars: list[ProgressBars] = []


def progress() -> Callable[[str, int, int], None]:
    """A new set of progress bars for a command's `progress=` callback; `stop_bars` clears every live one."""
    bars = ProgressBars()
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
    if report.prefix_shift is not None:
        render_prefix_shift("candidate", report.prefix_shift)
    c = report.candidate
    out.print(
        f"{c.num_sequences} sequences, {c.num_tokens} tokens; engine start {c.seconds_engine_start:.1f} s, "
        f"measurement {c.seconds_measure:.1f} s; total {report.seconds_total:.1f} s"
    )


def render_prefix_shift(name: str, d: PrefixShiftReport) -> None:
    """The prefix-shift diagnostic in a few lines (coupled sampling against the reference engine)."""
    q = d.divergence_quantiles
    out.print(
        f"[bold]prefix shift ({name})[/bold]: {100 * d.diverged_share:.0f}% of responses diverge "
        f"(first divergence p10/p50/p90 at {fmt(q.p10)}/{fmt(q.p50)}/{fmt(q.p90)}); "
        f"{100 * d.share_after_divergence:.0f}% of tokens come after the divergence.\n"
        f"  teacher log-lik of the prefixes reached, candidate − reference: {fmt(d.prefix_gap)} nats/token; "
        f"with TIS weights min(r, {d.tis_cap:g}): {fmt(d.prefix_gap_tis)} (TIS cannot move prefixes); "
        f"per-token gap {fmt(d.token_gap)} → {fmt(d.token_gap_tis)} with TIS."
    )


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


# --------------------------------------------------------------------------------------------------- pair


def render_pair(name: str, summary, *, reused: bool = False) -> None:
    """A built-in pair's build summary; a reused (cached) pair shows no build_seconds: they were another run's."""
    d = summary.to_dict()
    table = Table(title=f"{name} pair in {summary.directory}" + (" (reused: cached build)" if reused else ""))
    table.add_column("field")
    table.add_column("value", justify="right")
    for k, v in d.items():
        if k != "directory" and not (reused and k == "build_seconds"):
            shown = json.dumps(v) if isinstance(v, dict) else ", ".join(map(fmt, v)) if isinstance(v, list) else fmt(v)
            table.add_row(k, shown)
    out.print(table)


def render_toy(summary, *, reused: bool = False) -> None:
    render_pair("toy", summary, reused=reused)


# --------------------------------------------------------------------------------------------------- calibrate


def render_ledger_progress(p) -> None:
    """`calibrate --status`: one line from the ledger (`progress.LedgerProgress`), printed as is (no markup)."""
    import time

    ago = f"last {time.time() - p.last_finished_at:.0f} s ago" if p.last_finished_at else "no finish time"
    rate = f"{p.runs_per_minute:.2f} runs/min" if p.runs_per_minute is not None else "runs/min n/a"
    if p.runs_per_minute is not None and p.rate_runs < p.runs:
        rate += f" (its latest {p.rate_runs} runs)"
    phases = ", ".join(f"{k} {v:g}" for k, v in p.median_phase_seconds.items())
    gpu = f"GPU {p.gpu_utilization:g}%" if p.gpu_utilization is not None else "GPU n/a"
    print(f"{p.path}: {p.runs} runs ({ago}), {rate}, median run {p.median_seconds} s [{phases}], {gpu}")


def render_ledger_budget(b) -> None:
    """`calibrate --budget-so-far`: the budget the ledger's runs give now (`calibrate.LedgerBudget`), one line."""
    lo, hi = b.interval
    held = f" of the ledger's {b.ledger_runs}" if b.ledger_runs != b.runs else ""
    print(f"{b.path}: B = {b.budget:.4g} nats/token ({b.kind}, {b.method}, x {b.x}), {b.confidence:.0%} interval "
          f"[{lo:.4g}, {hi:.4g}], hi/lo {b.interval_factor:.3g}; {b.runs} runs{held} through round {b.rounds} "
          f"({b.stop}); τ {b.tolerance:.4g}")  # fmt: skip


def render_calibration(cal: CalibrationArtifact) -> None:
    runs = Table(title="calibration runs (mismatch and quality in nats/token)")
    for c in ("level", "seed", "mismatch", "95% CI", "quality", "quality cost"):
        runs.add_column(c, justify="right" if c != "level" else "left")
    for r in cal.runs:
        runs.add_row(
            str(r.level),
            str(r.seed),
            fmt(r.mismatch),
            fmt_interval(r.mismatch_interval),
            fmt(r.quality),
            fmt(r.quality_cost),
        )
    out.print(runs)
    summary = Table(title=f"mismatch budget: {cal.path}")
    summary.add_column("field")
    summary.add_column("value")
    for k, v in cal.summary_rows():
        summary.add_row(k, v)
    out.print(summary)


# --------------------------------------------------------------------------------------------------- backtest


def render_backtest(bt: BacktestReport) -> None:
    """`admitcheck backtest`'s tables (`admission.backtest_report.BacktestReport`)."""
    rows = Table(title=f"backtest: {bt.path} (cost in nats/token; τ {fmt(bt.calibration.tolerance)})")
    for c in (
        "candidate",
        "family",
        "verdict",
        "screen mismatch [CI]",
        "x in runs",
        "predicted cost",
        "observed cost [CI]",
        "pairs",
        "truth",
        "agrees",
    ):
        rows.add_column(c, justify="left" if c in ("candidate", "family", "verdict", "truth") else "right")
    for r in bt.rows:
        v, t = r.verdict, r.truth
        rows.add_row(
            r.name,
            r.family,
            v.decision + (" (marginal)" if v.marginal else ""),
            f"{fmt(v.mismatch)} {fmt_interval(v.mismatch_interval)}",
            fmt(r.x),
            fmt(r.predicted_cost),
            f"{fmt(t.cost)} {fmt_interval(t.interval)}",
            str(t.n),
            t.label,
            {True: "yes", False: "[red]no[/red]", None: "-"}[r.agrees],
        )
    out.print(rows)
    a = bt.agreement
    m = a.confusion
    conf = Table(title="verdict × truth")
    for c in ("verdict", "admit", "reject", "ambiguous"):
        conf.add_column(c)
    for v in ("ADMIT", "REJECT"):
        conf.add_row(v, *(str(m[v][t]) for t in ("admit", "reject", "ambiguous")))
    out.print(conf)
    frac = "-" if a.fraction is None else f"{a.fraction:.0%}"
    out.print(
        f"agreement on decided truths: {a.agree}/{a.decided_truths} = {frac} "
        f"(95% CI {fmt_interval(tuple(a.interval))}); {a.ambiguous} ambiguous"
    )
    fams = Table(title="residual by source family (observed − predicted cost, nats/token)")
    for c in ("family", "candidates", "mean residual [95% CI]", "agree/disagree/ambiguous"):
        fams.add_column(c)
    for name, f in bt.families.items():
        fams.add_row(
            name,
            str(f.candidates),
            f"{fmt(f.mean)} {fmt_interval(tuple(f.interval))}",
            f"{f.agree}/{f.disagree}/{f.ambiguous}",
        )
    out.print(fams)
    for r in bt.rows:
        if r.agrees is False:
            out.print(f"[red]disagreement[/red] {r.name}: {escape(r.why)}")
    out.print(f"report: {bt.path.with_suffix('.md')}, plot: {bt.path.with_suffix('.png')}")


def render_backtest_status(st) -> None:
    """`backtest --status`: the truth runs so far (`admission.backtest_status.BacktestStatus`); interim costs."""
    title = (
        f"backtest so far: {st.ledger} ({st.candidate_runs} runs; baselines {st.baseline_runs} from "
        f"{st.baselines_from}; cost in nats/token; τ {fmt(st.tau)})"
    )
    rows = Table(title=title)
    cols = ("candidate", "family", "verdict", "screen mismatch [CI]", "KV × BF16", "x in runs", "predicted cost",
            "cost so far [CI]", "pairs", "truth")  # fmt: skip
    for c in cols:
        rows.add_column(c, justify="left" if c in ("candidate", "family", "verdict", "truth") else "right")
    for r in st.rows:
        truth = r.truth or (f"needs {r.next_look} pairs" if r.next_look else "-")
        interval = fmt_interval(r.cost_interval) if r.cost_interval else ""
        screened = f"{fmt(r.verdict_mismatch)} {fmt_interval(r.verdict_interval)}" if r.verdict_interval else "-"
        kv = f"{r.kv_tokens_vs_bf16:.2f}" if r.kv_tokens_vs_bf16 is not None else "-"
        rows.add_row(r.name, r.family, r.verdict or "not screened", screened, kv, fmt(r.x), fmt(r.predicted_cost),
                     f"{fmt(r.cost)} {interval}".strip(), str(r.pairs), truth)  # fmt: skip
    out.print(rows)
    fams = Table(title="residual by source family so far (observed − predicted cost; 95% CI by seed), in τ")
    for c in ("family", "candidates", "mean residual [95% CI]"):
        fams.add_column(c)
    for name, f in st.families.items():
        lo, hi = f.interval
        fams.add_row(name, str(f.candidates), f"{f.mean / st.tau:+.2f} [{lo / st.tau:+.2f}, {hi / st.tau:+.2f}]")
    out.print(fams)
    a = st.agreement
    so_far = "" if a is None else (f" ({a.decided_truths} decided: {a.agree} agree with their verdicts, {a.disagree} "
                                   f"disagree; {a.ambiguous} ambiguous)")  # fmt: skip
    out.print(f"{st.settled}/{len(st.rows)} truths settled{so_far}; the report is written when all are (run the "
              "command without --status to resume)")  # fmt: skip


# --------------------------------------------------------------------------------------------------- compare


def render_compare(cmp, cal_a: CalibrationArtifact, cal_b: CalibrationArtifact, levels: list) -> None:
    """Two calibrations' budgets side by side, their ratio, and `levels` (`calibration.compare.level_rows`)."""
    table = Table(title=f"mismatch budgets ({cal_a.metric}, nats/token)")
    table.add_column("")
    for side in (cmp.first, cmp.second):
        table.add_column(side.label)
    rows = [
        ("objective (recipe.loss)", lambda s, c: s.objective),
        ("baseline quality", lambda s, c: f"{fmt(c.quality.baseline_mean)} ± {fmt(c.quality.baseline_std)}"),
        ("tolerance τ", lambda s, c: fmt(s.tolerance)),
        ("budget", lambda s, c: fmt(s.value) + ("" if s.kind == "point" else f" ({s.kind})")),
        (f"{100 * cmp.confidence:.0f}% interval", lambda s, c: fmt_interval(s.interval)),
    ]
    for name, cell in rows:
        table.add_row(name, cell(cmp.first, cal_a), cell(cmp.second, cal_b))
    out.print(table)
    name = f"budget ratio {cmp.second.objective} / {cmp.first.objective}"
    if cmp.method == "bound":  # no point estimate: only the bound is claimed
        out.print(f"{name} within {fmt_interval(cmp.ratio_interval)} (bound)", markup=False)
    else:
        out.print(
            f"{name} = {fmt(cmp.ratio)}  {100 * cmp.confidence:.0f}% interval "
            f"{fmt_interval(cmp.ratio_interval)}  ({cmp.method})",
            markup=False,
        )
    if cmp.tau_convention:
        out.print(f"τ: {cmp.tau_convention}", markup=False)
    for note in cmp.notes:
        out.print(f"note: {note}", markup=False)
    table = Table(title="per level: mean mismatch and mean quality cost in units of each τ (>1: over τ)")
    for c in ("level", f"{cal_a.metric} A", "cost/τ A", f"{cal_b.metric} B", "cost/τ B"):
        table.add_column(c, justify="right" if c != "level" else "left")
    for r in levels:
        a, b = r.a, r.b
        table.add_row(r.level, fmt(a.mismatch), f"{a.cost_over_tau:+.2f}", fmt(b.mismatch), f"{b.cost_over_tau:+.2f}")
    out.print(table)


# --------------------------------------------------------------------------------------------------- screen


def render_screen(result: ScreenReport, dashes: dict) -> None:
    """The verdict table, each candidate's prefix-shift diagnostic and dashboard (`dashes`: candidate -> Dashboard)."""
    from admitcheck.report import verdict_table

    out.print(verdict_table(result))
    for name, diag in result.diagnostics.items():
        render_prefix_shift(name, diag.prefix_shift)
    for name, d in dashes.items():
        render_dashboard(d, budget=result.calibration.budget, title=f" for {name}")


def render_trajectory(t) -> None:
    """`admitcheck trajectory`'s table (`admission.trajectory.Trajectory`): k3 per checkpoint and the predicted
    run-averaged x against the run-averaged budget."""
    steps = [p.step for p in t.points]
    table = Table(
        title=f"mismatch along the run (k3 token means, nats/token; horizon {t.horizon} steps, seed {t.seed})"
    )
    table.add_column("candidate", no_wrap=True)
    for st in steps:
        table.add_column(f"step {st}", justify="right")
    table.add_column("run-averaged x", justify="right")
    table.add_column("run budget [CI]", justify="right")
    table.add_column("position", no_wrap=True)
    for name, rx in t.run_x.items():
        ks = [fmt(p.candidates[name].k3) for p in t.points]
        budget = f"{fmt(rx.budget)} {fmt_interval(rx.budget_interval)}" if rx.budget is not None else "-"
        table.add_row(name, *ks, fmt(rx.value), budget, rx.position)
    out.print(table)
    out.print(f"rule: {t.rule}", markup=False)


# --------------------------------------------------------------------------------------------------- validate


def render_validate(config: Path, v) -> None:
    """Print ok and what a config names (`v`: `validation.Validation`, its kind, how the kind was found, its info)."""
    out.print(f"[green]ok[/green]: {config} ({v.kind} config, {v.kind_from})")
    info = v.info
    if v.kind == "backtest":
        keys = ["calibration", "budget", "tolerance", "candidates"]
    else:
        # decide: a calibrate config's, the screens' bounds folded in; to screen: its screen configs not screened yet
        listed = ("candidates", "prompts", "decide", "to screen")
        keys = [k for k, x in info.items() if not isinstance(x, (dict, list)) or k in listed]
    for k in keys:
        out.print(f"  {k}: {info[k]}")


# --------------------------------------------------------------------------------------------------- sensitivity


def render_sensitivity(rep) -> None:
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


def render_recipe(res, written: Path | None = None) -> None:
    """The recipe search's steps and outcome; `written`: where its screen config was written, if it was."""
    table = Table(title="recipe search (units returned to the engine dtype, most sensitive first)")
    level = f"{res.confidence_per_recipe:.4g}"
    for c in (
        "step",
        "returned",
        "decision",
        "estimator",
        "mismatch",
        f"CI ({level}, per look)",
        "budget",
        "KV ratio vs BF16",
    ):
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
    if written is not None:
        out.print(f"screen config written to {written}")


# --------------------------------------------------------------------------------------------------- demo


def render_demo(result) -> None:
    from admitcheck.demo import EXIT_RULE
    from admitcheck.report import verdict_table

    render_toy(result.toy, reused=result.reused_pair)
    render_calibration(result.calibration)
    out.print(verdict_table(result.screen))
    out.print(f"reports: {', '.join(str(p) for p in result.report_paths)}")
    out.print(f"exit status: {EXIT_RULE}", markup=False)


def render_logged(logged) -> None:
    """What logged log-probs measure (`checks.LoggedVsProtocol`), beside the budget's protocol."""
    q, b = logged.quantity, logged.budget_protocol
    steps = ", ".join(map(str, q.steps)) or (f"{logged.step} (logs.step)" if logged.step is not None else "not logged")
    s = logged.stored  # as the artifact stores it (None: not stored)
    out.print(
        f"logged quantity: {q.sequences} sequences of the pipeline's own prompts, step {steps}, "
        f"{q.tokens_per_sequence_mean:.1f} counted tokens per sequence (max {q.tokens_per_sequence_max}); "
        f"the budget's protocol: {b.prompts} at the {b.x} weights, max_new_tokens {b.max_new_tokens}, "
        f"temperature {s.temperature}, top_p {s.top_p}, top_k {s.top_k}",
        markup=False,
    )
    r = logged.run_average
    if r is None:
        return
    per_step = ", ".join(f"{st.step if st.step is not None else 'all'}: {fmt(st.k3)}" for st in r.steps[:12])
    more = f" (+{len(r.steps) - 12} steps)" if len(r.steps) > 12 else ""
    against = (
        f"the run-averaged budget {fmt(r.budget)} {fmt_interval(r.budget_interval)}: {r.position}"
        if r.budget is not None
        else "no run-averaged budget"
    )
    out.print(
        f"logged k3 per step (token means) {per_step}{more}; their mean {fmt(r.value)} nats/token against {against} "
        "(a point, no interval: not a verdict)",
        markup=False,
    )
    for note in r.notes:
        out.print(f"note: {note}", markup=False, style="yellow")


# --------------------------------------------------------------------------------------------------- plan


def render_plan(p, plot: Path | None = None) -> None:
    """`admitcheck plan`'s table (`admission.plan.Plan`): candidates by predicted speed-up, fastest first."""
    c = p.calibration
    title = (
        f"plan: {c.name} — time to the baseline's final quality + τ ({fmt(c.tau)} {c.quality_unit}); "
        f"{int(100 * p.confidence)}% intervals over replicate pairs"
    )
    table = Table(title=title)
    for col in (
        "candidate",
        "x",
        "learning curves",
        "pairs reached",
        "steps ratio [CI]",
        "noise curve at x",
        "step time",
        "step time from",
        f"time to quality ({p.time_unit}) [CI]",
        "speed-up [CI]",
    ):
        table.add_column(col, justify="left" if col in ("candidate", "learning curves", "step time from") else "right")
    for r in p.rows:
        e = r.efficiency
        lo, hi = e.interval
        steps_ci = f"[{fmt(1 / hi if hi > 0 else float('inf'))}, {fmt(1 / lo if lo > 0 else float('inf'))}]"
        table.add_row(
            r.name,
            fmt(r.x),
            r.source,
            f"{e.reached}/{e.n}",
            f"{fmt(e.steps_ratio)} {steps_ci}",
            fmt(r.noise_curve.steps_ratio) if r.noise_curve else "-",
            fmt(r.step_time_ratio),
            r.step_time_from,
            f"{fmt(r.time_to_quality)} {fmt_interval(r.time_to_quality_interval)}",
            f"{fmt(r.speedup)} {fmt_interval(r.speedup_interval)}",
        )
    out.print(table)
    t = c.baseline_steps_to_target_interval
    out.print(
        f"baseline reaches the target at step {fmt(c.baseline_steps_to_target)} [{fmt(t[0])}, {fmt(t[1])}] "
        f"of {fmt(c.steps)} ({c.baseline_replicates} replicates, {c.evals_per_run} evaluations per "
        f"run); runs from {', '.join(c.ledgers)}"
    )
    if plot is not None:
        out.print(f"plot: {plot}")
    for w in p.warnings:
        render_warning(w)
