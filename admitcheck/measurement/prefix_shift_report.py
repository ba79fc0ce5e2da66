"""The prefix-shift diagnostic's result (`prefix_shift.prefix_shift`) as a frozen pydantic model, read by attribute:
a measure's and a screen's (`screen_report.CandidateDiagnostics`), read back from a screen's --json document.

    rep = PrefixShiftReport.model_validate(doc["diagnostics"]["fp8_kv"]["prefix_shift"])
    rep.prefix_gap, rep.prefix_gap_tis, rep.tis_closes      # nats/token; the share of the gap TIS closes
    rep.to_dict()                                            # the document again (tis_closes and tis_closes_token
                                                             # written beside the fields, never read back)

Light on purpose (no torch): the screen's report schema imports it, and `validate` loads no model.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, computed_field, model_validator

# A float a JSON document may hold as null (a screen's --json writes non-finite numbers so): read back as NaN.
Real = Annotated[float, BeforeValidator(lambda v: math.nan if v is None else v)]
_DERIVED = ("tis_closes", "tis_closes_token")  # written beside the fields, never read back


class DivergenceQuantiles(BaseModel):
    """Quantiles of the first divergence positions of the diverged sequences (nan when none diverged)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p10: Real
    p50: Real
    p90: Real


class PrefixShiftReport(BaseModel):
    """Coupled-sampling prefix shift of a candidate engine against the reference-precision engine; a screen's
    `CandidateDiagnostics.prefix_shift` (read back from its --json document) and a measure's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_sequences: int
    num_tokens: int  # candidate response tokens
    diverged_share: Real  # sequences whose response differs anywhere
    divergence_positions: list[int]  # first divergence position of each diverged sequence
    divergence_quantiles: DivergenceQuantiles  # of those positions
    share_after_divergence: Real  # candidate tokens at positions > first divergence / all candidate tokens
    seq_log_ratio_mean: Real  # mean over sequences of Σ_t ℓ_t, nats/sequence
    seq_log_ratio_std: Real
    k3: Real  # token-mean k3 of the candidate against π, nats/token (for scale)
    tis_cap: Real
    teacher_ll_reference: Real  # teacher log-likelihood per token of the reference engine's responses, nats
    teacher_ll_candidate: Real  # ... of the candidate's responses
    token_gap: Real  # teacher_ll_candidate − teacher_ll_reference, nats/token
    token_gap_tis: Real  # the same with candidate tokens reweighted by min(r_t, C): what TIS *can* correct
    prefix_gap: Real  # teacher log-lik per token of the prefixes h_t (t ≥ 1), candidate − reference
    prefix_gap_tis: Real  # the same reweighted by min(r_t, C): what TIS *cannot* correct (E[r_t | h_t] = 1)
    prefix_gap_seq_is: Real  # the same reweighted per sequence by exp(Σℓ) (self-normalised)
    seq_is_ess: Real = math.nan  # (Σw)²/(n Σw²) of the sequence weights, in (0, 1]
    intervals: dict[str, list[Real]] = {}  # bootstrap 95% (lo, hi), for the gaps

    @model_validator(mode="before")
    @classmethod
    def _derived_not_read(cls, data: Any) -> Any:
        return {k: v for k, v in data.items() if k not in _DERIVED} if isinstance(data, dict) else data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tis_closes(self) -> float:
        """Share of the prefix gap the per-token TIS reweighting closes (≈ 0: it leaves the gap in place)."""
        return 1.0 - self.prefix_gap_tis / self.prefix_gap if self.prefix_gap else float("nan")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tis_closes_token(self) -> float:
        """Share of the token-level gap TIS closes (what a per-token correction can do)."""
        return 1.0 - self.token_gap_tis / self.token_gap if self.token_gap else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()
