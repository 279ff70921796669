"""Host samples (disks, mounts, NFS mounts, IB ports) packed into day blocks: read back exactly
(raw reads, the rollups rebuilt from them, the storage page's charts), late and duplicate
readings into a packed day, how long each table stays raw, and retention of day blocks."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope
from app.fleet.models import Node
from app.retention.jobs import prune
from app.series import jobs as series_jobs
from app.series import latest, minute_blocks
from app.series.blocks import DISK, HOST_SPECS, MOUNT, NFS, NIC, BlockSpec
from app.series.compact import compact
from app.series.read import rows_between
from app.series.rollups import fold
from app.series.rollups import specs as rollup_specs
from app.series.rollups.jobs import rebuild
from app.series.tables import DiskSample, MountSample, NfsSample, NicPortSample
from app.series.writes import StagedRows, insert_staged
from app.storage import fleet_service
from tests.app.series_helpers import store_factory
from tests.factories import add_rules

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
#: 30 h of readings: the first day is packed (horizon NOW − 2 h = 04:00 of day 2, floored to
#: the day), the last 6 h stay raw.
NOW = T0 + timedelta(hours=30)
STEP_S = 60
READINGS = 30 * 3600 // STEP_S
BIG = 2**64 - 5  # an NFS counter near the 64-bit limit: must come back exact (numeric)


@pytest.fixture
def factory(postgres_url: str) -> Iterator[sessionmaker[Session]]:
    with store_factory(postgres_url) as made:
        yield made


def seed(session: Session) -> Node:
    """One node with two disks, a mount, an NFS mount and two IB ports, a reading a minute."""
    node = Node(hostname="host-a", labels={}, created_at=T0, last_seen_at=NOW)
    session.add(node)
    session.flush()
    disks, mounts, nfs, ports = [], [], [], []
    for k in range(READINGS):
        at = T0 + timedelta(seconds=k * STEP_S)
        for d, device in enumerate(("nvme0n1", "sda")):
            disks.append(
                {
                    "node_id": node.id,
                    "device": device,
                    "sampled_at": at,
                    "read_bytes_per_s": 1024.5 * (k % 97) + d,
                    "write_bytes_per_s": None if k % 13 == 0 else 3.25 * k,
                    "read_iops": float(k % 7),
                    "write_iops": 0.0,
                    "busy_pct": 12.5,
                    "avg_wait_s": 0.000125 * (k % 5),
                }
            )
        mounts.append(
            {
                "node_id": node.id,
                "mountpoint": "/data",
                "sampled_at": at,
                "device": "/dev/nvme0n1p1" if k < 600 else "/dev/nvme1n1p1",  # remounted
                "fstype": "xfs",
                "used_bytes": 2**40 + k * 4096,
                "total_bytes": 2**42,
            }
        )
        nfs.append(
            {
                "node_id": node.id,
                "mountpoint": "/home",
                "sampled_at": at,
                "export": "filer:/export/home",
                "version": "4.2",
                "read_bytes": BIG - READINGS + k,
                "write_bytes": k * 10,
                "ops": k,
                "retransmits": k // 100,
                "read_bytes_per_s": 1.0 / 3.0,
                "write_bytes_per_s": 0.0,
                "ops_per_s": 2.5,
                "retransmits_per_s": None,
                "avg_rtt_s": 0.0015,
            }
        )
        for port in (1, 2):
            ports.append(
                {
                    "node_id": node.id,
                    "device": "mlx5_0",
                    "port": port,
                    "sampled_at": at,
                    "link_layer": "InfiniBand",
                    "state": "DOWN" if (port, k // 60) == (2, 3) else "ACTIVE",
                    "phys_state": "LinkUp",
                    "rate_gbps": 400.0,
                    "tx_bytes_per_s": 1e9 + k,
                    "rx_bytes_per_s": 2e9 - k,
                    "symbol_error_count": k // 500,
                    "link_downed_count": 1 if k >= 240 else 0,
                    "link_error_recovery_count": 0,
                    "port_rcv_errors_count": None,
                    "port_xmit_discards_count": 2**62,
                }
            )
    for model, rows in (
        (DiskSample, disks),
        (MountSample, mounts),
        (NfsSample, nfs),
        (NicPortSample, ports),
    ):
        session.execute(model.__table__.insert(), rows)  # type: ignore[attr-defined]
    return node


def every_row(session: Session, spec: BlockSpec) -> list[tuple[Any, ...]]:
    rows = rows_between(
        spec.name, columns=list(spec.values), start=None, end=None, dialect="postgresql"
    )
    return sorted(tuple(r) for r in session.execute(select(rows)))


def count(session: Session, table: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(table)) or 0)


def minute_rollups(session: Session) -> dict[str, list[tuple[Any, ...]]]:
    """Every host rollup table rebuilt over the 30 h from whatever form the samples are in."""
    out = {}
    for spec in (rollup_specs.DISK, rollup_specs.NFS, rollup_specs.NIC):
        session.execute(delete(spec.tables[60]))
        session.execute(delete(spec.tables[3600]))
        fold.fold_range(session, spec, lo_s=int(T0.timestamp()), hi_s=int(NOW.timestamp()))
        for resolution, table in spec.tables.items():
            out[f"{spec.name}:{resolution}"] = sorted(
                tuple(r) for r in session.execute(select(table))
            )
    return out


def same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> None:
    """Equal rows; sums of non-integral doubles may differ in the last bits (another order)."""
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x == y or (isinstance(y, float) and x == pytest.approx(y, rel=1e-12))


CHARTED = ("disk_avg_wait_s", "nfs_retransmits", "ib_errors", "ib_rx_bytes_per_s")


def charts(factory: sessionmaker[Session], q: fleet_service.Query) -> list[Any]:
    """The storage page's charts of :data:`CHARTED` for ``q``: per chart, the top series
    (name, times, values) and the rest's values."""
    with session_scope(factory) as s:
        out = []
        for name in CHARTED:
            metric = fleet_service.METRICS[name]
            chart = (
                fleet_service.counter_chart(s, metric, q)[0]
                if metric.counter
                else fleet_service.gauge_chart(s, metric, q)
            )
            rest = chart.rest.values if chart.rest else None
            out.append(([(x.name, x.times, x.values) for x in chart.top], rest))
        return out


