"""Ingest rate: GPU samples stored per second by ONE server process (or ``--workers N`` web
processes on one port) on Postgres, with the node sections an agent sends, against a raw COPY
of the same rows measured in the same run.

Starts ``fleetwatch serve`` (one uvicorn process; with ``--workers N``, N web processes and a
jobs worker) on a fresh Postgres database, then N client
threads, one per simulated 8-GPU HGX node, POST gzip batches of ``--gpus × --samples`` samples
(one per GPU every ``--interval`` seconds) as fast as the server answers, for ``--seconds``.
With ``--sections`` (the default) each batch also carries what the agent sends over the same
seconds (agents/agent.py, agents/simulated/): every ``--host-interval`` seconds 3 disks, 3
mounts, 1 NFS mount and 8 NIC ports; every ``--nvlink-interval`` seconds 18 NVLinks per GPU.
The default mix (1-s ticks, host sections every tick, NVLinks every 30 s, samples of the 10
metrics of ``tests.factories.sample``) is the one earlier figures were measured with;
``--agent-defaults`` sends what a fleet of default agents sends instead: the three intervals of
the agent's defaults (``AgentConfig``: GPU values every 10 s, host sections and NVLinks every
60 s) and samples with every metric the simulated agent writes (``--agent-samples``: 38).
``--table-form`` sends the same lists in the table form (:mod:`app.ingest.table_form`).

Then the anchor: into the same database, for a fresh node and fresh GPUs, one binary ``COPY``
per table of as many rows as the run stored (``gpu_sample``, and each section table), timed
with its commit. Prints the stored-sample rate, the rows/s of every table together, the
anchor's rates and the ratios, the batch latency median and p99, the server process's CPU
seconds per batch, the CPU of the server, Postgres, the clients and everything else on the
machine (``/proc/stat``: other load on a shared machine shows there), and checks the stored
row count against what was acknowledged.

    python bench/ingest_rate.py [--nodes 16] [--gpus 8] [--samples 60] [--seconds 20]
                                [--no-sections] [--interval 1] [--host-interval 1]
                                [--nvlink-interval 30] [--agent-defaults] [--table-form]
                                [--workers 1]

Bodies are made before the clock starts (``--pool`` batches per node, gzip as the agent
compresses them), so the clients spend their CPU on HTTP only; they still run on the same
machine as the server and Postgres, so the figure is a lower bound. A client whose pool runs
dry makes its batches as it goes (and the run says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import func, select, table
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import app.models  # noqa: E402, F401  (every table on Base.metadata)
from agents.agent import AgentConfig  # noqa: E402
from agents.payload import as_table_form  # noqa: E402
from agents.simulated.collector import SimulatedCollector  # noqa: E402
from app.db import Base, make_engine  # noqa: E402
from app.series.tables import gpu_sample  # noqa: E402
from app.series.writes import pg_copy_type  # noqa: E402
from tests.app import section_factories  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token, gpu, iso, sample  # noqa: E402
from tests.live_server import free_port  # noqa: E402

#: Payload section → table, in the order the anchor copies them.
TABLES = {
    "samples": "gpu_sample",
    "nvlinks": "nvlink_sample",
    "disks": "disk_sample",
    "mounts": "mount_sample",
    "nfs_mounts": "nfs_sample",
    "nic_ports": "nic_port_sample",
}
DISKS = ("nvme0n1", "nvme1n1", "nvme2n1")
MOUNTS = ("/", "/data", "/scratch")
NIC_PORTS = 8


def make_payload(
    hostname: str, args: argparse.Namespace, start: datetime, first_tick: int
) -> dict[str, Any]:
    """One batch: ``args.samples`` ticks ``args.interval`` seconds apart from ``start``; tick
    numbers count from the node's first batch (host sections go every ``args.host_interval``
    seconds, NVLinks every ``args.nvlink_interval`` seconds, both at a tick)."""
    inventory = [gpu(i, hostname=hostname) for i in range(args.gpus)]
    ticks = [start + timedelta(seconds=i * args.interval) for i in range(args.samples)]
    host = [
        at for i, at in enumerate(ticks) if _due(first_tick + i, args.interval, args.host_interval)
    ]
    payload: dict[str, Any] = {
        "schema_version": 1,
        "batch_id": str(uuid.uuid4()),
        "sent_at": iso(datetime.now(UTC)),
        "node": {"hostname": hostname, "labels": {"cluster": "bench"}},
        "gpus": inventory,
        "samples": [
            {**AGENT_METRICS, **sample(g, at, util_gpu_pct=(i * 7) % 100)}
            if args.agent_samples
            else sample(g, at, util_gpu_pct=(i * 7) % 100)
            for g in inventory
            for i, at in enumerate(ticks)
        ],
        "events": [],
    }
    if args.sections:
        payload["nvlinks"] = [
            link
            for i, at in enumerate(ticks)
            if _due(first_tick + i, args.interval, args.nvlink_interval)
            for g in inventory
            for link in section_factories.nvlinks(g, at)
        ]
        payload["disks"] = [section_factories.disk(at, d) for at in host for d in DISKS]
        payload["mounts"] = [section_factories.mount(at, m) for at in host for m in MOUNTS]
        payload["nfs_mounts"] = [section_factories.nfs_mount(at) for at in host]
        payload["nic_ports"] = [
            section_factories.nic_port(at, f"mlx5_{p}") for at in host for p in range(NIC_PORTS)
        ]
    return payload


def _agent_metrics() -> dict[str, Any]:
    """The metrics of one sample as the simulated agent writes it (every metric of the
    catalog, ``null`` where NVML has none), without its GPU and time."""
    made = SimulatedCollector(hostname="bench-shape", seed=1).sample(datetime.now(UTC))[0]
    return {k: v for k, v in made.items() if k not in ("gpu_uuid", "sampled_at")}


AGENT_METRICS = _agent_metrics()


def apply_agent_defaults(args: argparse.Namespace) -> None:
    """Set ``args``' three intervals to the agent's defaults (``AgentConfig``) and
    ``agent_samples``: what a fleet of default agents sends."""
    defaults = {f.name: f.default for f in dataclasses.fields(AgentConfig)}
    args.interval = defaults["interval_s"]
    args.host_interval = defaults["host_interval_s"]
    args.nvlink_interval = defaults["nvlink_interval_s"]
    args.agent_samples = True


def _due(tick: int, interval: float, every: float) -> bool:
    """Whether tick number ``tick`` (``interval`` seconds apart) is one at which a reading sent
    every ``every`` seconds goes: the first tick of each ``every``-second span."""
    if every <= interval:
        return True
    return int(tick * interval // every) != int((tick - 1) * interval // every) or tick == 0


class Node:
    """One simulated node: its token, its batches made ahead, and where its clock stands."""

    def __init__(self, hostname: str, token: str, args: argparse.Namespace, origin: datetime):
        self.hostname, self.token, self.args = hostname, token, args
        self.origin = origin
        self.tick = 0
        self.pool: list[bytes] = []
        self.made_late = 0

    def make(self) -> bytes:
        payload = make_payload(
            self.hostname,
            self.args,
            self.origin + timedelta(seconds=self.tick * self.args.interval),
            self.tick,
        )
        self.tick += self.args.samples
        if self.args.table_form:
            payload = as_table_form(payload)  # as the agent spools it
        return gzip.compress(json.dumps(payload).encode(), compresslevel=6)  # as agents/push.py

    def next_body(self) -> bytes:
        if self.pool:
            return self.pool.pop()
        self.made_late += 1
        return self.make()


def add_batch_options(parser: argparse.ArgumentParser, *, samples: int) -> None:
    """The options that shape a simulated node's batches (:class:`Node`, :func:`make_payload`),
    shared by the benches that make them; ``samples``: the default samples per GPU per batch."""
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--samples", type=int, default=samples, help="samples per GPU per batch")
    parser.add_argument(
        "--sections",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="send the node sections an agent sends (NVLinks, disks, mounts, NFS, NIC ports)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between GPU ticks")
    parser.add_argument(
        "--host-interval", type=float, default=1.0, help="seconds between host sections"
    )
    parser.add_argument(
        "--nvlink-interval", type=float, default=30.0, help="seconds between NVLinks"
    )
    parser.add_argument(
        "--agent-samples",
        action="store_true",
        help="samples with every metric the agent sends (38; default: the test factory's 10)",
    )
    parser.add_argument(
        "--agent-defaults",
        action="store_true",
        help="the three intervals of the agent's defaults (agents/agent.py AgentConfig), "
        "and --agent-samples",
    )
    parser.add_argument(
        "--table-form",
        action="store_true",
        help="send the bulk lists in the table form (app/ingest/table_form.py: fields + rows)",
    )


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds so far of process ``pid`` and its descendants (the web workers
    and the jobs worker of ``serve --workers``; Linux /proc)."""
    parents: dict[int, int] = {}
    spent: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        spent[child] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for child, seconds in spent.items():
        up = child
        while up not in (0, 1) and up != pid:
            up = parents.get(up, 0)
        if up == pid:
            total += seconds
    return total


