"""Bytes per node and day of the host sections (disks, mounts, NFS mounts, IB ports): raw rows,
day blocks and their rollups, on Postgres, from the project's own simulator.

Each node ``host-{i:04d}`` is a simulated HGX node (3 NVMe disks, 3 mounts, an NFS home, 8 IB
ports: ``agents/simulated/host.py``) read every ``--step`` seconds (the agent's
``--host-interval``, 60 s) for ``--days`` whole UTC days, stored through the real ingest
(:func:`app.ingest.service.store_batch`, an hour of readings per batch) into a fresh database
migrated to head. Then, after ``VACUUM FULL`` at each stage:

1. the raw tables (``disk_sample`` …, indexes included);
2. their 1-minute and 1-hour rollups, rebuilt (``fleetwatch rollups rebuild``);
3. the raw rows packed into day blocks by the real compaction (:func:`app.series.compact.
   compact`), and what stays raw; the 1-minute rollups packed by day in the same pass.

Prints bytes per reading and MB per node per day per table and stage, and the ratio blocks ÷
raw. Bytes do not depend on the machine's speed; the machine is printed anyway.

    python bench/host_storage_bytes.py --nodes 4 --days 2
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.simulated.collector import SimulatedCollector  # noqa: E402
from agents.simulated.host import SimulatedHostSource  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.fleet import service as fleet_service  # noqa: E402
from app.ingest import service as ingest_service  # noqa: E402
from app.ingest.schemas import IngestBatchIn  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.series.blocks import HOST_SPECS  # noqa: E402
from app.series.compact import compact  # noqa: E402
from app.series.rollups.jobs import rebuild  # noqa: E402

SECTIONS = {
    "disks": "disk_sample",
    "mounts": "mount_sample",
    "nfs_mounts": "nfs_sample",
    "nic_ports": "nic_port_sample",
}
ROLLED_UP = ("disk_sample", "nfs_sample", "nic_port_sample")


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def load(url: str, nodes: int, days: int, step_s: int, start: datetime) -> dict[str, int]:
    """Store every node's readings through the ingest, an hour per batch; returns readings
    per raw table."""
    engine = make_engine(url)
    factory = make_session_factory(engine)
    readings = dict.fromkeys(SECTIONS.values(), 0)
    steps = days * 86400 // step_s
    per_batch = max(1, 3600 // step_s)
    try:
        for i in range(nodes):
            hostname = f"host-{i:04d}"
            collector = SimulatedCollector(hostname, 8)
            host = SimulatedHostSource(collector)
            for first in range(0, steps, per_batch):
                sections: dict[str, list[dict[str, Any]]] = {name: [] for name in SECTIONS}
                for k in range(first, min(first + per_batch, steps)):
                    at = start + timedelta(seconds=k * step_s)
                    collector.sample(at)
                    for name, entries in host.collect(at).items():
                        sections[name].extend(entries)
                for name, table in SECTIONS.items():
                    readings[table] += len(sections[name])
                at = start + timedelta(seconds=min(first + per_batch, steps) * step_s)
                payload = {
                    "schema_version": 1,
                    "batch_id": str(uuid.uuid4()),
                    "sent_at": iso(at),
                    "node": {"hostname": hostname, "labels": {}, "agent_version": "bench"},
                    "gpus": [],
                    "samples": [],
                    **sections,
                }
                with session_scope(factory) as session:
                    node = fleet_service.get_or_create_node(session, hostname=hostname)
                    ingest_service.store_batch(
                        session,
                        node=node,
                        batch=IngestBatchIn.model_validate(payload),
                        received_at=at,
                        future_tolerance_s=300.0,
                        retention_days=3650.0,
                    )
    finally:
        engine.dispose()
    return readings


def sizes(url: str, tables: list[str]) -> dict[str, int]:
    """``VACUUM FULL`` then ``pg_total_relation_size`` of each table (heap, TOAST, indexes)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            out = {}
            for table in tables:
                conn.execute(text(f"VACUUM FULL ANALYZE {table}"))
                out[table] = int(conn.scalar(text(f"SELECT pg_total_relation_size('{table}')")))
            return out
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--days", type=int, default=2, help="whole UTC days of readings")
    parser.add_argument("--step", type=int, default=60, help="seconds between readings")
    parser.add_argument(
        "--database-url",
        default=os.environ.get(
            "FLEETWATCH_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="a Postgres server URL; the bench creates and drops its own database",
    )
    args = parser.parse_args()
    if args.nodes < 1 or args.days < 1 or args.step < 1:
        parser.error("--nodes, --days and --step must be at least 1")
    admin = make_url(args.database_url)
    name = f"fleetwatch_hostbytes_{uuid.uuid4().hex[:8]}"
    admin_engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = admin.set(database=name).render_as_string(hide_password=False)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}")
    try:
        upgrade(url)
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        start = today - timedelta(days=args.days + 1)
        readings = load(url, args.nodes, args.days, args.step, start)
        node_days = args.nodes * args.days
        raw = sizes(url, list(SECTIONS.values()))
        rebuild(make_session_factory(make_engine(url)), since=None)
        rolled = sizes(url, [f"{t}{s}" for t in ROLLED_UP for s in ("_1m", "_1h")])
        end = start + timedelta(days=args.days)
        compact(
            make_session_factory(make_engine(url)),
            compact_after_s=0,
            now=end + timedelta(days=1),
            minutes_after_s=0,
        )
        packed = sizes(url, [s.block.name for s in HOST_SPECS])
        left = sizes(url, list(SECTIONS.values()))
        minute_days = sizes(url, [f"{t}_1m_block" for t in ROLLED_UP])
        minutes_left = sizes(url, [f"{t}_1m" for t in ROLLED_UP])
        print(f"{args.nodes} nodes x {args.days} days, a reading every {args.step} s")
        print(f"{'table':<28}{'readings':>10}{'B/reading':>11}{'MB/node/day':>13}")

        def line(table: str, size: int, count: int) -> None:
            per = size / count if count else float("nan")
            print(f"{table:<28}{count:>10,}{per:>11.1f}{size / node_days / 1e6:>13.3f}")

        total_raw = total_blocks = 0
        for table in SECTIONS.values():
            line(table, raw[table], readings[table])
            line(f"{table}_block", packed[f"{table}_block"], readings[table])
            total_raw += raw[table]
            total_blocks += packed[f"{table}_block"] + left[table]
        for table, size in rolled.items():
            line(table, size, readings[table.rsplit("_", 1)[0]])
        print(f"raw rows, all four:       {total_raw / node_days / 1e6:.3f} MB/node/day")
        print(f"day blocks (+ rows left):  {total_blocks / node_days / 1e6:.3f} MB/node/day")
        print(f"blocks / raw:              {total_blocks / total_raw:.3f}")
        for table, size in minute_days.items():
            line(table, size, readings[table.removesuffix("_1m_block")])
        minutes = sum(v for k, v in rolled.items() if k.endswith("_1m"))
        hours = sum(v for k, v in rolled.items() if k.endswith("_1h"))
        packed_minutes = sum(minute_days.values()) + sum(minutes_left.values())
        print(f"1-minute rollups, rows:    {minutes / node_days / 1e6:.3f} MB/node/day")
        print(f"1-minute rollups, packed:  {packed_minutes / node_days / 1e6:.3f} MB/node/day")
        print(f"1-hour rollups:            {hours / node_days / 1e6:.3f} MB/node/day")
    finally:
        with admin_engine.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin_engine.dispose()


if __name__ == "__main__":
    main()
