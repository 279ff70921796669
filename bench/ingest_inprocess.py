"""Ingest cost per batch in process: what the server's Python and Postgres spend on one batch,
without HTTP, the event loop or other requests (``bench/ingest_rate.py`` measures end to end).

On a fresh Postgres database, one node: its batches are made ahead as ``bench/ingest_rate.py``
makes them (same options: ``--agent-defaults``, ``--table-form``, ``--samples``,
``--no-sections``; ``--nvlink-interval`` overrides the defaults' 60 s), then each is
authenticated (the token lookup), decoded and validated (``app.ingest.router._parse``) and stored
(``store_batch`` under the node's row lock) as the ingest route does, one at a time, with the
server's garbage-collector thresholds (:func:`app.gc_tuning.tune_gc`). Prints, per batch, the
median and quartiles of this process's CPU (``time.process_time``) and the mean CPU of the rest
of the machine around it (``/proc/stat``: Postgres's work for the batch, in 10-ms ticks).

    python bench/ingest_inprocess.py [--batches 200] [--warmup 20] [--agent-defaults]
        [--table-form] [--samples 60] [--no-sections] [--nvlink-interval S] [--profile 30]

``--profile N`` prints the N functions with the most cumulative and own time (cProfile) over
the measured batches, instead of the CPU figures (the profiler's overhead distorts them).

**In turns** (the only comparison on this noisy shared VM that holds still: 20-s end-to-end runs
of the same code move by ±20 %): ``--against ROOT`` runs this file of this checkout (A) and of
the checkout at ``ROOT`` (B: another revision, e.g. a ``git worktree``; copy this file there
where it predates it) side by side, each on its own database, and has them store one batch
each in turns (ABBA) for ``--batches`` turns; ``--b-options "..."`` gives B other options
(alone: the same checkout, e.g. without NVLinks). Prints both sides' figures and B / A.

    python bench/ingest_inprocess.py --agent-defaults --table-form --against ../base
    python bench/ingest_inprocess.py --agent-defaults --table-form \
        --b-options "--agent-defaults --table-form --nvlink-interval 100000"
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import os
import platform
import pstats
import shlex
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ingest_rate import TABLES, Node, apply_agent_defaults, machine_cpu_s  # noqa: E402
from sqlalchemy import text  # noqa: E402

from app.auth import service as auth_service  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.fleet.models import Node as NodeRow  # noqa: E402
from app.gc_tuning import collection_paused, tune_gc  # noqa: E402
from app.ingest import service as ingest_service  # noqa: E402
from app.ingest.router import _parse  # noqa: E402
from tests.dbs import postgres_database  # noqa: E402
from tests.factories import create_token  # noqa: E402


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--samples", type=int, default=60, help="samples per GPU per batch")
    parser.add_argument("--sections", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--agent-defaults", action="store_true")
    parser.add_argument("--table-form", action="store_true")
    parser.add_argument(
        "--nvlink-interval", type=float, default=0, help="seconds between NVLinks (overrides)"
    )
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--pair", action="store_true", help="one batch per stdin line")
    parser.add_argument("--against", help="another checkout's root: B in an A/B in turns")
    parser.add_argument("--b-options", help="B's options (default: A's) for an A/B in turns")
    args = parser.parse_args()
    nvlink_interval = args.nvlink_interval
    args.interval, args.host_interval, args.nvlink_interval = 1.0, 1.0, 30.0
    args.agent_samples = False
    if args.agent_defaults:
        apply_agent_defaults(args)
    args.nvlink_interval = nvlink_interval or args.nvlink_interval
    return args


class Store:
    """Stores one batch as the ingest route does (its three steps), on ``url``'s database."""

    def __init__(self, url: str):
        engine = make_engine(url)
        self.factory = make_session_factory(engine)
        self.tokens = make_session_factory(engine, one_statement=True)

    def __call__(self, token: str, raw: bytes) -> None:
        with session_scope(self.tokens) as session:
            node_id = auth_service.authenticate(session, authorization=f"Bearer {token}")
        batch, digest, legacy = _parse(raw, "gzip", 64 * 1024 * 1024)  # collector paused
        received_at = datetime.now(UTC)
        with collection_paused(), session_scope(self.factory) as session:  # as the route
            node = session.get_one(NodeRow, node_id, with_for_update={"key_share": True})
            ingest_service.store_batch(
                session,
                node=node,
                batch=batch,
                received_at=received_at,
                future_tolerance_s=300.0,
                retention_days=30.0,
                content_sha256=digest,
                legacy_sha256=legacy,
            )


def _rest_cpu_s() -> float:
    """CPU seconds of the whole machine (``/proc/stat``) less this process's: Postgres's work
    for the batch, with whatever else runs (the A/B's other side waits on its stdin). Summing
    the ``postgres`` processes instead undercounts: autovacuum workers exit with their CPU."""
    return machine_cpu_s() - time.process_time()


