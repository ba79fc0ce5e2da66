"""The calibration ledger `<stem>.ledger.jsonl` beside the artifact: a header (the run-relevant config and the pair),
then one JSON line per finished run, appended by the driver only; a resumed calibration reuses its runs.

    ledger = Ledger.open(ledger_path(out), header)     # CalibrationError when the header is another config's
    ledger.append(record.keyed(run_key(level, seed)))   # a record.RunRecord; ledger.runs[key] is it read back
    read_live(ledger_path(out))                         # (header, runs) of a ledger being written (progress.py)
    Ledger.read(ledger_path(out))                       # the whole ledger as it stands, read only (a replay)

A driver killed mid-append (SIGKILL, the machine taken back) can leave a last line without its newline: `open` drops
that torn tail (that run is made again), so a killed campaign loses at most the runs in flight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from admitcheck import fingerprint, io
from admitcheck.calibration.artifact import fingerprint_pair, prompt_hashes
from admitcheck.calibration.record import RunRecord
from admitcheck.config import CalibrateConfig
from admitcheck.errors import AdmitcheckError, CalibrationError

LEDGER_VERSION = 2


_NOT_IN_HEADER = {"pair", "levels", "tolerance", "bootstrap", "confidence", "output", "resources", "kind"}  # not re-run


def ledger_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.ledger.jsonl")


@dataclass(frozen=True)
class LedgerHeader:
    """A ledger's first line, read by attribute: its version, the pair's fingerprints with its prompt sets, every
    config field that changes a run (both dumps, compared key by key: `first_difference`) and, in a calibrate's,
    what its levels' x are (`functional`; `names_functional` false: the header says nothing of it, a backtest's)."""

    ledger_version: int | None
    pair: dict[str, Any] | None
    config: dict[str, Any] | None  # `run_relevant_config`
    functional: dict[str, Any] | None = None  # `metrics.Functional.to_dict`; None: the uncapped token mean
    names_functional: bool = False
    eval_every: int = 0  # the runs' `eval.every` as `config` holds it (0: start and end only), typed

    def line(self) -> dict[str, Any]:
        """The header line as written."""
        out = {"kind": "header", "ledger_version": self.ledger_version, "pair": self.pair, "config": self.config}
        return out | {"functional": self.functional} if self.names_functional else out

    @classmethod
    def read(cls, line: dict[str, Any]) -> LedgerHeader:
        """A header line read back, of any ledger version: a key it lacks is None (the one reader of its format)."""
        names = "functional" in line
        every = _StoredRunConfig.model_validate(line.get("config") or {}).eval.every or 0
        return cls(
            line.get("ledger_version"), line.get("pair"), line.get("config"), line.get("functional"), names, every
        )


class _StoredEval(BaseModel):
    model_config = ConfigDict(extra="ignore")
    every: int | None = 0


class _StoredRunConfig(BaseModel):
    """The part of a header's run-relevant config read by attribute (the rest is compared as it is stored)."""

    model_config = ConfigDict(extra="ignore")
    eval: _StoredEval = _StoredEval()


def ledger_header(config: CalibrateConfig) -> LedgerHeader:
    """The header a ledger of `config`'s runs starts with (a calibration's, and a backtest's of that calibration):
    the pair's fingerprints with its prompt sets, and every config field that changes a run."""
    pair = fingerprint_pair(config.pair) | {"prompts": prompt_hashes(config)}
    return LedgerHeader(LEDGER_VERSION, pair, run_relevant_config(config), eval_every=config.eval.every)


def run_relevant_config(config: CalibrateConfig) -> dict[str, Any]:
    """Every config field that changes a run's numbers, prompt paths replaced by content hashes."""
    data = config.model_dump(mode="json", exclude=_NOT_IN_HEADER)
    data["rollout"] = config.rollout.key_dump()  # an old FP8-KV recipe keeps its old header
    hashes = prompt_hashes(config)
    for section in ("probe", "train", "eval"):
        data[section]["prompts"] = hashes[section]
    return data


def line_kind(line: dict[str, Any]) -> str | None:
    """A ledger line's kind ("header", "grid", "run" or "round"), read before the line's schema: the one reader of
    it (a run line then goes through `read_run`)."""
    return line.get("kind")


