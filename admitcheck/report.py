# long module: one screen result rendered four ways (JSON, JUnit, Markdown, table) that must stay in step
"""Screen reports: one JSON document, JUnit XML (one testcase per candidate), Markdown, and a rich table; and the
backtest report's Markdown.

    result = screen(cfg)
    print(to_json(result))                               # valid JSON: non-finite numbers become null
    io.write_text_atomic("screen.xml", to_junit_xml(result))
    io.write_text_atomic("screen.md", to_markdown(result))
    console.print(verdict_table(result))                 # rich Table; the CLI prints it
    write_reports(result, json_path="r.json", junit_path="r.xml", markdown_path="r.md")  # + $GITHUB_STEP_SUMMARY
    io.write_text_atomic("tiny.backtest.md", backtest_markdown(report))    # a BacktestReport; backtest writes it

JUnit: a rejected candidate is a <failure> (type REJECT), an admitted one passes; a marginal verdict carries a
`marginal` property either way; a candidate whose engine failed (`result.failures`, a partial result) is an <error>
(type EngineError) and an ERROR row in the tables. Numbers are nats/token (k3) unless a column says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

from admitcheck.admission.screen_report import ScreenReport
from admitcheck.admission.sequential import Verdict
from admitcheck.formatting import fmt, fmt_interval

if TYPE_CHECKING:
    from admitcheck.admission.backtest_report import BacktestReport
    from admitcheck.calibration.schema import CalibrationArtifact


def json_safe(obj: Any) -> Any:
    """JSON-safe: tuples to lists, non-finite floats to None (strict JSON has no NaN or Infinity)."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        return json_safe(obj.item())
    return obj


def to_json(result: ScreenReport) -> str:
    """One JSON document: verdicts, calibration, floor, policy, timings; non-finite numbers are null."""
    return json.dumps(json_safe(result.to_dict()), indent=2, allow_nan=False)


def _capacity_ratio(v: Verdict) -> float | None:
    return v.capacity.ratio_vs_bf16 if v.capacity else None


def _verdict_word(v: Verdict) -> str:
    marks = [m for m, on in (("marginal", v.marginal), ("NO ERROR CONTROL", not v.error_control)) if on]
    return v.decision + (f" ({', '.join(marks)})" if marks else "")


def _mismatch(v: Verdict) -> str:
    """The functional (the budget's x) with its confidence sequence, e.g. `kl_exact 0.0012 [0.001, 0.0015]`."""
    return f"{v.estimator} {fmt(v.mismatch)} {fmt_interval(v.mismatch_interval)}"


def _other(v: Verdict) -> str:
    """The estimator's uncapped token mean with its bootstrap interval: the number a training dashboard shows."""
    if v.estimator not in v.metrics:
        return "-"
    return f"{fmt(v.metrics[v.estimator])} {fmt_interval(v.metric_intervals.get(v.estimator))}"


def _kl_exact(v: Verdict) -> str:
    """`, kl_exact 0.0012 [0.001, 0.0015]` where full rows gave it (the same KL as k3, less variance), else ''."""
    if "kl_exact" not in v.metrics or v.metrics["kl_exact"] is None:
        return ""
    return f", kl_exact {fmt(v.metrics['kl_exact'])} {fmt_interval(v.metric_intervals.get('kl_exact'))}"


def _tail(v: Verdict) -> str:
    """The capped share (what the functional leaves out), then the top sequence's share and the tail index k̂ where
    it was estimated (−inf: no tail to fit)."""
    flag = " ⚠" if v.heavy_tail else ""
    k = f", k̂ {fmt(v.tail_index)}" if math.isfinite(v.tail_index) else ""
    return f"{v.capped_share:.0%} (top {v.top_share:.0%}{k}){flag}"


