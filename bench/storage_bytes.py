"""Bytes per stored GPU value and node-chart query time: Fleetwatch's Postgres layouts (raw rows,
blocks: an hour, a day for samples 30 s apart or more) against Prometheus 2.42 on the same
simulated data, in one run.

Generates ``--nodes`` simulated 8-GPU nodes × ``--hours`` of samples every ``--step`` seconds
(``bench/sim_history.py``), then:

* Fleetwatch: a fresh Postgres database migrated to head, the rows COPYed into ``gpu_sample``
  (size measured: the raw layout), then packed into ``gpu_sample_block`` by the real
  compaction (:func:`app.series.compact.compact`) and measured again after ``VACUUM``;
* Prometheus: the same values as OpenMetrics, ``promtool tsdb create-blocks-from openmetrics``,
  block bytes on disk (``bench/prom_anchor.py``), then Prometheus started on loopback.

The 1-minute rollups are measured as rows and packed by day (whole days only: use whole
``--hours`` days for that figure). Both answer the node chart query — one node's 8 GPUs ×
4 metrics over the whole range, at the node page's step for that range (Fleetwatch as the
page reads it: rollups rebuilt from the blocks, raw rows at the edges; again once the minute
rollups are packed) and at the raw step
(every sample, unpacked from the blocks) — ``--repeat`` times; medians, with the ratio.
Bytes per value divide by the non-null values (what Prometheus stores).

    python bench/storage_bytes.py --nodes 4 --hours 6
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import prom_anchor  # noqa: E402
from sim_history import count_values, generate, generate_nvlinks  # noqa: E402

from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.fleet.models import Node  # noqa: E402
from app.metrics import service as metrics_service  # noqa: E402
from app.metrics.catalog import METRICS  # noqa: E402
from app.metrics.service import choose_step_s  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.series.blocks import NVLINK  # noqa: E402
from app.series.compact import compact  # noqa: E402
from app.series.rollups.jobs import rebuild, set_mark  # noqa: E402
from app.series.rollups.specs import GPU  # noqa: E402

START = datetime(2024, 1, 3, tzinfo=UTC)
CHART_METRICS = ["util_gpu_pct", "mem_used_bytes", "power_w", "temp_c"]


def load(url: str, nodes: int, hours: float, step_s: float, om_path: Path) -> int:
    """COPY the simulated rows into ``gpu_sample`` and write the same values as OpenMetrics;
    returns the non-null values."""
    import psycopg

    values = 0
    names = [m.name for m in METRICS]
    pg = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def both() -> Any:
        nonlocal values
        with psycopg.connect(pg) as conn:
            for hostname, samples in generate(nodes, hours, step_s, START):
                values += count_values(samples)
                node_id = conn.execute(
                    "INSERT INTO node (hostname, labels, created_at) VALUES (%s, '{}', %s) "
                    "RETURNING id",
                    (hostname, START),
                ).fetchone()[0]
                ids: dict[str, int] = {}
                for s in samples[:8]:
                    ids[s["gpu_uuid"]] = conn.execute(
                        'INSERT INTO gpu (node_id, uuid, "index", state, first_seen_at, '
                        "last_seen_at) VALUES (%s, %s, %s, 'ok', %s, %s) RETURNING id",
                        (node_id, s["gpu_uuid"], len(ids), START, START),
                    ).fetchone()[0]
                columns = ", ".join(["gpu_id", "sampled_at", "received_at", *names])
                with conn.cursor().copy(f"COPY gpu_sample ({columns}) FROM STDIN") as copy:
                    for s in samples:
                        at = datetime.fromisoformat(s["sampled_at"].replace("Z", "+00:00"))
                        copy.write_row([ids[s["gpu_uuid"]], at, at, *(s[n] for n in names)])
                conn.execute(
                    "UPDATE gpu SET last_sample_at = %s WHERE node_id = %s",
                    (at, node_id),
                )
                conn.commit()
                yield hostname, samples

    prom_anchor.write_openmetrics(both(), om_path)
    return values


NVLINK_VALUES = NVLINK.values


def load_nvlinks(url: str, nodes: int, hours: float, step_s: float, nvlink_step_s: float) -> int:
    """COPY the simulated NVLink readings into ``nvlink_sample`` (GPUs matched by UUID, as
    loaded by :func:`load`); returns the rows."""
    import psycopg

    pg = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    rows = 0
    with psycopg.connect(pg) as conn:
        ids = dict(conn.execute("SELECT uuid, id FROM gpu").fetchall())
        columns = ", ".join(["gpu_id", "link", "sampled_at", *NVLINK_VALUES])
        for _host, links in generate_nvlinks(nodes, hours, step_s, nvlink_step_s, START):
            with conn.cursor().copy(f"COPY nvlink_sample ({columns}) FROM STDIN") as copy:
                for e in links:
                    at = datetime.fromisoformat(str(e["sampled_at"]).replace("Z", "+00:00"))
                    copy.write_row(
                        [ids[e["gpu_uuid"]], e["link"], at, *(e[n] for n in NVLINK_VALUES)]
                    )
            rows += len(links)
            conn.commit()
    return rows


def table_bytes(url: str, table: str) -> int:
    """``pg_total_relation_size`` after ``VACUUM FULL`` (heap, TOAST, indexes; the space of
    rows moved into blocks given back, as autovacuum's reuse would in a running server)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"VACUUM FULL ANALYZE {table}"))
            return int(conn.execute(text(f"SELECT pg_total_relation_size('{table}')")).scalar())
    finally:
        engine.dispose()


def our_chart_ms(
    url: str, end: datetime, step_s: int, repeat: int, source_s: int | None
) -> list[float]:
    """Wall ms of the node chart read (8 GPUs × 4 metrics, whole range, ``step_s``), from
    ``source_s`` (0 raw rows and blocks; ``None`` as the page does: rollups inside, raw at the
    edges)."""
    engine = make_engine(url)
    times = []
    try:
        factory = make_session_factory(engine)
        for _ in range(repeat):
            with session_scope(factory) as session:
                node = session.query(Node).filter_by(hostname="sim-0000").one()
                began = time.perf_counter()
                series = metrics_service.node_series_from(
                    session,
                    node=node,
                    metrics=CHART_METRICS,
                    start=START,
                    end=end,
                    step_s=step_s,
                    source_s=source_s,
                )
                times.append((time.perf_counter() - began) * 1000)
                assert len(series) == 8 and series[0].times
    finally:
        engine.dispose()
    return times


def main() -> None:
    """Run both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--step", type=int, default=5, help="seconds between samples")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--nvlink-step", type=int, default=30, help="seconds between NVLink readings"
    )
    parser.add_argument("--port", type=int, default=19090)
    parser.add_argument(
        "--keep", action="store_true", help="keep the database (its name is printed) to study"
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "FLEETWATCH_TEST_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    args = parser.parse_args()
    admin = make_url(args.admin_url).set(drivername="postgresql+psycopg")
    name = f"fleetwatch_bench_{uuid.uuid4().hex[:8]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.set(database=name).render_as_string(hide_password=False)
    end = START + timedelta(hours=args.hours) - timedelta(seconds=args.step)
    work = Path(tempfile.mkdtemp(prefix="storage-bytes-"))
    prom = None
    try:
        upgrade(url)
        began = time.monotonic()
        values = load(url, args.nodes, args.hours, args.step, work / "data.om")
        print(f"loaded {values:,} values in {time.monotonic() - began:.0f} s", flush=True)
        raw_bytes = table_bytes(url, "gpu_sample")
        link_rows = load_nvlinks(url, args.nodes, args.hours, args.step, args.nvlink_step)
        link_raw_bytes = table_bytes(url, "nvlink_sample")
        factory = make_session_factory(make_engine(url))
        with session_scope(factory) as session:
            set_mark(session, GPU.arrival_key, end + timedelta(days=1))
        began = time.monotonic()
        result = compact(factory, compact_after_s=0, now=end + timedelta(days=1))
        packed = result.rows_packed["gpu_sample"]
        print(f"compacted {packed:,} rows in {time.monotonic() - began:.1f} s", flush=True)
        began = time.monotonic()
        rebuild(factory, since=START, now=end + timedelta(hours=1))
        print(f"rollups rebuilt from blocks in {time.monotonic() - began:.1f} s", flush=True)
        block_bytes = table_bytes(url, "gpu_sample_block")
        link_block_bytes = table_bytes(url, "nvlink_sample_block")
        minute_bytes = table_bytes(url, "gpu_sample_1m")
        hour_bytes = table_bytes(url, "gpu_sample_1h")
        page_step = choose_step_s(START, end)
        ours = {
            "page": statistics.median(our_chart_ms(url, end, page_step, args.repeat, None)),
            "raw": statistics.median(our_chart_ms(url, end, args.step, args.repeat, 0)),
        }
        # Pack the minute rollups of every whole day (the job packs those older than a week).
        with session_scope(factory) as session:
            set_mark(session, GPU.horizon_key, end + timedelta(days=2))
        compact(factory, compact_after_s=0, minutes_after_s=86400, now=end + timedelta(days=2))
        packed_minute_bytes = table_bytes(url, "gpu_sample_1m_block")
        minute_rest = table_bytes(url, "gpu_sample_1m")
        left_bytes = table_bytes(url, "gpu_sample")
        ours["packed"] = statistics.median(our_chart_ms(url, end, page_step, args.repeat, None))
        prom_anchor.build_blocks(work / "data.om", work / "tsdb")
        (work / "data.om").unlink()
        prom_bytes = prom_anchor.tsdb_bytes(work / "tsdb")

        prom = prom_anchor.start_prometheus(work / "tsdb", args.port)
        theirs: dict[str, float] = {}
        # "page" asks for the value at each step, as a Grafana panel does by default; "mean"
        # for each step's mean (avg_over_time over the step), which is what our chart returns.
        for kind, step in (("page", page_step), ("mean", page_step), ("raw", args.step)):
            if (end - START).total_seconds() / step + 1 > prom_anchor.MAX_POINTS_PER_SERIES:
                theirs[kind] = math.nan  # Prometheus refuses > 11,000 points per series
                continue
            rounds = [0.0] * args.repeat
            for key in CHART_METRICS:
                query = f'{prom_anchor.METRIC_PREFIX}{key}{{hostname="sim-0000"}}'
                if kind == "mean":
                    query = f"avg_over_time({query}[{step}s])"
                ms = prom_anchor.query_range_ms(args.port, query, START, end, step, args.repeat)
                rounds = [r + t for r, t in zip(rounds, ms, strict=True)]
            theirs[kind] = statistics.median(rounds)
    finally:
        if prom is not None:
            prom_anchor.stop_prometheus(prom)
        if args.keep:
            print(f"kept database {name}", flush=True)
        else:
            with engine.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()
        for path in sorted(work.rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        work.rmdir()

    per_value_prom = prom_bytes / values
    print()
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}"
    )
    print(f"prometheus: {prom_anchor.prometheus_version()}")
    print(
        f"data: {args.nodes} nodes x 8 GPUs x {args.hours:g} h every {args.step} s, "
        f"{values:,} non-null values ({len(METRICS)} metrics)"
    )
    print(f"{'store':<34}{'bytes':>14}{'B/value':>10}{'x Prometheus':>14}")
    rows = [
        ("Fleetwatch raw rows (gpu_sample)", raw_bytes),
        ("Fleetwatch blocks", block_bytes),
        ("  + newest 10 min raw per GPU", block_bytes + left_bytes),
        ("Prometheus 2.42 TSDB blocks", prom_bytes),
    ]
    for label, size in rows:
        print(
            f"{label:<34}{size:>14,}{size / values:>10.3f}{size / values / per_value_prom:>14.2f}"
        )
    per_day = 86400 / (args.hours * 3600) / args.nodes
    print(
        f"NVLink, {link_rows:,} link readings (8 GPUs x 18 links every {args.nvlink_step} s):"
        f" raw rows {link_raw_bytes / link_rows:.1f} B per reading"
        f" ({link_raw_bytes * per_day / 1e6:.1f} MB per node per day),"
        f" blocks {link_block_bytes / link_rows:.2f} B per reading"
        f" ({link_block_bytes * per_day / 1e6:.2f} MB per node per day)"
    )
    print(
        f"GPU samples per node per day: raw rows {raw_bytes * per_day / 1e6:.1f} MB,"
        f" blocks {block_bytes * per_day / 1e6:.2f} MB"
    )
    print(
        f"GPU rollups per node per day: 1-minute {minute_bytes * per_day / 1e6:.2f} MB"
        f" (packed by day: {(packed_minute_bytes + minute_rest) * per_day / 1e6:.2f} MB),"
        f" 1-hour {hour_bytes * per_day / 1e6:.3f} MB"
    )
    print(f"chart query, 1 node, 8 GPUs x 4 metrics, {args.hours:g} h (median of {args.repeat}):")
    ours["mean"] = ours["page"]
    ours["packed_mean"], theirs["packed"], theirs["packed_mean"] = (
        ours["packed"],
        theirs["page"],
        theirs["mean"],
    )
    labels = {
        "page": f"page step {page_step} s",
        "mean": "  Prometheus avg_over_time",
        "packed": "  minutes packed",
        "packed_mean": "  packed, avg_over_time",
        "raw": f"raw step {args.step} s",
    }
    for kind, label in labels.items():
        print(
            f"  {label:<27} Fleetwatch {ours[kind]:8.1f} ms   Prometheus {theirs[kind]:8.1f} ms"
            f"   ratio {ours[kind] / theirs[kind]:.2f}"
        )


if __name__ == "__main__":
    main()
