"""Drift's fleet-wide loading (:mod:`app.topology.drift_source`) on both backends: a constant
number of SQL statements however many nodes there are, and which readings count (the node's
newest NVLink reading, NIC ports within the window, fresh PCIe samples only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.fleet import service as fleet_service
from app.fleet.models import Gpu, Node
from app.ingest import service as ingest_service
from app.ingest.schemas import IngestBatchIn
from app.topology.drift import find_drift
from app.topology.drift_source import (
    gpu_facts,
    load_signatures,
    nic_port_states,
    nvlinks_up,
)
from app.topology.signature import GpuFacts
from tests.app.section_factories import nic_port, nvlinks
from tests.app.topology_drift_data import A100, node_payload, set_link
from tests.dbs import wipe
from tests.factories import iso

POD = {"ib_pod": "pod-01"}
SECTION_KEYS = ("topology", "nvlinks", "disks", "mounts", "nfs_mounts", "nic_ports")


@contextmanager
def session_on(url: str) -> Iterator[tuple[Session, list[str]]]:
    """A session on ``url`` and the list of SQL statements it runs (appended as they run),
    without SQLite's ``BEGIN IMMEDIATE`` (see :mod:`app.db`)."""
    engine = make_engine(url)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):
            statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        with session_scope(make_session_factory(engine)) as session:
            yield session, statements
    finally:
        engine.dispose()


def store(url: str, *payloads: dict[str, Any]) -> None:
    """Store ``payloads`` as ingest does (received now)."""
    with session_on(url) as (session, _):
        for payload in payloads:
            batch = IngestBatchIn.model_validate(payload)
            node = fleet_service.get_or_create_node(session, hostname=batch.node.hostname)
            ingest_service.store_batch(
                session,
                node=node,
                batch=batch,
                received_at=utcnow(),
                future_tolerance_s=300,
                retention_days=30,
            )


def narrow(topology: dict[str, Any]) -> None:
    set_link(topology, "GPU3", "GPU5", "NV6")


def gpu_ids(session: Session, hostname: str) -> list[int]:
    return list(
        session.scalars(
            select(Gpu.id).join(Node).where(Node.hostname == hostname).order_by(Gpu.index)
        )
    )


def node_id(session: Session, hostname: str) -> int:
    return session.scalars(select(Node.id).where(Node.hostname == hostname)).one()


def test_statement_count_does_not_grow_with_the_node_count(db_url: str) -> None:
    store(db_url, *(node_payload(f"dgx-{i}", labels=POD) for i in (1, 2)))
    with session_on(db_url) as (session, statements):
        assert find_drift(session, now=utcnow()) == []
    two = len(statements)

    store(db_url, *(node_payload(f"dgx-{i}", labels=POD) for i in (3, 4, 5)))
    store(db_url, node_payload("dgx-6", labels=POD, alter=narrow, down_nics=("mlx5_7",)))
    with session_on(db_url) as (session, statements):
        found = find_drift(session, now=utcnow())

    assert (two, len(statements)) == (6, 6), statements
    assert [(f.hostname, f.kind, f.detail) for f in found] == [
        ("dgx-6", "nvlink_fewer", "GPU3↔GPU5: NV12 expected (5 of 6 nodes), NV6 here"),
        ("dgx-6", "nic_down", "mlx5_7: port state ACTIVE expected (5 of 6 nodes), DOWN here"),
    ]


def _dated(entries: list[dict[str, Any]], at: datetime, **only: Any) -> list[dict[str, Any]]:
    """``entries`` (payload section items) matching ``only`` re-dated to ``at``."""
    for entry in entries:
        if all(entry.get(k) == v for k, v in only.items()):
            entry["sampled_at"] = iso(at)
    return entries


def _sections_batch(payload: dict[str, Any], **sections: list[dict[str, Any]]) -> dict[str, Any]:
    """A later batch of ``payload``'s node carrying only ``sections`` (no samples, events or
    topology), as an agent sends a changed NVLink or port between full rounds."""
    kept = {k: v for k, v in payload.items() if k not in SECTION_KEYS}
    return {**kept, "batch_id": str(uuid.uuid4()), "samples": [], "events": [], **sections}


def test_nvlinks_are_counted_from_each_links_newest_reading(db_url: str) -> None:
    now = utcnow()
    a, b, c, d = (node_payload(h, nvlinks_up=12) for h in "abcd")
    # Node b's only readings are older than the 900 s freshness window.
    _dated(b["nvlinks"], now - timedelta(seconds=901))
    # Node d's GPU2 stopped reporting NVLinks 11 minutes before its node's newest reading.
    _dated(d["nvlinks"], now - timedelta(minutes=11), gpu_uuid=d["gpus"][2]["uuid"])
    # Node a's agent sends GPU1's link 0 alone (it went down) between two full rounds, as
    # agents/nvlink_thinner.py does: GPU1 has 11 links up, the other GPUs still 12.
    gone = nvlinks(a["gpus"][1], now - timedelta(seconds=5), links=1, state="down")
    store(db_url, a, b, c, d, _sections_batch(a, nvlinks=gone))
    with session_on(db_url) as (session, _):
        found = nvlinks_up(session, oldest=now - timedelta(seconds=900))
        ids = {h: node_id(session, h) for h in "abcd"}
        signatures = load_signatures(session, now=utcnow())

    assert found[ids["a"]] == {i: 11 if i == 1 else 12 for i in range(8)}
    assert ids["b"] not in found
    assert found[ids["c"]] == {i: 12 for i in range(8)}
    assert found[ids["d"]] == {i: 12 for i in range(8) if i != 2}
    assert signatures["a"].nvlinks_up["GPU1"] == 11
    assert signatures["b"].nvlinks_up == {}


