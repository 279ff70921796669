"""Simulated agents push to a real server that is stopped for a while and started again: every
sample they generated ends up stored exactly once (counted in the database)."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import func, select

from agents.fleetspec import FleetNode, ScheduledFault
from agents.simfleet import SimFleet
from app.db import make_engine
from app.events.models import NodeEvent
from app.series.tables import gpu_sample
from tests.conftest import make_settings
from tests.factories import create_token
from tests.live_server import LiveServer


def _stored(url: str) -> tuple[int, int, int]:
    """(sample rows, distinct (gpu, sampled_at) keys, event rows)."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(gpu_sample)) or 0
            keys = select(gpu_sample.c.gpu_id, gpu_sample.c.sampled_at).distinct().subquery()
            distinct = conn.scalar(select(func.count()).select_from(keys)) or 0
            events = conn.scalar(select(func.count()).select_from(NodeEvent)) or 0
        return rows, distinct, events
    finally:
        engine.dispose()


def test_no_sample_is_lost_or_stored_twice_when_the_server_restarts(
    db_url: str, tmp_path: Path
) -> None:
    server = LiveServer(make_settings(db_url, tmp_path))
    server.start()
    nodes = [
        FleetNode("hgx-001", create_token(db_url, "hgx-001"), 8, {"cluster": "e2e"}),
        FleetNode("hgx-002", create_token(db_url, "hgx-002"), 8, {"cluster": "e2e"}),
        FleetNode("pcie-001", create_token(db_url, "pcie-001"), 4, {"cluster": "e2e"}),
    ]
    fleet = SimFleet(
        nodes,
        server_url=server.url,
        spool_root=tmp_path / "spool",
        interval_s=0.1,
        batch_interval_s=0.3,
        faults=[
            ScheduledFault("hgx-002", "xid", 0.5, gpu_index=1, xid=48),
            ScheduledFault("pcie-001", "gpu_lost", 1.0, gpu_index=2),
        ],
        agent_options={"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0},
    )
    fleet.start()
    try:
        time.sleep(2.0)
        server.stop()
        time.sleep(3.0)  # agents keep sampling into their spools meanwhile
        down_failures = fleet.totals()["push_failures"]
        server.start()
        time.sleep(3.0)
    finally:
        fleet.stop(timeout_s=20)
    try:
        for agent in fleet.agents.values():
            agent.push_pending(ignore_backoff=True)  # anything the last push left behind
            assert len(agent.spool) == 0
        totals = fleet.totals()
        rows, distinct, events = _stored(db_url)
    finally:
        server.stop()

    assert down_failures > 0, "the agents never saw the server down"
    assert totals["batches_dropped"] == 0
    assert totals["samples_generated"] > 500
    assert rows == distinct == totals["samples_generated"] == totals["samples_acked"]
    assert events == totals["events_generated"] >= 2
