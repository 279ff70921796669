"""The overview's queries on both backends: latest values fleet-wide, recent events with
topology changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.db import make_engine, make_session_factory, session_scope
from app.events.models import NodeEvent
from app.fleet.models import Gpu, Node
from app.overview import service
from app.series.tables import gpu_sample
from app.topology.models import TopologyChange, TopologySnapshot

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_latest_values_reads_each_gpus_newest_sample_in_one_query(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            node = Node(hostname="n1", labels={}, created_at=T0, last_seen_at=at(10))
            session.add(node)
            session.flush()
            gpus = [
                Gpu(node_id=node.id, uuid=f"GPU-{i}", index=i, first_seen_at=T0, last_seen_at=T0)
                for i in range(3)
            ]
            session.add_all(gpus)
            session.flush()
            rows = [(gpus[0], 0, 10.0), (gpus[0], 5, 20.0), (gpus[1], 5, 30.0)]
            session.execute(
                gpu_sample.insert(),
                [
                    {"gpu_id": g.id, "sampled_at": at(s), "received_at": at(s), "util_gpu_pct": u}
                    for g, s, u in rows
                ],
            )
            gpus[0].last_sample_at, gpus[1].last_sample_at = at(5), at(5)
            session.flush()

            latest = service.latest_values(session)
            views = service.list_views(session, stale_after_s=120, now=at(20), search="N1")

        assert {gid: v["util_gpu_pct"] for gid, v in latest.items()} == {
            gpus[0].id: 20.0,
            gpus[1].id: 30.0,
        }
        assert set(latest[gpus[0].id]) == set(service.LATEST_METRICS)
        assert [(v.node.hostname, v.freshness) for v in views] == [("n1", "fresh")]
        assert [g.latest.get("util_gpu_pct") for g in views[0].gpus] == [20.0, 30.0, None]
    finally:
        engine.dispose()


def test_recent_events_merge_node_events_and_topology_changes_newest_first(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            a = Node(hostname="a", labels={}, created_at=T0)
            b = Node(hostname="b", labels={}, created_at=T0)
            session.add_all([a, b])
            session.flush()
            gpu = Gpu(node_id=a.id, uuid="GPU-a0", index=0, first_seen_at=T0, last_seen_at=T0)
            session.add(gpu)
            session.flush()
            for node, second in ((a, 0), (b, 0), (a, 30)):  # first reports, then a changes
                snap = TopologySnapshot(
                    node_id=node.id,
                    collected_at=at(second),
                    received_at=at(second),
                    digest=f"{node.hostname}{second}",
                    partial=False,
                    source="nvml",
                    document={},
                )
                session.add(snap)
                session.flush()
                session.add(
                    TopologyChange(
                        node_id=node.id,
                        snapshot_id=snap.id,
                        collected_at=at(second),
                        received_at=at(second),
                    )
                )
            for second, kind, xid, gpu_id in (
                (10, "xid", 79, gpu.id),
                (40, "thermal_throttle", None, None),
            ):
                session.add(
                    NodeEvent(
                        node_id=a.id if gpu_id else b.id,
                        gpu_id=gpu_id,
                        occurred_at=at(second),
                        received_at=at(second),
                        kind=kind,
                        xid=xid,
                    )
                )
            session.flush()

            events = service.recent_events(session, limit=10)
            two = service.recent_events(session, limit=2)

        assert [(e.at, e.hostname, e.kind, e.xid, e.gpu_index) for e in events] == [
            (at(40), "b", "thermal_throttle", None, None),
            (at(30), "a", "topology_change", None, None),
            (at(10), "a", "xid", 79, 0),
        ]
        assert [e.kind for e in two] == ["thermal_throttle", "topology_change"]
    finally:
        engine.dispose()