def test_nic_ports_gone_from_the_window_or_too_old_are_left_out(db_url: str) -> None:
    now = utcnow()
    a, b = node_payload("a", down_nics=("mlx5_3",)), node_payload("b")
    newest = datetime.fromisoformat(a["nic_ports"][0]["sampled_at"])
    # Ports last read 700 s (gone) and 300 s (still there) before the node's newest reading.
    a["nic_ports"] += [
        nic_port(newest - timedelta(seconds=age_s), device, state=state)
        for device, age_s, state in (("mlx5_20", 700, "DOWN"), ("mlx5_21", 300, "INIT"))
    ]
    # Node b's ports were last read before the 900 s window.
    _dated(b["nic_ports"], now - timedelta(seconds=901))
    # An older, different reading of a port whose newest reading is ACTIVE does not count.
    old = newest - timedelta(seconds=10)
    late = [
        nic_port(old, "mlx5_0", state="DOWN"),
        nic_port(old, "mlx5_0", port=2, state="DOWN"),
    ]
    store(db_url, a, b, _sections_batch(a, nic_ports=late))
    with session_on(db_url) as (session, _):
        a_id, b_id = node_id(session, "a"), node_id(session, "b")
        found = nic_port_states(session, oldest=now - timedelta(seconds=900))
        signatures = load_signatures(session, now=utcnow())

    expected: dict[str, list[str | None]] = {f"mlx5_{i}": ["ACTIVE"] for i in range(10)}
    expected |= {"mlx5_0": ["ACTIVE", "DOWN"], "mlx5_3": ["DOWN"], "mlx5_21": ["INIT"]}
    assert {d: sorted(v, key=str) for d, v in found[a_id].items()} == expected
    assert b_id not in found
    assert signatures["a"].nic_states["mlx5_0"] == "DOWN"
    assert signatures["a"].nic_states["mlx5_21"] == "INIT"
    assert "mlx5_20" not in signatures["a"].nic_states
    assert signatures["b"].nic_states == {}


def test_pcie_comes_from_each_gpus_newest_sample_while_it_is_fresh(db_url: str) -> None:
    store(db_url, node_payload("a", pcie_gen={2: 3}))
    now = utcnow()
    with session_on(db_url) as (session, _):
        a = node_id(session, "a")
        fresh = gpu_facts(session, oldest=now - timedelta(seconds=900))
        stale = gpu_facts(session, oldest=now + timedelta(seconds=1))

    assert fresh[a] == [GpuFacts(i, A100, "ok", 3 if i == 2 else 4, 4, 16, 16) for i in range(8)]
    assert stale[a] == [GpuFacts(i, A100, "ok") for i in range(8)]


def test_a_topology_received_after_now_is_not_used(db_url: str) -> None:
    store(db_url, node_payload("a"))
    earlier: datetime = utcnow() - timedelta(hours=1)
    with session_on(db_url) as (session, _):
        assert load_signatures(session, now=earlier) == {}
        assert list(load_signatures(session, now=utcnow())) == ["a"]


def test_sqlite_reads_the_sample_tables_through_their_indexes(sqlite_url: str) -> None:
    """Every access to ``gpu_sample`` is an index search (a full scan would read every row kept
    for the retention period on each call); NVLinks and NIC ports come from their current
    readings."""
    store(sqlite_url, node_payload("a"), node_payload("b"))
    engine = make_engine(sqlite_url)
    captured: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        with session_scope(make_session_factory(engine)) as session:
            assert len(load_signatures(session, now=utcnow())) == 2
            loads = [(s, p) for s, p in captured if s.startswith(("SELECT", "WITH"))]
            plans = [
                row[3]
                for statement, parameters in loads
                for row in session.connection().exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + statement, parameters
                )
            ]
    finally:
        engine.dispose()
        wipe(sqlite_url)

    assert len(loads) == 6
    samples = [p for p in plans if "_sample" in p]
    # Raw readings are searched through an index; the current readings (one row per link or
    # port, not per reading: app.series.latest) are read whole.
    raw = [p for p in samples if "_latest" not in p]
    assert {p.split()[1] for p in raw} == {"gpu_sample"}
    assert [p for p in raw if not p.startswith("SEARCH")] == []
    assert {"nvlink_sample_latest", "nic_port_sample_latest"} <= {p.split()[1] for p in samples}