def to_junit_xml(result: ScreenReport) -> str:
    """JUnit XML: one <testcase> per candidate in one <testsuite>; rejections are <failure>s."""
    pair = result.calibration.pair or "pair"
    failures = sum(not v.admitted for v in result.verdicts)
    counts = {
        "tests": str(len(result.verdicts) + len(result.failures)),
        "failures": str(failures),
        "errors": str(len(result.failures)),
    }
    suites = ET.Element("testsuites", name="admitcheck screen", **counts, time=f"{result.seconds_total:.3f}")
    suite = ET.SubElement(
        suites, "testsuite", name=f"admitcheck.screen.{pair}", **counts, skipped="0", time=f"{result.seconds_total:.3f}"
    )
    for v in result.verdicts:
        case = ET.SubElement(
            suite, "testcase", classname=f"admitcheck.screen.{pair}", name=v.name, time=f"{v.seconds:.3f}"
        )
        props = ET.SubElement(case, "properties")
        for key, value in (
            ("decision", v.decision),
            ("marginal", str(v.marginal).lower()),
            ("error_control", str(v.error_control).lower()),
            ("decided_by", v.decided_by),
            ("estimator", v.estimator),
            ("mismatch", fmt(v.mismatch)),
            ("mismatch_interval", fmt_interval(v.mismatch_interval)),
            ("k3", fmt(v.k3)),
            ("budget", fmt(v.budget)),
            ("budget_interval", fmt_interval(v.budget_interval)),
            ("budget_kind", v.budget_kind),
            ("margin", fmt(v.margin)),
            ("top_share", fmt(v.top_share)),
            ("capped_share", fmt(v.capped_share)),
            ("heavy_tail", str(v.heavy_tail).lower()),
            ("probes", str(v.probes)),
            ("kv_capacity_vs_bf16", fmt(_capacity_ratio(v))),
        ):
            ET.SubElement(props, "property", name=key, value=value)
        if not v.admitted:
            failure = ET.SubElement(case, "failure", type="REJECT", message=v.reason)
            failure.text = _detail(v)
        ET.SubElement(case, "system-out").text = _detail(v)
    for name, message in result.failures.items():  # no verdict: the engine failed (a partial result)
        case = ET.SubElement(suite, "testcase", classname=f"admitcheck.screen.{pair}", name=name, time="0.000")
        ET.SubElement(case, "error", type="EngineError", message=message).text = message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _detail(v: Verdict) -> str:
    return (
        f"{_verdict_word(v)}: {v.reason}\n"
        f"{_mismatch(v)} vs budget {fmt(v.budget)} {fmt_interval(v.budget_interval)} ({v.budget_kind}); "
        f"decided by the {v.decided_by}'s uncertainty; margin {fmt(v.margin)}; token means: k3 {fmt(v.k3)} "
        f"{fmt_interval(v.k3_interval)}{_kl_exact(v)}; capped share (top sequence, tail index): {_tail(v)}; "
        f"predicted quality cost {fmt(v.quality_cost)} {fmt_interval(v.quality_cost_interval)}; "
        f"floor {fmt(v.floor)}; {v.probes} probes, {v.tokens} tokens, {v.seconds:.1f} s"
    )


_COLUMNS = (
    "candidate",
    "verdict",
    "mismatch [CI]",
    "token mean [CI]",
    "budget [CI]",
    "decided by",
    "margin",
    "capped share (top, k̂)",
    "pred. cost",
    "floor",
    "KV × BF16",
    "probes",
    "s",
)


def _row(v: Verdict) -> list[str]:
    return [
        v.name,
        _verdict_word(v),
        _mismatch(v),
        _other(v),
        f"{fmt(v.budget)} {fmt_interval(v.budget_interval)}",
        v.decided_by,
        fmt(v.margin),
        _tail(v),
        fmt(v.quality_cost),
        fmt(v.floor),
        fmt(_capacity_ratio(v)),
        str(v.probes),
        f"{v.seconds:.1f}",
    ]