def _store_all(args: argparse.Namespace) -> tuple[list[float], list[float]] | None:
    """Make and store the batches; the CPU figures per batch (ms), or None where ``--pair`` or
    ``--profile`` printed what they print instead."""
    total = args.warmup + args.batches
    with postgres_database() as url:
        origin = datetime.now(UTC) - timedelta(seconds=total * args.samples * args.interval + 3600)
        node = Node("bench-000", create_token(url, "bench-000"), args, origin)
        bodies = [node.make() for _ in range(total)]
        store = Store(url)
        for raw in bodies[: args.warmup]:
            store(node.token, raw)
        measured = bodies[args.warmup :]
        if args.pair:
            print("ready", flush=True)
            for raw, _ in zip(measured, sys.stdin, strict=False):
                cpu, rest = time.process_time(), _rest_cpu_s()
                store(node.token, raw)
                print(f"{time.process_time() - cpu:.6f} {_rest_cpu_s() - rest:.6f}", flush=True)
            return None
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for raw in measured:
                store(node.token, raw)
            profile.disable()
            stats = pstats.Stats(profile).strip_dirs()
            stats.sort_stats("cumulative").print_stats(args.profile)
            stats.sort_stats("tottime").print_stats(args.profile)
            return None
        cpu_ms, pg_ms = [], []
        for raw in measured:
            cpu, rest = time.process_time(), _rest_cpu_s()
            store(node.token, raw)
            cpu_ms.append((time.process_time() - cpu) * 1000)
            pg_ms.append((_rest_cpu_s() - rest) * 1000)
        _print_sizes(url)
        return cpu_ms, pg_ms


def _print_sizes(url: str) -> None:
    """Each raw sample table's rows and bytes per row on disk, indexes included."""
    engine = make_engine(url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
            for name in TABLES.values():
                rows = conn.scalar(text(f"SELECT count(*) FROM {name}")) or 0
                size = conn.scalar(text(f"SELECT pg_total_relation_size('{name}')")) or 0
                per = f"{size / rows:.0f} B per row" if rows else "no rows"
                print(f"{name}: {rows:,} rows, {size / 1e6:.1f} MB with indexes, {per}")
    finally:
        engine.dispose()


def _in_turns(args: argparse.Namespace, passed: list[str]) -> tuple[Figures, Figures]:
    """Run this file of this checkout and of ``args.against`` (a checkout of another
    revision; this one with ``--b-options`` where given) side by side with ``--pair``, and
    have them store one batch each in turns (ABBA), so that the VM's drift falls on both."""
    others = passed if args.b_options is None else shlex.split(args.b_options)
    b_root = Path(args.against) if args.against else ROOT
    commands = (
        [sys.executable, str(ROOT / "bench" / Path(__file__).name), "--pair", *passed],
        [sys.executable, str(b_root / "bench" / Path(__file__).name), "--pair", *others],
    )
    procs = [
        subprocess.Popen(c, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)
        for c, root in zip(commands, (ROOT, b_root), strict=True)
    ]
    figures = (Figures([], []), Figures([], []))
    try:
        for proc in procs:
            assert proc.stdout is not None
            while (line := proc.stdout.readline()) and line.strip() != "ready":
                pass
        for turn in range(args.batches):
            order = (0, 1) if turn % 4 in (0, 3) else (1, 0)
            for side in order:
                proc = procs[side]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                cpu, pg = proc.stdout.readline().split()
                figures[side].cpu_ms.append(float(cpu) * 1000)
                figures[side].pg_ms.append(float(pg) * 1000)
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=60)
    return figures


@dataclasses.dataclass
class Figures:
    """CPU per batch, milliseconds: this process's and every postgres process's."""

    cpu_ms: list[float]
    pg_ms: list[float]

    def line(self) -> str:
        """Median and quartiles of the server CPU, mean of Postgres's (10-ms clock ticks)."""
        q = statistics.quantiles(self.cpu_ms, n=4)
        return (
            f"server CPU per batch median {q[1]:.2f} ms (quartiles {q[0]:.2f}–{q[2]:.2f}), "
            f"rest of the machine (Postgres) mean {statistics.fmean(self.pg_ms):.2f} ms"
        )


def main() -> None:
    """Make the batches, store them, print the figures."""
    args = _args()
    tune_gc()  # as the server does: CPython's default thresholds cost a third more here
    header = (
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; {args.batches} batches of {args.gpus} GPUs × "
        f"{args.samples} ticks {args.interval:g} s apart"
        + (f", NVLinks every {args.nvlink_interval:g} s" if args.sections else ", no sections")
        + (", table form" if args.table_form else "")
    )
    if args.against or args.b_options is not None:
        passed = [a for a in sys.argv[1:] if a not in _coordinator_only(sys.argv[1:])]
        a, b = _in_turns(args, passed)
        print(header + " (A's options); in turns, ABBA")
        print(f"A {ROOT}: {a.line()}")
        print(f"B {args.against or ROOT} {args.b_options or ''}: {b.line()}")
        ratio = statistics.median(b.cpu_ms) / statistics.median(a.cpu_ms)
        pg_ratio = statistics.fmean(b.pg_ms) / statistics.fmean(a.pg_ms)
        print(f"B / A: server CPU {ratio:.3f}, rest (Postgres) {pg_ratio:.3f}")
        return
    figures = _store_all(args)
    if figures is None:
        return
    done = Figures(*figures)
    print(header)
    print(done.line())
    per_k = 1000 / (args.gpus * args.samples)
    print(
        f"per 1,000 GPU samples: server {statistics.median(done.cpu_ms) * per_k:.1f} ms, "
        f"Postgres {statistics.fmean(done.pg_ms) * per_k:.1f} ms"
    )


def _coordinator_only(argv: list[str]) -> set[str]:
    """The arguments of ``argv`` that the coordinator keeps to itself (and their values)."""
    kept: set[str] = set()
    for i, a in enumerate(argv):
        if a in ("--against", "--b-options") and i + 1 < len(argv):
            kept.update((a, argv[i + 1]))
        elif a.startswith(("--against=", "--b-options=")):
            kept.add(a)
    return kept


if __name__ == "__main__":
    main()
