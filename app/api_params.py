"""Bounded integer id parameters for the JSON API.

The alert and notification tables key rows by ``Integer`` (``app/alerts/models.py``,
``app/notify/models.py``): 32-bit ``INTEGER`` on Postgres, 64-bit on SQLite. An id outside
``1 .. 2**31 - 1`` cannot name a row and would make Postgres raise "integer out of range" (or
the SQLite driver overflow past 2^63), so it is refused up front with FastAPI's 422, whose
``loc`` names the parameter (``["path", "alert_id"]``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

#: Largest value of Postgres ``INTEGER`` (int4), the type of these tables' ``id`` columns.
MAX_ID = 2**31 - 1

#: A row id in the URL path: ``/api/v1/alerts/{alert_id}``.
IdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="row id, 1 .. 2^31-1")]
#: An optional row id in the query string: ``?channel_id=3``.
IdQuery = Annotated[int | None, Query(ge=1, le=MAX_ID, description="row id, 1 .. 2^31-1")]
