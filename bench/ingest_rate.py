"""Ingest rate: GPU samples stored per second by ONE server process on Postgres.

Starts ``fleetwatch serve`` (one uvicorn process) on a fresh Postgres database, then N client
threads, one per simulated node, POST gzip batches of ``--gpus × --samples`` samples as fast as
the server answers, for ``--seconds``. Prints the stored-sample rate, the batch latency median
and p99, and checks the stored row count against what was acknowledged.

    python bench/ingest_rate.py [--nodes 16] [--gpus 8] [--samples 60] [--seconds 20]

The clients run on the same machine and take CPU from the server: the figure is a lower bound.
"""

from __future__ import annotations

import argparse
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db import make_engine  # noqa: E402
from app.metrics.models import gpu_sample  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token, gpu, iso, sample  # noqa: E402
from tests.live_server import free_port  # noqa: E402


def make_batch(hostname: str, gpus: int, samples: int, start: datetime) -> bytes:
    """One gzip payload: ``samples`` samples per GPU, 1 s apart from ``start``."""
    inventory = [gpu(i, hostname=hostname) for i in range(gpus)]
    body = {
        "schema_version": 1,
        "batch_id": str(uuid.uuid4()),
        "sent_at": iso(datetime.now(UTC)),
        "node": {"hostname": hostname, "labels": {"cluster": "bench"}},
        "gpus": inventory,
        "samples": [
            sample(g, start + timedelta(seconds=i), util_gpu_pct=(i * 7) % 100)
            for g in inventory
            for i in range(samples)
        ],
        "events": [],
    }
    return gzip.compress(json.dumps(body).encode())


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--samples", type=int, default=60, help="samples per GPU per batch")
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()

    with postgres_database() as url:
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--database-url", url, "--port", str(port)],
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
            tokens = {
                f"bench-{i:03d}": create_token(url, f"bench-{i:03d}") for i in range(args.nodes)
            }
            latencies: list[float] = []
            stored = [0]
            lock = threading.Lock()
            deadline = time.monotonic() + args.seconds
            origin = datetime.now(UTC) - timedelta(days=1)

            def client(hostname: str, token: str) -> None:
                offset = 0
                with httpx.Client(timeout=60) as http:
                    while time.monotonic() < deadline:
                        body = make_batch(
                            hostname, args.gpus, args.samples, origin + timedelta(seconds=offset)
                        )
                        offset += args.samples
                        began = time.perf_counter()
                        response = http.post(
                            f"{base}/api/v1/ingest",
                            content=body,
                            headers={
                                "Authorization": f"Bearer {token}",
                                "Content-Type": "application/json",
                                "Content-Encoding": "gzip",
                            },
                        )
                        elapsed = time.perf_counter() - began
                        response.raise_for_status()
                        with lock:
                            latencies.append(elapsed)
                            stored[0] += response.json()["samples_stored"]

            began = time.monotonic()
            threads = [threading.Thread(target=client, args=item) for item in tokens.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.monotonic() - began
        finally:
            server.terminate()
            server.wait(timeout=15)
        engine = make_engine(url)
        with engine.connect() as conn:
            rows = conn.scalar(select(func.count()).select_from(gpu_sample))
        engine.dispose()

    latencies.sort()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; clients on the same machine"
    )
    print(
        f"nodes={args.nodes} gpus/node={args.gpus} samples/gpu/batch={args.samples} "
        f"batch={args.gpus * args.samples} samples, {len(latencies)} batches in {wall:.1f} s"
    )
    print(f"stored GPU samples/s: {stored[0] / wall:,.0f}")
    print(
        f"batch latency median {statistics.median(latencies) * 1000:.0f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99) - 1] * 1000:.0f} ms"
    )
    print(f"rows in gpu_sample: {rows} (acknowledged as stored: {stored[0]})")


if __name__ == "__main__":
    main()
