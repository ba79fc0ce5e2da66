"""A campaign of runs: a ledger, an executor, and rounds of (level, seed) runs; what `calibrate` and `backtest` share.

    check_jobs(2, "cal.yaml"); runner = open_executor(config.resources, jobs=2, executor="local", ray_address=None)
    campaign = Campaign(config, "cal.yaml", Ledger.open(path, ledger_header(config)), runner, progress)
    campaign.run_round([(level, seed), ...], "runs (round 0)")     # runs what the ledger lacks, appends as they finish
    campaign.record(level, seed)                                   # the RunRecord, from the ledger
    LedgerReplay(config, Ledger.read(path)).run_round(wanted, "")  # runs nothing: whether the ledger holds them all

A round runs, through the executor (this process, local workers or Ray tasks), every wanted run whose key
(`run_key(level, seed)`) the ledger lacks, and appends each record the moment it finishes: an interrupted campaign
resumes where it stopped, and `--jobs N` or Ray give the ledger a single-process run gives. What the next round
wants is the caller's decision (`calibrate`: the adaptive design on the fit; `backtest`: the sequential truth).
Every run is `levels.run_task` with the campaign's calibrate config.
"""

from __future__ import annotations

from collections.abc import Callable

from admitcheck.calibration.executors import Executor, Task, make_executor
from admitcheck.calibration.ledger import Ledger
from admitcheck.calibration.levels import Level, run_task
from admitcheck.calibration.record import RunKey, RunRecord
from admitcheck.config import CalibrateConfig, ResourcesConfig
from admitcheck.errors import ConfigError

Progress = Callable[[str, int, int], None]  # (label, done, total)


def run_key(level: Level, seed: int) -> str:
    """The ledger key of a level's run with `seed`: what determines the run (the level's spec, not its name)."""
    return RunKey(level.spec(), seed).encode()


def check_jobs(jobs: int, config_file: str | None) -> None:
    if jobs < 1:
        raise ConfigError(f"jobs must be >= 1, got {jobs}", file=config_file, field="--jobs")


def open_executor(resources: ResourcesConfig, *, jobs: int, executor: str, ray_address: str | None) -> Executor:
    """The executor a campaign runs on, started: it connects now, so a cluster that does not answer fails before
    anything is loaded or written."""
    runner = make_executor(
        executor, jobs=jobs, address=ray_address, num_cpus=resources.num_cpus, num_gpus=resources.num_gpus
    )
    runner.start()
    return runner


class Campaign:
    """The runs of one calibrate config in one ledger, made by one executor (the caller closes it)."""

    def __init__(
        self,
        config: CalibrateConfig,
        config_file: str | None,
        ledger: Ledger,
        runner: Executor,
        progress: Progress | None = None,
    ) -> None:
        self.config, self.config_file = config, config_file
        self.ledger, self.runner, self.progress = ledger, runner, progress

    def record(self, level: Level, seed: int) -> RunRecord:
        return self.ledger.runs[run_key(level, seed)]

    replay = False  # `LedgerReplay`: runs nothing

    def run_round(
        self, wanted: list[tuple[Level, int]], label: str, reusable: dict[str, RunRecord] | None = None
    ) -> bool:
        """Make every wanted (level, seed) run the ledger lacks; `reusable` runs (another ledger's, same header) are
        copied in first, marked `reused_from`. The progress bar `label` counts the round's runs. True: all made."""
        keys = {run_key(lv, s): (lv, s) for lv, s in wanted}
        for key in keys:
            if key not in self.ledger.runs and reusable and key in reusable:
                self.ledger.append(reusable[key])
        todo = [(lv, s) for key, (lv, s) in keys.items() if key not in self.ledger.runs]
        done = len(keys) - len(todo)
        self._show(label, done, len(keys))
        tasks = [
            Task(run_key(lv, s), f"{lv.name}/seed {s}", run_task, (self.config, self.config_file, lv, s))
            for lv, s in todo
        ]
        status = getattr(self.progress, "status", None)  # the CLI's bar shows the runs in flight, retried and failed
        for task, record in self.runner.run(tasks, on_status=(lambda text: status(label, text)) if status else None):
            self.ledger.append(record.keyed(task.key))
            done += 1
            self._show(label, done, len(keys))
        return True

    def _show(self, label: str, done: int, total: int) -> None:
        if self.progress:
            self.progress(label, done, total)


class LedgerReplay(Campaign):
    """A campaign that runs nothing: its rounds are the ledger's as it stands (`calibrate.ledger_budget`)."""

    replay = True

    def __init__(self, config: CalibrateConfig, ledger: Ledger) -> None:
        super().__init__(config, None, ledger, runner=None)  # type: ignore[arg-type]  # never asked to run

    def run_round(self, wanted, label, reusable=None) -> bool:
        """Whether the ledger holds every wanted (level, seed) run (nothing is made)."""
        return all(run_key(lv, s) in self.ledger.runs for lv, s in wanted)
