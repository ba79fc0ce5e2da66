# long module: one reader per pipeline log format (admitcheck, prime-rl, verl, TRL, NeMo-RL) behind the one read_logs
"""Logged log-probs: a training pipeline's per-sequence rollout and trainer log-probs, read for screening.

(~400 lines: five pipelines' formats and the checks that catch their dump traps belong with the reader.)

    logs = read_logs("rollouts.jsonl")       # format detected from the columns, or read_logs(p, format="prime-rl")
    logs.rollout_logprobs.shape              # (B, T) float64, 0 at padding; logs.mask (B, T) bool
    logs.format, logs.warnings               # "prime-rl", ("...fake mismatch...",)
    m = mismatch_metrics(logs.rollout_logprobs, logs.trainer_logprobs, logs.mask)
    write_logs("out.jsonl", rollout_lp, trainer_lp, mask)    # admitcheck's format, from any (B, T) arrays
    write_measurement_logs("out.jsonl", accumulator)         # from `measure.measure_engine`'s ProbeRun

Formats (one JSON object per sequence, or a Parquet file with the same list columns; docs/pipelines.md says how
each pipeline writes them). Columns: rollout log μ, trainer log π, mask.
- `admitcheck`: `rollout_logprobs`, `trainer_logprobs`, optional `mask` (default: every position counts).
- `prime-rl` (`trainer.enable_token_export`, token_exports/step_N/rank_R.jsonl): `inference_logprobs`,
  `trainer_logprobs`, `loss_mask`; tokens count where loss_mask and (rl_weights ≠ 0 or ref_kl_weights ≠ 0) when
  those streams are present, as prime-rl's `mismatch_kl` does. Newer exports have no weight streams: `loss_mask`
  is the union of every loss channel (RL, SFT/CE, ...) and `losses` holds, per token, `{channel: {"advantage",
  "mask"}}`; only tokens of the `rl` channel count (the others were not sampled by the rollout engine, or not
  trained on its log-probs). `null` is how it writes a non-finite value. Rows carry their training `step`.
- `verl` (the documented dump hook): `rollout_log_probs`, `old_log_probs`, `response_mask`.
- `trl` (the documented dump hook): `sampling_per_token_logps`, `old_per_token_logps`, `completion_mask`, optional
  `tool_mask` (0 on tool-result tokens, which TRL gives rollout log-prob 0.0) and `process_index`.
- `nemo-rl` (train_data_stepN.jsonl, written by every GRPO step): `generation_logprobs`, `prev_logprobs`,
  `token_loss_mask`, `sample_loss_mask`; rows nested one level (`[[...]]`) as NeMo-RL writes them, and position 0
  dropped as its loss does (`[:, 1:]`).
Optional per-row keys `top_p`, `top_k`: the rollout's sampling (checked against the trainer's recompute below).

Rules: a missing key, lists of unequal length, a value that is not a number, or a log-prob above
`POSITIVE_TOLERANCE` on a masked-in token is bad input (`ConfigError`, exit 2). NaN and −inf are numbers: they are
kept and counted as non-finite by the metrics, so the verdict is a REJECT naming them. Values outside the mask are
not checked and are read as 0. Rollout and trainer log-probs identical on every token mean the trainer never
recomputed them (verl `bypass_mode` copies one into the other): a ConfigError, not a perfect ADMIT. Logs whose
trainer log-probs sit below the rollout's on nearly every token (the signature of top-p/top-k log-probs
renormalised over the kept set and a trainer that applies temperature only), and TRL logs without `tool_mask` that
hold rollout log-probs of exactly 0.0, come back with a warning in `warnings` giving the size of the fake mismatch.
The whole file is held in memory as (B, T) float64 arrays.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from admitcheck.errors import ConfigError
from admitcheck.measurement.metrics import k3_terms

POSITIVE_TOLERANCE = 1e-4  # nats; log-probs up to this above 0 are float rounding, beyond it a bug upstream
PARQUET_SUFFIXES = (".parquet", ".pq")
COLUMNS = ("rollout_logprobs", "trainer_logprobs")  # the admitcheck format's two log-prob columns

LogFormat = Literal["admitcheck", "prime-rl", "verl", "trl", "nemo-rl"]  # FORMATS' keys (config.LogsSource.format too)


@dataclass(frozen=True)
class FormatSpec:
    """Where a pipeline's logs keep each side: rollout log μ, trainer log π, the mask columns (all multiplied)."""

    rollout: str
    trainer: str
    masks: tuple[str, ...]  # multiplied; the first is required unless `mask_optional`
    mask_optional: bool = False
    nested: bool = False  # NeMo-RL writes each row as a batch of one: [[...]]
    drop_first: bool = False  # NeMo-RL's loss reads [:, 1:]
    nulls_are_nonfinite: bool = False  # prime-rl writes inf/nan as null
    group: str | None = None  # the process / rank a sequence was logged on (per-process means: TRL)


