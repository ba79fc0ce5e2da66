"""The calibration ledger `<stem>.ledger.jsonl` beside the artifact: a header (the run-relevant config and the pair),
then one JSON line per finished run, appended by the driver only; a resumed calibration reuses its runs.

    ledger = Ledger.open(ledger_path(out), header)     # CalibrationError when the header is another config's
    ledger.append(record.keyed(run_key(level, seed)))   # a record.RunRecord; ledger.runs[key] is it read back
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from admitcheck import fingerprint, io
from admitcheck.calibration.artifact import fingerprint_pair, prompt_hashes
from admitcheck.calibration.record import RunRecord
from admitcheck.config import CalibrateConfig
from admitcheck.errors import AdmitcheckError, CalibrationError

LEDGER_VERSION = 2


_NOT_IN_HEADER = {"pair", "levels", "tolerance", "bootstrap", "confidence", "output", "resources", "kind"}  # not re-run


def ledger_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.ledger.jsonl")


def ledger_header(config: CalibrateConfig) -> dict[str, Any]:
    """The header a ledger of `config`'s runs starts with (a calibration's, and a backtest's of that calibration):
    the pair's fingerprints with its prompt sets, and every config field that changes a run."""
    pair = fingerprint_pair(config.pair) | {"prompts": prompt_hashes(config)}
    return {"kind": "header", "ledger_version": LEDGER_VERSION, "pair": pair, "config": run_relevant_config(config)}


def run_relevant_config(config: CalibrateConfig) -> dict[str, Any]:
    """Every config field that changes a run's numbers, prompt paths replaced by content hashes."""
    data = config.model_dump(mode="json", exclude=_NOT_IN_HEADER)
    data["rollout"] = config.rollout.key_dump()  # an old FP8-KV recipe keeps its old header
    hashes = prompt_hashes(config)
    for section in ("probe", "train", "eval"):
        data[section]["prompts"] = hashes[section]
    return data


def first_difference(a: Any, b: Any, prefix: str = "") -> str | None:
    """The first dotted key (sorted order) where two nested dicts differ, or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = first_difference(a.get(k), b.get(k), f"{prefix}{k}.")
            if d:
                return d
        return None
    return prefix.rstrip(".") if a != b else None


@dataclass
class Ledger:
    """The runs (and the grid) a calibration has finished, keyed so that a re-run can skip them."""

    path: Path
    header: dict[str, Any]
    grid: dict[str, Any] | None = None
    runs: dict[str, RunRecord] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path, header: dict[str, Any]) -> Ledger:
        """Read an existing ledger (refusing one of another pair or config, untouched) or start a new one."""
        ledger = cls(path, header)
        if not path.exists():
            io.append_jsonl(path, header)
            return ledger
        try:
            records = io.read_jsonl(path)
        except AdmitcheckError as exc:
            raise CalibrationError(f"corrupt ledger: {exc.message}", file=str(path)) from None
        if not records or records[0].get("kind") != "header":
            raise CalibrationError("not a calibration ledger (no header line)", file=str(path), field="kind")
        theirs = records[0]
        for section in ("ledger_version", "pair", "config"):
            diff = first_difference(theirs.get(section), header[section], f"{section}.")
            if diff:
                what = "a different pair" if section == "pair" else "a different config"
                was, now = fingerprint.dotted_get(theirs, diff, None), fingerprint.dotted_get(header, diff, None)
                raise CalibrationError(
                    f"this ledger was written for {what} ({diff}: ledger {was!r}, now "
                    f"{now!r}); its runs are kept: restore the old setting, or set another "
                    "`output` (or delete the ledger) to calibrate afresh",
                    file=str(path),
                    field=diff,
                )
        if "functional" in header and theirs.get("functional") != header["functional"]:
            raise CalibrationError(
                f"this ledger's level x were measured as {theirs.get('functional') or 'the uncapped token mean'}, "
                f"this admitcheck measures {header['functional']}; its runs are kept: re-measure the levels "
                "(python bench/remeasure_levels.py CONFIG --write), or set another `output` to calibrate afresh",
                file=str(path),
                field="functional",
            )
        for i, rec in enumerate(records[1:], start=1):
            if rec.get("kind") == "grid":
                ledger.grid = rec
            elif rec.get("kind") == "run":
                run = read_run(rec, path, i)
                ledger.runs[run.key] = run
        return ledger

    def append(self, record: RunRecord | dict[str, Any]) -> None:
        """Append a run (a `RunRecord` filed under its key) or the grid measurement (a dict of kind "grid")."""
        if isinstance(record, RunRecord):
            io.append_jsonl(self.path, record.line())
            self.runs[record.key] = record
        else:
            io.append_jsonl(self.path, record)
            self.grid = record


def read_run(line: dict[str, Any], path: Path, index: int) -> RunRecord:
    """A ledger's run line as a RunRecord; a CalibrationError naming the line and field when it is not one."""
    try:
        return RunRecord.model_validate(line)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CalibrationError(f"corrupt ledger line {index + 1}: {err['msg']}", file=str(path), field=where) from None