def _error_row(name: str) -> list[str]:
    """A Markdown row for a candidate without a verdict (its engine failed)."""
    return [name, "❌ **ERROR**", *["-"] * (len(_COLUMNS) - 2)]


def _headline(result: ScreenReport) -> str:
    c = result.calibration
    n_ok = sum(v.admitted for v in result.verdicts)
    failed = f"; {len(result.failures)} failed (engine error)" if result.failures else ""
    return (
        f"{n_ok}/{len(result.verdicts) + len(result.failures)} admitted{failed} against budget {fmt(c.budget)} "
        f"nats/token {fmt_interval(c.budget_interval)} ({c.budget_kind}, τ = {fmt(c.tolerance)}) from {c.path}"
        + (f"; measured {result.weights.describe()}" if result.weights is not None else "")
    )


def to_markdown(result: ScreenReport) -> str:
    """A Markdown report: headline, verdict table, reasons (fits a GitHub step summary)."""
    lines = [
        "## admitcheck screen",
        "",
        _headline(result),
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "|".join(["---"] * len(_COLUMNS)) + "|",
    ]
    for v in result.verdicts:
        cells = _row(v)
        cells[1] = f"**{cells[1]}**" if v.admitted else f"❌ **{cells[1]}**"
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    for name in result.failures:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in _error_row(name)) + " |")
    lines += [
        "",
        "mismatch and budget in nats/token; mismatch CI: studentized bootstrap over sequences at the per-look "
        "confidence of the sequential test; ADMIT needs its upper bound below the budget's lower bound, REJECT its "
        "lower bound above the budget's upper bound (docs/statistics.md); decided by = whose uncertainty was the "
        "larger part of the gap; ⚠ = heavy tail (one sequence > 10% of the total or k̂ > 0.7): the bounds did not "
        "decide; pred. cost = quality cost the calibration curve predicts at the mismatch.",
        "",
    ]
    lines += [f"- **{v.name}**: {v.reason}" for v in result.verdicts]
    lines += [f"- **{name}**: ERROR, no verdict: {message}" for name, message in result.failures.items()]
    for kind, f in result.floor.items():
        kl = f", kl_exact {fmt(f.kl_exact)}" if f.kl_exact is not None else ""
        lines.append(f"- noise floor ({kind}, {f.dtype}): k3 {fmt(f.k3)}{kl} on {f.probes} probes")
    return "\n".join(lines) + "\n"