def header_difference(a: LedgerHeader, b: LedgerHeader) -> str | None:
    """The first dotted field where two headers differ in what makes a run, or None: whether one ledger's runs belong to
    another (`Ledger.open`, a backtest's reuse); a missing key equals null (`rollout.cuda_graphs: null` of old ones)."""
    sections = {"ledger_version": (a.ledger_version, b.ledger_version), "pair": (a.pair, b.pair)}
    sections["config"] = (a.config, b.config)
    return next((d for k, (x, y) in sections.items() if (d := first_difference(x, y, f"{k}."))), None)


def first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """The first dotted key (sorted order) where two nested dicts differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if d:
                return d
        return None
    return prefix.rstrip(".") if a != b else None


@dataclass(frozen=True)
class NoiseGrid:
    """Weight-noise sizes σ (relative to each tensor's RMS) and the k3 measured at each, nats/token: the auto grid's
    measurement (a ledger's grid line) or the noise levels' own (`calibrate`), for `levels.noise_for_mismatch`."""

    relative_std: list[float]
    mismatch: list[float]

    @classmethod
    def read(cls, line: dict[str, Any]) -> NoiseGrid:
        """A ledger's grid line (kind "grid", as `calibrate` appends it): the one reader of its format."""
        return cls(line["relative_std"], line["mismatch"])


@dataclass(frozen=True)
class AddedLevel:
    """A noise level an adaptive round added: its name, σ and the mismatch it aimed at (nats/token)."""

    name: str
    relative_std: float
    target: float | None = None


@dataclass(frozen=True)
class RoundLine:
    """What `calibrate` decided after round `round`'s runs, as its ledger records it before acting (kind "round"):
    the next round (its added levels and every level's replicate count) or the stop (`stop`: why), with the effort
    settings it was decided under. A resumed calibration follows the recorded decisions instead of planning again,
    so a ledger replays as it was made whatever design or fit a later admitcheck has (`calibrate._rounds`); a ledger
    without them (written before) is planned again."""

    round: int
    counts: dict[str, int]  # the next round's replicates per level name (empty at a stop)
    added: tuple[AddedLevel, ...] = ()
    stop: str | None = None
    max_runs: int | None = None  # the effort the decision was made under: a stop recorded under another
    interval_factor: float | None = None  # max_runs or interval_factor is planned again (a continuation)
    decide: tuple[float, ...] = ()

    def line(self) -> dict[str, Any]:
        return {"kind": "round", "round": self.round, "counts": self.counts,
                "added": [vars(a) for a in self.added], "stop": self.stop, "max_runs": self.max_runs,
                "interval_factor": self.interval_factor, "decide": list(self.decide)}  # fmt: skip

    @classmethod
    def read(cls, line: dict[str, Any]) -> RoundLine:
        """A ledger's round line (kind "round"): the one reader of its format."""
        return cls(line["round"], dict(line["counts"]), tuple(AddedLevel(**a) for a in line["added"]), line["stop"],
                   line["max_runs"], line["interval_factor"], tuple(line["decide"]))  # fmt: skip


@dataclass
class Ledger:
    """The runs (and the grid) a calibration has finished, keyed so that a re-run can skip them, and the decisions
    its adaptive rounds took (`rounds`, by the round they followed)."""

    path: Path
    header: LedgerHeader
    grid: dict[str, Any] | None = None
    runs: dict[str, RunRecord] = field(default_factory=dict)
    rounds: dict[int, RoundLine] = field(default_factory=dict)
    read_only: bool = False  # `Ledger.read`: a replay's, never appended to

    @classmethod
    def open(cls, path: Path, header: LedgerHeader) -> Ledger:
        """Read an existing ledger (refusing one of another pair or config, untouched) or start a new one."""
        ledger = cls(path, header)
        if not path.exists():
            io.append_jsonl(path, header.line())
            return ledger
        drop_torn_tail(path)
        try:
            records = io.read_jsonl(path)
        except AdmitcheckError as exc:
            raise CalibrationError(f"corrupt ledger: {exc.message}", file=str(path)) from None
        theirs = _header(records, path)
        diff = header_difference(theirs, header)
        if diff:
            what = "a different pair" if diff.startswith("pair") else "a different config"
            was, now = (fingerprint.dotted_get(x, diff, None) for x in (records[0], header.line()))
            raise CalibrationError(
                f"this ledger was written for {what} ({diff}: ledger {was!r}, now "
                f"{now!r}); its runs are kept: restore the old setting, or set another "
                "`output` (or delete the ledger) to calibrate afresh",
                file=str(path),
                field=diff,
            )
        if header.names_functional and theirs.functional != header.functional:
            raise CalibrationError(
                f"this ledger's level x were measured as {theirs.functional or 'the uncapped token mean'}, "
                f"this admitcheck measures {header.functional}; its runs are kept: re-measure the levels "
                "(python bench/remeasure_levels.py CONFIG --write), or set another `output` to calibrate afresh",
                file=str(path),
                field="functional",
            )
        return ledger._filled(records)

    @classmethod
    def read(cls, path: Path) -> Ledger:
        """An existing ledger as it stands, read without writing: a torn last line skipped and the file left alone (its
        campaign may still be appending), no header compared; `append` is refused (`calibrate.ledger_budget`)."""
        if not path.exists():
            raise CalibrationError("no ledger yet: the campaign has not started (or writes elsewhere)", file=str(path))
        records = _live_lines(path)
        ledger = cls(path, _header(records, path), read_only=True)
        return ledger._filled(records)

    def _filled(self, records: list[dict[str, Any]]) -> Ledger:
        """This ledger with the grid, runs and round decisions of `records` (a ledger's lines, header first)."""
        ledger, path = self, self.path
        for i, rec in enumerate(records[1:], start=1):
            if line_kind(rec) == "grid":
                ledger.grid = rec
            elif line_kind(rec) == "run":
                run = read_run(rec, path, i)
                ledger.runs[run.key] = run
            elif line_kind(rec) == "round":
                try:
                    decided = RoundLine.read(rec)
                except (KeyError, TypeError) as exc:
                    raise CalibrationError(f"corrupt ledger line {i + 1}: a round line without {exc}", file=str(path),
                                           field="round") from None  # fmt: skip
                ledger.rounds[decided.round] = decided  # a decision taken again (a continuation) replaces the older
        return ledger

    @property
    def noise_grid(self) -> NoiseGrid | None:
        """The grid line, typed; None before the grid is measured."""
        return NoiseGrid.read(self.grid) if self.grid is not None else None

    def append(self, record: RunRecord | RoundLine | dict[str, Any]) -> None:
        """Append a run (a `RunRecord` filed under its key), a round's decision, or the grid measurement (a dict of
        kind "grid")."""
        if self.read_only:
            raise CalibrationError("a ledger read for a replay is not written to", file=str(self.path))
        if isinstance(record, RunRecord):
            io.append_jsonl(self.path, record.line())
            self.runs[record.key] = record
        elif isinstance(record, RoundLine):
            io.append_jsonl(self.path, record.line())
            self.rounds[record.round] = record
        else:
            io.append_jsonl(self.path, record)
            self.grid = record


def _header(records: list[dict[str, Any]], path: Path) -> LedgerHeader:
    """The header of a ledger's lines (`Ledger.open`'s and `Ledger.read`'s one check that there is one)."""
    if not records or line_kind(records[0]) != "header":
        raise CalibrationError("not a calibration ledger (no header line)", file=str(path), field="kind")
    return LedgerHeader.read(records[0])


def read_run(line: dict[str, Any], path: Path, index: int) -> RunRecord:
    """A ledger's run line as a RunRecord; a CalibrationError naming the line and field when it is not one."""
    try:
        return RunRecord.model_validate(line)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"corrupt ledger line {index + 1}: {err['msg']}", file=str(path), field=where) from None


def drop_torn_tail(path: Path) -> None:
    """Cut a last line that has no newline (an append interrupted by a kill): every whole line stays."""
    with path.open("rb+") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        if size == 0:
            return
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        keep = fh.read().rfind(b"\n") + 1
        fh.truncate(keep)


def read_live(path: Path) -> tuple[dict[str, Any] | None, list[RunRecord]]:
    """A ledger's header line and runs (file order), read as it is being written: a torn last line skipped, the file
    left alone, CalibrationError on a corrupt line (`progress.read_progress`, `backtest --status`)."""
    header, runs = None, []
    for i, line in enumerate(_live_lines(path, keep_blank=True)):
        if line_kind(line) == "header":
            header = line
        elif line_kind(line) == "run":
            runs.append(read_run(line, path, i))
    return header, runs


def _live_lines(path: Path, keep_blank: bool = False) -> list[dict[str, Any]]:
    """A ledger's whole lines as dicts, read as it is being written: the part after the last newline (torn or empty)
    skipped, the file left alone, CalibrationError on a corrupt line; blank lines as {} (`keep_blank`: line numbers
    kept) or left out."""
    out = []
    for i, raw in enumerate(path.read_bytes().split(b"\n")[:-1]):
        try:
            line = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"corrupt ledger line {i + 1}: {exc.msg}", file=str(path)) from None
        if line or keep_blank:
            out.append(line)
    return out
