"""How numbers are written for people (tables, Markdown, one-line summaries): one rule everywhere.

fmt(0.000123) == "1.23e-04"; fmt(0.0108) == "0.0108"; fmt(None) == "-"; fmt_interval((0.0037, 0.0284))
"""

from __future__ import annotations

import math
from typing import Any


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
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e4:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def fmt_interval(ci: Any) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "-"
