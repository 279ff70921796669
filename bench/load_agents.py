"""Load: N simulated agents against one server and one Postgres for T minutes.

The real agent code in simulated mode (:class:`agents.simfleet.SimFleet`: the agent loop, the
simulated 8-GPU HGX node with its disks, mounts, NFS and NIC ports, the spool, gzip pushes),
one thread per agent (plus its pusher), started in ``--groups`` groups spread over one sampling
interval as a real fleet's ticks are; against one ``fleetwatch serve`` process (jobs on: the
evaluator with the default rule pack, health, rollups) on a fresh Postgres database, all on
loopback. Bounded: at most 5,000 agents and 120 minutes (a memory curve needs more than an hour:
the windowed rules' sample cache fills for the default pack's longest window, one hour).

Prints: the machine; samples/s acknowledged over the run (sustained); the ingest latency
(one push: request to answer, as the agent saw it) p50/p99/max, and the server's own time
per batch (its ``fleetwatch_ingest_batch_duration_seconds`` histogram, to the bucket); pushes
that failed (retried); the server's RSS at start, every minute and at the end (growth) and its
CPU seconds, the client's (this process) and the whole machine's; and rows stored against
samples acknowledged (and generated) after the agents flushed their spools.

    python bench/load_agents.py [--agents 200] [--minutes 2] [--interval 10] [--batch-interval 20]
                                [--client agents|replay]

``--client replay`` replaces the agent threads with :mod:`bench.load_replay`: each agent's real
batches, made once by the agent code, rebuilt (new batch id, times, moved values) and posted
from one asyncio thread at the agent loop's cadence, retried as the agent retries; the row
check is then also made sample by sample (every acknowledged ``(GPU, sampled_at)`` stored, and
nothing else). The issue's figure is 1,000 agents for 10 minutes: ``--agents 1000 --minutes 10
--client replay`` on a small machine (the agent threads of the default ``--client agents``
would measure the client there). The client runs on the same machine as the server and
Postgres: its CPU (printed) counts against theirs.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from app.config import load_settings  # noqa: E402
from app.demo import apply_default_rules  # noqa: E402
from bench.load_replay import ReplayFleet  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.server_process import (  # noqa: E402
    ServerProcess,
    fresh_database,
    machine,
    rss_bytes,
    stored_sample_keys,
    stored_samples,
)

MAX_AGENTS = 5000
MAX_MINUTES = 120.0


class Latencies:
    """Push durations (seconds) of acknowledged pushes, and failed pushes, thread-safe."""

    def __init__(self) -> None:
        self.ok: list[float] = []
        self.failed = 0
        self.lock = threading.Lock()

    def wrap(self, pusher: Any) -> None:
        """Time every ``pusher.push``."""
        push = pusher.push

        def timed(body: bytes, *, timeout_s: float | None = None) -> Any:
            started = time.perf_counter()
            result = push(body, timeout_s=timeout_s)
            took = time.perf_counter() - started
            with self.lock:
                if result.outcome.value == "ok":
                    self.ok.append(took)
                else:
                    self.failed += 1
            return result

        pusher.push = timed


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ingest_buckets(server: ServerProcess) -> dict[float, float]:
    """The server's ``fleetwatch_ingest_batch_duration_seconds`` histogram: upper bound (s) →
    cumulative count (scraped with its API token, as Prometheus does)."""
    text = server.api.get(f"{server.url}/metrics", timeout=30).text
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "fleetwatch_ingest_batch_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                out[float(sample.labels["le"])] = sample.value
    return out


def bucket_quantile(start: dict[float, float], end: dict[float, float], q: float) -> str:
    """The bucket bound under which the ``q`` quantile of the batches between two scrapes
    fell ("≤ 0.25 s"), from the histogram's cumulative counts."""
    bounds = sorted(end)
    counts = [end[b] - start.get(b, 0.0) for b in bounds]
    total = counts[-1] if counts else 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if total and count >= q * total:
            return f"<= {bound * 1000:.0f} ms" if bound != float("inf") else "> 30 s"
    return "-"


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants (``serve --workers N``: uvicorn's web processes and the
    jobs worker), from the parent ids in ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def server_cpu_s(root: int) -> float:
    """CPU seconds of the server's processes (:func:`process_tree`) now."""
    return sum(cpu_s(pid) or 0.0 for pid in process_tree(root))


