"""The GPU columns every batch moves (``last_seen_at``, ``last_sample_at``, ``implausible``),
written for all of a node's GPUs in one statement (app/fleet/gpu_heartbeat.py), on both
backends: the values stored, what a batch leaves alone, and that an unchanged inventory costs
one statement on ``gpu`` instead of one per GPU."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.engine import Engine

from app.db import make_engine
from app.fleet.models import Gpu
from tests.factories import batch, gpu, sample, store_payload

T0 = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)


def _gpu_rows(url: str) -> dict[int, tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = select(
                Gpu.index, Gpu.last_seen_at, Gpu.last_sample_at, Gpu.implausible, Gpu.state
            )
            return {row[0]: tuple(row[1:]) for row in conn.execute(query)}
    finally:
        engine.dispose()


def _payload(gpus: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, Any]:
    payload = batch(gpus=gpus, samples_per_gpu=0)
    payload["samples"] = samples
    return payload


def test_a_batch_moves_seen_sampled_and_implausible_and_leaves_the_rest(db_url: str) -> None:
    g0, g1 = gpu(0), gpu(1)
    first = _payload(
        [g0, g1],
        [
            sample(g0, T0 - timedelta(seconds=20)),
            sample(g0, T0 - timedelta(seconds=10), util_gpu_pct=150),  # nulled: implausible
            sample(g1, T0 - timedelta(seconds=10)),
        ],
    )
    store_payload(db_url, first, received_at=T0)
    stamp = (T0 - timedelta(seconds=10)).isoformat()
    assert _gpu_rows(db_url) == {
        0: (T0, T0 - timedelta(seconds=10), {"util_gpu_pct": stamp}, "ok"),
        1: (T0, T0 - timedelta(seconds=10), None, "ok"),
    }

    # GPU 1 is gone from the inventory; GPU 0 sends a sample older than its newest only.
    later = T0 + timedelta(seconds=20)
    second = _payload([g0], [sample(g0, T0 - timedelta(seconds=15), temp_c=9999)])
    store_payload(db_url, second, received_at=later)
    rows = _gpu_rows(db_url)
    assert rows[0] == (later, T0 - timedelta(seconds=10), {"util_gpu_pct": stamp}, "ok")
    assert rows[1][:3] == (T0, T0 - timedelta(seconds=10), None)
    assert rows[1][3] == "missing"

    # A newer clean sample clears what was implausible; GPU 1 is seen again without samples.
    third_at = T0 + timedelta(seconds=40)
    third = _payload([g0, g1], [sample(g0, T0 + timedelta(seconds=30))])
    store_payload(db_url, third, received_at=third_at)
    assert _gpu_rows(db_url) == {
        0: (third_at, T0 + timedelta(seconds=30), None, "ok"),
        1: (third_at, T0 - timedelta(seconds=10), None, "ok"),
    }


def test_a_batch_of_an_unchanged_inventory_writes_the_gpu_table_once(db_url: str) -> None:
    gpus = [gpu(i) for i in range(8)]
    store_payload(db_url, batch(gpus=gpus, samples_per_gpu=2, start=T0), received_at=T0)
    statements: list[tuple[str, int]] = []  # statement, parameter sets

    def _seen(
        conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        statements.append((" ".join(statement.split()), len(params) if many else 1))

    received = T0 + timedelta(minutes=1)
    payload = batch(gpus=gpus, samples_per_gpu=2, start=T0 + timedelta(seconds=30))
    event.listen(Engine, "before_cursor_execute", _seen)
    try:
        answer = store_payload(db_url, payload, received_at=received)
    finally:
        event.remove(Engine, "before_cursor_execute", _seen)
    assert answer["samples_stored"] == 16
    writes = [(s, n) for s, n in statements if s.upper().startswith("UPDATE GPU")]
    assert len(writes) == 1, writes
    # Postgres: one statement for the eight GPUs (the ORM's flush sent one per GPU); SQLite,
    # in process, one executemany of a Core statement.
    assert writes[0][1] == (1 if db_url.startswith("postgresql") else 8)
    newest = T0 + timedelta(seconds=35)
    assert {row[:2] for row in _gpu_rows(db_url).values()} == {(received, newest)}


def test_a_changed_inventory_value_is_still_written_by_the_session(db_url: str) -> None:
    g0 = gpu(0)
    store_payload(db_url, _payload([g0], [sample(g0, T0)]), received_at=T0)
    renamed = {**g0, "name": "NVIDIA H200", "processes": [{"pid": 4242, "used_memory_bytes": 1}]}
    later = T0 + timedelta(seconds=10)
    store_payload(db_url, _payload([renamed], [sample(renamed, later)]), received_at=later)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            name, processes, seen = conn.execute(
                select(Gpu.name, Gpu.processes, Gpu.last_seen_at)
            ).one()
    finally:
        engine.dispose()
    assert (name, seen) == ("NVIDIA H200", later)
    assert [p["pid"] for p in processes] == [4242]


def test_a_batch_received_before_the_newest_stored_moves_nothing_back(db_url: str) -> None:
    """Two batches of one node in flight at once: the one received first (its body slower to
    arrive) is stored last. It may not move a GPU's ``last_seen_at`` back, undo the newer
    batch's inventory values or ``missing`` mark; its samples are stored as any."""
    g0, g1 = gpu(0), gpu(1)
    t_first, t_newer = T0, T0 + timedelta(seconds=1)
    newer = _payload([{**g0, "name": "renamed"}], [sample(g0, T0 - timedelta(seconds=5))])
    store_payload(db_url, newer, received_at=t_newer)
    older = _payload([g0, g1], [sample(g0, T0 - timedelta(seconds=2))])
    answer = store_payload(db_url, older, received_at=t_first)
    assert answer["samples_stored"] == 1 and answer["gpus_missing"] == []
    rows = _gpu_rows(db_url)
    # g0: seen at the newer batch's time, its newest sample from the older batch.
    assert rows[0] == (t_newer, T0 - timedelta(seconds=2), None, "ok")
    # g1 was new to the server: added by the older batch, seen at its time.
    assert rows[1][:2] == (t_first, None)
    engine = make_engine(db_url)
    try:
        with engine.connect() as conn:
            names = dict(conn.execute(select(Gpu.index, Gpu.name)).all())
    finally:
        engine.dispose()
    assert names[0] == "renamed"

    # The newer batch marked nothing missing here; now one that does, then an older one.
    t_third = T0 + timedelta(seconds=3)
    store_payload(db_url, _payload([g0], []), received_at=t_third)
    assert _gpu_rows(db_url)[1][3] == "missing"
    store_payload(db_url, _payload([g0, g1], []), received_at=T0 + timedelta(seconds=2))
    rows = _gpu_rows(db_url)
    assert rows[1][3] == "missing" and rows[0][0] == t_third
