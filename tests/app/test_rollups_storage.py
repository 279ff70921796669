"""Storage and IB rollups: the /storage page's charts, rankings and counter totals are the same
from raw rows and from minute or hour rollups (exact values, 64-bit counters near 2⁶⁴, counter
resets), and the lookback fold is idempotent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, event, func, select
from sqlalchemy.orm import Session

from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from app.series.rollups import fold, jobs
from app.series.rollups.models import rollup_watermark
from app.series.rollups.specs import DISK, NFS, NIC
from app.series.tables import DiskSample, NfsSample, NicPortSample
from app.storage import fleet_service as fs

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
HOURS = 5
BIG = 2**64 - 50_000


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            s.execute(delete(rollup_watermark))
            yield s
    finally:
        engine.dispose()


def seed(session: Session) -> None:
    """Three nodes, every 10 s for five hours: two disks, an NFS mount (one near 2⁶⁴, one
    reset), two IB ports (errors rising on one), values exact in binary floating point."""
    rows: list[Any] = []
    for n in range(3):
        node = Node(hostname=f"st-{n}", labels={}, created_at=T0)
        session.add(node)
        session.flush()
        for i in range(HOURS * 360):
            at = T0 + timedelta(seconds=10 * i + n)
            if i % 89 == 5:
                continue
            for d, device in enumerate(("nvme0n1", "sda")):
                rows.append(
                    DiskSample(
                        node_id=node.id,
                        device=device,
                        sampled_at=at,
                        read_bytes_per_s=float((i * (n + 1) + d) % 1000) * 1024,
                        write_bytes_per_s=None if i % 11 == 0 else float(i % 77) + 0.5,
                        avg_wait_s=(i % 16) / 1024,
                    )
                )
            retrans = {0: i // 30, 1: BIG + i, 2: (i % 700) // 3}[n]
            rows.append(
                NfsSample(
                    node_id=node.id,
                    mountpoint="/home",
                    sampled_at=at,
                    retransmits=retrans,
                    read_bytes_per_s=float(i % 300) * 4096,
                    write_bytes_per_s=float(i % 3),
                    avg_rtt_s=(i % 32) / 2048,
                )
            )
            for port in (1, 2):
                rising = n == 1 and port == 2
                rows.append(
                    NicPortSample(
                        node_id=node.id,
                        device="mlx5_0",
                        port=port,
                        sampled_at=at,
                        state="ACTIVE",
                        rx_bytes_per_s=float((i * port) % 500) * 8,
                        tx_bytes_per_s=float(n * 1000 + port),
                        symbol_error_count=i // 200 if rising else 0,
                        link_downed_count=(i // 900) if rising else 0,
                        port_rcv_errors_count=None if i % 13 == 0 else 0,
                    )
                )
    session.add_all(rows)
    session.flush()
    for spec in (DISK, NFS, NIC):
        fold.fold_range(session, spec, lo_s=T0.timestamp(), hi_s=T0.timestamp() + HOURS * 3600)
        jobs.set_mark(session, spec.horizon_key, T0 + timedelta(days=1))


def charts(session: Session, q: fs.Query) -> tuple[Any, ...]:
    gauges = [m for m in fs.METRICS.values() if not m.counter]
    by_table: dict[Any, list[fs.Metric]] = {}
    for m in gauges:
        by_table.setdefault(m.source.name, []).append(m)
    data = {}
    for metrics in by_table.values():
        data.update(fs.gauge_charts(session, metrics, q))
    for m in fs.METRICS.values():
        if m.counter:
            data[m.name] = fs.counter_chart(session, m, q)  # type: ignore[assignment]
    return tuple(sorted(data.items()))


@pytest.mark.parametrize("by", ["mean", "max"])
def test_storage_charts_from_rollups_equal_those_from_raw_rows(session: Session, by: str) -> None:
    seed(session)
    scope = fs.select_nodes(session, labels={}, search="")
    start = T0 + timedelta(minutes=17, seconds=23)
    end = T0 + timedelta(hours=4, minutes=41, seconds=7)
    for step in (15, 60, 300, 3600):
        q = fs.Query(scope, start, end, step, top_n=1, by=by, source_s=0)  # type: ignore[arg-type]
        raw = charts(session, q)
        assert raw[0][1].top and raw[0][1].rest is not None  # a top series and the rest
        for source in (60, 3600):
            if step % source:
                continue
            rolled = charts(
                session, fs.Query(scope, start, end, step, top_n=1, by=by, source_s=source)
            )  # type: ignore[arg-type]
            assert rolled == raw, (step, source)
        picked = charts(session, fs.Query(scope, start, end, step, top_n=1, by=by))  # type: ignore[arg-type]
        assert picked == raw, step


def test_a_counter_that_moved_only_in_the_hours_around_a_short_window_is_not_listed(
    session: Session,
) -> None:
    """Short windows find the series to read exactly through the hours around them: st-1's
    port 2 symbol errors rise at 4:26:40 and then stay flat, so a window from 4:30 lists no
    series, and one from 4:20 lists it with the one error — as the raw rows say."""
    seed(session)
    scope = fs.select_nodes(session, labels={}, search="")
    metric = fs.METRICS["ib_errors"]
    end = T0 + timedelta(hours=4, minutes=59)
    for start, expected in (
        (T0 + timedelta(hours=4, minutes=30), []),
        (T0 + timedelta(hours=4, minutes=20), [("st-1", "mlx5_0/2", 1, 0)]),
    ):
        picked = fs.counter_chart(session, metric, fs.Query(scope, start, end, 60))
        raw = fs.counter_chart(session, metric, fs.Query(scope, start, end, 60, source_s=0))
        assert picked == raw
        assert [(t.hostname, t.item, t.total, t.gaps) for t in picked[1]] == expected


def test_counter_totals_are_exact_near_two_to_the_64(session: Session) -> None:
    seed(session)
    scope = fs.select_nodes(session, labels={}, search="")
    q = fs.Query(scope, T0, T0 + timedelta(hours=HOURS), 300, top_n=5)
    chart, totals = fs.counter_chart(session, fs.METRICS["nfs_retransmits"], q)
    by_host = {t.hostname: (t.total, t.gaps) for t in totals}
    # Readings are bucket maxima: st-1 goes from BIG + 29 (the first 5-min bucket) to
    # BIG + 1799 (the last sample); st-2 rises 0 → 233 and resets twice in the window.
    assert by_host["st-1"] == (1799 - 29, 0)
    assert by_host["st-0"] == (1799 // 30, 0)
    assert by_host["st-2"][1] == 2
    assert {s.hostname for s in chart.top} == {"st-0", "st-1", "st-2"}


def test_the_lookback_fold_is_idempotent(session: Session) -> None:
    seed(session)
    now = T0 + timedelta(hours=HOURS)
    table = NFS.tables[60]

    def snapshot() -> list[Any]:
        return [tuple(r) for r in session.execute(select(table).order_by(*table.primary_key))]

    before = snapshot()
    jobs.fold_recent(session, NFS, now=now, lookback_s=3600)
    jobs.fold_recent(session, NFS, now=now, lookback_s=3600)
    assert snapshot() == before
    last = max(r[2] for r in before)
    assert [r[3] for r in before if r[2] == last] == [6, 6, 6]  # samples per node in a minute


def test_fleet_minutes_hold_the_sums_of_every_key(session: Session) -> None:
    seed(session)
    for spec in (DISK, NFS, NIC):
        assert spec.fleet is not None
        minute = spec.tables[60]
        gauges = [c.name for c in spec.fleet.c if c.name.endswith(("_sum", "_n"))]
        expected = session.execute(
            select(
                minute.c.bucket_start_s,
                func.count(),
                func.sum(minute.c.samples),
                *(func.sum(minute.c[g]) for g in gauges),
            )
            .group_by(minute.c.bucket_start_s)
            .order_by(minute.c.bucket_start_s)
        ).all()
        stored = session.execute(
            select(
                spec.fleet.c.bucket_start_s,
                spec.fleet.c.series,
                spec.fleet.c.samples,
                *(spec.fleet.c[g] for g in gauges),
            ).order_by(spec.fleet.c.bucket_start_s)
        ).all()
        assert len(stored) == HOURS * 60
        assert [tuple(r) for r in stored] == [tuple(r) for r in expected], spec.name


def test_a_late_sample_of_one_node_refolds_the_fleet_minute(session: Session) -> None:
    seed(session)
    node = session.scalars(select(Node).where(Node.hostname == "st-0")).one()
    at = T0 + timedelta(minutes=30, seconds=5)  # st-0 samples at :00, :10 …: a new key time
    session.add(DiskSample(node_id=node.id, device="nvme9n1", sampled_at=at, avg_wait_s=0.5))
    session.flush()
    bucket = int(at.timestamp()) // 60 * 60
    fleet = DISK.fleet
    assert fleet is not None
    before = session.execute(select(fleet).where(fleet.c.bucket_start_s == bucket)).one()
    fold.fold_range(session, DISK, lo_s=at.timestamp(), hi_s=at.timestamp() + 1, owners={node.id})
    after = session.execute(select(fleet).where(fleet.c.bucket_start_s == bucket)).one()
    assert after.series == before.series + 1
    assert after.samples == before.samples + 1
    assert after.avg_wait_s_n == before.avg_wait_s_n + 1
    assert after.avg_wait_s_sum == before.avg_wait_s_sum + 0.5
    assert after.read_bytes_per_s_n == before.read_bytes_per_s_n  # NULL is not counted


def test_long_windows_rank_by_hours_and_draw_exact_values(session: Session) -> None:
    """A window of six hours or more ranks from the 1-hour rollup alone (no minute rows);
    where its edges hold no data the result equals the exact one from raw rows."""
    seed(session)
    scope = fs.select_nodes(session, labels={}, search="")
    start, end = T0 - timedelta(minutes=40), T0 + timedelta(hours=HOURS, minutes=20)
    raw = charts(session, fs.Query(scope, start, end, 300, top_n=1, source_s=0))
    statements: list[str] = []

    def capture(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", capture)
    try:
        picked = charts(session, fs.Query(scope, start, end, 300, top_n=1))
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert picked == raw
    rankings = [s for s in statements if "_1h" in s]
    assert rankings and not any("_1m" in s for s in rankings)
    assert any("_fleet_1m" in s for s in statements)  # the rest line from the fleet sums


@pytest.mark.parametrize("top_n", [1, 2, 6])
def test_the_top_is_ranked_in_sql_with_every_other_series_counted(
    session: Session, top_n: int
) -> None:
    seed(session)
    scope = fs.select_nodes(session, labels={}, search="")
    q = fs.Query(scope, T0, T0 + timedelta(hours=2), 300, top_n=top_n)
    chart = fs.gauge_chart(session, fs.METRICS["ib_tx_bytes_per_s"], q)
    # tx is constant per port: n * 1000 + port, so the order is known: st-2 first.
    expected = [("st-2", "mlx5_0/2"), ("st-2", "mlx5_0/1"), ("st-1", "mlx5_0/2")][:top_n]
    assert [(s.hostname, s.item) for s in chart.top][:3] == expected
    assert len(chart.top) == min(top_n, 6)
    assert chart.rest_count == 6 - min(top_n, 6)
    assert (chart.rest is None) == (top_n >= 6)