def machine_cpu_s() -> float:
    """Busy CPU seconds so far of the whole machine, every CPU together (``/proc/stat``: all
    but idle and iowait); 0 where it cannot be read."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_s() -> float:
    """User + system CPU seconds so far of every process named ``postgres`` on this machine
    (the server's backends, the WAL writer, the checkpointer …); 0 where /proc cannot tell."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name, rest = text.split("(", 1)[1].rsplit(")", 1)
        if name == "postgres":
            fields = rest.split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def run_clients(base: str, nodes: list[Node], seconds: float) -> tuple[list[float], Counter[str]]:
    """Every node posts its batches until ``seconds`` have passed; returns the latencies and
    the summed answers (``samples_stored`` and ``sections_stored``)."""
    latencies: list[float] = []
    stored: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(node: Node) -> None:
        with httpx.Client(timeout=60) as http:
            while time.monotonic() < deadline:
                body = node.next_body()
                began = time.perf_counter()
                response = http.post(
                    f"{base}/api/v1/ingest",
                    content=body,
                    headers={
                        "Authorization": f"Bearer {node.token}",
                        "Content-Type": "application/json",
                        "Content-Encoding": "gzip",
                    },
                )
                elapsed = time.perf_counter() - began
                response.raise_for_status()
                answer = response.json()
                with lock:
                    latencies.append(elapsed)
                    stored["samples"] += answer["samples_stored"]
                    stored.update(answer["sections_stored"])

    threads = [threading.Thread(target=client, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, stored


def copy_anchor(
    url: str, rows_per_table: dict[str, int], *, agent_samples: bool = False
) -> dict[str, float]:
    """Seconds for one binary COPY (and its commit) of ``rows_per_table[name]`` rows into each
    table, for a fresh node and 8 fresh GPUs of the same database; the rows have the values of
    the bench's payloads."""
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    now = datetime.now(UTC)
    origin = now - timedelta(days=2)
    with psycopg.connect(dsn) as conn:
        node_id = conn.execute(
            "INSERT INTO node (hostname, labels, created_at) VALUES (%s, '{}', %s) RETURNING id",
            (f"anchor-{uuid.uuid4().hex[:8]}", now),
        ).fetchone()[0]  # type: ignore[index]
        gpu_ids = [
            conn.execute(
                "INSERT INTO gpu (uuid, node_id, index, first_seen_at, last_seen_at, state) "
                "VALUES (%s, %s, %s, %s, %s, 'ok') RETURNING id",
                (f"GPU-anchor-{uuid.uuid4()}", node_id, i, now, now),
            ).fetchone()[0]  # type: ignore[index]
            for i in range(8)
        ]
        conn.commit()
        made = _anchor_rows(node_id, gpu_ids, origin, now, rows_per_table, agent_samples)
        seconds: dict[str, float] = {}
        for name, (columns, types, rows) in made.items():
            began = time.perf_counter()
            with (
                conn.cursor() as cur,
                cur.copy(f"COPY {name} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(types)
                for row in rows:
                    copy.write_row(row)
            conn.commit()
            seconds[name] = time.perf_counter() - began
    return seconds


def _anchor_rows(
    node_id: int,
    gpu_ids: list[int],
    origin: datetime,
    now: datetime,
    rows_per_table: dict[str, int],
    agent_samples: bool,
) -> dict[str, tuple[list[str], list[str], list[tuple[Any, ...]]]]:
    """Rows for :func:`copy_anchor`, made before its clock starts: the payloads' values, keys
    made unique by counting through GPUs (or devices), then seconds."""
    gpu_values = sample(gpu(0), now)
    if agent_samples:
        gpu_values = {**AGENT_METRICS, **gpu_values}
    link = section_factories.nvlinks(gpu(0), now)[0]
    entries = {
        "gpu_sample": (
            {**gpu_values, "received_at": now},
            lambda i: {"gpu_id": gpu_ids[i % 8], "sampled_at": origin + timedelta(seconds=i // 8)},
        ),
        "nvlink_sample": (
            link,
            lambda i: {
                "gpu_id": gpu_ids[i % 8],
                "link": (i // 8) % 18,
                "sampled_at": origin + timedelta(seconds=i // 144),
            },
        ),
        "disk_sample": (
            section_factories.disk(now),
            lambda i: {
                "node_id": node_id,
                "device": f"nvme{i % 3}n1",
                "sampled_at": _s(origin, i, 3),
            },
        ),
        "mount_sample": (
            section_factories.mount(now),
            lambda i: {
                "node_id": node_id,
                "mountpoint": f"/m{i % 3}",
                "sampled_at": _s(origin, i, 3),
            },
        ),
        "nfs_sample": (
            section_factories.nfs_mount(now),
            lambda i: {"node_id": node_id, "sampled_at": _s(origin, i, 1)},
        ),
        "nic_port_sample": (
            section_factories.nic_port(now),
            lambda i: {
                "node_id": node_id,
                "device": f"mlx5_{i % 8}",
                "sampled_at": _s(origin, i, 8),
            },
        ),
    }
    made: dict[str, tuple[list[str], list[str], list[tuple[Any, ...]]]] = {}
    for name, (values, keys) in entries.items():
        count = rows_per_table.get(name, 0)
        if not count:
            continue
        target = Base.metadata.tables[name]
        columns = [c.name for c in target.columns]
        types = [pg_copy_type(c) for c in target.columns]
        rows = []
        for i in range(count):
            row = {**values, **keys(i)}
            rows.append(tuple(row.get(c) for c in columns))
        made[name] = (columns, types, rows)
    return made


def _s(origin: datetime, i: int, per_tick: int) -> datetime:
    return origin + timedelta(seconds=i // per_tick)


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20)
    add_batch_options(parser, samples=60)
    parser.add_argument("--pool", type=int, default=0, help="batches made ahead per node")
    parser.add_argument(
        "--workers", type=int, default=1, help="web processes (fleetwatch serve --workers)"
    )
    args = parser.parse_args()
    if args.agent_defaults:
        apply_agent_defaults(args)
    pool = args.pool or max(4, int(args.seconds * 5))

    with postgres_database() as url:
        port = free_port()
        command = [sys.executable, "-m", "app", "serve", "--database-url", url]
        command += ["--port", str(port), "--workers", str(args.workers)]
        server = subprocess.Popen(
            command,
            env={**os.environ, "FLEETWATCH_LOG_LEVEL": "warning"},
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    httpx.get(f"{base}/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            # Far enough back that every batch made ahead lies in the past (10-s ticks span
            # 10 minutes a batch), and within the default retention.
            span_s = pool * args.samples * args.interval
            origin = datetime.now(UTC) - timedelta(seconds=max(86400.0, span_s + 3600))
            nodes = [
                Node(f"bench-{i:03d}", create_token(url, f"bench-{i:03d}"), args, origin)
                for i in range(args.nodes)
            ]
            made_at = time.monotonic()
            for node in nodes:
                node.pool = [node.make() for _ in range(pool)][::-1]
            print(f"made {pool} batches per node in {time.monotonic() - made_at:.0f} s")
            load = os.getloadavg()
            cpu_before = server_cpu_s(server.pid)
            pg_before, clients_before = postgres_cpu_s(), time.process_time()
            machine_before = machine_cpu_s()
            began = time.monotonic()
            latencies, stored = run_clients(base, nodes, args.seconds)
            wall = time.monotonic() - began
            server_cpu = server_cpu_s(server.pid) - cpu_before
            pg_cpu = postgres_cpu_s() - pg_before
            clients_cpu = time.process_time() - clients_before
            machine_cpu = machine_cpu_s() - machine_before
        finally:
            server.terminate()
            server.wait(timeout=15)
        engine = make_engine(url)
        with engine.connect() as conn:
            rows = {
                name: conn.scalar(select(func.count()).select_from(table(name))) or 0
                for name in TABLES.values()
            }
            rows["gpu_sample"] = conn.scalar(select(func.count()).select_from(gpu_sample)) or 0
        engine.dispose()
        anchor = copy_anchor(url, rows, agent_samples=args.agent_samples)

    latencies.sort()
    batches = len(latencies)
    all_rows = sum(rows.values())
    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average before the run {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        "clients, server and Postgres on the same machine"
    )
    print(
        f"server processes: {args.workers} web"
        + (" + 1 jobs worker" if args.workers > 1 else " (jobs in the same process)")
        + "; "
        f"nodes={args.nodes} gpus/node={args.gpus} samples/gpu/batch={args.samples} "
        f"batch={args.gpus * args.samples} samples"
        + (f" of {len(AGENT_METRICS)} metrics" if args.agent_samples else " of 10 metrics")
        + (
            f" {args.interval:g} s apart + sections (NVLinks every {args.nvlink_interval:g} s; "
            f"{len(DISKS)} disks, {len(MOUNTS)} mounts, 1 NFS, {NIC_PORTS} NIC ports every "
            f"{args.host_interval:g} s)"
            if args.sections
            else " (no sections)"
        )
        + (" in the table form" if args.table_form else "")
        + f", {batches} batches in {wall:.1f} s"
    )
    late = sum(node.made_late for node in nodes)
    if late:
        print(f"note: {late} batches were made during the run (the pool ran dry): lower figure")
    sample_rate = stored["samples"] / wall
    print(f"stored GPU samples/s: {sample_rate:,.0f}")
    print(f"stored rows/s, every table: {all_rows / wall:,.0f} ({all_rows} rows)")
    print(
        f"batch latency median {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {latencies[max(0, int(batches * 0.99) - 1)] * 1000:.0f} ms; "
        f"server CPU {server_cpu / wall:.2f} cores, {server_cpu / batches * 1000:.1f} ms per batch"
    )
    per_k = 1000 / max(1, stored["samples"])
    spent = max(machine_cpu, server_cpu + pg_cpu + clients_cpu)
    other = spent - server_cpu - pg_cpu - clients_cpu
    print(
        f"CPU per 1,000 GPU samples stored: server {server_cpu * per_k * 1000:.0f} ms, "
        f"Postgres {pg_cpu * per_k * 1000:.0f} ms, clients {clients_cpu * per_k * 1000:.0f} ms, "
        f"everything else on the machine {other * per_k * 1000:.0f} ms (kernel, exited "
        f"processes, other load); the machine {spent / wall:.2f} of {os.cpu_count()} CPUs busy, "
        f"so its ceiling at this cost is ~{stored['samples'] / spent * (os.cpu_count() or 1):,.0f}"
        " GPU samples/s"
    )
    copy_samples = rows["gpu_sample"] / anchor["gpu_sample"]
    copy_all = all_rows / sum(anchor.values())
    print(
        f"raw binary COPY anchor, same run and database: gpu_sample {copy_samples:,.0f} rows/s; "
        f"every table {copy_all:,.0f} rows/s"
    )
    print(
        f"end to end / raw COPY: GPU samples {sample_rate / copy_samples:.2f}, "
        f"every table {all_rows / wall / copy_all:.2f}"
    )
    if args.sections and rows["gpu_sample"]:
        # The anchor's rate in GPU samples/s at this run's mix: the run's GPU samples over the
        # anchor's COPY seconds. One serial stream measured once: a reference, not a ceiling.
        per_sample = all_rows / rows["gpu_sample"]
        print(
            f"the anchor at this mix ({per_sample:.2f} rows of every table per GPU sample): "
            f"{copy_all / per_sample:,.0f} GPU samples/s (one binary COPY per table on one "
            "connection, after the run)"
        )
    acknowledged = {TABLES[k]: v for k, v in stored.items()}
    print(f"rows stored: {rows} (acknowledged as stored: {acknowledged})")


if __name__ == "__main__":
    main()
