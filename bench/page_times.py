"""Page server times on a big fleet: 1,000 nodes × 8 GPUs with 24 h of 10-s GPU samples, Postgres.

Seeds a fresh Postgres database in two steps:

1. the *current* state through the real ingest API: one simulated agent per node (the same
   simulator as ``fleetwatch demo``, mixed labels cluster/pod/rack/team) takes three readings
   10 s apart and pushes them with every node section (topology, NVLinks, storage, NICs); a few
   nodes get faults first (GPU lost, Xid 79, thermal throttling, NVLink down, IB port down,
   slow storage) so the health views have something to find;
2. the *history* server-side with ``INSERT … SELECT generate_series`` (no Python per row): every
   GPU gets a sample every ``--step-s`` seconds for ``--hours`` hours, every disk, NFS mount and
   NIC port the agents reported a sample every ``--host-step-s`` seconds. NVLink rows get no
   history (18 links × 8 GPUs × 1,000 nodes at 10 s is 1.2 billion rows a day; see the issue 3
   note on NVLink row volume).

Then it starts ``fleetwatch serve`` (one uvicorn process) on that database and requests each
page ``--repeat`` times after one warm-up request, printing the median and worst wall time per
page (client on the same machine, localhost, gzip accepted) and the response size. Pages that do
not exist in this build answer 404 and are listed as such.

    python bench/page_times.py                        # full size: ~69 M GPU rows, 10-20 min
    python bench/page_times.py --nodes 50 --hours 1   # quick look
    python bench/page_times.py --keep                 # keep the database, print its URL
    python bench/page_times.py --db-url URL           # re-measure an already seeded database
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.agent import Agent  # noqa: E402
from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from app.config import Settings  # noqa: E402
from app.db import make_engine  # noqa: E402
from app.demo import demo_fleet, write_fleet_file  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from tests.dbs import admin_url  # noqa: E402
from tests.live_server import free_port  # noqa: E402

# (node index, fault kind, extra) applied before the last reading; spread over the pods.
FAULTS = (
    (3, "gpu_lost", {}),
    (117, "xid", {"xid": 79}),
    (242, "thermal_throttle", {}),
    (389, "nvlink_down", {}),
    (501, "ib_port_down", {}),
    (777, "storage_slow", {}),
)

GPU_HISTORY_SQL = """
INSERT INTO gpu_sample (gpu_id, sampled_at, received_at, util_gpu_pct, util_mem_pct,
    mem_used_bytes, mem_free_bytes, power_w, power_limit_w, temp_c, mem_temp_c, sm_clock_mhz,
    mem_clock_mhz, pstate, clocks_event_reasons, pcie_tx_bytes_per_s, pcie_rx_bytes_per_s,
    nvlink_tx_bytes_per_s, nvlink_rx_bytes_per_s, ecc_corrected_volatile_count,
    ecc_uncorrected_volatile_count, pcie_link_gen, pcie_link_gen_max, pcie_link_width,
    pcie_link_width_max)
SELECT g.id, ts, ts,
    u, u * 0.6, (u * 8e8)::bigint, (85e9 - u * 8e8)::bigint, 80 + u * 6, 700, 32 + u * 0.45,
    40 + u * 0.4, (1980 * (0.5 + u / 200))::bigint, 2619, 0, 0, u * 2e8, u * 1e8, u * 3e9,
    u * 3e9, (extract(epoch FROM ts) / 3600)::bigint % 7, 0, 5, 5, 16, 16
FROM gpu g
CROSS JOIN generate_series(:start, :stop, make_interval(secs => :step)) AS ts
CROSS JOIN LATERAL (SELECT (50 + 45 * sin(extract(epoch FROM ts) / 900 + g.id))::double precision
                    AS u) AS load
ORDER BY g.id, ts
"""

HOST_HISTORY_SQL = (
    """