FORMATS: dict[LogFormat, FormatSpec] = {  # one record per format: read_logs and detect_format read it
    "admitcheck": FormatSpec("rollout_logprobs", "trainer_logprobs", ("mask",), mask_optional=True),
    "prime-rl": FormatSpec("inference_logprobs", "trainer_logprobs", ("loss_mask",), nulls_are_nonfinite=True),
    "verl": FormatSpec("rollout_log_probs", "old_log_probs", ("response_mask",)),
    "trl": FormatSpec(
        "sampling_per_token_logps", "old_per_token_logps", ("completion_mask", "tool_mask"), group="process_index"
    ),
    "nemo-rl": FormatSpec("generation_logprobs", "prev_logprobs", ("token_loss_mask",), nested=True, drop_first=True),
}
OPTIONAL_MASKS = {"tool_mask", "sample_loss_mask", "rl_weights", "ref_kl_weights"}
# Truncation signature: among tokens with ℓ ≠ 0, at least this share has π < μ, over at least this many tokens.
# Symmetric numeric noise gives a share near 0.5: P(share ≥ 0.9 | n = 20, p = 0.5) = 2e-4.
SIGNATURE_SHARE, SIGNATURE_MIN_TOKENS = 0.9, 20


@dataclass(frozen=True)
class LoggedLogprobs:
    """Per-sequence log-probs from a pipeline's logs, right-padded to the longest sequence."""

    path: str
    rollout_logprobs: np.ndarray  # (B, T) float64 log μ(y_t), 0 at padding
    trainer_logprobs: np.ndarray  # (B, T) float64 log π(y_t), 0 at padding
    mask: np.ndarray  # (B, T) bool, True on tokens that count
    format: str = "admitcheck"
    warnings: tuple[str, ...] = ()
    groups: np.ndarray | None = None  # (B,) int: process / rank of each sequence, when the logs say
    steps: tuple[int, ...] = ()  # the training steps the rows say they are from (prime-rl `step`), sorted
    sampling: dict[str, float] | None = None  # top_p / top_k the rows say they were sampled with, when they do
    row_steps: np.ndarray | None = None  # (B,) int: each row's training step, when every row states one

    @property
    def num_sequences(self) -> int:
        return int(self.mask.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.mask.sum())