def verdict_table(result: ScreenReport):
    """A rich Table of the verdicts (the CLI prints it); names and verdicts never wrap, numbers fold."""
    from rich.table import Table

    table = Table(title="admitcheck screen", caption=_headline(result))
    table.add_column("candidate", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for c in _COLUMNS[2:]:
        table.add_column(c, justify="right")
    for v in result.verdicts:
        style = "green" if v.admitted else "red"
        cells = _row(v)
        table.add_row(v.name, f"[{style}]{cells[1]}[/{style}]", *cells[2:])
    for name in result.failures:
        table.add_row(name, "[red]ERROR[/red]", *["-"] * (len(table.columns) - 2))
    return table


def write_reports(
    result: ScreenReport,
    *,
    json_path: str | Path | None = None,
    junit_path: str | Path | None = None,
    markdown_path: str | Path | None = None,
    step_summary: bool = True,
) -> list[str]:
    """Write the asked-for reports atomically; append the Markdown to $GITHUB_STEP_SUMMARY when it is set.

    Returns the paths written.
    """
    from admitcheck import io

    written = []
    for path, render in ((json_path, to_json), (junit_path, to_junit_xml), (markdown_path, to_markdown)):
        if path is not None:
            io.write_text_atomic(path, render(result))
            written.append(str(path))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and summary:
        io.append_text(summary, to_markdown(result))
        written.append(summary)
    return written


# --------------------------------------------------------------------------------------------------- backtest


def _g(x: Any) -> str:
    if x is None:
        return "–"
    return f"{x:.3g}" if abs(x) >= 1e-3 or x == 0 else f"{x:.2e}"


def backtest_markdown(report: BacktestReport) -> str:
    """A backtest report (`admission.backtest_report.BacktestReport`) as Markdown: the candidates, the confusion
    matrix, the agreement, the families, the disagreements."""
    c, a = report.calibration, report.agreement
    lines = [
        f"# Backtest of {c.path}",
        "",
        f"Budget {_g(c.budget)} [{_g(c.budget_interval[0])}, {_g(c.budget_interval[1])}] ({c.metric}, "
        f"nats/token); τ = {_g(c.tolerance)} (quality: {c.quality}).",
        "",
        "| candidate | family | verdict | screen mismatch [CI] | x in runs | predicted cost | observed cost [CI] "
        "| pairs | truth | agrees |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.candidates:
        v, t = r.verdict, r.truth
        verdict = f"**{v.decision}**" if not v.marginal else f"{v.decision} (marginal)"
        agree = {True: "yes", False: "**no**", None: "–"}[r.agrees]
        lines.append(
            f"| {r.name} | {r.family} | {verdict} | {v.estimator} {_g(v.mismatch)} "
            f"[{_g(v.mismatch_interval[0])}, {_g(v.mismatch_interval[1])}] | {_g(r.x)} | "
            f"{_g(r.predicted_cost)} | {_g(t.cost)} [{_g(t.interval[0])}, {_g(t.interval[1])}] | "
            f"{t.n} | {t.label} | {agree} |"
        )
    m = a.confusion
    frac = "–" if a.fraction is None else f"{a.fraction:.0%}"
    lines += [
        "",
        "| verdict \\ truth | admit | reject | ambiguous |",
        "|---|---|---|---|",
        *(f"| {v} | {m[v]['admit']} | {m[v]['reject']} | {m[v]['ambiguous']} |" for v in ("ADMIT", "REJECT")),
        "",
        f"Agreement on the {a.decided_truths} candidates whose truth is decided: **{a.agree}/"
        f"{a.decided_truths} = {frac}** (95% Clopper–Pearson [{a.interval[0]:.2f}, {a.interval[1]:.2f}]); "
        f"{a.ambiguous} ambiguous. Candidates within a factor 3 of the budget: {report.within_factor_3}.",
        "",
        "| family | candidates | mean residual (observed − predicted) [95% CI] | in units of τ | agree / disagree / "
        "ambiguous |",
        "|---|---|---|---|---|",
    ]
    for name, f in report.families.items():
        lines.append(
            f"| {name} | {f.candidates} | {_g(f.mean)} [{_g(f.interval[0])}, {_g(f.interval[1])}] | "
            f"{f.mean / c.tolerance:+.2f} | {f.agree} / {f.disagree} / {f.ambiguous} |"
        )
    wrong = [r for r in report.candidates if r.agrees is False]
    if wrong:
        lines += ["", "Disagreements:", *(f"- **{r.name}**: {r.why}" for r in wrong)]
    return "\n".join(lines) + "\n"


def write_calibration_chart(cal: CalibrationArtifact) -> None:
    """`plots.plot_calibration` beside the artifact (`<stem>.png`), when matplotlib is installed."""
    from admitcheck import io
    from admitcheck.plots import plot_calibration

    assert cal.path is not None
    png = plot_calibration(cal)
    if png is not None:
        io.write_bytes_atomic(cal.path.with_suffix(".png"), png)


def write_backtest_companions(report: BacktestReport) -> None:
    """The backtest's Markdown (`<stem>.md`) and chart (`<stem>.png`, with matplotlib) beside its YAML."""
    from admitcheck import io
    from admitcheck.plots import plot_backtest

    assert report.path is not None
    io.write_text_atomic(report.path.with_suffix(".md"), backtest_markdown(report))
    png = plot_backtest(report)
    if png is not None:
        io.write_bytes_atomic(report.path.with_suffix(".png"), png)