INSERT INTO disk_sample (node_id, device, sampled_at, read_bytes_per_s, write_bytes_per_s,
    read_iops, write_iops, busy_pct, avg_wait_s)
SELECT d.node_id, d.device, ts, 2e8 * (1 + sin(extract(epoch FROM ts) / 600)),
    5e7, 900, 300, 35 + 30 * sin(extract(epoch FROM ts) / 600), 0.0008
FROM (SELECT DISTINCT node_id, device FROM disk_sample) d
CROSS JOIN generate_series(:start, :stop, make_interval(secs => :step)) AS ts
ON CONFLICT DO NOTHING
""",
    """
INSERT INTO nfs_sample (node_id, mountpoint, sampled_at, export, version, read_bytes_per_s,
    write_bytes_per_s, ops_per_s, retransmits_per_s, avg_rtt_s)
SELECT n.node_id, n.mountpoint, ts, n.export, n.version, 3e8, 2e7, 4000,
    CASE WHEN extract(minute FROM ts) = 7 THEN 2 ELSE 0 END, 0.0011
FROM (SELECT DISTINCT ON (node_id, mountpoint) node_id, mountpoint, export, version
      FROM nfs_sample ORDER BY node_id, mountpoint, sampled_at DESC) n
CROSS JOIN generate_series(:start, :stop, make_interval(secs => :step)) AS ts
ON CONFLICT DO NOTHING
""",
    """
INSERT INTO nic_port_sample (node_id, device, port, sampled_at, link_layer, state, phys_state,
    rate_gbps, tx_bytes_per_s, rx_bytes_per_s, symbol_error_count, link_downed_count,
    link_error_recovery_count, port_rcv_errors_count, port_xmit_discards_count)
SELECT p.node_id, p.device, p.port, ts, p.link_layer, 'ACTIVE', 'LINK_UP', p.rate_gbps,
    1e10 * (1 + sin(extract(epoch FROM ts) / 300)), 1e10, 0, 0, 0, 0, 0
FROM (SELECT DISTINCT ON (node_id, device, port) node_id, device, port, link_layer, rate_gbps
      FROM nic_port_sample ORDER BY node_id, device, port, sampled_at DESC) p
