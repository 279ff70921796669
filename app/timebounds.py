"""Bounds on the times a user or an agent may name, so date arithmetic cannot overflow.

``datetime`` stops at years 1 and 9999: converting ``0001-01-01T00:00+01:00`` to UTC, or going an
hour before it, raises ``OverflowError``. Every time that comes from outside is checked here
first and refused with a message instead.

Also the wall-clock arithmetic of chart buckets: a bucket of 2 h or more starts at the viewer's
local midnight (or a multiple of the step after it), so across a DST change the day has 23 or
25 hours and no bucket is doubled or missing (:func:`wall_bucket`, :func:`wall_bucket_start`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, tzinfo

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


# Buckets of at least this width follow the viewer's wall clock (local midnight); narrower ones
# stay on Unix-epoch boundaries, which every zone agrees on.
LOCAL_ALIGN_FROM_S = 7200
_PROBE = timedelta(hours=1)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Zulu", "Etc/Zulu"})


def utc_offset_s(instant: datetime, zone: tzinfo) -> int:
    """Seconds east of UTC that ``zone`` observes at ``instant`` (aware), per the IANA tz
    database (``zoneinfo``): 3600 for Europe/Berlin in winter, 19800 for Asia/Kolkata."""
    offset = instant.astimezone(zone).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def offset_segments(start: datetime, end: datetime, zone: tzinfo) -> list[tuple[datetime, int]]:
    """The UTC offsets ``zone`` uses over ``[start, end]``: ``[(from_utc, offset_s), …]``, the
    first from ``start``, then one per transition (DST change) to the second. Transitions are
    found by probing every hour and bisecting, so two changes less than an hour apart (which
    no zone has) would be missed."""
    segments = [(start, utc_offset_s(start, zone))]
    probe = start
    while probe < end:
        nxt = min(probe + _PROBE, end)
        if utc_offset_s(nxt, zone) != segments[-1][1]:
            # offset(lo) is the old one, offset(hi) the new one; changes fall on whole seconds
            lo, hi = math.floor(probe.timestamp()), math.ceil(nxt.timestamp())
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if utc_offset_s(datetime.fromtimestamp(mid, UTC), zone) == segments[-1][1]:
                    lo = mid
                else:
                    hi = mid
            segments.append((datetime.fromtimestamp(hi, UTC), utc_offset_s(nxt, zone)))
        probe = nxt
    return segments


def is_utc(zone: tzinfo) -> bool:
    """True for UTC itself (``datetime.UTC``, ``ZoneInfo("UTC")`` and its aliases)."""
    return zone is UTC or str(zone) in _UTC_NAMES


def aligns_to_wall_clock(step_s: int, zone: tzinfo) -> bool:
    """True when buckets of ``step_s`` follow the wall clock of ``zone``: steps of 2 h and
    more, in any zone but UTC (where the wall clock is the epoch)."""
    return step_s >= LOCAL_ALIGN_FROM_S and not is_utc(zone)


def wall_bucket(instant: datetime, step_s: int, zone: tzinfo) -> int:
    """The bucket of ``instant`` counted on the wall clock of ``zone``:
    ``floor((epoch_s + offset_s) / step_s)``. A repeated hour (DST ends) falls in the bucket of
    its wall time, so that day's bucket is an hour longer; a skipped hour leaves its bucket an
    hour shorter: no bucket is doubled or missing."""
    return math.floor((instant.timestamp() + utc_offset_s(instant, zone)) / step_s)


def wall_bucket_start(key: int, step_s: int, segments: list[tuple[datetime, int]]) -> datetime:
    """The earliest instant (UTC) whose :func:`wall_bucket` is ``key``, given the zone's
    :func:`offset_segments` around it (they must cover the bucket): the wall-clock start of the
    bucket in the offset then in force, or, when that wall time was skipped by a DST change,
    the moment of the change.

    Raises:
        ValueError: no instant of the segments falls in the bucket.
    """
    lo_wall, hi_wall = key * step_s, (key + 1) * step_s
    found: list[float] = []
    for i, (begin, offset) in enumerate(segments):
        a = begin.timestamp()
        b = segments[i + 1][0].timestamp() if i + 1 < len(segments) else math.inf
        at = lo_wall - offset
        if a <= at < b:
            found.append(at)
        if lo_wall <= a + offset < hi_wall:
            found.append(a)
    if not found:
        raise ValueError(f"bucket {key} of {step_s} s lies outside the offsets given")
    return datetime.fromtimestamp(min(found), UTC)
