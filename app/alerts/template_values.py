"""Numbers and durations as alert texts show them: rounded to what a person reads ("92 °C",
"0.0523 s", "for 2 min"), never a float's full repr ("116.648 s")."""

from __future__ import annotations

import math


def rounded(value: float) -> str:
    """``value`` with about three significant digits: whole numbers as integers, 100 and over
    to the unit, 10–100 to a tenth, 1–10 to a hundredth, below 1 three significant digits;
    trailing zeros dropped. Infinities and NaN as Python writes them."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    text = f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 1 else f"{value:.3g}"
    if "e" in text or "." not in text:
        return text
    return text.rstrip("0").rstrip(".")


def duration(seconds: float) -> str:
    """``seconds`` in words at two units at most: "45 s", "2 min", "2 min 5 s", "1 h 5 min",
    "3 d 4 h"; negative or non-finite values as a rounded number of seconds."""
    if not math.isfinite(seconds) or seconds < 0:
        return f"{rounded(seconds)} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s" if seconds >= 1 or seconds == 0 else f"{rounded(seconds)} s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size} {unit}")
            whole %= size
    return " ".join(parts[:2])
