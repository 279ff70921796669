"""The ingest's straight COPY on Postgres (:func:`app.series.writes.insert_staged`): rows whose
keys are new go straight into their tables, and the counts, newest times, current-state rows
and arrival feed come out as the staged path's; a batch repeating a stored key, or a key of its
own, falls back to the staged path with nothing of the straight attempt left behind."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.series import latest, sinks
from app.series.arrivals import sample_arrival
from app.series.tables import NvlinkSample, gpu_sample
from app.series.writes import StagedRows, insert_staged
from tests.dbs import wipe

T0 = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
GPU_COLUMNS = ("gpu_id", "sampled_at", "received_at", "util_gpu_pct")
LINK_COLUMNS = ("gpu_id", "link", "sampled_at", "state", "tx_bytes_per_s")


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(postgres_url)
    yield make_session_factory(engine)
    engine.dispose()
    wipe(postgres_url)


def _gpus(factory: sessionmaker[Session], count: int = 2) -> list[int]:
    with session_scope(factory) as session:
        node = Node(hostname="straight-a", labels={}, created_at=T0)
        session.add(node)
        session.flush()
        gpus = [
            Gpu(node_id=node.id, uuid=f"GPU-s{i}", index=i, first_seen_at=T0, last_seen_at=T0)
            for i in range(count)
        ]
        session.add_all(gpus)
        session.flush()
        return [g.id for g in gpus]


def _samples(gpu_ids: list[int], ticks: range, util: float = 10.0) -> list[tuple[Any, ...]]:
    return [
        (g, T0 + timedelta(seconds=10 * k), T0 + timedelta(seconds=10 * k + 1), util + k)
        for k in ticks
        for g in gpu_ids
    ]


def _links(gpu_ids: list[int], ticks: range, links: int = 2) -> list[tuple[Any, ...]]:
    return [
        (g, link, T0 + timedelta(seconds=10 * k), "up" if k % 2 else "down", 1e9 * k + link)
        for k in ticks
        for g in gpu_ids
        for link in range(links)
    ]


def _store(
    factory: sessionmaker[Session], samples: list[tuple[Any, ...]], links: list[tuple[Any, ...]]
) -> tuple[StagedRows, StagedRows]:
    """Both batches in one call, NVLinks first: their COPY is the one done before a repeated
    GPU key fails the straight attempt."""
    gpu_batch = sinks.staged(sinks.SAMPLES, GPU_COLUMNS, samples)
    link_batch = sinks.staged("nvlinks", LINK_COLUMNS, links)
    with session_scope(factory) as session:
        insert_staged(session, [link_batch, gpu_batch])
    return gpu_batch, link_batch


def _rows(factory: sessionmaker[Session], table: Any, columns: tuple[str, ...]) -> list[Any]:
    with session_scope(factory) as session:
        picked = [table.c[c] for c in columns]
        return [tuple(r) for r in session.execute(select(*picked).order_by(*picked))]


def _feed(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    t = sample_arrival
    with session_scope(factory) as session:
        picked = (t.c.series, t.c.owner_id, t.c.first_at, t.c.last_at)
        return [tuple(r) for r in session.execute(select(*picked).order_by(*picked))]


def _current_links(factory: sessionmaker[Session]) -> list[tuple[Any, ...]]:
    return _rows(factory, latest.NVLINK.table, LINK_COLUMNS)


def test_new_rows_go_straight_with_counts_newest_times_current_state_and_feed(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory)
    samples, links = _samples(gpu_ids, range(3)), _links(gpu_ids, range(3))
    gpu_batch, link_batch = _store(factory, samples, links)

    assert (gpu_batch.straight, link_batch.straight) == (True, True)
    assert (gpu_batch.inserted, link_batch.inserted) == (6, 12)
    last = T0 + timedelta(seconds=20)
    assert gpu_batch.newest == {gpu_ids[0]: last, gpu_ids[1]: last}
    assert _rows(factory, gpu_sample, GPU_COLUMNS) == sorted(samples)
    assert _rows(factory, NvlinkSample.__table__, LINK_COLUMNS) == sorted(links)
    # The newest reading of each link: tick 2, state "down", 2e9 + link.
    assert _current_links(factory) == sorted(r for r in links if r[2] == last)
    assert _feed(factory) == [("gpu_sample", g, T0, last) for g in gpu_ids]


def test_the_newest_times_and_feed_hold_whatever_order_the_rows_come_in(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory, count=1)
    samples = _samples(gpu_ids, range(5))
    shuffled = [samples[2], samples[4], samples[0], samples[3], samples[1]]
    gpu_batch, _ = _store(factory, shuffled, _links(gpu_ids, range(1)))

    assert gpu_batch.straight
    assert gpu_batch.newest == {gpu_ids[0]: T0 + timedelta(seconds=40)}
    assert _feed(factory) == [("gpu_sample", gpu_ids[0], T0, T0 + timedelta(seconds=40))]


def test_a_batch_repeating_a_stored_key_is_staged_and_stores_only_its_new_rows(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory)
    _store(factory, _samples(gpu_ids, range(2)), _links(gpu_ids, range(2)))
    with session_scope(factory) as session:
        session.execute(sample_arrival.delete())

    # Ticks 1-3: tick 1 is stored (its utilisation differs: the stored value stays).
    again = _samples(gpu_ids, range(1, 4), util=50.0)
    new_links = _links(gpu_ids, range(2, 4))
    gpu_batch, link_batch = _store(factory, again, new_links)

    assert (gpu_batch.straight, link_batch.straight) == (False, False)
    # The NVLinks' COPY went in before the GPU samples' failed: rolled back, then staged, so
    # they count once as stored, and no row of theirs is there twice.
    assert (gpu_batch.inserted, link_batch.inserted) == (4, 8)
    stored = _rows(factory, gpu_sample, GPU_COLUMNS)
    assert stored == sorted(_samples(gpu_ids, range(2)) + _samples(gpu_ids, range(2, 4), 50.0))
    assert _rows(factory, NvlinkSample.__table__, LINK_COLUMNS) == sorted(_links(gpu_ids, range(4)))
    last = T0 + timedelta(seconds=30)
    assert gpu_batch.newest == {g: last for g in gpu_ids}
    assert _feed(factory) == [("gpu_sample", g, T0 + timedelta(seconds=20), last) for g in gpu_ids]
    assert _current_links(factory) == sorted(r for r in new_links if r[2] == last)


def test_a_key_repeated_inside_the_batch_is_staged_and_stored_once(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory, count=1)
    samples = _samples(gpu_ids, range(3))
    gpu_batch, link_batch = _store(factory, [*samples, samples[1]], _links(gpu_ids, range(1)))

    assert not gpu_batch.straight and gpu_batch.inserted == 3
    assert link_batch.inserted == 2
    assert _rows(factory, gpu_sample, GPU_COLUMNS) == sorted(samples)


def test_a_repeated_key_at_the_start_of_a_large_batch_falls_back_cleanly(
    factory: sessionmaker[Session],
) -> None:
    """Postgres may report the violation while the client is still sending the COPY: the
    fallback must work whenever it comes."""
    gpu_ids = _gpus(factory, count=8)
    _store(factory, _samples(gpu_ids, range(1)), [])
    many = _samples(gpu_ids, range(4000))
    gpu_batch, _ = _store(factory, many, [])

    assert not gpu_batch.straight
    assert gpu_batch.inserted == len(many) - 8
    with session_scope(factory) as session:
        assert session.scalar(select(func.count()).select_from(gpu_sample)) == len(many)


def test_a_key_another_transaction_is_storing_waits_for_it_then_falls_back(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory, count=1)
    samples = _samples(gpu_ids, range(4))
    done: list[StagedRows] = []
    with session_scope(factory) as first:
        insert_staged(first, [sinks.staged(sinks.SAMPLES, GPU_COLUMNS, samples[2:3])])
        second = threading.Thread(target=lambda: done.extend(_store(factory, samples, [])[:1]))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive()  # waiting on the uncommitted key
    second.join(timeout=30)
    assert not second.is_alive()
    assert not done[0].straight and done[0].inserted == 3
    assert _rows(factory, gpu_sample, GPU_COLUMNS) == sorted(samples)


def test_a_key_whose_transaction_rolls_back_goes_straight_after_it(
    factory: sessionmaker[Session],
) -> None:
    gpu_ids = _gpus(factory, count=1)
    samples = _samples(gpu_ids, range(4))
    done: list[StagedRows] = []
    first = factory()
    try:
        insert_staged(first, [sinks.staged(sinks.SAMPLES, GPU_COLUMNS, samples[2:3])])
        second = threading.Thread(target=lambda: done.extend(_store(factory, samples, [])[:1]))
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive()
        first.rollback()
    finally:
        first.close()
    second.join(timeout=30)
    assert done[0].straight and done[0].inserted == 4
    assert _rows(factory, gpu_sample, GPU_COLUMNS) == sorted(samples)
