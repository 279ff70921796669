"""Bounds on the times a user or an agent may name, so date arithmetic cannot overflow.

``datetime`` stops at years 1 and 9999: converting ``0001-01-01T00:00+01:00`` to UTC, or going an
hour before it, raises ``OverflowError``. Every time that comes from outside is checked here
first and refused with a message instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

EARLIEST = datetime(1970, 1, 2, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def checked_utc(value: datetime) -> datetime:
    """``value`` (timezone-aware) converted to UTC.

    Raises:
        ValueError: naive, not convertible, or outside 1970-01-02 … 9000-01-01 UTC.
    """
    if value.tzinfo is None:
        raise ValueError("time needs a UTC offset or Z")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("time is out of range") from None
    if not (EARLIEST <= utc <= LATEST):
        raise ValueError("time must lie between 1970-01-02 and 9000-01-01 UTC")
    return utc
