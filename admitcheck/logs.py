"""Logged log-probs: a training pipeline's per-sequence rollout and trainer log-probs, read for screening.

    logs = read_logs("rollouts.jsonl")       # or a .parquet file with the same columns
    logs.rollout_logprobs.shape              # (B, T) float64, 0 at padding; logs.mask (B, T) bool
    m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
    write_logs("out.jsonl", rollout_lp, trainer_lp, mask)    # the same format, from any (B, T) arrays
    write_measurement_logs("out.jsonl", accumulator)         # from `measure.measure_engine`'s Accumulator

Format: one object per sequence with equal-length float lists `rollout_logprobs` (log μ, the rollout engine's
sampled-token log-probs) and `trainer_logprobs` (log π, the trainer's recompute of the same tokens), and an optional
`mask` (0/1 or booleans; default: every position counts). Other keys (prompt, step, ...) are ignored. A Parquet
file holds the same three columns as list columns (reading it needs `pyarrow`: `pip install 'admitcheck[parquet]'`).

Rules: a missing key, lists of unequal length, a value that is not a number, or a log-prob above
`POSITIVE_TOLERANCE` on a masked-in token is bad input (`ConfigError`, exit 2). NaN and −inf (JSON `NaN`,
`-Infinity`, as Python writers emit them) are numbers: they are kept and counted as non-finite by the metrics, so
the verdict is a REJECT naming them, as for an engine that produced them. Values outside the mask are not checked
and are read as 0. The whole file is held in memory as (B, T) float64 arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from admitcheck.errors import ConfigError

POSITIVE_TOLERANCE = 1e-4  # nats; log-probs up to this above 0 are float rounding, beyond it a bug upstream
PARQUET_SUFFIXES = (".parquet", ".pq")
COLUMNS = ("rollout_logprobs", "trainer_logprobs")


@dataclass(frozen=True)
class LoggedLogprobs:
    """Per-sequence log-probs from a pipeline's logs, right-padded to the longest sequence."""

    path: str
    rollout_logprobs: np.ndarray  # (B, T) float64 log μ(y_t), 0 at padding
    trainer_logprobs: np.ndarray  # (B, T) float64 log π(y_t), 0 at padding
    mask: np.ndarray  # (B, T) bool, True on tokens that count

    @property
    def num_sequences(self) -> int:
        return int(self.mask.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())


