"""SQL building block of the fleet-wide health reads: a timestamp moved back by a number of
seconds, on both backends, comparable with an indexed ``UTCDateTime`` column. (The newest
reading of each entity comes from its current-state table, :mod:`app.series.latest`.)"""

from __future__ import annotations

from typing import Any

from sqlalchemy import literal_column
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from app.db import UTCDateTime


class seconds_before(FunctionElement[Any]):
    """``seconds_before(ts, s)``: the timestamp ``s`` seconds (a float literal, rounded to the
    microsecond like ``timedelta(seconds=s)``) before ``ts``; NULL when ``ts`` is NULL.

    On SQLite (timestamps stored as ``YYYY-MM-DD HH:MM:SS.ffffff`` text) it is computed in
    whole microseconds and printed in that format, so a column compared with it keeps its index
    and the comparison is exact."""

    type = UTCDateTime()
    inherit_cache = True
    name = "seconds_before"


def _parts(element: seconds_before) -> list[Any]:
    return list(element.clauses)


def _micros(element: seconds_before) -> int:
    # A literal column, not a bound parameter: its text is part of the statement cache key.
    seconds = _parts(element)[1]
    return round(float(seconds.name) * 1_000_000)


@compiles(seconds_before, "postgresql")
def _seconds_before_pg(element: seconds_before, compiler: Any, **kw: Any) -> str:
    ts = compiler.process(_parts(element)[0], **kw)
    return f"({ts} - make_interval(secs => {_micros(element) / 1_000_000!r}))"


@compiles(seconds_before, "sqlite")
def _seconds_before_sqlite(element: seconds_before, compiler: Any, **kw: Any) -> str:
    ts = compiler.process(_parts(element)[0], **kw)
    us = (
        f"(CAST(strftime('%s', {ts}) AS INTEGER) * 1000000"
        f" + CAST(substr({ts}, 21, 6) AS INTEGER) - {_micros(element)})"
    )
    return (
        f"(strftime('%Y-%m-%d %H:%M:%S', {us} / 1000000, 'unixepoch')"
        f" || printf('.%06d', {us} % 1000000))"
    )


def before(ts: Any, seconds: float) -> seconds_before:
    """``ts`` minus ``seconds`` in SQL (see :class:`seconds_before`)."""
    return seconds_before(ts, literal_column(repr(float(seconds))))
