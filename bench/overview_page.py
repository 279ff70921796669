"""Fleet overview at scale: response size and time of ``/`` and its 5 s refresh for a seeded fleet.

Seeds ``--nodes × --gpus`` (default 1,000 × 8) through the ingest service (the same code path
as ``POST /api/v1/ingest``, without HTTP) into a fresh SQLite file, or a fresh Postgres database
with ``--postgres``: 4 clusters, 16 nodes per IB pod, one GPU in 200 lost with an Xid 79, one in
100 thermally throttled, 1 % of nodes stale. The others stay fresh for the whole run
(``stale_after_s`` of an hour: seeding takes longer than the default 120 s); ``--stale`` makes
the whole fleet stale instead (``stale_after_s`` of 1 s, as after a server outage). Then starts
one server and GETs each page ``--repeat`` times, printing the HTML bytes (raw and gzip, as
sent), the median and max wall time per request (client on the same machine), and an in-process
split of one page's server work with the SQL statements it ran: loading the fleet (3),
health (6), building the grid, the recent events (2) (rendering is the rest). The statement
counts do not depend on the fleet's size or freshness (tests/app/test_health_query_count.py).

    python bench/overview_page.py [--nodes 1000] [--gpus 8] [--repeat 5] [--postgres] [--stale]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event, update

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import load_settings  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.fleet import service as fleet_service  # noqa: E402
from app.fleet.models import Node  # noqa: E402
from app.health import service as health_service  # noqa: E402
from app.health.rules import rules_from_settings  # noqa: E402
from app.ingest import service as ingest_service  # noqa: E402
from app.ingest.schemas import IngestBatchIn  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.overview import service as overview_service  # noqa: E402
from app.overview import tiles  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.factories import gpu, iso, sample  # noqa: E402
from tests.live_server import live_server  # noqa: E402

STALE_AFTER_S = 3600.0
PAGES = (
    ("page, health overlay", "/"),
    ("page, temperature overlay", "/?overlay=temp"),
    ("refresh partial (5 s)", "/fleet/_nodes"),
    ("refresh partial, problems only", "/fleet/_nodes?problems=1"),
    ("table view", "/?view=table"),
)


def node_batch(n: int, gpus: int, now: datetime) -> dict[str, Any]:
    """The ingest payload of node ``n``: one sample per GPU, faults by index (see module doc)."""
    hostname = f"gpu-{n // 250}-{n:04d}"
    inventory = []
    samples = []
    events = []
    for i in range(gpus):
        k = n * gpus + i
        lost = k % 200 == 7
        entry = gpu(i, hostname=hostname, state="lost" if lost else "ok")
        inventory.append(entry)
        if lost:
            events.append(
                {"kind": "xid", "xid": 79, "occurred_at": iso(now), "gpu_uuid": entry["uuid"]}
            )
            continue
        samples.append(
            sample(
                entry,
                now - timedelta(seconds=2),
                util_gpu_pct=(k * 37) % 101,
                temp_c=40 + (k * 13) % 50,
                power_w=100 + (k * 29) % 600,
                clocks_event_reasons=0x40 if k % 100 == 3 else 0,
            )
        )
    return {
        "schema_version": 1,
        "batch_id": str(uuid.uuid4()),
        "sent_at": iso(now),
        "node": {
            "hostname": hostname,
            "labels": {
                "cluster": f"c{n // 250}",
                "ib_pod": f"pod-{n // 16:02d}",
                "rack": f"r{n // 4:03d}",
                "team": ("llm", "vision", "infra")[n % 3],
            },
        },
        "gpus": inventory,
        "samples": samples,
        "events": events,
    }


def seed(url: str, *, nodes: int, gpus: int) -> float:
    """Store the fleet; returns the seconds it took."""
    started = time.perf_counter()
    engine = make_engine(url)
    factory = make_session_factory(engine)
    now = datetime.now(UTC)
    for start in range(0, nodes, 100):
        with session_scope(factory) as session:
            for n in range(start, min(nodes, start + 100)):
                batch = IngestBatchIn.model_validate(node_batch(n, gpus, now))
                node = fleet_service.get_or_create_node(session, hostname=batch.node.hostname)
                ingest_service.store_batch(
                    session,
                    node=node,
                    batch=batch,
                    received_at=now,
                    future_tolerance_s=300,
                    retention_days=30,
                )
    with session_scope(factory) as session:
        session.execute(
            update(Node).where(Node.id % 100 == 0).values(last_seen_at=now - timedelta(hours=1))
        )
    engine.dispose()
    return time.perf_counter() - started


@contextmanager
def database(postgres: bool) -> Iterator[tuple[str, Path]]:
    """A fresh, migrated database URL and a scratch directory."""
    with tempfile.TemporaryDirectory() as tmp:
        if postgres:
            with postgres_database() as url:  # migrated
                yield url, Path(tmp)
        else:
            url = f"sqlite:///{Path(tmp) / 'overview.db'}"
            upgrade(url)
            yield url, Path(tmp)


def split(url: str, stale_after_s: float) -> None:
    """Print the milliseconds and SQL statements of each step of one overview build, in
    process."""
    engine = make_engine(url)
    settings = load_settings(database_url=url, stale_after_s=stale_after_s)
    ran: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda _c, _cur, sql, *_a: ran.append(sql))
    with session_scope(make_session_factory(engine)) as session:
        now = datetime.now(UTC)
        t0 = time.perf_counter()
        views = overview_service.list_views(session, stale_after_s=stale_after_s, now=now)
        t1, n1 = time.perf_counter(), len(ran)
        health = health_service.evaluate_views(
            session, views=views, rules=rules_from_settings(settings), now=now
        )
        t2, n2 = time.perf_counter(), len(ran)
        tiles.build_grid(views, health, overlay="temp")
        t3 = time.perf_counter()
        overview_service.recent_events(session, limit=20)
        t4, n4 = time.perf_counter(), len(ran)
    engine.dispose()
    print(
        f"in process: load fleet {(t1 - t0) * 1000:.0f} ms ({n1} statements), "
        f"health {(t2 - t1) * 1000:.0f} ms ({n2 - n1}), grid {(t3 - t2) * 1000:.0f} ms, "
        f"events {(t4 - t3) * 1000:.0f} ms ({n4 - n2})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--stale", action="store_true", help="the whole fleet stale")
    args = parser.parse_args()
    stale_after_s = 1.0 if args.stale else STALE_AFTER_S
    with database(args.postgres) as (url, tmp):
        took = seed(url, nodes=args.nodes, gpus=args.gpus)
        backend = "Postgres" if args.postgres else "SQLite"
        print(f"{backend}: seeded {args.nodes} nodes × {args.gpus} GPUs in {took:.1f} s")
        if args.stale:
            time.sleep(stale_after_s)
        split(url, stale_after_s=stale_after_s)
        settings = load_settings(database_url=url, data_dir=tmp, stale_after_s=stale_after_s)
        with live_server(settings) as server, httpx.Client(base_url=server.url, timeout=120) as c:
            c.get("/")  # warm-up
            print(f"{'request':34} {'raw KiB':>9} {'gzip KiB':>9} {'median ms':>10} {'max ms':>8}")
            for title, path in PAGES:
                times, raw, sent = [], 0, 0
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    response = c.get(path, headers={"Accept-Encoding": "gzip"})
                    times.append((time.perf_counter() - t0) * 1000)
                    response.raise_for_status()
                    raw, sent = len(response.content), response.num_bytes_downloaded
                print(
                    f"{title:34} {raw / 1024:9.0f} {sent / 1024:9.0f} "
                    f"{statistics.median(times):10.0f} {max(times):8.0f}"
                )


if __name__ == "__main__":
    main()
