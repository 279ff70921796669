"""``GET /metrics`` at fleet size: the time of a scrape of 1,000 nodes × 8 GPUs.

Seeds ``--nodes × --gpus`` (default 1,000 × 8) the way ``bench/overview_page.py`` does (the
ingest service, one sample per GPU, one GPU in 200 lost with an Xid 79, 4 clusters, IB pods,
racks) into a fresh SQLite file, or a fresh Postgres database with ``--postgres``; fills every
metric those samples leave empty, as an HGX H100 reports nearly all of them (``--sparse``
keeps the seed's 10: a smaller scrape); then adds ``--history-minutes`` (15) of older samples
every 10 s per GPU, all received within the freshness window: what a plan that scanned
samples by arrival would read. Then prints
the machine, an in-process split of one scrape (the DCGM families with their statements, the
text, Fleetwatch's gauges) and, through one live server, the median and max wall time of
``--repeat`` scrapes after a warm-up (client on the same machine) with the body's size, raw
and gzip as sent. The statement count does not grow with the fleet
(tests/app/test_metrics_scrape.py).

    python bench/metrics_scrape.py [--nodes 1000] [--gpus 8] [--repeat 20] [--postgres]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import event, func, insert, select, update

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import load_settings  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.exporter import gauges, gpus, text  # noqa: E402
from app.metrics.catalog import METRICS  # noqa: E402
from app.series.tables import gpu_sample  # noqa: E402
from bench.overview_page import STALE_AFTER_S, database, seed  # noqa: E402
from tests.app.test_health_query_count import TRANSACTION_CONTROL  # noqa: E402
from tests.live_server import live_server  # noqa: E402

NODE_LABELS = ["cluster", "ib_pod", "rack"]


def machine(url: str) -> str:
    """CPUs, architecture, Python and the database server."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                server = conn.exec_driver_sql("SHOW server_version").scalar()
                backend = f"Postgres {server}"
            else:
                backend = f"SQLite {conn.exec_driver_sql('select sqlite_version()').scalar()}"
    finally:
        engine.dispose()
    cpu = platform.processor() or platform.machine()
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {backend}"


def fill_metrics(url: str) -> None:
    """Give every empty metric of every stored sample a plausible value (a third of its range,
    at most 100,000, as an integer)."""
    values = {
        m.name: func.coalesce(gpu_sample.c[m.name], round(min(m.high, 1e5) / 3)) for m in METRICS
    }
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(update(gpu_sample).values(values))
    finally:
        engine.dispose()


def add_history(url: str, minutes: float, step_s: int = 10) -> float:
    """Copies of every GPU's sample ``step_s``, 2 ``step_s`` … back over ``minutes``, sampled
    and received that much earlier (the newest sample stays the newest); returns seconds."""
    started = time.perf_counter()
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            rows = [dict(r) for r in conn.execute(select(gpu_sample)).mappings()]
            for k in range(1, int(minutes * 60 / step_s) + 1):
                back = timedelta(seconds=k * step_s)
                shifted = [
                    r
                    | {"sampled_at": r["sampled_at"] - back, "received_at": r["received_at"] - back}
                    for r in rows
                ]
                conn.execute(insert(gpu_sample), shifted)
    finally:
        engine.dispose()
    return time.perf_counter() - started


def split(url: str) -> None:
    """Print one in-process scrape's parts: milliseconds and SQL statements."""
    engine = make_engine(url)
    ran: list[str] = []

    def count(_conn: object, _cursor: object, sql: str, *_args: object) -> None:
        if not sql.lstrip().upper().startswith(TRANSACTION_CONTROL):
            ran.append(sql)

    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_scope(make_session_factory(engine, read_only=True)) as session:
            now = datetime.now(UTC)
            t0 = time.perf_counter()
            families = gpus.families(
                session, stale_after_s=STALE_AFTER_S, now=now, node_labels=NODE_LABELS
            )
            t1, n1 = time.perf_counter(), len(ran)
            body = text.render(families)
            t2 = time.perf_counter()
            gauges.families(session, stale_after_s=STALE_AFTER_S, now=now)
            t3, n3 = time.perf_counter(), len(ran)
    finally:
        engine.dispose()
    series = sum(len(f.samples) for f in families)
    print(
        f"in process: GPU values {(t1 - t0) * 1000:.0f} ms ({n1} statements, {series:,} "
        f"series), text {(t2 - t1) * 1000:.0f} ms ({len(body) / 1024:.0f} KiB), "
        f"gauges {(t3 - t2) * 1000:.0f} ms ({n3 - n1} statements)"
    )


def scrape(url: str, tmp: Path, repeat: int) -> None:
    """Time ``repeat`` scrapes through a live server after a warm-up."""
    settings = load_settings(
        database_url=url, data_dir=tmp, stale_after_s=STALE_AFTER_S, metrics_node_labels=NODE_LABELS
    )
    with live_server(settings) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        c.get("/metrics").raise_for_status()
        times, raw, sent = [], 0, 0
        for _ in range(repeat):
            t0 = time.perf_counter()
            response = c.get("/metrics", headers={"Accept-Encoding": "gzip"})
            times.append((time.perf_counter() - t0) * 1000)
            response.raise_for_status()
            raw, sent = len(response.content), response.num_bytes_downloaded
    print(
        f"GET /metrics ×{repeat}: median {statistics.median(times):.0f} ms, "
        f"max {max(times):.0f} ms; {raw / 1024:.0f} KiB raw, {sent / 1024:.0f} KiB gzip"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--history-minutes", type=float, default=15)
    parser.add_argument("--sparse", action="store_true", help="keep the seed's 10 metrics")
    args = parser.parse_args()
    with database(args.postgres) as (url, tmp):
        print(f"machine: {machine(url)}")
        took = seed(url, nodes=args.nodes, gpus=args.gpus)
        print(f"seeded {args.nodes} nodes × {args.gpus} GPUs in {took:.1f} s")
        if not args.sparse:
            fill_metrics(url)
        took = add_history(url, args.history_minutes)
        print(f"+ {args.history_minutes:g} min of 10-s samples per GPU in {took:.1f} s")
        split(url)
        scrape(url, tmp, args.repeat)


if __name__ == "__main__":
    main()
