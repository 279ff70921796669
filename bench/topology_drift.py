"""Topology drift at scale: ``find_drift`` and the ``/topology`` page for a seeded fleet.

Seeds ``--nodes × 8 GPUs`` (default 1,000) into a fresh Postgres database: each node's batch
(DGX A100 ``nvidia-smi topo -m`` capture, 8 GPUs with PCIe readings, 12 NVLinks per GPU —
``--links`` of them, 18 by default, are stored and the rest are ``down`` — and one port per NIC)
goes through the ingest service (the code path of ``POST /api/v1/ingest``, without HTTP), 16
nodes per IB pod, one node in 50 with a narrower NVLink pair, one in 70 with a NIC port down, one
in 90 with a PCIe link downtrained. Then ``--minutes`` of NVLink and NIC-port history at 10 s
(default 10: 60 rows per link and port) is added in the database (``INSERT … SELECT
generate_series``), and the tables are analysed.

Prints the row counts, the median and max of ``find_drift`` (in process, ``--repeat`` times), the
number of SQL statements one call runs, and the median and max wall time of ``GET /topology``
and its 5 s refresh ``/topology/_drift`` from a real server (client on the same machine).

    python bench/topology_drift.py [--nodes 1000] [--links 18] [--minutes 10] [--repeat 5]
                                   [--database postgresql://…/name]

``--database`` times an existing database instead (migrated first; seeded only when it has no
node), so one seeded fleet can be timed again after a change — within 15 minutes of seeding,
while its readings are still fresh (``READING_MAX_AGE_S``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event, func, select, text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import load_settings  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.fleet import service as fleet_service  # noqa: E402
from app.ingest import service as ingest_service  # noqa: E402
from app.ingest.schemas import IngestBatchIn  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.series.tables import NicPortSample, NvlinkSample  # noqa: E402
from app.topology import drift_source  # noqa: E402
from app.topology.drift import compare_group, find_drift  # noqa: E402
from tests.app.topology_drift_data import node_payload, set_link  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.live_server import live_server  # noqa: E402

PAGES = (("page", "/topology"), ("refresh partial (5 s)", "/topology/_drift"))


def payload(n: int, links: int) -> dict[str, Any]:
    """Node ``n``'s batch (see the module doc for which nodes drift and how)."""
    hostname = f"dgx-{n:04d}"
    alter: Callable[[dict[str, Any]], None] | None = None
    if n % 50 == 7:

        def alter(topology: dict[str, Any]) -> None:
            set_link(topology, "GPU3", "GPU5", "NV6")

    body = node_payload(
        hostname,
        labels={"ib_pod": f"pod-{n // 16:03d}", "rack": f"r{n // 4:03d}"},
        alter=alter,
        down_nics=("mlx5_7",) if n % 70 == 11 else (),
        pcie_gen={2: 3} if n % 90 == 13 else None,
    )
    up = {(x["gpu_uuid"], x["link"]) for x in body["nvlinks"]}
    body["nvlinks"] = [
        {**x, "link": link, "state": "up" if (x["gpu_uuid"], link) in up else "down"}
        for x in body["nvlinks"]
        if x["link"] == 0
        for link in range(links)
    ]
    return body


def seed(url: str, *, nodes: int, links: int, minutes: int) -> float:
    """Store the fleet and its history; returns the seconds it took."""
    started = time.perf_counter()
    engine = make_engine(url)
    factory = make_session_factory(engine)
    for start in range(0, nodes, 50):
        with session_scope(factory) as session:
            for n in range(start, min(nodes, start + 50)):
                batch = IngestBatchIn.model_validate(payload(n, links))
                node = fleet_service.get_or_create_node(session, hostname=batch.node.hostname)
                ingest_service.store_batch(
                    session,
                    node=node,
                    batch=batch,
                    received_at=datetime.now(UTC),
                    future_tolerance_s=300,
                    retention_days=30,
                )
    steps = f"generate_series(1, {minutes * 6 - 1}) AS k"
    with engine.begin() as conn:
        for table, columns in (
            ("nvlink_sample", [c.name for c in NvlinkSample.__table__.columns]),
            ("nic_port_sample", [c.name for c in NicPortSample.__table__.columns]),
        ):
            back = "sampled_at - k * interval '10 seconds'"
            moved = [back if c == "sampled_at" else c for c in columns]
            conn.execute(
                text(
                    f"INSERT INTO {table} ({', '.join(columns)}) "
                    f"SELECT {', '.join(moved)} FROM {table} CROSS JOIN {steps}"
                )
            )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE"))
    engine.dispose()
    return time.perf_counter() - started