def read_logs(path: str | Path, *, format: str = "auto", field: str = "logs.path") -> LoggedLogprobs:
    """Read and check a JSONL or Parquet logs file; every problem is one ConfigError naming the line or row.

    `format`: one of FORMATS, or "auto" (detected from the first row's columns).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError("logs file not found", file=str(path), field=field)
    if format != "auto" and format not in FORMATS:
        raise ConfigError(f"unknown logs format {format!r} (known: {', '.join(FORMATS)})", field="--format")
    parquet = path.suffix.lower() in PARQUET_SUFFIXES
    objs = _parquet_objects(path, field) if parquet else _jsonl_objects(path, field)
    if not objs:
        raise ConfigError("logs file holds no sequences", file=str(path), field=field)
    fmt = format if format != "auto" else detect_format(objs[0][1], file=str(path), field=field)
    spec = FORMATS[fmt]
    rows = [(where, _check_sequence(obj, spec, where, path, field)) for where, obj in objs]
    T = max(len(r.rollout) for _, r in rows)
    B = len(rows)
    mu = np.zeros((B, T), dtype=np.float64)  # (B, T)
    pi = np.zeros((B, T), dtype=np.float64)  # (B, T)
    mask = np.zeros((B, T), dtype=bool)  # (B, T)
    for b, (where, r) in enumerate(rows):
        n = len(r.rollout)
        mask[b, :n] = r.mask
        mu[b, :n] = np.where(r.mask, r.rollout, 0.0)
        pi[b, :n] = np.where(r.mask, r.trainer, 0.0)
        for name, arr in ((spec.rollout, mu[b, :n]), (spec.trainer, pi[b, :n])):
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
    _refuse_identical(mu, pi, mask, str(path), field)
    groups = None
    if spec.group and all(r.group is not None for _, r in rows):
        groups = np.array([r.group for _, r in rows], dtype=np.int64)  # (B,)
    sampling = {k: v for _, r in rows for k, v in r.sampling.items()}
    warnings = _warnings(mu, pi, mask, fmt, rows, sampling)
    steps = tuple(sorted({r.step for _, r in rows if r.step is not None}))
    row_steps = (
        np.array([r.step for _, r in rows], dtype=np.int64) if all(r.step is not None for _, r in rows) else None
    )
    return LoggedLogprobs(str(path), mu, pi, mask, fmt, tuple(warnings), groups, steps, sampling or None, row_steps)


@dataclass(frozen=True)
class StepMismatch:
    """The logs' k3 at one training step: the token mean over its rows, as a calibration run records each step's
    engine-vs-trainer k3 (`RunRecord.in_run_k3`). `step` None: the rows state no step (all rows as one)."""

    step: int | None
    sequences: int
    tokens: int
    k3: float  # nats/token


def per_step_k3(logs: LoggedLogprobs) -> list[StepMismatch]:
    """One `StepMismatch` per logged step (ascending), or one for all rows when they do not all state a step."""
    from admitcheck.measurement.metrics import k3_terms

    ell = np.where(logs.mask, logs.trainer_logprobs - logs.rollout_logprobs, 0.0)  # (B, T) log π − log μ
    terms = np.where(logs.mask, k3_terms(ell), 0.0)  # (B, T)
    groups = [(None, np.ones(logs.num_sequences, dtype=bool))]
    if logs.row_steps is not None:
        groups = [(int(s), logs.row_steps == s) for s in np.unique(logs.row_steps)]
    out = []
    for step, rows in groups:
        n = int(logs.mask[rows].sum())
        out.append(StepMismatch(step, int(rows.sum()), n, float(terms[rows].sum()) / max(n, 1)))
    return out


@dataclass(frozen=True)
class LoggedQuantity:
    """What a logged mismatch is a mismatch of (`logged_quantity`): the pipeline's own prompts (sequences), the
    training step(s) the rows say, the counted response tokens per sequence and the sampling the rows say."""

    sequences: int
    tokens: int
    steps: list[int]
    tokens_per_sequence_mean: float
    tokens_per_sequence_max: int
    sampling: dict[str, float]  # top_p / top_k as the rows state them (only those they state)


def logged_quantity(logs: LoggedLogprobs) -> LoggedQuantity:
    """The `LoggedQuantity` of read logs."""
    per_seq = logs.mask.sum(axis=1)  # (B,)
    return LoggedQuantity(
        sequences=logs.num_sequences,
        tokens=logs.num_tokens,
        steps=list(logs.steps),
        tokens_per_sequence_mean=float(per_seq.mean()),
        tokens_per_sequence_max=int(per_seq.max()),
        sampling=dict(logs.sampling or {}),
    )


@dataclass(frozen=True)
class StoredProtocol:
    """A budget's measurement protocol as its artifact stores it (`schema.Protocol.stored`), the parts logged
    log-probs are compared with: a key the artifact does not store is None (`x` absent means "start")."""

    x: str | None = "start"  # the weights the budget's mismatch is measured at: start or run
    num_prompts: int | None = None  # probe.num_prompts
    max_new_tokens: int | None = None  # probe.max_new_tokens
    temperature: float | None = None  # sampling.*
    top_p: float | None = None
    top_k: int | None = None


def protocol_differences(quantity: LoggedQuantity, protocol: StoredProtocol, *, step: int | None = None) -> list[str]:
    """How the logged quantity differs from a budget's measurement protocol (as its artifact stores it:
    start-weights probe, `probe.max_new_tokens`, sampling): each a sentence; empty when none is known to differ.
    `step` (the config's `logs.step`) must agree with the steps the rows say: a ConfigError otherwise."""
    steps = quantity.steps
    if step is not None and steps and steps != [step]:
        raise ConfigError(
            f"logs.step is {step} but the rows are from step(s) {', '.join(map(str, steps))}", field="logs.step"
        )
    out = []
    at = step if step is not None else (max(steps) if steps else None)
    if protocol.x == "start" and at:
        out.append(
            f"the logs are from training step {at}: their mismatch is the engine's against the trainer at θ_{at}, "
            "while the budget was fitted on the mismatch at the start weights (budget.x: start); the run-averaged "
            "budget, which is that quantity, is set beside it (logged.run_average)"
        )
    cap = protocol.max_new_tokens
    if cap and quantity.tokens_per_sequence_max > cap:
        out.append(
            f"responses of up to {quantity.tokens_per_sequence_max} counted tokens (mean "
            f"{quantity.tokens_per_sequence_mean:.0f}), while the budget's probes stop at max_new_tokens {cap}: "
            "later positions can carry a different mismatch"
        )
    for key, stored, default in (("top_p", protocol.top_p, 1.0), ("top_k", protocol.top_k, 0)):
        if key in quantity.sampling and quantity.sampling[key] != (default if stored is None else stored):
            out.append(f"sampled with {key} {quantity.sampling[key]}, the budget's protocol with {stored}")
    return out


def detect_format(obj: Any, *, file: str | None = None, field: str = "logs.path") -> str:
    """The format whose rollout and trainer columns a row (a dict, or a Parquet column list) holds; else ConfigError."""
    if not isinstance(obj, dict):
        return "admitcheck"  # the row check then says what a row must be
    keys = set(obj)
    found = [name for name, s in FORMATS.items() if s.rollout in keys and s.trainer in keys]
    partial = [name for name, s in FORMATS.items() if s.rollout in keys]  # rollout column names are unique
    if not found and len(partial) == 1:
        return partial[0]  # the row check then names the missing trainer column
    if len(found) == 1:
        return found[0]
    if found:
        raise ConfigError(
            f"the first row has the columns of several formats ({', '.join(found)}): name one with --format",
            file=file,
            field=field,
        )
    want = "; ".join(f"{n}: {s.rollout} + {s.trainer}" for n, s in FORMATS.items())
    raise ConfigError(
        f"cannot tell the logs format from the first row's columns (expected one of {want})", file=file, field=field
    )


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
    """Write a measurement's log-probs (a `probe.ProbeRun`: engine side as rollout, reference as trainer) as logs.

    What a pipeline would log for the same tokens: screening the file `--from-logs` gives the measurement's metrics.
    """
    T = max(m.shape[1] for m in acc.masks)

    def cat(batches: list) -> np.ndarray:  # [(B_i, T_i)] -> (B, T), right-padded
        return np.concatenate([np.pad(_as_f64(b), ((0, 0), (0, T - b.shape[1]))) for b in batches])

    return write_logs(path, cat(acc.rollout_lp), cat(acc.reference_lp), cat(acc.masks) > 0)


@dataclass(frozen=True)
class FakeTruncation:
    """`fake_truncation_k3`: the one-sided part of a logged k3, nats/token, and the sign pattern that shows it."""

    share_negative: float  # of the tokens with ℓ ≠ 0, those with ℓ < 0 (trainer below the rollout)
    tokens_nonzero: float  # tokens with ℓ ≠ 0
    k3: float  # token mean
    fake_k3: float  # the mirror estimate of the one-sided part, floored at 0
    mean_log_ratio: float  # mean ℓ


def fake_truncation_k3(rollout_logprobs: Any, trainer_logprobs: Any, mask: Any) -> FakeTruncation:
    """How much of the k3 looks like a kept-set renormalisation the trainer did not replay (nats/token).

    With top-p/top-k, processed rollout log-probs are log μ = log p − log Z (Z ≤ 1, the kept mass), so a trainer that
    applies temperature only sees ℓ = log Z ≤ 0 on every token. Numeric noise is symmetric in sign to first order
    (k3 ≈ ℓ²/2), so the mirror estimate (Σ_{ℓ<0} k3 − Σ_{ℓ>0} k3)/n, floored at 0, is the one-sided (fake) part.
    """
    mu, pi = _as_f64(rollout_logprobs), _as_f64(trainer_logprobs)  # (B, T)
    m = np.asarray(mask, dtype=bool) & np.isfinite(mu) & np.isfinite(pi)  # (B, T)
    ell = (pi - mu)[m]  # (N,)
    k3 = k3_terms(ell)  # (N,)
    n = max(ell.size, 1)
    nonzero = int(np.count_nonzero(ell))
    return FakeTruncation(
        share_negative=float((ell < 0).sum() / nonzero) if nonzero else 0.0,
        tokens_nonzero=float(nonzero),
        k3=float(k3.sum() / n),
        fake_k3=max(0.0, float((k3[ell < 0].sum() - k3[ell > 0].sum()) / n)),
        mean_log_ratio=float(ell.sum() / n),
    )


def _refuse_identical(mu: np.ndarray, pi: np.ndarray, mask: np.ndarray, file: str, field: str) -> None:
    both = mask & np.isfinite(mu) & np.isfinite(pi)  # (B, T)
    if both.any() and both.sum() == mask.sum() and np.array_equal(mu[both], pi[both]):
        raise ConfigError(
            f"rollout and trainer log-probs are identical on all {int(both.sum())} tokens: the trainer never "
            "recomputed them, so the logs cannot show any mismatch. Likely cause: verl's bypass mode "
            "(algorithm.rollout_correction.bypass_mode=True, the async recipes) copies rollout_log_probs into "
            "old_log_probs; dump the actor's recomputed log-probs instead (docs/pipelines.md)",
            file=file,
            field=field,
        )


def _warnings(mu, pi, mask, fmt: str, rows: list, sampling: dict) -> list[str]:
    out = []
    s = fake_truncation_k3(mu, pi, mask)
    truncating = sampling.get("top_p", 1.0) < 1.0 or sampling.get("top_k", 0) > 0
    signature = s.tokens_nonzero >= SIGNATURE_MIN_TOKENS and s.share_negative >= SIGNATURE_SHARE
    if signature or (truncating and fmt == "trl"):
        why = (
            f"top_p={sampling.get('top_p', 1.0)}, top_k={sampling.get('top_k', 0)} in the logs; " if truncating else ""
        )
        out.append(
            f"possible fake mismatch from top-p/top-k: {why}trainer log-probs are below the rollout's on "
            f"{100 * s.share_negative:.1f}% of {int(s.tokens_nonzero)} differing tokens (mean ℓ "
            f"{s.mean_log_ratio:.3g}); about {s.fake_k3:.3g} of the k3 {s.k3:.3g} nats/token is one-sided, as "
            "a rollout renormalised over the kept set scored by a trainer that applies temperature only gives "
            "(TRL recomputes with temperature only). Sample with top_p=1, top_k=0, or make the trainer apply "
            "the same kept set (docs/pipelines.md)"
        )
    if fmt == "trl" and not any(r.has_tool_mask for _, r in rows):
        zero = mask & (mu == 0.0) & (pi < 0.0)  # (B, T) rollout log-prob exactly 0.0: what TRL writes on tool tokens
        if zero.any():
            ell = (pi - mu)[zero]
            k3 = float(k3_terms(ell).sum() / mask.sum())
            out.append(
                f"{int(zero.sum())} tokens have rollout log-prob exactly 0.0, as TRL writes on tool-result tokens, "
                f"and no tool_mask was logged: they add {k3:.3g} nats/token to k3. Dump tool_mask beside "
                "completion_mask (docs/pipelines.md)"
            )
    return out


def _as_f64(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


@dataclass(frozen=True)
class _Row:
    rollout: list[float]
    trainer: list[float]
    mask: list[bool]
    group: int | None
    has_tool_mask: bool
    sampling: dict
    step: int | None = None


def _jsonl_objects(path: Path, field: str, limit: int | None = None) -> list[tuple[str, Any]]:
    objs: list[tuple[str, Any]] = []
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path), field=field) from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"line {lineno}"
            if limit is not None and len(objs) >= limit:
                break
            try:
                objs.append((where, json.loads(line)))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                msg = getattr(exc, "msg", str(exc))
                raise ConfigError(f"{where}: not valid JSON ({msg})", file=str(path), field=field) from None
    return objs


