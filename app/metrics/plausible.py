"""Plausible ranges for stored numbers, and the rule that nulls everything outside them.

A value outside its range is a driver sentinel or garbage (NVML's ``0xFFFFFFFF``, DCGM's int64
blank ``9223372036854775794``, a negative rate after a counter wrap): it is stored as ``NULL`` and
counted, and never fails the batch. GPU sample metrics declare their ranges in
:mod:`app.metrics.catalog`; each node section (disks, NVLinks …) declares a ``BOUNDS`` mapping in
its feature's ``schemas.py``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, AwareDatetime, BeforeValidator, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from app.timebounds import checked_utc


def _number(value: Any) -> int | float:
    """A JSON number as it came (ints stay exact), else one error at the field itself, of type
    ``number_type`` (the reason the ingest counts a value it left out under)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError(
            "number_type", "must be a number, got {got}", {"got": type(value).__name__}
        )
    return value


def _rfc3339_text(value: Any) -> Any:
    """Times travel as RFC 3339 text: a bare number would be read as Unix time without a zone."""
    if not isinstance(value, str):
        raise ValueError(
            "must be an RFC 3339 time string with an offset, e.g. 2026-11-29T16:00:05Z"
        )
    return value


#: A metric value as the payload may carry it: an int or a float, never a bool or a string.
Number = Annotated[
    int | float,
    PlainValidator(_number),
    WithJsonSchema({"type": "number"}),
]

#: A time an agent sends: RFC 3339 text with an offset, between 1970 and 9000 (so no date
#: arithmetic on it can overflow), converted to UTC.
Timestamp = Annotated[AwareDatetime, BeforeValidator(_rfc3339_text), AfterValidator(checked_utc)]

#: The largest value of an unsigned 64-bit kernel counter (``/proc/self/mountstats`` …).
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Bound:
    """The plausible closed range ``[low, high]``; ``integer``: a fractional value is implausible
    too (counts, P-states, link widths)."""

    low: float
    high: float
    integer: bool = False


def plausible(value: float | int | None, bound: Bound) -> float | int | None:
    """``value`` if it lies in ``bound`` (an integral float becomes an ``int`` for an integer
    bound), else ``None``. NaN, ±inf and booleans are implausible."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not (bound.low <= value <= bound.high):
        return None
    if bound.integer and isinstance(value, float):
        return int(value) if value.is_integer() else None
    return value


def clean_numbers(
    values: Mapping[str, Any],
    bounds: Mapping[str, Bound],
    *,
    prefix: str,
    nulled: Counter[str],
) -> dict[str, Any]:
    """A copy of ``values`` with each field named in ``bounds`` made plausible; every value
    nulled is counted in ``nulled`` under ``"<prefix>.<field>"`` (e.g. ``disks.busy_pct``)."""
    cleaned = dict(values)
    for name, bound in bounds.items():
        raw = cleaned.get(name)
        if raw is None:
            continue
        value = plausible(raw, bound)
        if value is None:
            nulled[f"{prefix}.{name}"] += 1
        cleaned[name] = value
    return cleaned
