"""Imports every table module of :mod:`app.series` so ``Base.metadata`` holds the sample
tables (raw rows, blocks, minute blocks, rollups, current readings, the arrival feed):
:mod:`app.models` imports this one for Alembic and the tests."""

from app.series import arrivals, blocks, latest, minute_blocks, tables
from app.series.rollups import models as rollups

__all__ = ["arrivals", "blocks", "latest", "minute_blocks", "rollups", "tables"]