def _parquet_objects(path: Path, field: str) -> list[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "reading Parquet needs pyarrow: pip install 'admitcheck[parquet]'", file=str(path), field=field
        ) from None
    keep = {c for s in FORMATS.values() for c in (s.rollout, s.trainer, *s.masks, s.group) if c}
    keep |= OPTIONAL_MASKS | {"top_p", "top_k", "losses", "step"}
    try:
        schema = pq.read_schema(path)
        table = pq.read_table(path, columns=[c for c in schema.names if c in keep])
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a file that is not Parquet
        raise ConfigError(
            f"not a readable Parquet file ({type(exc).__name__}: {exc})", file=str(path), field=field
        ) from None
    return [(f"row {i}", obj) for i, obj in enumerate(table.to_pylist())]


def _check_sequence(obj: Any, spec: FormatSpec, where: str, path: Path, field: str) -> _Row:
    def fail(msg: str) -> ConfigError:
        return ConfigError(f"{where}: {msg}", file=str(path), field=field)

    if not isinstance(obj, dict):
        raise fail(f"expected an object with {spec.rollout} and {spec.trainer}")

    def unnest(key: str, value: Any) -> Any:
        if spec.nested and isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
            return value[0]
        return value

    lists = []
    for key in (spec.rollout, spec.trainer):
        value = unnest(key, obj.get(key))
        if value is None:
            raise fail(f"missing {key!r} (a list of floats per sequence)")
        if not isinstance(value, list):
            raise fail(f"{key} must be a list of numbers, not {type(value).__name__}")
        for j, x in enumerate(value):
            if x is None and spec.nulls_are_nonfinite:
                continue
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise fail(f"{key}[{j}] = {x!r} is not a number")
        lists.append([math.nan if x is None else float(x) for x in value])
    rollout, trainer = lists
    if len(rollout) != len(trainer):
        raise fail(f"{spec.rollout} has {len(rollout)} values but {spec.trainer} has {len(trainer)}")
    n = len(rollout)
    mask = [True] * n
    present = set()
    for i, key in enumerate(spec.masks):
        value = unnest(key, obj.get(key))
        if value is None:
            if i == 0 and not spec.mask_optional:
                raise fail(f"missing {key!r} (a list of 0/1 per token)")
            continue
        present.add(key)
        mask = [a and b for a, b in zip(mask, _mask_values(value, key, n, fail), strict=True)]
    if spec.nested and "sample_loss_mask" in obj:  # NeMo-RL: a whole sequence masked out (dynamic sampling)
        s = obj["sample_loss_mask"]
        s = s[0] if isinstance(s, list) and len(s) == 1 else s
        if isinstance(s, bool) or not isinstance(s, (int, float)) or s not in (0, 1):
            raise fail(f"sample_loss_mask must be 0 or 1 (got {s!r})")
        mask = [m and bool(s) for m in mask]
    if spec.nulls_are_nonfinite:  # prime-rl: only tokens that carry sampling log-probs (rl or ref_kl members)
        rl, ref = obj.get("rl_weights"), obj.get("ref_kl_weights")
        rl = rl if isinstance(rl, list) and any(x is not None for x in rl) else None
        ref = ref if isinstance(ref, list) and any(x is not None for x in ref) else None
        if rl is not None or ref is not None:
            sampled = [bool(x) for x in rl] if rl is not None else list(mask)
            if ref is not None:
                sampled = [a or bool(x) for a, x in zip(sampled, ref, strict=False)]
            mask = [a and b for a, b in zip(mask, sampled, strict=False)]
        elif isinstance(obj.get("losses"), list):  # newer exports: loss_mask is every channel's; keep the rl one
            mask = [a and b for a, b in zip(mask, _rl_channel(obj["losses"], n, fail), strict=True)]
    if spec.drop_first and n:
        rollout, trainer, mask = rollout[1:], trainer[1:], mask[1:]
    group = obj.get(spec.group) if spec.group else None
    group = int(group) if isinstance(group, int) and not isinstance(group, bool) else None
    sampling = {}
    for key in ("top_p", "top_k"):
        v = obj.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            sampling[key] = v
    step = obj.get("step")
    step = int(step) if isinstance(step, int) and not isinstance(step, bool) else None
    return _Row(rollout, trainer, mask, group, "tool_mask" in present, sampling, step)


def _rl_channel(losses: list, n: int, fail) -> list[bool]:
    """prime-rl's per-token `losses` records ({channel: {"advantage": a, "mask": m}}, {} where no channel trains):
    True where the `rl` channel masks the token in (the policy-gradient tokens the rollout engine sampled)."""
    if len(losses) != n:
        raise fail(f"losses has {len(losses)} records for {n} tokens")
    out = []
    for j, rec in enumerate(losses):
        if not isinstance(rec, dict):
            raise fail(f"losses[{j}] must be an object of loss channels, not {type(rec).__name__}")
        rl = rec.get("rl")
        out.append(bool(rl.get("mask")) if isinstance(rl, dict) else False)
    return out


def _mask_values(value: Any, key: str, n: int, fail) -> list[bool]:
    if not isinstance(value, list) or len(value) != n:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise fail(f"{key} must be a list of {n} 0/1 values (got {got})")
    if any(isinstance(x, bool) is False and (not isinstance(x, (int, float)) or x not in (0, 1)) for x in value):
        raise fail(f"{key} values must be 0/1 or true/false")
    return [bool(x) for x in value]
