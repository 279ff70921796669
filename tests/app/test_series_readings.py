"""The current readings handed out by :mod:`app.series.readings` carry exactly the columns of
their current-state tables, so a column added to a sample table cannot be dropped on the way
to the pages (nor a reading be built with a field the table lacks)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

import pytest

from app.series import latest, readings

PAIRS = [
    (latest.NVLINK, readings.NvlinkReading),
    (latest.NIC, readings.NicPortReading),
    (latest.DISK, readings.DiskReading),
    (latest.MOUNT, readings.MountReading),
    (latest.NFS, readings.NfsReading),
]


@pytest.mark.parametrize(("spec", "kind"), PAIRS, ids=lambda x: getattr(x, "__name__", ""))
def test_a_reading_has_the_columns_of_its_table(spec: latest.LatestSpec, kind: type) -> None:
    assert [f.name for f in fields(kind)] == [c.name for c in spec.table.columns]


def test_used_pct_is_none_without_a_size() -> None:
    at = datetime(2026, 12, 3, tzinfo=UTC)
    assert readings.MountReading(1, "/", at, used_bytes=5, total_bytes=20).used_pct == 25.0
    assert readings.MountReading(1, "/", at, used_bytes=5, total_bytes=0).used_pct is None
    assert readings.MountReading(1, "/", at, used_bytes=None, total_bytes=20).used_pct is None
