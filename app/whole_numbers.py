"""Whole numbers typed by people (query parameters, channel options): ASCII digits only.

``str.isdigit()`` is true for ``²``, ``١`` or ``２`` (which ``int()`` refuses or reads as
other digits) and for 5,000-digit strings (which ``int()`` refuses past 4,300 digits), so
checking with it and then converting turned bad input into 500s. Every such parameter goes
through :func:`parse_whole` instead.
"""

from __future__ import annotations

#: No parameter of ours needs more digits; a longer string is refused before ``int()``.
MAX_DIGITS = 18


def parse_whole(raw: str, *, low: int, high: int) -> int | None:
    """``raw`` (surrounding spaces ignored) as an int when it is 1 to :data:`MAX_DIGITS` ASCII
    digits and within ``[low, high]``; else ``None`` (the caller names the field)."""
    text = raw.strip()
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if low <= value <= high else None