def test_host_samples_pack_into_day_blocks_and_read_back_exactly(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        seed(s)
        before = {spec.name: every_row(s, spec) for spec in HOST_SPECS}
        rollups = minute_rollups(s)

    result = compact(factory, compact_after_s=2 * 3600, now=NOW)

    day = 86400 // STEP_S
    assert {spec.name: result.rows_packed[spec.name] for spec in HOST_SPECS} == {
        "disk_sample": 2 * day,
        "mount_sample": day,
        "nfs_sample": day,
        "nic_port_sample": 2 * day,
    }
    assert result.blocks_written["disk_sample"] == 2  # one per device and day
    assert result.blocks_written["nic_port_sample"] == 2  # one per port and day
    with session_scope(factory) as s:
        for spec in HOST_SPECS:
            assert s.scalars(select(spec.block.c.block_start)).all() == [T0] * len(
                s.scalars(select(spec.block.c.block_start)).all()
            )
            assert s.scalar(select(func.min(spec.raw.c.sampled_at))) == T0 + timedelta(days=1)
            assert every_row(s, spec) == before[spec.name], spec.name
        nfs = every_row(s, NFS)
        assert max(r[5] for r in nfs) == BIG - 1  # numeric(20) counters exact near 2^64
        assert any(r[4] is None for r in every_row(s, DISK))  # a NULL stays NULL
        devices = {r[3] for r in every_row(s, MOUNT)}
        assert devices == {"/dev/nvme0n1p1", "/dev/nvme1n1p1"}
        steps = s.scalar(select(DISK.block.c.sampled_at_delta_us).limit(1))
        assert set(steps[1:]) == {STEP_S * 1_000_000}
        # The rollups rebuilt from the blocks equal those built from the raw rows.
        after = minute_rollups(s)
        assert after.keys() == rollups.keys()
        for name, rows in rollups.items():
            same_rows(after[name], rows)


def test_the_storage_page_draws_the_same_charts_from_blocks(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = seed(s)
        q = fleet_service.Query(
            scope=fleet_service.NodeScope({node.id: node.hostname}, filtered=False),
            start=T0 + timedelta(hours=2),
            end=T0 + timedelta(hours=26),
            step_s=300,
            top_n=5,
        )
    raw = charts(factory, q)
    assert all(top for top, _ in raw)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    packed = charts(factory, q)
    for (got, got_rest), (want, want_rest) in zip(packed, raw, strict=True):
        assert [(name, times) for name, times, _ in got] == [(n, t) for n, t, _ in want]
        for (_, _, a), (_, _, b) in zip(got, want, strict=True):
            # bucket means of non-integral doubles: summed in another order from blocks
            assert a == pytest.approx(b, rel=1e-12)
        assert got_rest == want_rest


def test_a_late_or_repeated_host_reading_joins_its_packed_day(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = seed(s)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    with session_scope(factory) as s:
        before = every_row(s, DISK)
        blank = {c: None for c in DISK.values}
        s.execute(
            DiskSample.__table__.insert(),  # type: ignore[attr-defined]
            [
                # between two packed readings (out of order)
                {
                    "node_id": node.id,
                    "device": "sda",
                    "sampled_at": T0 + timedelta(seconds=30),
                    **blank,
                    "busy_pct": 99.0,
                },
                # a repeat of a packed reading with another value: the first stored wins
                {
                    "node_id": node.id,
                    "device": "sda",
                    "sampled_at": T0 + timedelta(minutes=5),
                    **blank,
                    "busy_pct": 1.0,
                },
            ],
        )
    result = compact(factory, compact_after_s=2 * 3600, now=NOW)
    assert result.blocks_reopened["disk_sample"] == 1
    with session_scope(factory) as s:
        got = every_row(s, DISK)
        late = (node.id, "sda", T0 + timedelta(seconds=30), None, None, None, None, 99.0, None)
        assert got == sorted([*before, late])
        counts = dict(s.execute(select(DISK.block.c.device, DISK.block.c.sample_count)).all())
        assert counts == {"nvme0n1": 1440, "sda": 1441}
        assert count(s, DISK.raw) == 2 * 6 * 60  # only the unpacked last 6 h are raw


def test_rule_windows_and_the_health_event_window_keep_host_rows_raw(
    factory: sessionmaker[Session], postgres_url: str
) -> None:
    add_rules(
        postgres_url,
        {
            "name": "slow-disk-day",
            "condition": {
                "kind": "threshold",
                "target": "disk",
                "metric": "avg_wait_s",
                "aggregation": "avg",
                "window": "36h",
                "op": ">",
                "threshold": 0.05,
            },
        },
    )
    with session_scope(factory) as s:
        seed(s)
        spans = series_jobs.raw_spans_s(
            s, health_throttle_window_s=300.0, health_event_window_s=86400.0
        )
    margin = 600.0
    assert spans["disk_sample"] == 36 * 3600 + margin
    assert spans["nic_port_sample"] == 86400 + margin  # a port down is dated within the window
    assert spans["gpu_sample"] == 300 + margin
    assert "mount_sample" not in spans
    result = series_jobs.run(
        factory, compact_after_s=2 * 3600, health_throttle_window_s=300.0, now=NOW
    )
    # disks: 36 h reach before T0; IB ports: 24 h 10 min reach into the first day: both raw.
    assert result.rows_packed["disk_sample"] == 0
    assert result.rows_packed["nic_port_sample"] == 0
    assert result.rows_packed["mount_sample"] == 1440
    with session_scope(factory) as s:
        assert count(s, DiskSample.__table__) == 2 * READINGS  # type: ignore[arg-type]
    from tests.factories import wipe_alerts

    wipe_alerts(postgres_url)


def test_retention_drops_host_day_blocks_whose_whole_day_is_older(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        seed(s)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    with session_scope(factory) as s:
        # cutoff at 12:00 of day 1: the day block holds readings newer than it, so it stays.
        kept = prune(s, retention_days=18 / 24, now=NOW)
        assert kept["disk_sample_block"] == 0
        assert count(s, NIC.block) == 2
        # cutoff at 00:00 of day 2 (and a second later): the whole first day is older.
        gone = prune(s, retention_days=30 / 24, now=NOW + timedelta(hours=24, seconds=1))
        assert gone["disk_sample_block"] == 2
        assert gone["nic_port_sample_block"] == 2
        for spec in HOST_SPECS:
            assert count(s, spec.block) == 0


def test_rollups_rebuild_reaches_back_to_the_oldest_block(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        seed(s)
    compact(factory, compact_after_s=2 * 3600, now=NOW)
    written = rebuild(factory, since=None, now=NOW)
    # Every minute of the 30 h, packed or raw, for both disks.
    assert written["disk_sample"][0] == 2 * READINGS
    with session_scope(factory) as s:
        table = rollup_specs.DISK.tables[60]
        first = s.scalar(select(func.min(table.c.bucket_start_s)))
        assert first == int(T0.timestamp())


def test_host_minute_rollups_pack_by_day_and_charts_read_them_alike(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        node = seed(s)
        scope = fleet_service.NodeScope({node.id: node.hostname}, filtered=False)
    rebuild(factory, since=None, now=NOW)
    q = fleet_service.Query(
        scope=scope, start=T0, end=T0 + timedelta(hours=20), step_s=300, top_n=5, source_s=60
    )
    rows = charts(factory, q)
    result = compact(factory, compact_after_s=2 * 3600, now=NOW, minutes_after_s=3600)
    # The first day is whole and folded: packed; the second day is not whole.
    assert result.blocks_written["disk_sample_1m"] == 2
    assert result.blocks_written["nfs_sample_1m"] == 1
    assert result.blocks_written["nic_port_sample_1m"] == 2
    assert result.rows_packed["nic_port_sample_1m"] == 2 * 1440
    with session_scope(factory) as s:
        minutes = rollup_specs.NIC.tables[60]
        assert s.scalar(select(func.min(minutes.c.bucket_start_s))) == T0.timestamp() + 86400
    assert charts(factory, q) == rows
    # A recompute of an hour of the packed day re-opens it (no second copy of its minutes).
    with session_scope(factory) as s:
        lo = int(T0.timestamp()) + 3600
        fold.fold_range(s, rollup_specs.NIC, lo_s=lo, hi_s=lo + 3600)
        assert count(s, minute_blocks.NIC.block) == 0
        assert count(s, rollup_specs.NIC.tables[60]) == 2 * READINGS
    assert charts(factory, q) == rows


def test_the_scheduled_pass_packs_host_minutes_after_a_day_and_gpu_minutes_after_seven(
    factory: sessionmaker[Session],
) -> None:
    with session_scope(factory) as s:
        seed(s)
    rebuild(factory, since=None, now=NOW)
    later = NOW + timedelta(days=1)  # day 1 ended 30 h before: older than a day, not seven
    result = series_jobs.run(
        factory,
        compact_after_s=2 * 3600,
        health_throttle_window_s=300.0,
        minutes_after_days=7.0,
        host_minutes_after_days=1.0,
        now=later,
    )
    assert result.blocks_written["disk_sample_1m"] == 2
    assert result.blocks_written["nic_port_sample_1m"] == 2
    assert result.blocks_written.get("gpu_sample_1m", 0) == 0  # no GPU here; none due anyway
    again = series_jobs.run(
        factory,
        compact_after_s=2 * 3600,
        health_throttle_window_s=300.0,
        host_minutes_after_days=3.0,
        now=later,
    )
    assert again.blocks_written.get("disk_sample_1m", 0) == 0  # nothing more is due


def silent_node(session: Session, gone_at: datetime) -> Node:
    """A node whose one IB port was ACTIVE until 2 h before it went silent at ``gone_at``,
    then DOWN: a day of readings a minute apart up to ``gone_at``."""
    node = Node(hostname="gone", labels={}, created_at=gone_at - timedelta(days=2))
    node.last_seen_at = gone_at
    session.add(node)
    session.flush()
    rows = []
    for k in range(24 * 60 + 1):
        at = gone_at - timedelta(days=1) + timedelta(minutes=k)
        state = "ACTIVE" if at < gone_at - timedelta(hours=2) else "DOWN"
        rows.append(
            {
                "node_id": node.id,
                "device": "mlx5_0",
                "port": 1,
                "sampled_at": at,
                "link_layer": "InfiniBand",
                "state": state,
                "phys_state": "LinkUp",
                "rate_gbps": 400.0,
            }
        )
    disks = [
        {"node_id": node.id, "device": "nvme0n1", "sampled_at": r["sampled_at"], "busy_pct": 1.0}
        for r in rows
    ]
    # Through the ingest's write path, which keeps the current readings too.
    insert_staged(
        session,
        [
            StagedRows(spec.raw, tuple(dicts[0]), [tuple(d.values()) for d in dicts], latest=spec)
            for spec, dicts in ((latest.NIC, rows), (latest.DISK, disks))
        ],
    )
    return node


def test_a_silent_nodes_newest_rows_do_not_reopen_its_packed_day_at_every_pass(
    factory: sessionmaker[Session],
) -> None:
    gone_at = datetime(2026, 11, 28, 0, 3, tzinfo=UTC)  # 3 minutes into a day
    with session_scope(factory) as s:
        silent_node(s, gone_at)
    first = compact(factory, compact_after_s=2 * 3600, now=NOW)
    # The day before 00:00 is packed; the newest 10 minutes (23:53-00:03) stay raw, 7 of them
    # in the packed day.
    assert first.blocks_written["disk_sample"] == 1
    again = compact(factory, compact_after_s=2 * 3600, now=NOW + timedelta(minutes=5))
    assert again.blocks_reopened["disk_sample"] == 0
    assert again.rows_packed["disk_sample"] == 0
    with session_scope(factory) as s:
        assert count(s, DiskSample.__table__) == 11  # type: ignore[arg-type]
        assert len(every_row(s, DISK)) == 24 * 60 + 1


def test_a_silent_node_keeps_its_port_down_reason_after_compaction(
    factory: sessionmaker[Session],
) -> None:
    from app.health.rules import DEFAULT_RULES
    from app.health.service import get_node_health

    gone_at = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    with session_scope(factory) as s:
        silent_node(s, gone_at)

    def reasons() -> list[tuple[str, Any]]:
        with session_scope(factory) as s:
            health = get_node_health(s, hostname="gone", rules=DEFAULT_RULES)
            return [(r.code, r.since) for r in health.reasons]

    before = reasons()
    assert ("ib_port_down", gone_at - timedelta(hours=2)) in before
    result = series_jobs.run(factory, compact_after_s=2 * 3600, health_throttle_window_s=300.0)
    # Its last 24 h 10 min before its newest reading stay raw, the last ACTIVE one included;
    # the disks' day is packed.
    assert result.rows_packed["nic_port_sample"] == 0
    assert result.rows_packed["disk_sample"] > 0
    assert reasons() == before


def test_a_host_reading_re_sent_after_its_day_was_packed_is_a_duplicate(
    factory: sessionmaker[Session], postgres_url: str
) -> None:
    from tests.app.section_factories import disk
    from tests.factories import batch, store_payload

    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    old = day - timedelta(days=2)
    first = batch("late-host", gpus=1, samples_per_gpu=0)
    first["disks"] = [disk(old + timedelta(minutes=k), "nvme0n1", busy_pct=10.0) for k in range(30)]
    stored = store_payload(postgres_url, first, received_at=old + timedelta(minutes=30))
    assert stored["sections_stored"]["disks"] == 30
    # All but the newest 10 minutes (minutes 19-29) go into the day's block.
    assert compact(factory, compact_after_s=2 * 3600).rows_packed["disk_sample"] == 19
    again = batch("late-host", gpus=first["gpus"], samples_per_gpu=0)
    again["disks"] = [
        # a packed reading again, another value (1e9 % is implausible: nulled, not counted)
        disk(old + timedelta(minutes=1), "nvme0n1", busy_pct=1e9),
        disk(old + timedelta(minutes=1, seconds=30), "nvme0n1", busy_pct=20.0),  # a new one
    ]
    answer = store_payload(postgres_url, again, received_at=day)
    assert answer["sections_stored"]["disks"] == 1
    assert answer["nulled_values"] == {}
    with session_scope(factory) as s:
        got = [(r[2], r[7]) for r in every_row(s, DISK)]
    assert len(got) == 31
    assert got[:4] == [
        (old, 10.0),
        (old + timedelta(minutes=1), 10.0),  # the first stored wins, stored once
        (old + timedelta(minutes=1, seconds=30), 20.0),
        (old + timedelta(minutes=2), 10.0),
    ]


def test_a_downgrade_to_0011_unpacks_host_days_and_minutes_block_values_winning() -> None:
    from alembic import command

    from app.db import make_engine, make_session_factory
    from app.migrate import alembic_config
    from tests.dbs import postgres_database

    with postgres_database() as url:
        engine = make_engine(url)
        try:
            made = make_session_factory(engine)
            with session_scope(made) as s:
                node = seed(s)
                before = {spec.name: every_row(s, spec) for spec in HOST_SPECS}
            rebuild(made, since=None, now=NOW)
            with session_scope(made) as s:
                minutes = sorted(tuple(r) for r in s.execute(select(rollup_specs.NIC.tables[60])))
            compact(made, compact_after_s=2 * 3600, now=NOW, minutes_after_s=3600)
            with session_scope(made) as s:
                assert count(s, DISK.block) == 2 and count(s, minute_blocks.NIC.block) == 2
                # A raw repeat of a packed reading, not merged by a compaction yet.
                s.execute(
                    DiskSample.__table__.insert(),  # type: ignore[attr-defined]
                    {"node_id": node.id, "device": "sda", "sampled_at": T0, "read_iops": 12345.0},
                )
        finally:
            engine.dispose()
        command.downgrade(alembic_config(url), "0011")
        engine = make_engine(url)
        try:
            with engine.connect() as conn:
                for spec in HOST_SPECS:
                    columns = ", ".join(f'"{c}"' for c in (*spec.keys, "sampled_at", *spec.values))
                    got = conn.execute(text(f"SELECT {columns} FROM {spec.name}")).all()
                    assert sorted(tuple(r) for r in got) == before[spec.name], spec.name
                nic_minutes = conn.execute(select(rollup_specs.NIC.tables[60])).all()
                assert sorted(tuple(r) for r in nic_minutes) == minutes
        finally:
            engine.dispose()
