"""Ingest cost per request over HTTP, two checkouts in turns: the server process's CPU per
batch end to end (uvicorn, the middleware, the thread-pool hand-offs, the route and the jobs a
batch wakes), where ``bench/ingest_inprocess.py`` measures the route's own work without HTTP.

Starts ``fleetwatch serve`` from this checkout (A) and from the checkout at ``--against ROOT``
(B: another revision, e.g. a ``git worktree``), each on a fresh Postgres database of its own,
then posts batches made ahead (as ``bench/ingest_rate.py`` makes them: same options) to A and
B in turns (ABBA), one request at a time, so that each server's CPU over a block of turns is
its cost for that block's batches and nothing else of the other's (both share the machine and
Postgres, and this VM's speed moves by ±20 % between runs: only turns compare). Prints, per
side, the median over blocks of ``--block`` turns of the server's CPU per batch (``/proc``:
the process and its children, in clock ticks summed over the block), and B / A.

    python bench/ingest_http_turns.py --against ../base [--agent-defaults] [--table-form]
        [--samples 2] [--nodes 16] [--turns 400] [--block 50]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_rate import Node, apply_agent_defaults, server_cpu_s  # noqa: E402

from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="B's checkout root")
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2, help="samples per GPU per batch")
    parser.add_argument(
        "--turns", type=int, default=400, help="batches measured on each side (after a warm-up)"
    )
    parser.add_argument("--block", type=int, default=50, help="turns per CPU reading")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--host-interval", type=float, default=1.0)
    parser.add_argument("--nvlink-interval", type=float, default=30.0)
    parser.add_argument("--sections", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--agent-samples", action="store_true")
    parser.add_argument("--agent-defaults", action="store_true")
    parser.add_argument("--table-form", action="store_true")
    args = parser.parse_args()
    if args.agent_defaults:
        apply_agent_defaults(args)
    if args.turns < args.block or args.block < 1:
        parser.error("--turns must be at least --block, and --block at least 1")
    return args


class Side:
    """One checkout's server on its own database, and its nodes with their batches."""

    def __init__(self, root: Path, url: str, args: argparse.Namespace, stack: ExitStack):
        self.root = root
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.server = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--database-url", url, "--port", str(port)],
            cwd=root,
            env={**os.environ, "FLEETWATCH_LOG_LEVEL": "warning"},
        )
        stack.callback(self._stop)
        self.http = stack.enter_context(httpx.Client(timeout=60))
        for _ in range(300):
            try:
                self.http.get(f"{self.base}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        per_node = -(-args.turns // args.nodes) + 1  # and one each for the warm-up
        span_s = per_node * args.samples * args.interval
        origin = datetime.now(UTC) - timedelta(seconds=max(86400.0, span_s + 3600))
        self.nodes = [
            Node(f"bench-{i:03d}", create_token(url, f"bench-{i:03d}"), args, origin)
            for i in range(args.nodes)
        ]
        for node in self.nodes:
            node.pool = [node.make() for _ in range(per_node)][::-1]

    def _stop(self) -> None:
        self.server.terminate()
        self.server.wait(timeout=60)

    def post(self, turn: int) -> None:
        node = self.nodes[turn % len(self.nodes)]
        response = self.http.post(
            f"{self.base}/api/v1/ingest",
            content=node.next_body(),
            headers={
                "Authorization": f"Bearer {node.token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        response.raise_for_status()

    def cpu_s(self) -> float:
        return server_cpu_s(self.server.pid)


def main() -> None:
    args = _args()
    with ExitStack() as stack:
        sides = [
            Side(root, stack.enter_context(postgres_database()), args, stack)
            for root in (ROOT, args.against.resolve())
        ]
        for side in sides:  # warm-up: imports, statement caches, the pool
            for turn in range(len(side.nodes)):
                side.post(turn)
        per_batch: list[list[float]] = [[], []]
        since = [side.cpu_s() for side in sides]
        for done in range(1, args.turns + 1):
            turn = len(sides[0].nodes) + done
            for side in sides if turn % 2 == 0 else sides[::-1]:  # ABBA
                side.post(turn)
            if done % args.block == 0:
                # The whole process over the block: the route, and the jobs its batches woke.
                now = [side.cpu_s() for side in sides]
                for i in (0, 1):
                    per_batch[i].append((now[i] - since[i]) / args.block * 1000)
                since = now
    a, b = (statistics.median(ms) for ms in per_batch)
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {args.turns} turns of batches of {args.gpus} GPUs × "
        f"{args.samples} samples{' + sections' if args.sections else ''}"
        f"{', table form' if args.table_form else ''}, one request at a time, ABBA"
    )
    figures = (("A", ROOT, a, per_batch[0]), ("B", args.against, b, per_batch[1]))
    for name, root, ms, blocks in figures:
        quartiles = statistics.quantiles(blocks, n=4) if len(blocks) > 1 else [ms, ms, ms]
        print(
            f"{name} {root}: server CPU per batch, median of {len(blocks)} blocks of "
            f"{args.block}: {ms:.2f} ms (quartiles {quartiles[0]:.2f}–{quartiles[2]:.2f})"
        )
    print(f"B / A: {b / a:.3f}")


if __name__ == "__main__":
    main()
