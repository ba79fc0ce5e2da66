"""How numbers are written for people (tables, Markdown, one-line summaries): one rule everywhere.

fmt(0.000123) == "1.23e-04"; fmt(0.0108) == "0.0108"; fmt(None) == "-"; fmt_interval((0.0037, 0.0284))
fmt(-9.86e-10) == "0"   # below ROUNDING_ZERO: the float rounding of a zero (a floor engine equal to the reference)
"""

from __future__ import annotations

import math
from typing import Any

# Magnitudes below this print as 0. Every quantity admitcheck prints is a mismatch, cost or budget in nats/token
# (≥ 1e-6 where it is real: bf16 rounding alone gives ~1e-5) or a count or share; float32 sums of per-token log-prob
# differences that are exactly zero come out as ±1e-10-ish, which reads like a measured (negative) mismatch.
ROUNDING_ZERO = 1e-8


def fmt(x: Any, digits: int = 3) -> str:
    """Compact number: 3 significant digits, scientific below 1e-3 and above 1e4; '-' for None."""
    if x is None:
        return "-"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) < ROUNDING_ZERO:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e4:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def fmt_interval(ci: Any) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "-"
