"""Turning whatever a driver hands us into values that always serialise to valid JSON.

NVML and the kernel can return NaN, infinities, bytes that are not UTF-8, or strings carrying
lone surrogates (``os.fsdecode`` of a bad name). None of them may ever make a batch unsendable:
numbers that are not finite become ``None`` (JSON ``null``), text is decoded with
``errors="replace"``.
"""

from __future__ import annotations

import json
import math
from typing import Any

_REPLACEMENT = "\ufffd"


def clean_text(value: str | bytes) -> str:
    """Return ``value`` as a string that encodes to valid UTF-8.

    ``bytes`` are decoded as UTF-8 with ``errors="replace"``; in a ``str``, surrogate-escaped bytes
    and lone surrogates are replaced the same way. NUL characters become U+FFFD too, because
    PostgreSQL text columns refuse them and a refused batch would be retried forever.
    """
    if isinstance(value, bytes):
        text = value.decode("utf-8", errors="replace")
    else:
        try:
            value.encode("utf-8")
            text = value
        except UnicodeEncodeError:
            try:
                raw = value.encode("utf-8", errors="surrogateescape")
            except UnicodeEncodeError:
                raw = value.encode("utf-8", errors="replace")
            text = raw.decode("utf-8", errors="replace")
    return text.replace("\x00", _REPLACEMENT)


def clean_number(value: object) -> int | float | None:
    """Return ``value`` if it is a finite ``int`` or ``float``, else ``None``.

    Booleans, strings and other objects also become ``None``: the server answers 422 to a metric
    that is not a number, and one bad reading must not cost the whole batch.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def make_json_safe(value: Any) -> Any:
    """Return a deep copy of ``value`` that ``json.dumps(..., allow_nan=False)`` always accepts.

    Dicts (keys made text), lists and tuples are walked; floats that are not finite become
    ``None``; ``str``/``bytes`` go through :func:`clean_text`; other objects become their cleaned
    ``str()``.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str | bytes):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): make_json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [make_json_safe(v) for v in value]
    return clean_text(str(value))


def dumps(value: Any, *, indent: int | None = None) -> str:
    """Serialise ``value`` to JSON text after :func:`make_json_safe`; never emits NaN/Infinity.

    Raises:
        ValueError: never expected; ``allow_nan=False`` guards the invariant.
    """
    return json.dumps(make_json_safe(value), allow_nan=False, ensure_ascii=False, indent=indent)