def counts(url: str) -> str:
    """``table rows`` of the tables drift reads."""
    engine = make_engine(url)
    with engine.connect() as conn:
        found = [
            f"{t} {conn.scalar(select(func.count()).select_from(text(t))):,}"
            for t in ("node", "gpu", "topology_change", "nvlink_sample", "nic_port_sample")
        ]
    engine.dispose()
    return ", ".join(found)


def time_find_drift(url: str, repeat: int) -> None:
    """Print ``find_drift``'s median and max milliseconds and its statement count."""
    engine = make_engine(url)
    statements = 0

    def count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    event.listen(engine, "before_cursor_execute", count)
    factory = make_session_factory(engine)
    times, found = [], 0
    for _ in range(repeat):
        statements = 0
        with session_scope(factory) as session:
            t0 = time.perf_counter()
            found = len(find_drift(session, now=datetime.now(UTC)))
            times.append((time.perf_counter() - t0) * 1000)
    print(
        f"find_drift: {found} findings, {statements} SQL statements, "
        f"median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"
    )
    with session_scope(factory) as session:
        now = datetime.now(UTC)
        oldest = now - timedelta(seconds=drift_source.READING_MAX_AGE_S)
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("documents", lambda: drift_source.latest_documents(session, now=now)),
            ("GPUs", lambda: drift_source.gpu_facts(session, oldest=oldest)),
            ("NVLinks", lambda: drift_source.nvlinks_up(session, oldest=oldest)),
            ("NIC ports", lambda: drift_source.nic_port_states(session, oldest=oldest)),
            ("signatures", lambda: drift_source.load_signatures(session, now=now)),
        ]
        split = []
        for name, step in steps:
            t0 = time.perf_counter()
            signatures = step()
            split.append(f"{name} {(time.perf_counter() - t0) * 1000:.0f} ms")
        t0 = time.perf_counter()
        compare_group(signatures)
        split.append(f"compare {(time.perf_counter() - t0) * 1000:.0f} ms")
    engine.dispose()
    print("in process: " + ", ".join(split))


def time_pages(url: str, data_dir: Path, repeat: int) -> None:
    """Print the median and max wall time of each drift page from a real server."""
    upgrade(url)  # the server refuses a database behind the newest migration
    settings = load_settings(database_url=url, data_dir=data_dir)
    with live_server(settings) as server, httpx.Client(base_url=server.url, timeout=600) as c:
        c.get("/topology").raise_for_status()  # warm-up
        for title, path in PAGES:
            times, size = [], 0
            for _ in range(repeat):
                t0 = time.perf_counter()
                response = c.get(path)
                times.append((time.perf_counter() - t0) * 1000)
                response.raise_for_status()
                size = len(response.content)
            print(
                f"GET {path:18} {title:22} {size / 1024:6.0f} KiB, "
                f"median {statistics.median(times):.0f} ms, max {max(times):.0f} ms"
            )


@contextmanager
def database(url: str | None) -> Iterator[str]:
    """``url`` migrated, else a fresh migrated Postgres database dropped on exit."""
    if url:
        upgrade(url)
        yield url
        return
    with postgres_database() as fresh:
        yield fresh


def node_count(url: str) -> int:
    """Nodes stored in ``url``."""
    engine = make_engine(url)
    with engine.connect() as conn:
        found = conn.scalar(select(func.count()).select_from(text("node"))) or 0
    engine.dispose()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--links", type=int, default=18)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database", help="an existing Postgres database URL to use")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database(args.database) as url:
        if not node_count(url):
            took = seed(url, nodes=args.nodes, links=args.links, minutes=args.minutes)
            print(f"Postgres: seeded {args.nodes} nodes × 8 GPUs in {took:.0f} s")
        print(counts(url))
        time_find_drift(url, args.repeat)
        time_pages(url, Path(tmp), args.repeat)


if __name__ == "__main__":
    main()
