"""Errors a user can cause. `cli.py` catches `AdmitcheckError` once and prints `file: field: message`, exit 2/3.

raise ConfigError("probe.max_new_tokens must be > 0", file="run.yaml", field="probe.max_new_tokens")
"""

from __future__ import annotations


class AdmitcheckError(Exception):
    """Base of every error a user can cause; `exit_code` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.field = field

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.message])


class ConfigError(AdmitcheckError):
    """A config file, prompt file, model dir or log file that cannot be used as given (exit 2)."""


class CalibrationError(AdmitcheckError):
    """A missing, corrupt or incompatible calibration artifact or ledger (exit 2)."""


class EngineError(AdmitcheckError):
    """The rollout engine failed at run time: it would not start, ran out of memory (exit 3)."""

    exit_code = 3


class AdmitcheckWarning(UserWarning):
    """Something a user should know that does not stop the command (the CLI prints it in yellow on stderr)."""


class Collected:
    """One independent check of a `validate` that collects every error (torchtune's pattern):

        with Collected(errors) as inputs:
            check_inputs(...)
        if inputs.ok:  # the checks that need the inputs
            ...

    With a list, the check's AdmitcheckError joins it and the code after the block runs on (`ok` is False); with
    None, the error is raised as it is (the first error stops, as in a command). Other exceptions always pass."""

    def __init__(self, errors: list[AdmitcheckError] | None) -> None:
        self.errors = errors
        self.ok = True

    def __enter__(self) -> Collected:
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or self.errors is None or not isinstance(exc, AdmitcheckError):
            return False
        self.errors.append(exc)
        self.ok = False
        return True
