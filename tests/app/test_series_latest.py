"""The host entities' current state (``<raw>_latest``, :mod:`app.series.latest`): kept by the
ingest in the batch's transaction, equal to the newest raw row of every key whatever order
batches arrive in, read by the storage page's "now" tables, filled by the 0013 upgrade."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import delete, func, insert, select, tuple_
from sqlalchemy.engine import Engine

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Gpu, Node
from app.migrate import alembic_config, upgrade
from app.series import latest
from app.series.tables import DiskSample, NicPortSample, NvlinkSample
from app.storage import fleet_now
from app.storage import fleet_service as fs
from tests.app.helpers import post_batch
from tests.app.section_factories import disk, mount, nfs_mount, nic_port, nvlinks
from tests.dbs import database_at
from tests.factories import batch, create_token
from tests.live_server import LiveServer

NOW = datetime.now(UTC).replace(microsecond=0)


def _newest_raw(engine: Engine, spec: latest.LatestSpec) -> list[tuple[Any, ...]]:
    """The newest raw row of every key, as the reference the current state must equal."""
    raw = spec.raw
    keys = [raw.c[k] for k in spec.key_columns]
    newest = select(*keys, func.max(raw.c.sampled_at)).group_by(*keys)
    with engine.connect() as conn:
        rows = conn.execute(
            select(raw).where(tuple_(*keys, raw.c.sampled_at).in_(newest)).order_by(*keys)
        )
        return [tuple(r._mapping[c.name] for c in spec.table.columns) for r in rows]


def _current(engine: Engine, spec: latest.LatestSpec) -> list[tuple[Any, ...]]:
    table = spec.table
    with engine.connect() as conn:
        order = [table.c[k] for k in spec.key_columns]
        return [tuple(r) for r in conn.execute(select(table).order_by(*order))]


def _host_batch(
    at: datetime, hostname: str = "node-a", **sections: list[dict[str, Any]]
) -> dict[str, Any]:
    payload = batch(hostname, samples_per_gpu=1, start=at)
    payload.update(sections)
    return payload


def test_the_current_state_is_the_newest_reading_whatever_order_batches_arrive_in(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    t0, t1, t2 = NOW - timedelta(seconds=120), NOW - timedelta(seconds=60), NOW
    first = _host_batch(
        t1,
        disks=[disk(t1, "nvme0n1", busy_pct=10.0), disk(t1, "sda", busy_pct=1.0)],
        mounts=[mount(t1, "/data")],
        nfs_mounts=[nfs_mount(t1, retransmits=5)],
        nic_ports=[nic_port(t1, "mlx5_0"), nic_port(t1, "mlx5_1", state="DOWN")],
    )
    first["nvlinks"] = nvlinks(first["gpus"][0], t1, links=2)
    assert post_batch(server.url, token, first).status_code == 200
    # Newer readings for some entities, a late (older) one for others, and a reading of the
    # same time as a stored one with other values (the first stored wins, as for raw rows).
    second = _host_batch(
        t2,
        disks=[
            disk(t2, "nvme0n1", busy_pct=20.0),
            disk(t0, "sda", busy_pct=99.0),
            disk(t0, "sdb", busy_pct=3.0),
        ],
        mounts=[mount(t1, "/data", used_bytes=1)],
        nfs_mounts=[nfs_mount(t2, retransmits=6, avg_rtt_s=None)],
        nic_ports=[nic_port(t2, "mlx5_0", state="INIT", phys_state="LinkUp"), nic_port(t0)],
    )
    # Link 0 read again later (down), link 1 only earlier: each link keeps its newest.
    second["nvlinks"] = (
        nvlinks(second["gpus"][0], t2, links=1, state="down")
        + nvlinks(second["gpus"][0], t0, links=2)[1:]
    )
    assert post_batch(server.url, token, second).status_code == 200
    assert post_batch(server.url, token, first).status_code == 200  # a replay changes nothing
    engine = make_engine(db_url)
    try:
        for spec in latest.SPECS:
            assert _current(engine, spec) == _newest_raw(engine, spec), spec.table.name
        by_device = {r[1]: r for r in _current(engine, latest.DISK)}
        at = [c.name for c in latest.DISK.table.columns].index("busy_pct")
        assert {d: r[at] for d, r in by_device.items()} == {"nvme0n1": 20.0, "sda": 1.0, "sdb": 3.0}
        ports = {r[1]: r for r in _current(engine, latest.NIC)}
        state = [c.name for c in latest.NIC.table.columns].index("state")
        assert {d: r[state] for d, r in ports.items()} == {"mlx5_0": "INIT", "mlx5_1": "DOWN"}
        links = {r[1]: r for r in _current(engine, latest.NVLINK)}
        state = [c.name for c in latest.NVLINK.table.columns].index("state")
        assert {k: r[state] for k, r in links.items()} == {0: "down", 1: "up"}
        (nfs,) = _current(engine, latest.NFS)
        names = [c.name for c in latest.NFS.table.columns]
        assert nfs[names.index("retransmits")] == 6
        assert nfs[names.index("avg_rtt_s")] is None  # a null in the newest reading stays null
        assert nfs[names.index("read_bytes")] == 18446744073709551000  # exact above 2**63
        (data,) = _current(engine, latest.MOUNT)
        assert data[[c.name for c in latest.MOUNT.table.columns].index("used_bytes")] != 1
    finally:
        engine.dispose()


def test_the_now_tables_read_the_current_state_within_the_window(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "node-a")
    other = create_token(db_url, "node-b")
    old = NOW - timedelta(seconds=900)  # beyond the 10-minute window: gone
    post_batch(
        server.url,
        token,
        _host_batch(
            NOW,
            disks=[
                disk(NOW, "nvme0n1", read_bytes_per_s=9e8),
                disk(NOW - timedelta(seconds=400), "sdy"),  # quiet for 400 s: still there
                disk(old, "sdz"),
            ],
            nic_ports=[
                nic_port(NOW, "mlx5_0", state="DOWN"),
                nic_port(NOW, "mlx5_1"),
                nic_port(old, "mlx5_9", state="DOWN"),
            ],
        ),
    )
    payload = _host_batch(NOW, "node-b", disks=[disk(NOW, "nvme0n1", read_bytes_per_s=1e8)])
    post_batch(server.url, other, payload)
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    try:
        with session_scope(factory) as session:
            everyone = fs.select_nodes(session, labels={}, search="")
            busiest = fleet_now.busiest_devices(session, everyone, NOW)
            assert [(h, d.device) for h, d in busiest] == [
                ("node-a", "nvme0n1"),
                ("node-a", "sdy"),
                ("node-b", "nvme0n1"),
            ]
            ports = fleet_now.port_problems(session, everyone, NOW, [])
            assert [(p.hostname, p.port, p.state) for p in ports] == [
                ("node-a", "mlx5_0/1", "DOWN")
            ]
            # The same session asked again with an active port whose errors rose: read anew.
            rising = [fs.CounterTotal("node-a", "mlx5_1/1", 3, 0)]
            ports = fleet_now.port_problems(session, everyone, NOW, rising)
            assert [(p.port, p.state, p.phys_state, p.errors) for p in ports] == [
                ("mlx5_0/1", "DOWN", "LinkUp", 0),
                ("mlx5_1/1", "ACTIVE", "LinkUp", 3),
            ]
            only_b = fs.select_nodes(session, labels={}, search="node-b")
            assert [h for h, _ in fleet_now.busiest_devices(session, only_b, NOW)] == ["node-b"]
            assert fleet_now.port_problems(session, only_b, NOW, []) == []
    finally:
        engine.dispose()


def test_deleting_a_node_deletes_its_current_state(server: LiveServer, db_url: str) -> None:
    token = create_token(db_url, "node-a")
    post_batch(server.url, token, _host_batch(NOW, disks=[disk(NOW)], nic_ports=[nic_port(NOW)]))
    engine = make_engine(db_url)
    factory = make_session_factory(engine)
    try:
        with session_scope(factory) as session:
            session.execute(delete(Node))
        for spec in latest.SPECS:
            assert _current(engine, spec) == []
    finally:
        engine.dispose()


@pytest.fixture(params=["postgres", "sqlite"])
def at_0012(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """An empty database of either backend at revision 0012."""
    with database_at(request.param, "0012", tmp_path) as url:
        yield url


def test_the_upgrade_fills_the_current_state_from_the_raw_rows(at_0012: str) -> None:
    engine = make_engine(at_0012)
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(Node.__table__).values(id=1, hostname="old-node", labels={}, created_at=NOW)
            )
            conn.execute(
                insert(DiskSample.__table__),
                [
                    {
                        "node_id": 1,
                        "device": "nvme0n1",
                        "sampled_at": NOW - timedelta(seconds=s),
                        "busy_pct": b,
                    }
                    for s, b in ((60, 1.0), (0, 2.0), (120, 3.0))
                ],
            )
            conn.execute(
                insert(NicPortSample.__table__).values(
                    node_id=1, device="mlx5_0", port=1, sampled_at=NOW, state="ACTIVE"
                )
            )
            conn.execute(
                insert(Gpu.__table__).values(
                    id=7,
                    node_id=1,
                    uuid="GPU-x",
                    index=0,
                    state="ok",
                    first_seen_at=NOW,
                    last_seen_at=NOW,
                )
            )
            conn.execute(
                insert(NvlinkSample.__table__),
                [
                    {
                        "gpu_id": 7,
                        "link": link,
                        "sampled_at": NOW - timedelta(seconds=s),
                        "state": st,
                    }
                    for link in (0, 1)
                    for s, st in ((0, "up" if link else "down"), (60, "up"))
                ],
            )
        upgrade(at_0012)
        assert _current(engine, latest.DISK) == _newest_raw(engine, latest.DISK)
        (row,) = _current(engine, latest.DISK)
        assert row[[c.name for c in latest.DISK.table.columns].index("busy_pct")] == 2.0
        assert len(_current(engine, latest.NIC)) == 1
        assert _current(engine, latest.NVLINK) == _newest_raw(engine, latest.NVLINK)
        states = [c.name for c in latest.NVLINK.table.columns].index("state")
        assert [r[states] for r in _current(engine, latest.NVLINK)] == ["down", "up"]
        assert _current(engine, latest.MOUNT) == _current(engine, latest.NFS) == []
        command.downgrade(alembic_config(at_0012), "0012")
        upgrade(at_0012)
        assert len(_current(engine, latest.DISK)) == 1
    finally:
        engine.dispose()


def test_concurrent_batches_of_one_node_bringing_a_new_gpu_all_store(
    server: LiveServer, db_url: str
) -> None:
    """Batches of one node arriving together, each with a GPU the server has not seen and the
    same 40 disks at other times, all answer 200 (before the node row was locked first, one in
    four deadlocked on Postgres: one batch held the node row and waited for a current-state
    row, another held that row and waited for the node), and the current state is still the
    newest raw row of every key."""
    token = create_token(db_url, "node-a")
    start = NOW - timedelta(seconds=300)
    first = _host_batch(start, disks=[disk(start, f"nvme{d}n1") for d in range(40)])
    first["gpus"] = first["gpus"][:1]
    first["samples"] = [s for s in first["samples"] if s["gpu_uuid"] == first["gpus"][0]["uuid"]]
    assert post_batch(server.url, token, first).status_code == 200
    payloads = []
    for i in range(24):
        at = NOW - timedelta(seconds=(i * 37) % 100)
        disks = [disk(at - timedelta(seconds=(i * d) % 50), f"nvme{d}n1") for d in range(40)]
        payloads.append(_host_batch(at, disks=disks))
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda p: post_batch(server.url, token, p).status_code, payloads))
    assert statuses == [200] * 24
    engine = make_engine(db_url)
    try:
        assert _current(engine, latest.DISK) == _newest_raw(engine, latest.DISK)
    finally:
        engine.dispose()
