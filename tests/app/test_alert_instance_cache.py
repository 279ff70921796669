"""The active instances kept between an evaluator lane's ticks (Postgres): every write made
since the last read is read again — the evaluator's, an acknowledgement by another session,
one that was still uncommitted when the cache read — and a delete makes it load whole."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, text, update

from app.alerts.instance_reads import AT, READ, ActiveInstanceCache, active_instances
from app.alerts.models import AlertInstance, AlertRule
from app.db import make_engine, make_session_factory, session_scope
from tests.dbs import session_factory
from tests.factories import add_rules, batch, evaluate_at, gpu, sample, store_payload, wipe_alerts

NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


@pytest.fixture
def url(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    wipe_alerts(postgres_url)
    from tests.dbs import wipe

    wipe(postgres_url)


@pytest.fixture
def factory(url: str) -> Iterator[Any]:
    """A session factory on ``url``."""
    with session_factory(url) as sessions:
        yield sessions


def hot(at: datetime, hostname: str, temp_c: float = 90) -> dict[str, Any]:
    """One GPU of ``hostname`` at ``temp_c``."""
    g = gpu(0, hostname=hostname)
    payload = batch(hostname, gpus=[g], samples_per_gpu=0)
    payload["samples"] = [sample(g, at, temp_c=temp_c)]
    return payload


def same(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]]) -> bool:
    """Whether ``a`` and ``b`` hold the same instances with the same ``READ`` columns (the
    cache's rows carry two more)."""

    def cut(active: dict[int, dict[str, Any]]) -> dict[int, dict[str, tuple[Any, ...]]]:
        width = len(READ) + 1
        return {
            r: {fp: tuple(row)[:width] for fp, row in rows.items()} for r, rows in active.items()
        }

    return cut(a) == cut(b)


def summary(active: dict[int, dict[str, Any]]) -> dict[str, tuple[str, bool, float | None]]:
    """hostname → (state, acked, value) of ``active``."""
    return {
        row[AT["labels"]]["hostname"]: (row[AT["state"]], row[AT["acked"]], row[AT["value"]])
        for rows in active.values()
        for row in rows.values()
    }


def test_the_cache_follows_every_write_and_reloads_after_a_delete(url: str, factory: Any) -> None:
    for host in ("node-a", "node-b"):
        store_payload(url, hot(NOW, host), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT}, {"name": "hot2", "condition": HOT})
    evaluate_at(url, NOW)
    cache = ActiveInstanceCache()
    with session_scope(factory) as session:
        ids = list(session.scalars(select(AlertRule.id).order_by(AlertRule.id)))
        first = cache.get(session, ids)
        assert same(first, active_instances(session, ids))
    assert summary(first) == {
        "node-a": ("firing", False, 90.0),
        "node-b": ("firing", False, 90.0),
    }
    assert cache.loads == 1

    # Another session acknowledges one; a new reading changes another's value.
    with session_scope(factory) as session:
        session.execute(
            update(AlertInstance)
            .where(AlertInstance.labels["hostname"].as_string() == "node-a")
            .values(acked=True)
        )
    store_payload(url, hot(NOW + timedelta(seconds=65), "node-b", 95), received_at=NOW)
    evaluate_at(url, NOW + timedelta(seconds=70))  # the value's refresh is due
    with session_scope(factory) as session:
        again = cache.get(session, ids)
        assert same(again, active_instances(session, ids))
    assert summary(again) == {
        "node-a": ("firing", True, 90.0),
        "node-b": ("firing", False, 95.0),
    }
    assert cache.loads == 1  # read what changed, not whole

    # A write still uncommitted while the cache reads is read at its next read.
    writer = factory()
    try:
        writer.execute(
            update(AlertInstance)
            .where(AlertInstance.labels["hostname"].as_string() == "node-b")
            .values(acked=True)
        )
        writer.flush()
        with session_scope(factory) as session:
            during = summary(cache.get(session, ids))
        assert during["node-b"] == ("firing", False, 95.0)
        writer.commit()
    finally:
        writer.close()
    with session_scope(factory) as session:
        after = cache.get(session, ids)
        assert same(after, active_instances(session, ids))
    assert summary(after)["node-b"] == ("firing", True, 95.0)
    assert cache.loads == 1

    # Resolved instances leave it; a deleted rule's instances too (a whole load).
    store_payload(url, hot(NOW + timedelta(seconds=75), "node-a", 20), received_at=NOW)
    evaluate_at(url, NOW + timedelta(seconds=80))
    with session_scope(factory) as session:
        assert set(summary(cache.get(session, ids))) == {"node-b"}
        assert cache.loads == 1
        session.execute(delete(AlertRule).where(AlertRule.name == "hot"))
    with session_scope(factory) as session:
        left = cache.get(session, ids)
        assert same(left, active_instances(session, ids))
    assert [len(rows) for rows in left.values()] == [0, 1]
    assert cache.loads == 2
    # Another set of rules (a rule moved to the other lane): those alone, loaded whole.
    with session_scope(factory) as session:
        assert same(cache.get(session, ids[1:]), active_instances(session, ids[1:]))
    assert cache.loads == 3


def test_on_sqlite_it_reads_whole(sqlite_url: str) -> None:
    store_payload(sqlite_url, hot(NOW, "node-a"), received_at=NOW)
    add_rules(sqlite_url, {"name": "hot", "condition": HOT})
    try:
        evaluate_at(sqlite_url, NOW)
        engine = make_engine(sqlite_url)
        try:
            with session_scope(make_session_factory(engine)) as session:
                ids = list(session.scalars(select(AlertRule.id)))
                assert summary(ActiveInstanceCache().get(session, ids)) == {
                    "node-a": ("firing", False, 90.0)
                }
        finally:
            engine.dispose()
    finally:
        wipe_alerts(sqlite_url)
        from tests.dbs import wipe

        wipe(sqlite_url)


def test_a_write_committed_after_the_reader_got_its_own_id_is_read(url: str, factory: Any) -> None:
    """The reader's transaction already has an id (the timer lane's feed ``DELETE``) when an
    acknowledgement by a later transaction commits: the next read takes it. (``age(xmin)``
    counted from the reader's own id and left such rows out, so an ack was missed and then
    outlived the alert's resolution.)"""
    store_payload(url, hot(NOW, "node-a"), received_at=NOW)
    add_rules(url, {"name": "hot", "condition": HOT})
    evaluate_at(url, NOW)
    cache = ActiveInstanceCache()
    with session_scope(factory) as session:
        ids = list(session.scalars(select(AlertRule.id)))
        assert summary(cache.get(session, ids)) == {"node-a": ("firing", False, 90.0)}
    reader = factory()
    try:
        reader.execute(text("SELECT pg_current_xact_id()"))  # the reader has its id now
        with session_scope(factory) as other:  # a later transaction, committed
            other.execute(update(AlertInstance).values(acked=True))
        assert summary(cache.get(reader, ids)) == {"node-a": ("firing", True, 90.0)}
        assert cache.loads == 1
    finally:
        reader.rollback()
        reader.close()
