"""Screening at a checkpoint: the screen config measured at a student checkpoint instead of the start weights
(`checkpoint`, `--checkpoint DIR --checkpoint-step N`), its input checks, and the pair the screen then loads.

    cfg = with_checkpoint(cfg, "ckpts/step-50", 50)      # what --checkpoint ckpts/step-50 --checkpoint-step 50 means
    check_checkpoint_inputs(cfg, chosen, "screen.yaml")   # a causal-LM dir with weights; no staleness candidate
    cfg, pair = at_checkpoint(cfg, pair)                  # after the calibration checks: the student is the checkpoint

The pair's fingerprints are checked on `pair.student` (the calibration's pair); the checkpoint is checked as a
checkpoint of that student (`compatibility.check_student_checkpoint`, in `checks.load_checked_calibration`); from then
on the reference and every candidate's engine load the checkpoint, and the report's `weights` says so.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from admitcheck import io
from admitcheck.config import CandidateConfig, ScreenConfig
from admitcheck.errors import ConfigError
from admitcheck.pairs.load import LoadedPair


def with_checkpoint(config: ScreenConfig, path: str | Path | None, step: int | None = None) -> ScreenConfig:
    """The config measured at checkpoint `path` (what `--checkpoint DIR --checkpoint-step N` means); unchanged when
    both are None. A ConfigError (exit 2) when the combination is invalid (a logs screen, a step without a dir)."""
    if path is None and step is None:
        return config
    data = config.model_dump() | {"checkpoint": str(Path(path).resolve()) if path is not None else config.checkpoint}
    data |= {"checkpoint_step": step} if step is not None else {}
    try:
        return ScreenConfig.model_validate(data)
    except ValidationError as exc:
        message = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError(message, field="--checkpoint") from None


def check_checkpoint_inputs(config: ScreenConfig, chosen: list[CandidateConfig], file: str | None) -> None:
    """`checkpoint`: a causal-LM dir with weights (`io.check_causal_lm`), and no staleness candidate beside it (θc
    against θc+k needs the run's own optimizer state and schedule at step c: `admission.trajectory` measures it from
    the run; a fresh optimizer from θc would not)."""
    io.check_causal_lm(config.checkpoint, file=file, field="checkpoint")
    for c in chosen:
        if c.staleness is not None:
            raise ConfigError(
                f"a staleness candidate cannot be screened at a checkpoint: θc against θc+{c.staleness} needs the "
                "run's optimizer state at step c; measure it along a run with admission.trajectory "
                "(bench/screen_during_run.py), or screen it at the start weights (no checkpoint)",
                file=file,
                field=f"candidates.{c.name}.staleness",
            )


def at_checkpoint(config: ScreenConfig, pair: LoadedPair) -> tuple[ScreenConfig, LoadedPair]:
    """The screen measured at `config.checkpoint`: the config whose pair.student is the checkpoint (the reference
    and every engine load it; the tokenizer stays the pair's) and its `LoadedPair`, sharing the tokenizer."""
    at = pair.with_student(config.checkpoint)
    return config.model_copy(update={"pair": at.config}), at