def read_logs(path: str | Path, *, field: str = "logs.path") -> LoggedLogprobs:
    """Read and check a JSONL or Parquet logs file; every problem is one ConfigError naming the line or row."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("logs file not found", file=str(path), field=field)
    rows = _parquet_rows(path, field) if path.suffix.lower() in PARQUET_SUFFIXES else _jsonl_rows(path, field)
    if not rows:
        raise ConfigError("logs file holds no sequences", file=str(path), field=field)
    T = max(len(r[0]) for _, r in rows)
    B = len(rows)
    mu = np.zeros((B, T), dtype=np.float64)  # (B, T)
    pi = np.zeros((B, T), dtype=np.float64)  # (B, T)
    mask = np.zeros((B, T), dtype=bool)  # (B, T)
    for b, (where, (rollout, trainer, m)) in enumerate(rows):
        n = len(rollout)
        mask[b, :n] = m
        mu[b, :n] = np.where(m, rollout, 0.0)
        pi[b, :n] = np.where(m, trainer, 0.0)
        for name, arr in (("rollout_logprobs", mu[b, :n]), ("trainer_logprobs", pi[b, :n])):
            with np.errstate(invalid="ignore"):
                bad = np.flatnonzero(arr > POSITIVE_TOLERANCE)
            if bad.size:
                raise ConfigError(
                    f"{where}: {name}[{int(bad[0])}] = {arr[bad[0]]!r} is a positive log-prob (a probability above 1)",
                    file=str(path),
                    field=field,
                )
    if not mask.any():
        raise ConfigError("logs file holds no masked-in tokens", file=str(path), field=field)
    return LoggedLogprobs(str(path), mu, pi, mask)


def write_logs(path: str | Path, rollout_logprobs: Any, trainer_logprobs: Any, mask: Any) -> int:
    """Write (B, T) arrays (torch or numpy) as JSONL logs, one sequence per line, cut to its last masked token.

    Values are written as exact float reprs, so reading them back gives the same float64 numbers. Returns B.
    """
    from admitcheck import io

    mu, pi = _as_f64(rollout_logprobs), _as_f64(trainer_logprobs)  # (B, T)
    m = np.asarray(mask.detach().cpu().numpy() if hasattr(mask, "detach") else mask, dtype=bool)  # (B, T)
    lines = []
    for b in range(m.shape[0]):
        idx = np.flatnonzero(m[b])
        n = int(idx[-1]) + 1 if idx.size else 0
        row = {
            "rollout_logprobs": mu[b, :n].tolist(),
            "trainer_logprobs": pi[b, :n].tolist(),
            "mask": m[b, :n].astype(int).tolist(),
        }
        lines.append(json.dumps(row))
    io.write_text_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)


def write_measurement_logs(path: str | Path, acc: Any) -> int:
    """Write a measurement's log-probs (`measure.Accumulator`: engine side as rollout, reference as trainer) as logs.

    What a pipeline would log for the same tokens: screening the file `--from-logs` gives the measurement's metrics.
    """
    T = max(m.shape[1] for m in acc.masks)

    def cat(batches: list) -> np.ndarray:  # [(B_i, T_i)] -> (B, T), right-padded
        return np.concatenate([np.pad(_as_f64(b), ((0, 0), (0, T - b.shape[1]))) for b in batches])

    return write_logs(path, cat(acc.rollout_lp), cat(acc.reference_lp), cat(acc.masks) > 0)


def _as_f64(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


Row = tuple[str, tuple[list[float], list[float], list[bool]]]


def _jsonl_rows(path: Path, field: str) -> list[Row]:
    rows: list[Row] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path), field=field) from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                msg = getattr(exc, "msg", str(exc))
                raise ConfigError(f"{where}: not valid JSON ({msg})", file=str(path), field=field) from None
            rows.append((where, _check_sequence(obj, where, path, field)))
    return rows


def _parquet_rows(path: Path, field: str) -> list[Row]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "reading Parquet needs pyarrow: pip install 'admitcheck[parquet]'", file=str(path), field=field
        ) from None
    try:
        schema = pq.read_schema(path)
        names = [c for c in (*COLUMNS, "mask") if c in schema.names]
        table = pq.read_table(path, columns=names)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a file that is not Parquet
        raise ConfigError(
            f"not a readable Parquet file ({type(exc).__name__}: {exc})", file=str(path), field=field
        ) from None
    return [(f"row {i}", _check_sequence(obj, f"row {i}", path, field)) for i, obj in enumerate(table.to_pylist())]


def _check_sequence(obj: Any, where: str, path: Path, field: str) -> tuple[list[float], list[float], list[bool]]:
    def fail(msg: str) -> ConfigError:
        return ConfigError(f"{where}: {msg}", file=str(path), field=field)

    if not isinstance(obj, dict):
        raise fail("expected an object with rollout_logprobs and trainer_logprobs")
    lists = []
    for key in COLUMNS:
        value = obj.get(key)
        if value is None:
            raise fail(f"missing {key!r} (a list of floats per sequence)")
        if not isinstance(value, list):
            raise fail(f"{key} must be a list of numbers, not {type(value).__name__}")
        for j, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise fail(f"{key}[{j}] = {x!r} is not a number")
        lists.append([float(x) for x in value])
    rollout, trainer = lists
    if len(rollout) != len(trainer):
        raise fail(f"rollout_logprobs has {len(rollout)} values but trainer_logprobs has {len(trainer)}")
    mask = obj.get("mask")
    if mask is None:
        return rollout, trainer, [True] * len(rollout)
    if not isinstance(mask, list) or len(mask) != len(rollout):
        n = len(mask) if isinstance(mask, list) else type(mask).__name__
        raise fail(f"mask must be a list of {len(rollout)} 0/1 values (got {n})")
    if any(not isinstance(x, (bool, int)) or x not in (0, 1) for x in mask):
        raise fail("mask values must be 0/1 or true/false")
    return rollout, trainer, [bool(x) for x in mask]
