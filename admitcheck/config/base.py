"""The base of every config schema: `Strict` (unknown keys are errors, named first, with their closest spelling),
the shared literals (`Dtype`, `MetricName`, `Objective`) and the dump rule for switches added after files shipped.

    class MySection(Strict):          # extra keys forbid, frozen
        value: float = Field(1.0, gt=0)  # unit in a comment
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

Dtype = Literal["float32", "bfloat16", "float16", "float64"]
# What a budget was calibrated for: "opd" (train.loss pg or gkd_reverse_kl) or "rl" (train.loss grpo). A screen
# names the one it gates (`objective:`); a budget of the other objective is refused (their budgets differ: docs/rl.md)
Objective = Literal["opd", "rl"]
MetricName = Literal["k1", "k2", "k3", "kl_exact", "abs_diff_mean", "mult_prob_error", "chi2_token"]


def _unknown_key(key: object, known: list[str]) -> PydanticCustomError:
    """The error for a key no field has: its closest known spelling, else the keys this section knows."""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
    hint = f"did you mean {close[0]!r}?" if close else f"this section has {', '.join(known)}"
    text = f"unknown key: {hint} (config reference: README.md)"
    return PydanticCustomError("unknown_key", text.replace("{", "{{").replace("}", "}}"))


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _unknown_keys_first(cls, data: Any, handler: Any) -> Any:
        """Unknown keys, at every level, come before any other error (a misspelt `candidats:` is named, not
        reported as `candidates` missing): `io.validation_error` shows the first error."""
        try:
            return handler(data)
        except ValidationError as exc:
            errors = []
            for e in exc.errors():
                kind: Any = e["type"]
                if kind == "extra_forbidden" and len(e["loc"]) == 1:  # a key of this model, not of a nested one
                    kind = _unknown_key(e["loc"][0], list(cls.model_fields))
                elif kind == "unknown_key":  # named by a nested model already: keep its message
                    kind = PydanticCustomError("unknown_key", e["msg"].replace("{", "{{").replace("}", "}}"))
                item = {"type": kind, "loc": e["loc"], "input": e.get("input")}
                if "ctx" in e and isinstance(kind, str):
                    item["ctx"] = e["ctx"]
                errors.append(item)
            errors.sort(key=lambda item: isinstance(item["type"], str))  # stable: unknown keys first, then the rest
            raise ValidationError.from_exception_data(exc.title, errors) from None


NOISE_SWITCHES = {"coupling": "inverse_cdf", "sampling_coupling": "inverse_cdf", "ema": None}  # issue 36's defaults


def without_defaults(model: BaseModel, data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A dump without the fields of `defaults` that sit at their default: switches added after artifacts and ledgers
    were shipped keep those files' dumps (and so their headers, run keys and re-fits) bit for bit."""
    drop = {k for k, v in defaults.items() if k in data and getattr(model, k) == v}
    return {k: v for k, v in data.items() if k not in drop}