CROSS JOIN generate_series(:start, :stop, make_interval(secs => :step)) AS ts
ON CONFLICT DO NOTHING
""",
)


def pages(hostname: str) -> list[tuple[str, str]]:
    """(name, path) of every page measured; ``hostname`` is a faulty node."""
    return [
        ("fleet overview", "/"),
        ("fleet overview, problems only", "/?problems=1"),
        ("fleet node table", "/?view=table"),
        ("fleet refresh partial", "/fleet/_nodes"),
        ("fleet refresh, nothing changed", "/fleet/_nodes?seen={version}"),
        ("fleet refresh partial, table", "/fleet/_nodes?view=table"),
        ("fleet health API", "/api/v1/health"),
        ("node page (1 h)", f"/nodes/{hostname}"),
        ("node page (24 h)", f"/nodes/{hostname}?range=24h"),
        ("node live partial", f"/nodes/{hostname}/_live"),
        ("GPU page (24 h)", f"/nodes/{hostname}/gpus/0?range=24h"),
        ("node topology", f"/nodes/{hostname}/topology"),
        ("fleet topology and drift", "/topology"),
        ("storage (1 h)", "/storage"),
        ("storage (24 h)", "/storage?range=24h"),
    ]


def seed_current(url: str, server: str, count: int, work: Path) -> list[str]:
    """Create tokens and push three readings per node through the ingest API; return the
    hostnames in fleet order."""
    settings = Settings(database_url=url)
    fleet = demo_fleet(count, 8)
    fleet_file = work / "fleet.json"
    write_fleet_file(settings, fleet, fleet_file)
    nodes = [FleetNode(**entry) for entry in json.loads(fleet_file.read_text())["nodes"]]
    sim = SimFleet(nodes, server_url=server, spool_root=work / "spool", interval_s=10)
    hostnames = [n.hostname for n in nodes]
    now = datetime.now(UTC)

    def push(item: tuple[int, str]) -> None:
        index, hostname = item
        agent: Agent = sim.agents[hostname]
        for step in (20, 10):
            agent.collect(now - timedelta(seconds=step))
        for at, kind, extra in FAULTS:
            if at == index:
                sim.inject(hostname, kind, **extra)
        agent.collect(now)
        agent.cut_batch()
        if not agent.push_pending(ignore_backoff=True):
            raise RuntimeError(f"{hostname}: batch not accepted")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(push, enumerate(hostnames)))
    return hostnames


def seed_history(url: str, hours: float, step_s: int, host_step_s: int) -> None:
    """Fill ``hours`` of history before the current readings, server-side: the GPU rows in
    two connections at once (even and odd GPU ids), then the host rows."""
    engine = make_engine(url)
    stop = datetime.now(UTC) - timedelta(seconds=60)
    start = stop - timedelta(hours=hours)
    window = {"start": start, "stop": stop}
    # The history ends before the ingested readings, so no key can collide; the secondary
    # indexes are rebuilt once at the end instead of being maintained row by row.
    secondary = ("ix_gpu_sample_sampled_at", "ix_gpu_sample_received_at")
    column = {"ix_gpu_sample_sampled_at": "sampled_at", "ix_gpu_sample_received_at": "received_at"}

    def gpu_part(parity: int) -> None:
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL synchronous_commit = off"))
            statement = GPU_HISTORY_SQL.replace("ORDER BY", f"WHERE g.id % 2 = {parity}\nORDER BY")
            conn.execute(text(statement), {**window, "step": step_s})

    try:
        began = time.monotonic()
        with engine.begin() as conn:
            for name in secondary:
                conn.execute(text(f"DROP INDEX IF EXISTS {name}"))
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(gpu_part, (0, 1)))
        with engine.begin() as conn:
            for name in secondary:
                conn.execute(text(f"CREATE INDEX {name} ON gpu_sample ({column[name]})"))
        print(f"  GPU history: {time.monotonic() - began:.0f} s", flush=True)
        with engine.begin() as conn:
            for statement in HOST_HISTORY_SQL:
                conn.execute(text(statement), {**window, "step": host_step_s})
        print(f"  + host history: {time.monotonic() - began:.0f} s", flush=True)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
            rows = conn.execute(text("SELECT count(*) FROM gpu_sample")).scalar_one()
            size = conn.execute(text("SELECT pg_size_pretty(pg_database_size(current_database()))"))
            print(f"  gpu_sample rows: {rows:,}; database size {size.scalar_one()}", flush=True)
    finally:
        engine.dispose()


def wait_for_health_state(url: str, nodes: int, timeout_s: float = 300) -> None:
    """Wait until the server's refresher has stored every node's health (its first refresh
    after start evaluates the whole fleet)."""
    engine = make_engine(url)
    began = time.monotonic()
    try:
        while time.monotonic() - began < timeout_s:
            with engine.connect() as conn:
                stored = conn.execute(text("SELECT count(*) FROM node_health_state")).scalar_one()
            if stored >= nodes:
                print(f"  health of {stored} nodes stored after {time.monotonic() - began:.0f} s")
                return
            time.sleep(1)
        print(f"  health state incomplete after {timeout_s:.0f} s", flush=True)
    finally:
        engine.dispose()


def start_worker(url: str) -> subprocess.Popen[bytes]:
    """``fleetwatch worker`` on ``url`` (the jobs, beside a ``serve --no-jobs``), with the same
    environment as :func:`start_server`."""
    return subprocess.Popen(
        [sys.executable, "-m", "app", "worker"],
        env=_server_env(url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _server_env(url: str) -> dict[str, str]:
    return dict(
        os.environ,
        FLEETWATCH_DATABASE_URL=url,
        # An hour (the seeding takes longer than the default 120 s), or the caller's setting
        # when re-measuring a database seeded earlier.
        FLEETWATCH_STALE_AFTER_S=os.environ.get("FLEETWATCH_STALE_AFTER_S", "3600"),
        FLEETWATCH_COMPACT_INTERVAL_S="86400",
    )


def start_server(url: str, port: int, *, jobs: bool = True) -> subprocess.Popen[bytes]:
    """``fleetwatch serve`` on ``url``; waits until /healthz answers. Compaction is deferred
    (a day): the seeded history is a backlog no running server has, and packing it would run
    under the measurements."""
    env = _server_env(url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)]
        + ([] if jobs else ["--no-jobs"]),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def measure(base: str, hostname: str, repeat: int) -> None:
    """Request each page ``repeat`` times after a warm-up; print median, worst and size."""
    print(f"\n{'page':34} {'status':>6} {'median ms':>10} {'max ms':>8} {'KiB':>8}")
    with httpx.Client(base_url=base, timeout=120, headers={"Accept-Encoding": "gzip"}) as client:
        version = client.get("/fleet/_nodes").headers.get("X-Live-Version", "")
        for name, path in pages(hostname):
            path = path.replace("{version}", version)
            first = client.get(path)
            if first.status_code not in (200, 204):
                print(f"{name:34} {first.status_code:>6}   (not measured: {path})")
                continue
            times = []
            for _ in range(repeat):
                began = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - began) * 1000)
            size = len(response.content) / 1024
            print(
                f"{name:34} {response.status_code:>6} {statistics.median(times):>10.0f} "
                f"{max(times):>8.0f} {size:>8.0f}"
            )


def main() -> None:
    """Seed (unless ``--db-url``), serve and measure; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24)
    parser.add_argument("--step-s", type=int, default=10, help="GPU sample interval")
    parser.add_argument("--host-step-s", type=int, default=60, help="disk/NFS/NIC interval")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--worker",
        action="store_true",
        help="serve with --no-jobs beside a 'fleetwatch worker' (the jobs in their own process)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    parser.add_argument("--db-url", help="measure this already seeded database")
    args = parser.parse_args()
    python = platform.python_version()
    print(f"machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {python}")
    if args.db_url:
        run(args.db_url, args, seed=False)
        return
    name = f"fleetwatch_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(admin_url()).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url()).set(database=name).render_as_string(hide_password=False)
    try:
        run(url, args, seed=True)
    finally:
        if args.keep:
            print(f"\nkept: --db-url {url}")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run(url: str, args: argparse.Namespace, *, seed: bool) -> None:
    """Migrate and seed ``url`` when ``seed``, then serve it and measure every page."""
    port = free_port()
    if seed:
        upgrade(url)
    server = start_server(url, port, jobs=not args.worker)
    worker = start_worker(url) if args.worker else None
    base = f"http://127.0.0.1:{port}"
    try:
        if seed:
            began = time.monotonic()
            with tempfile.TemporaryDirectory() as work:
                hostnames = seed_current(url, base, args.nodes, Path(work))
            took = time.monotonic() - began
            print(f"current state of {args.nodes} nodes ingested in {took:.0f} s")
            seed_history(url, args.hours, args.step_s, args.host_step_s)
            began = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "app", "rollups", "rebuild", "--database-url", url],
                check=True,
            )
            print(f"  rollups rebuilt in {time.monotonic() - began:.0f} s", flush=True)
        else:
            hostnames = [str(n["hostname"]) for n in demo_fleet(args.nodes, 8)]
        wait_for_health_state(url, args.nodes)
        faulty = hostnames[FAULTS[0][0] % len(hostnames)]
        measure(base, str(faulty), args.repeat)
    finally:
        for proc in (server, worker):
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:  # a job in the middle of a long run
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
