"""Whole numbers in text that a tool, the kernel or a file printed.

``str.isdigit()`` says yes to ``"²"`` (which ``int()`` refuses) and to ``"٣"`` (which it reads
as 3), and ``int()`` refuses 4,300 digits and more: a check with ``isdigit()`` before ``int()``
let one garbled value raise out of a parser and take its whole reading with it. Here a number
is ASCII digits, at most 20 of them (2⁶⁴−1, the widest counter a kernel or driver prints).
"""

from __future__ import annotations

import re

_UNSIGNED = re.compile(r"[0-9]{1,20}")
_SIGNED = re.compile(r"-?[0-9]{1,20}")


def ascii_int(text: str | None, *, signed: bool = False) -> int | None:
    """``text`` (surrounding whitespace allowed) as an int, or ``None`` when it is not ASCII
    digits (with a leading ``-`` where ``signed``), at most 20 of them."""
    if text is None:
        return None
    stripped = text.strip()
    pattern = _SIGNED if signed else _UNSIGNED
    return int(stripped) if pattern.fullmatch(stripped) else None
