"""Ingest cost per request over HTTP, two checkouts in turns: the server process's CPU per
batch end to end (uvicorn, the middleware, the thread-pool hand-offs, the route and the jobs a
batch wakes), where ``bench/ingest_inprocess.py`` measures the route's own work without HTTP.

Starts ``fleetwatch serve`` from this checkout (A) and from the checkout at ``--against ROOT``
(B: another revision, e.g. a ``git worktree``), each on a fresh Postgres database of its own
that its own ``fleetwatch migrate`` builds (so B may be at another migration; the node tokens
are written by this checkout's code, into tables alike in both). Then posts batches made ahead
(as ``bench/ingest_rate.py`` makes them, same options) to A and B in turns (ABBA), one request
at a time, and reads each server process's CPU (``/proc``: the process and its children) at
the end of every block of ``--block`` turns. Both share the machine and Postgres, and this VM's
speed moves by ±20 % between runs: only turns compare. Prints, per side, the median over blocks
of the CPU per batch, and B / A.

What a block's CPU holds besides its batches: the server's timer jobs (notify every second,
health every 2 s, alerts every 10 s, rollups every minute, compaction every 5 minutes; the
bench's samples are a day old, so compaction has work) over the block's wall time, which
includes the other side's turns. Both sides carry them alike, which pulls B / A towards 1 by
a little; the absolute figures are a few tenths of a ms above the batches' own cost. Readings
are in clock ticks (10 ms): a block of 50 measures in steps of 0.2 ms per batch.

Each batch's ``sent_at`` is stamped when it is made, before the run: a run much longer than
the server's future tolerance (300 s) would see the nodes' clocks drift "behind" and wake the
health checks for it. The run says how long it took and warns past 240 s: use fewer turns.

    python bench/ingest_http_turns.py --against ../base [--agent-defaults] [--table-form]
        [--samples 2] [--gpus 8] [--nodes 16] [--turns 400] [--block 50] [--warmup 40]
        [--no-sections] [--interval 1] [--host-interval 1] [--nvlink-interval 30]
        [--agent-samples]
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

from ingest_rate import (  # noqa: E402
    Node,
    add_batch_options,
    apply_agent_defaults,
    server_cpu_s,
)

from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402

#: Past this, the batches' ``sent_at`` (stamped before the run) nears the future tolerance.
LONG_RUN_S = 240.0


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", type=Path, required=True, help="B's checkout root")
    parser.add_argument("--nodes", type=int, default=16, help="simulated nodes per side")
    parser.add_argument("--turns", type=int, default=400, help="measured batches per side")
    parser.add_argument("--block", type=int, default=50, help="turns per CPU reading (even)")
    parser.add_argument("--warmup", type=int, default=40, help="unmeasured batches per side")
    add_batch_options(parser, samples=2)
    args = parser.parse_args()
    if args.agent_defaults:
        apply_agent_defaults(args)
    for name in ("nodes", "gpus", "samples", "turns", "block"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if not (args.against / "app" / "__main__.py").is_file():
        parser.error(f"--against {args.against}: not a Fleetwatch checkout (no app/__main__.py)")
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    if args.block % 2 or args.turns % args.block:
        parser.error("--block must be even (as many AB as BA turns) and divide --turns")
    return args


class Side:
    """One checkout's server on its own database, and its nodes with their batches."""

    def __init__(self, root: Path, url: str, args: argparse.Namespace, stack: ExitStack):
        self.root = root
        env = {**os.environ, "FLEETWATCH_LOG_LEVEL": "warning"}
        app = [sys.executable, "-m", "app"]
        subprocess.run([*app, "migrate", "--database-url", url], cwd=root, env=env, check=True)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.server = subprocess.Popen(
            [*app, "serve", "--database-url", url, "--port", str(port)], cwd=root, env=env
        )
        stack.callback(self._stop)
        self.http = stack.enter_context(httpx.Client(timeout=60))
        self._wait_healthy()
        per_node = -(-(args.warmup + args.turns) // args.nodes)
        span_s = per_node * args.samples * args.interval
        origin = datetime.now(UTC) - timedelta(seconds=max(86400.0, span_s + 3600))
        self.nodes = [
            Node(f"bench-{i:03d}", create_token(url, f"bench-{i:03d}"), args, origin)
            for i in range(args.nodes)
        ]
        for node in self.nodes:
            node.pool = [node.make() for _ in range(per_node)][::-1]

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise SystemExit(f"{self.root}: the server exited with {self.server.returncode}")
            try:
                if self.http.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"{self.root}: the server did not answer /healthz within 60 s")

    def _stop(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()

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
            Side(root, stack.enter_context(postgres_database(migrate=False)), args, stack)
            for root in (ROOT, args.against.resolve())
        ]
        for turn in range(args.warmup):  # imports, statement caches and prepares, the pool
            for side in sides:
                side.post(turn)
        per_batch: list[list[float]] = [[], []]
        began = time.monotonic()
        since = [side.cpu_s() for side in sides]
        for done in range(1, args.turns + 1):
            turn = args.warmup + done - 1  # each node's batches in order, none skipped
            for side in sides if turn % 2 == 0 else sides[::-1]:  # ABBA
                side.post(turn)
            if done % args.block == 0:
                # The whole process over the block: the route, the jobs its batches woke, and
                # the timer jobs (see the module docstring).
                now = [side.cpu_s() for side in sides]
                for i in (0, 1):
                    per_batch[i].append((now[i] - since[i]) / args.block * 1000)
                since = now
        wall_s = time.monotonic() - began
        made_late = sum(node.made_late for side in sides for node in side.nodes)
    a, b = (statistics.median(ms) for ms in per_batch)
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK") / args.block
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {args.nodes} nodes × {args.gpus} GPUs × {args.samples} "
        f"samples {args.interval:g} s apart per batch"
        f"{', 38 metrics' if args.agent_samples else ''}"
        + (
            f" + sections (hosts every {args.host_interval:g} s, NVLinks every "
            f"{args.nvlink_interval:g} s)"
            if args.sections
            else ""
        )
        + f"{', table form' if args.table_form else ''}; {args.warmup} warm-up turns, "
        f"{args.turns} measured in {args.turns // args.block} blocks of {args.block}, one "
        f"request at a time, ABBA, in {wall_s:.0f} s; resolution {tick_ms:.2f} ms per batch"
    )
    figures = (("A", ROOT, a, per_batch[0]), ("B", args.against, b, per_batch[1]))
    for name, root, ms, blocks in figures:
        quartiles = statistics.quantiles(blocks, n=4) if len(blocks) > 1 else [ms, ms, ms]
        print(
            f"{name} {root}: server CPU per batch, median of {len(blocks)} blocks: "
            f"{ms:.2f} ms (quartiles {quartiles[0]:.2f}–{quartiles[2]:.2f})"
        )
    print(f"B / A: {b / a:.3f}" if a > 0 else "B / A: undefined (A read 0 ticks: larger --block)")
    if made_late:
        print(f"note: {made_late} batches were made during the run (a pool ran dry)")
    if wall_s > LONG_RUN_S:
        print(
            f"warning: the run took {wall_s:.0f} s; batches stamped before it near the server's "
            "future tolerance (300 s) and skew the nodes' clocks: use fewer --turns"
        )


if __name__ == "__main__":
    main()
