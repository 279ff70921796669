"""Revision 0037: ``nvlink_sample``'s primary key is (gpu_id, sampled_at, link) and its
(gpu_id, sampled_at) index is gone; the rows a database holds survive the upgrade and the
downgrade, and a reading re-sent after the upgrade is still a duplicate."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from app.db import make_engine
from app.migrate import alembic_config, upgrade
from tests.app.section_factories import nvlinks
from tests.dbs import database_at
from tests.factories import batch, gpu, store_payload

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ROWS = [
    {"gpu_id": 1, "link": link, "at": AT + timedelta(seconds=60 * tick), "tx": 1000.0 * link + tick}
    for tick in range(3)
    for link in (0, 1, 17)
]


@pytest.fixture(params=["postgres", "sqlite"])
def at_0036(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of either backend at revision 0036 holding one GPU's NVLink rows."""
    with database_at(request.param, "0036", tmp_path) as url:
        engine = make_engine(url)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO node (id, hostname, labels, created_at) "
                    "VALUES (1, 'n1', '{}', :at)"
                ),
                {"at": AT},
            )
            conn.execute(
                text(
                    'INSERT INTO gpu (id, node_id, uuid, "index", state, first_seen_at, '
                    "last_seen_at) VALUES (1, 1, 'GPU-1', 0, 'ok', :at, :at)"
                ),
                {"at": AT},
            )
            conn.execute(
                text(
                    "INSERT INTO nvlink_sample (gpu_id, link, sampled_at, state, tx_bytes_per_s)"
                    " VALUES (:gpu_id, :link, :at, 'up', :tx)"
                ),
                ROWS,
            )
        engine.dispose()
        yield url


def _layout(url: str) -> tuple[list[str], set[str], list[tuple[int, int, float]]]:
    engine = make_engine(url)
    try:
        found = inspect(engine)
        key = found.get_pk_constraint("nvlink_sample")["constrained_columns"]
        indexes = {i["name"] for i in found.get_indexes("nvlink_sample")}
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT gpu_id, link, tx_bytes_per_s FROM nvlink_sample "
                    "ORDER BY sampled_at, link"
                )
            ).all()
        return key, indexes, [tuple(r) for r in rows]
    finally:
        engine.dispose()


def test_the_upgrade_reorders_the_key_keeps_the_rows_and_the_downgrade_undoes_it(
    at_0036: str,
) -> None:
    stored = [(r["gpu_id"], r["link"], r["tx"]) for r in ROWS]
    key, indexes, rows = _layout(at_0036)
    assert key == ["gpu_id", "link", "sampled_at"]
    assert "ix_nvlink_sample_gpu_id_sampled_at" in indexes

    upgrade(at_0036, "0037")
    key, indexes, rows = _layout(at_0036)
    assert key == ["gpu_id", "sampled_at", "link"]
    assert indexes == {"ix_nvlink_sample_sampled_at"}
    assert rows == stored

    command.downgrade(alembic_config(at_0036), "0036")
    key, indexes, rows = _layout(at_0036)
    assert key == ["gpu_id", "link", "sampled_at"]
    assert indexes == {"ix_nvlink_sample_sampled_at", "ix_nvlink_sample_gpu_id_sampled_at"}
    assert rows == stored


def test_a_reading_sent_twice_is_stored_once_under_the_new_key(db_url: str) -> None:
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    payload = batch("key-a", gpus=[gpu(0, hostname="key-a")], samples_per_gpu=1, start=at)
    payload["nvlinks"] = nvlinks(payload["gpus"][0], at)
    first = store_payload(db_url, payload, received_at=at + timedelta(seconds=5))
    again = {**payload, "batch_id": "00000000-0000-4000-8000-000000000037"}
    second = store_payload(db_url, again, received_at=at + timedelta(seconds=9))

    links = len(payload["nvlinks"])
    assert first["sections_stored"]["nvlinks"] == links
    assert second["sections_stored"]["nvlinks"] == 0
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SELECT count(*) FROM nvlink_sample")) == links
    finally:
        engine.dispose()
