"""Reading the text values of ``nvidia-smi -q -x``: numbers with units, and the words it prints
instead of a value.

nvidia-smi prints ``N/A`` (older and most fields) or ``[N/A]``, ``Not Supported`` /
``[Not Supported]``, ``Unknown Error`` / ``[Unknown Error]``, ``Insufficient Permissions`` and,
since driver 590, ``Requested functionality has been deprecated``. Each becomes ``None`` with the
matching NVML return-code name as the reason; a field the DTD version does not have at all is
``NOT_REPORTED``.
"""

from __future__ import annotations

import re
from xml.etree.ElementTree import Element

from agents.nvml.metrics import (
    NO_PERMISSION,
    NOT_REPORTED,
    NOT_SUPPORTED,
    UNKNOWN,
)

#: What nvidia-smi prints instead of a value (lower case, brackets removed) → reason.
NOT_A_VALUE: dict[str, str] = {
    "n/a": NOT_SUPPORTED,
    "not supported": NOT_SUPPORTED,
    "not available": NOT_SUPPORTED,
    "unknown error": UNKNOWN,
    "insufficient permissions": NO_PERMISSION,
    "no permission": NO_PERMISSION,
    "requested functionality has been deprecated": "DEPRECATED",
    "gpu is lost": "GPU_IS_LOST",
    "gpu requires reset": "RESET_REQUIRED",
}
#: Unit suffix → factor to the payload's unit (bytes, B/s, W, MHz, °C, %, lanes).
UNITS: dict[str, int] = {
    "": 1,
    "W": 1,
    "MHz": 1,
    "C": 1,
    "%": 1,
    "x": 1,
    "us": 1,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "KB/s": 1024,
    "MB/s": 1024**2,
}
NOT_PARSED = "NOT_PARSED"
# ASCII digits, at most 20 on each side of the point: int() refuses 4,300 digits and more.
_NUMBER = re.compile(r"^(-?[0-9]{1,20}(?:\.[0-9]{1,20})?)\s*([A-Za-z/%]*)$")
_PSTATE = re.compile(r"^P(\d{1,2})$")


def reason_for(text: str | None) -> str | None:
    """The reason ``text`` is not a value (``None`` when it may be one); ``NOT_REPORTED`` for
    an absent element."""
    if text is None:
        return NOT_REPORTED
    word = text.strip().strip("[]").strip().lower()
    return NOT_A_VALUE.get(word)


def parse_number(text: str) -> float | int | None:
    """``"24576 MiB"`` → ``25769803776``, ``"35.06 W"`` → ``35.06``, ``"16x"`` → ``16``,
    ``"P8"`` → ``8``; ``None`` when the text is not a number in a known unit."""
    stripped = text.strip()
    pstate = _PSTATE.match(stripped)
    if pstate:
        return int(pstate[1])
    match = _NUMBER.match(stripped)
    if match is None or match[2] not in UNITS:
        return None
    factor = UNITS[match[2]]
    if "." in match[1]:
        value = float(match[1])
        return value * factor if factor != 1 else value
    return int(match[1]) * factor


def parse_flag(text: str) -> int | None:
    """``Yes``/``Active``/``Enabled`` → 1, ``No``/``Not Active``/``Disabled`` → 0."""
    word = text.strip().lower()
    if word in ("yes", "active", "enabled"):
        return 1
    if word in ("no", "not active", "disabled"):
        return 0
    return None


class Fields:
    """Values under one element, with the reason each ``None`` metric has in ``reasons``."""

    def __init__(self, element: Element) -> None:
        self.element = element
        self.reasons: dict[str, str] = {}

    def text(self, *paths: str) -> str | None:
        """The stripped text of the first of ``paths`` present (``None`` if none is)."""
        for path in paths:
            found = self.element.find(path)
            if found is not None:
                return (found.text or "").strip()
        return None

    def value(self, metric: str, *paths: str, flag: bool = False) -> float | int | None:
        """The first of ``paths`` that holds a number (or a Yes/No ``flag``) for ``metric``
        (driver 590 prints ``average_power_draw`` N/A but ``instant_power_draw`` on Turing);
        ``None`` otherwise, with the reason of the first present path recorded."""
        reason: str | None = None
        for path in paths:
            found = self.element.find(path)
            if found is None:
                continue
            text = (found.text or "").strip()
            why = reason_for(text)
            if why is None:
                value = parse_flag(text) if flag else parse_number(text)
                if value is not None:
                    return value
                why = NOT_PARSED
            reason = reason or why
        self.reasons[metric] = reason or NOT_REPORTED
        return None

    def word(self, *paths: str) -> str | None:
        """The first present of ``paths`` as text, ``None`` when absent or not a value."""
        text = self.text(*paths)
        return None if reason_for(text) is not None else text
