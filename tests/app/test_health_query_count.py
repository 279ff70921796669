"""The fleet health (``/api/v1/health``'s service) and the overview's context run a fixed number
of SQL statements: the same for 2 nodes as for 12, all fresh or all stale (a stale node once got
every check one node at a time), with telemetry that gives every kind of reason — both before
the health is stored (evaluated on read) and after (read from ``node_health_state``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event

from app.config import load_settings
from app.db import make_engine, make_session_factory, session_scope
from app.fleet.pages import LABEL_COLUMNS, SKEW_SHOWN_ABOVE_S, SORTS, FleetFilters
from app.health import current as health_current
from app.health import state as health_state
from app.health.rules import rules_from_settings
from app.overview.context import overview_context
from app.overview.filters import OverviewFilters
from tests.app.section_factories import disk, nfs_mount, nic_port, nvlinks
from tests.dbs import wipe
from tests.factories import batch, gpu, iso, sample, store_payload

#: Every reason the fleet below has on each node, fresh (stale nodes list them after "stale").
CODES = [
    "ib_port_down",
    "ib_port_flapping",
    "storage_latency_high",
    "gpu_unresponsive",
    "xid_79",
    "nvlink_down",
    "thermal_throttle",
    "gpu_missing",
]


def seed(url: str, nodes: int, *, at: datetime) -> None:
    """``nodes`` nodes whose telemetry ends at ``at``: an IB port ACTIVE then DOWN, another
    ACTIVE that went down 3 times between, a slow disk and NFS mount, an Xid 79 on a GPU that
    sends no samples since (unresponsive), a down NVLink, thermal throttling and a GPU
    missing."""
    for n in range(nodes):
        host = f"node-{n:02d}"
        gpus = [gpu(0, hostname=host), gpu(1, hostname=host)]
        gone = gpu(2, hostname=host)  # not in the second inventory: missing
        before = at - timedelta(seconds=600)  # before the throttle window
        first = batch(host, gpus=[*gpus, gone], samples_per_gpu=1, start=before)
        first["nic_ports"] = [nic_port(before, "mlx5_0"), nic_port(before, "mlx5_1")]
        store_payload(url, first, received_at=before)
        second = batch(
            host,
            gpus=gpus,
            samples_per_gpu=0,
            events=[
                {"kind": "xid", "xid": 79, "occurred_at": iso(at), "gpu_uuid": gpus[0]["uuid"]}
            ],
        )
        second["samples"] = [
            sample(gpus[1], at - timedelta(seconds=s), clocks_event_reasons=0x40) for s in (4, 2, 0)
        ]
        second["nic_ports"] = [
            nic_port(at, "mlx5_0", state="DOWN"),
            nic_port(at, "mlx5_1", link_downed_count=3),
        ]
        second["nvlinks"] = nvlinks(gpus[1], at, links=2) + nvlinks(
            gpus[0], at, links=1, state="down"
        )
        second["disks"] = [disk(at, avg_wait_s=0.2)]
        second["nfs_mounts"] = [nfs_mount(at, avg_rtt_s=0.5)]
        store_payload(url, second, received_at=at)


#: Not reads: SQLite's ``BEGIN IMMEDIATE`` (app.db) and the like.
TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "PRAGMA")


@contextmanager
def counting(url: str) -> Iterator[tuple[Any, list[str]]]:
    """A session on ``url`` and the list of SQL statements it runs."""
    engine = make_engine(url)
    statements: list[str] = []

    def count(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
        if not sql.lstrip().upper().startswith(TRANSACTION_CONTROL):
            statements.append(sql)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_scope(make_session_factory(engine)) as session:
            yield session, statements
    finally:
        engine.dispose()


def fleet_health(url: str) -> tuple[int, dict[str, tuple[str, list[str]]]]:
    """Statements run by one ``list_health``, and each node's (state, reason codes)."""
    settings = load_settings(database_url=url)
    with counting(url) as (session, statements):
        health = health_current.list_health(session, rules=rules_from_settings(settings))
        return len(statements), {
            n.hostname: (n.state.value, [r.code for r in n.reasons]) for n in health.nodes
        }


def overview(url: str, view: str) -> tuple[int, dict[str, Any]]:
    """Statements run by one overview context (``view`` tiles or table), and the context."""
    request = SimpleNamespace(
        app=SimpleNamespace(state=SimpleNamespace(settings=load_settings(database_url=url)))
    )
    filters = OverviewFilters.parse(FleetFilters.parse(None, [], None), view=view)
    with counting(url) as (session, statements):
        context = overview_context(
            request,  # type: ignore[arg-type]
            session,
            filters,
            label_columns=LABEL_COLUMNS,
            sorts=SORTS,
            skew_shown_above_s=SKEW_SHOWN_ABOVE_S,
        )
        return len(statements), context


def refresh(url: str) -> int:
    """Store every node's health (what the server's refresher does); nodes evaluated."""
    settings = load_settings(database_url=url)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            report = health_state.refresh(
                session, rules=rules_from_settings(settings), now=datetime.now(UTC)
            )
    finally:
        engine.dispose()
    health_current.DOCS.clear()  # this process has read none of them yet
    return report.evaluated


def measure(url: str, nodes: int, *, stale: bool) -> dict[str, Any]:
    """Seed ``nodes`` nodes (received 1 h ago when ``stale``) and count each read, before and
    after their health is stored."""
    now = datetime.now(UTC)
    seed(url, nodes, at=now - timedelta(hours=1) if stale else now - timedelta(seconds=1))
    unstored_count, unstored = fleet_health(url)
    assert refresh(url) == nodes
    health_count, health = fleet_health(url)
    cached_count, _ = fleet_health(url)
    tiles_count, tiles = overview(url, "tiles")
    table_count, table = overview(url, "table")
    return {
        "unstored": unstored_count,
        "health": health_count,
        "cached": cached_count,
        "tiles": tiles_count,
        "table": table_count,
        "states": health,
        "unstored_states": unstored,
        "counts": tiles["health_counts"].model_dump(),
        "table_nodes": len(table["views"]),
    }


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale"])
def test_statements_do_not_grow_with_the_fleet(db_url: str, stale: bool) -> None:
    small = measure(db_url, 2, stale=stale)
    wipe(db_url)
    large = measure(db_url, 12, stale=stale)

    state, codes = ("unknown", ["stale", *CODES]) if stale else ("unhealthy", CODES)
    assert large["states"] == {f"node-{n:02d}": (state, codes) for n in range(12)}
    assert small["states"] == {f"node-{n:02d}": (state, codes) for n in range(2)}
    assert large["counts"][state] == 12 and large["table_nodes"] == 12
    assert (large["unstored_states"], small["unstored_states"]) == (
        large["states"],
        small["states"],
    )
    # Not stored yet: the nodes with their stored state, then nodes, GPUs, latest samples, the
    # nine kinds of evidence, the Xid history of the nodes with Xids (escalation, one statement
    # for all of them) and the held since of the NVLink-down reasons (app.health.held).
    assert (small["unstored"], large["unstored"]) == (15, 15)
    # Stored: the nodes with their stored state, then the documents (none once this process has
    # parsed them).
    assert (small["health"], large["health"]) == (2, 2)
    assert (small["cached"], large["cached"]) == (1, 1)
    # The newest events and topology changes, the repeat offenders (nodes, GPUs), the nodes
    # out of service, the maintenance windows in force, the nodes, the fleet's GPU models.
    assert (small["tiles"], large["tiles"]) == (8, 8)
    assert (small["table"], large["table"]) == (8, 8)
