"""Screen reports: strict JSON, JUnit XML with the right counts, Markdown, the rich table, GITHUB_STEP_SUMMARY."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from rich.console import Console

from admitcheck.admission.screen import ScreenReport, Verdict
from admitcheck.formatting import fmt
from admitcheck.report import to_json, to_junit_xml, to_markdown, verdict_table, write_reports
from tests.test_sequential import CAPACITY


def make_verdict(name: str, decision: str = "ADMIT", k3: float = 1e-3, marginal: bool = False, **kw) -> Verdict:
    interval = kw.pop("k3_interval", (k3 / 2, k3 * 2))
    fields = dict(
        name=name,
        decision=decision,
        marginal=marginal,
        error_control=True,
        decided_by="candidate",
        reason=f"{name} because <k3 & budget>",
        metric="k3",
        estimator="k3",
        mismatch=k3,
        mismatch_interval=interval,
        budget=0.01,
        budget_interval=(0.005, 0.02),
        budget_kind="point",
        margin=0.005 - k3 * 2,
        ratio_to_budget=k3 / 0.01,
        top_share=0.05,
        tail_index=0.2,
        heavy_tail=False,
        quality_cost=0.001,
        quality_cost_interval=(0.0, 0.002),
        floor=0.0,
        probes=64,
        tokens=640,
        looks=2,
        confidence_per_look=0.99375,
        metrics={"k3": k3, "k1": 0.0},
        metric_intervals={"k3": interval},
        capacity=CAPACITY,
        seconds=1.5,
    )
    fields.update(kw)
    return Verdict(**fields)


def make_result(*verdicts: Verdict, **kw) -> ScreenReport:
    return ScreenReport(
        verdicts=list(verdicts),
        calibration={
            "path": "cal.yaml",
            "pair": "toy",
            "metric": "k3",
            "budget": 0.01,
            "budget_interval": (0.005, 0.02),
            "budget_kind": "point",
            "tolerance": 0.02,
        },
        floor={
            "hf": {
                "dtype": "float32",
                "mismatch": 0.0,
                "k3": 0.0,
                "k3_interval": (0.0, 0.0),
                "probes": 32,
                "tokens": 300,
                "seconds": 0.1,
            }
        },
        policy={"confidence": 0.95, "undecided": "reject", "confidence_per_look": 0.95, "max_looks": 3},
        source="engine",
        seconds_setup=0.5,
        seconds_total=4.0,
        **kw,
    )


RESULT = make_result(
    make_verdict("bf16"),
    make_verdict(
        "noise",
        "REJECT",
        k3=math.inf,
        k3_interval=(math.inf, math.inf),
        margin=-math.inf,
        quality_cost=None,
        quality_cost_interval=None,
    ),
    make_verdict("edge", "REJECT", k3=0.009, marginal=True, metrics={"k3": 0.009, "kl_exact": math.nan}),
)


def test_json_is_strict_and_complete():
    doc = json.loads(to_json(RESULT))  # allow_nan=False in to_json: inf/nan became null
    assert doc["exit_code"] == 1 and doc["all_admitted"] is False
    assert [v["name"] for v in doc["verdicts"]] == ["bf16", "noise", "edge"]
    v = doc["verdicts"][1]
    assert v["mismatch"] is None and v["mismatch_interval"] == [None, None] and v["decision"] == "REJECT"
    assert v["metric_intervals"] == {"k3": [None, None]} and "k3_interval" not in v  # one interval per metric
    assert doc["verdicts"][2]["metrics"]["kl_exact"] is None and doc["verdicts"][2]["marginal"] is True
    for key in (
        "budget",
        "budget_interval",
        "budget_kind",
        "margin",
        "quality_cost",
        "floor",
        "decided_by",
        "error_control",
        "estimator",
        "top_share",
        "heavy_tail",
        "probes",
        "tokens",
        "metrics",
        "capacity",
        "seconds",
    ):
        assert key in doc["verdicts"][0]
    assert doc["calibration"]["budget"] == 0.01 and doc["floor"]["hf"]["k3"] == 0.0


def test_junit_counts_and_failures():
    root = ET.fromstring(to_junit_xml(RESULT))
    suite = root.find("testsuite")
    assert root.get("tests") == "3" and root.get("failures") == "2"
    assert suite.get("tests") == "3" and suite.get("failures") == "2" and suite.get("errors") == "0"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["bf16", "noise", "edge"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure.get("type") == "REJECT" and "<k3 & budget>" in failure.get("message")  # escaped and restored
    props = {p.get("name"): p.get("value") for p in cases[2].find("properties")}
    assert props["marginal"] == "true" and props["kv_capacity_vs_bf16"] == "2"


def test_markdown_and_table():
    md = to_markdown(RESULT)
    assert md.startswith("## admitcheck screen") and "| candidate |" in md
    assert "1/3 admitted" in md and "❌ **REJECT**" in md and "**REJECT (marginal)**" in md
    assert md.count("\n| ") == 4  # header + 3 rows
    console = Console(width=250, record=True)
    console.print(verdict_table(RESULT))
    text = console.export_text()
    assert "KV × BF16" in text and "REJECT (marginal)" in text and "inf" in text


def test_write_reports_and_step_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("previous step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    paths = write_reports(
        RESULT, json_path=tmp_path / "r.json", junit_path=tmp_path / "r.xml", markdown_path=tmp_path / "r.md"
    )
    assert len(paths) == 4
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 1
    ET.parse(tmp_path / "r.xml")
    assert summary.read_text().startswith("previous step\n## admitcheck screen")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert write_reports(make_result(make_verdict("a"))) == []


def test_no_error_control_is_marked_everywhere():
    v = make_verdict("lenient", marginal=True, error_control=False)
    r = make_result(v)
    assert "ADMIT (marginal, NO ERROR CONTROL)" in to_markdown(r)
    props = {p.get("name"): p.get("value") for p in ET.fromstring(to_junit_xml(r)).iter("property")}
    assert props["error_control"] == "false"
    assert json.loads(to_json(r))["verdicts"][0]["error_control"] is False


def test_all_admitted_exit_code_and_fmt():
    assert make_result(make_verdict("a"), make_verdict("b")).exit_code == 0
    assert [fmt(x) for x in (None, 0.0, 1.23456, 1e-5, math.inf, 7)] == ["-", "0", "1.23", "1.00e-05", "inf", "7"]


def test_screen_report_json_reads_back_by_attribute(tmp_path):
    """The --json document is the ScreenReport's schema: read back (nulls as NaN), it renders the same reports."""
    from admitcheck.admission.screen_report import load_screen_report

    path = tmp_path / "screen.json"
    path.write_text(to_json(RESULT))
    again = load_screen_report(path)
    assert again.calibration.budget == 0.01 and again.floor["hf"].probes == 32 and again.policy.max_looks == 3
    assert again.exit_code == RESULT.exit_code == 1 and math.isnan(again.verdicts[1].mismatch)
    assert to_json(again) == to_json(RESULT)
    assert "kl_exact" not in json.loads(to_json(RESULT))["floor"]["hf"]  # a floor key not measured stays absent
