"""Background load for fleet-scale benchmarks: many nodes pushing batches at the agent's pace
without simulating each one.

A simulated agent costs ~3 ms of CPU per node and round (8 GPUs, host sections, NVLinks, JSON,
gzip): 1,000 of them at the agent's defaults need ~3 cores, more than this project's 2-vCPU
machine has beside the server. Here each node's GPU samples come from one simulated round taken
at start, re-dated for every batch (two samples per GPU, ``--interval`` apart, as the agent's
default 5-s samples in 10-s batches), its inventory and labels as an agent sends them; host
sections and NVLinks, which the agent sends once a minute, are left out. Nodes are spread
evenly over the batch interval and posted by a pool of threads over keep-alive connections.

    python bench/background_fleet.py --server http://127.0.0.1:8000 --fleet-file F --seconds 300

The fleet file is ``python -m agents.simfleet``'s (``{"nodes": [{"hostname", "token", ...}]}``).
Prints batches posted, refused and failed per 10 s to stderr; exits 0 after ``--seconds``.
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import json
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode, load_fleet_file  # noqa: E402
from agents.payload import build_node, build_payload, format_timestamp  # noqa: E402
from agents.simulated.collector import SimulatedCollector  # noqa: E402


class CannedNode:
    """One node's batch template: inventory and one round of samples from a simulator."""

    def __init__(self, node: FleetNode) -> None:
        sim = SimulatedCollector(node.hostname, node.gpu_count)
        now = datetime.now(UTC)
        self.token = node.token
        self.node = build_node(node.hostname, node.labels, sim.node_info())
        self.gpus = sim.inventory()
        self.samples = sim.sample(now)

    def body(self, now: datetime, interval_s: float) -> bytes:
        """A gzip-compressed batch of two rounds, the newest at ``now``."""
        rounds = [now - timedelta(seconds=interval_s), now]
        samples = [{**s, "sampled_at": format_timestamp(at)} for at in rounds for s in self.samples]
        payload = build_payload(self.node, self.gpus, samples, [], batch_id=str(uuid.uuid4()))
        payload["sent_at"] = format_timestamp(now)
        return gzip.compress(json.dumps(payload).encode(), compresslevel=1)


def run(
    server: str, nodes: list[FleetNode], *, seconds: float, batch_s: float, interval_s: float,
    threads: int,
) -> dict[str, int]:  # fmt: skip
    """Post every node's batch every ``batch_s`` for ``seconds``; returns the counts."""
    canned = [CannedNode(n) for n in nodes]
    start = time.monotonic()
    due = [(start + batch_s * i / len(canned), i) for i in range(len(canned))]
    heapq.heapify(due)
    lock = threading.Lock()
    counts = {"posted": 0, "refused": 0, "failed": 0}
    end = start + seconds

    def worker() -> None:
        with httpx.Client(base_url=server, timeout=30) as client:
            while True:
                with lock:
                    if not due:
                        return
                    at, i = heapq.heappop(due)
                    if at >= end:
                        return
                    heapq.heappush(due, (at + batch_s, i))
                time.sleep(max(0.0, at - time.monotonic()))
                node = canned[i]
                try:
                    answer = client.post(
                        "/api/v1/ingest",
                        content=node.body(datetime.now(UTC), interval_s),
                        headers={
                            "Authorization": f"Bearer {node.token}",
                            "Content-Type": "application/json",
                            "Content-Encoding": "gzip",
                        },
                    )
                    key = "posted" if answer.status_code < 300 else "refused"
                except httpx.HTTPError:
                    key = "failed"
                with lock:
                    counts[key] += 1

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    while any(t.is_alive() for t in pool):
        time.sleep(10)
        with lock:
            print(f"background fleet: {counts}", file=sys.stderr, flush=True)
    return counts


def main() -> None:
    """Parse arguments and run; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--fleet-file", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--batch-interval", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    counts = run(
        args.server,
        load_fleet_file(args.fleet_file),
        seconds=args.seconds,
        batch_s=args.batch_interval,
        interval_s=args.interval,
        threads=args.threads,
    )
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