def server_rss(root: int) -> int | None:
    """The server's resident memory, bytes: its processes' ``VmRSS`` summed (pages they share
    counted once per process), None when it is gone."""
    sizes = [rss_bytes(pid) for pid in process_tree(root)]
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine spent busy (every CPU, every process: ``/proc/stat``
    less idle and iowait)."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / os.sysconf("SC_CLK_TCK")


def client_cpu_s() -> float:
    """User + system CPU seconds of this process (the agents or the replay client)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def agent_fleets(
    nodes: list[FleetNode], server_url: str, tmp: Path, args: argparse.Namespace
) -> tuple[list[Any], Latencies]:
    """``--client agents``: the real agents in ``--groups`` SimFleets, their pushes timed."""
    latencies = Latencies()
    per_group = -(-len(nodes) // args.groups)
    fleets = [
        SimFleet(
            nodes[i : i + per_group],
            server_url=server_url,
            spool_root=tmp / f"spool-{i}",
            interval_s=args.interval,
            batch_interval_s=args.batch_interval,
            agent_options={"backoff_cap_s": 10.0, "shutdown_timeout_s": 30.0},
        )
        for i in range(0, len(nodes), per_group)
    ]
    for fleet in fleets:
        for agent in fleet.agents.values():
            latencies.wrap(agent.pusher)
    return fleets, latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=200, help=f"agents (≤ {MAX_AGENTS})")
    parser.add_argument("--minutes", type=float, default=2.0, help=f"run (≤ {MAX_MINUTES:g})")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per agent")
    parser.add_argument("--interval", type=float, default=10.0, help="sampling period, s")
    parser.add_argument("--batch-interval", type=float, default=20.0, help="batch period, s")
    parser.add_argument("--groups", type=int, default=10, help="start groups over 1 interval")
    parser.add_argument("--port", type=int, default=None, help="server port (default: free)")
    parser.add_argument(
        "--workers", type=int, default=1, help="serve --workers N (web processes + a worker)"
    )
    parser.add_argument(
        "--client",
        choices=("agents", "replay"),
        default="agents",
        help="agents: the real agent loop, 2 threads each; replay: their batches replayed "
        "from one asyncio thread (bench/load_replay.py)",
    )
    args = parser.parse_args()
    if not 1 <= args.agents <= MAX_AGENTS or not 0 < args.minutes <= MAX_MINUTES:
        parser.error(f"--agents 1..{MAX_AGENTS}, --minutes up to {MAX_MINUTES:g}")
    logging.basicConfig(level=logging.ERROR)
    print(f"machine: {machine()}")
    print(f"{args.agents} agents x {args.gpus} GPUs ({args.client} client, serve --workers "
          f"{args.workers}), sample every {args.interval:g} s, batch every "
          f"{args.batch_interval:g} s, "
          f"{args.minutes:g} min")  # fmt: skip
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-load-") as tmp:
        apply_default_rules(load_settings(database_url=url))
        hosts = [f"load-{i:05d}" for i in range(args.agents)]
        nodes = [FleetNode(h, create_token(url, h), args.gpus, {"cluster": "load"}) for h in hosts]
        more = ["--workers", str(args.workers)] if args.workers > 1 else []
        server = ServerProcess(url, args.port or free_port(), Path(tmp) / "server.log", args=more)
        server.start()
        pid = server.proc.pid if server.proc else 0
        fleets: list[Any]
        if args.client == "replay":
            replay = ReplayFleet(
                nodes,
                server_url=server.url,
                work=Path(tmp),
                interval_s=args.interval,
                batch_interval_s=args.batch_interval,
            )
            fleets = [replay]
        else:
            fleets, latencies = agent_fleets(nodes, server.url, Path(tmp), args)
        buckets_start = ingest_buckets(server)  # first: it makes the API token (a process)
        rss: list[tuple[float, int | None]] = [(0.0, server_rss(pid))]
        cpu_start = server_cpu_s(pid)
        client_start, busy_start = client_cpu_s(), machine_busy_s() or 0.0
        started = time.monotonic()
        try:
            for fleet in fleets:
                fleet.start()
                time.sleep(args.interval / len(fleets))
            end = started + args.minutes * 60
            while (now := time.monotonic()) < end:
                time.sleep(min(60.0, end - now))
                rss.append((time.monotonic() - started, server_rss(pid)))
                at_s, now_rss = rss[-1]
                if now_rss is not None:
                    print(f"{at_s / 60:.1f} min: server RSS {now_rss / 2**20:.0f} MiB", flush=True)
            acked_in_run = sum(f.totals()["samples_acked"] for f in fleets)
            buckets_end = ingest_buckets(server)
            run_s = time.monotonic() - started
            cpu_end = server_cpu_s(pid)
            client_end, busy_end = client_cpu_s(), machine_busy_s() or 0.0
        finally:
            for fleet in fleets:
                fleet.stop(timeout_s=120 if args.client == "replay" else 60)
        try:
            if args.client == "agents":
                for fleet in fleets:
                    for agent in fleet.agents.values():
                        agent.push_pending(ignore_backoff=True)
            totals = {k: sum(f.totals()[k] for f in fleets) for k in fleets[0].totals()}
            rows, distinct = stored_samples(url)
            unstored = unacked = 0
            if args.client == "replay":
                unstored, unacked = replay.check_rows(stored_sample_keys(url))
            rss.append((time.monotonic() - started, server_rss(pid)))
        finally:
            server.stop()
    if args.client == "replay":
        ok, failed = replay.latencies_s, totals["push_failures"] + totals["push_refusals"]
    else:
        ok, failed = latencies.ok, latencies.failed
    mib = 1024 * 1024
    print(f"sustained: {acked_in_run / run_s:,.0f} samples/s acknowledged over {run_s:.0f} s "
          f"({len(ok) / run_s:,.1f} batches/s)")  # fmt: skip
    if ok:
        print(f"ingest latency (push -> answer): p50 {statistics.median(ok) * 1000:.0f} ms, "
              f"p99 {pct(ok, 0.99) * 1000:.0f} ms, max {max(ok) * 1000:.0f} ms "
              f"over {len(ok)} pushes; {failed} failed and retried")  # fmt: skip
    print("server side (fleetwatch_ingest_batch_duration_seconds, bucket bounds): p50 "
          f"{bucket_quantile(buckets_start, buckets_end, 0.5)}, p99 "
          f"{bucket_quantile(buckets_start, buckets_end, 0.99)}")  # fmt: skip
    trend = ", ".join(f"{t / 60:.1f} min {r / mib:.0f} MiB" for t, r in rss if r is not None)
    first, last = rss[0][1], rss[-1][1]
    if first and last:
        print(f"server RSS: {first / mib:.0f} MiB at start -> {last / mib:.0f} MiB at the end "
              f"(+{(last - first) / mib:.0f} MiB); {trend}")  # fmt: skip
    print(f"server CPU: {cpu_end - cpu_start:.0f} s over {run_s:.0f} s "
          f"({(cpu_end - cpu_start) / run_s * 100:.0f} % of one core)")  # fmt: skip
    print(f"client CPU: {client_end - client_start:.0f} s over {run_s:.0f} s "
          f"({(client_end - client_start) / run_s * 100:.0f} % of one core); machine busy "
          f"{busy_end - busy_start:.0f} CPU-s of {run_s * (os.cpu_count() or 1):.0f} "
          f"(every process: Postgres and other work included)")  # fmt: skip
    print(f"samples generated {totals['samples_generated']:,}, acknowledged "
          f"{totals['samples_acked']:,}, rows stored {rows:,} (distinct keys {distinct:,}); "
          f"batches dropped {totals['batches_dropped']}")  # fmt: skip
    good = rows == distinct == totals["samples_acked"] == totals["samples_generated"]
    if args.client == "replay":
        pending = totals["batches_pending"]
        causes = ", ".join(f"{n} {k}" for k, n in replay.counters.failed_by_cause.most_common())
        print(f"failed pushes by cause: {causes or 'none'}")
        print(f"sample by sample: {unstored} acknowledged but not stored, {unacked} stored but "
              f"not acknowledged; batches still unacknowledged {pending}")  # fmt: skip
        good = good and unstored == unacked == 0
    print("rows stored = samples acknowledged = generated:", "yes" if good else "NO")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
