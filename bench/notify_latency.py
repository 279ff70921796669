"""Fault → webhook message latency: inject GPU-lost faults into a simulated fleet and time each
until a local webhook receiver gets its firing notice.

Runs everything on this machine the way ``fleetwatch demo --webhook`` does: a fresh database
(SQLite in a temporary folder by default, or ``--db-url``), the default rule pack, a generic
webhook channel with a catch-all route, ``fleetwatch serve`` in its own process (rule
evaluation every ``--eval-interval-s``, the delivery worker every ``--worker-interval-s``), and
a simulated fleet pushing over real HTTP (agents sample every ``--interval-s`` and send a batch
every ``--batch-interval-s``, as in the demo). ``--faults`` GPU-lost faults on distinct GPUs
start at random moments within ``--window-s`` seconds; for each, the time from injection to the
receiver getting the firing notice naming that GPU is split into detection (injection → the
alert's ``startsAt``, i.e. the evaluation that fired it) and notification (``startsAt`` →
received: group wait, worker wake-up or tick, HTTP). Prints p50/p90/p99/max of each.

The catch-all route waits ``--group-wait-s`` (5 s, the default of a route for every severity);
``--group-wait-s 0`` is what a route of critical alerts only gets by default. Agents cut a
batch at once on a new event, the ingest wakes the evaluator and the outbox commit wakes the
worker, so the intervals bound only what those wake-ups miss.

    python bench/notify_latency.py                          # demo defaults, 60 faults, ~3 min
    python bench/notify_latency.py --faults 30 --window-s 60 --group-wait-s 0   # ~1.5 min
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from app.config import Settings, load_settings  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.demo import add_webhook, apply_default_rules  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.notify import service as notify_service  # noqa: E402
from app.notify.schemas import RouteIn  # noqa: E402
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import receiver  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary(name: str, values: list[float]) -> str:
    """One table line: p50, p90, p99, max and mean in seconds."""
    p = [percentile(values, q) for q in (50, 90, 99)]
    return (
        f"{name:26} {p[0]:7.2f} {p[1]:7.2f} {p[2]:7.2f} {max(values):7.2f} "
        f"{statistics.fmean(values):7.2f}"
    )


def set_group_wait(url: str, group_wait_s: float) -> None:
    """Give the demo channel's catch-all route ``group_wait_s``."""
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for route in notify_service.list_routes(session):
                data = RouteIn(
                    channel_id=route.channel_id,
                    group_by=list(route.group_by),
                    group_wait_s=group_wait_s,
                    repeat_interval_s=route.repeat_interval_s,
                )
                notify_service.replace_route(session, route_id=route.id, data=data)
    finally:
        engine.dispose()


def start_server(settings: Settings, work: Path, port: int) -> subprocess.Popen[bytes]:
    """``fleetwatch serve`` in its own process (its own interpreter lock, as in production)
    with the bench's settings; waits until /healthz answers."""
    env = dict(
        os.environ,
        FLEETWATCH_DATABASE_URL=settings.effective_database_url,
        FLEETWATCH_DATA_DIR=str(work),  # the same secret key file as the channel was made with
        FLEETWATCH_ALERT_EVAL_INTERVAL_S=str(settings.alert_eval_interval_s),
        FLEETWATCH_NOTIFY_WORKER_INTERVAL_S=str(settings.notify_worker_interval_s),
        FLEETWATCH_NOTIFY_ALLOW_HOSTS=json.dumps(settings.notify_allow_hosts),
        FLEETWATCH_STALE_AFTER_S=str(settings.stale_after_s),
        FLEETWATCH_LOG_LEVEL="warning",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
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


def main() -> None:
    """Parse arguments, run the fleet and faults, print the latency table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--window-s", type=float, default=120.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--batch-interval-s", type=float, default=5.0)
    parser.add_argument("--eval-interval-s", type=float, default=10.0)
    parser.add_argument("--worker-interval-s", type=float, default=1.0)
    parser.add_argument("--group-wait-s", type=float, default=5.0)
    parser.add_argument("--db-url", default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    if args.faults > args.nodes * 8:
        parser.error("--faults: at most 8 per node (one per GPU)")

    work = Path(tempfile.mkdtemp(prefix="fw-notify-bench-"))
    url = args.db_url or f"sqlite:///{work / 'fleetwatch.db'}"
    settings = load_settings(
        database_url=url,
        data_dir=work,
        alert_eval_interval_s=args.eval_interval_s,
        notify_worker_interval_s=args.worker_interval_s,
        notify_allow_hosts=["127.0.0.1"],
        stale_after_s=3600,
    )
    upgrade(url)
    apply_default_rules(settings)
    received: dict[tuple[str, str], tuple[float, str]] = {}
    with receiver() as hook:
        add_webhook(settings, url=hook.url + "/bench", secret=None)
        set_group_wait(url, args.group_wait_s)
        port = free_port()
        server = start_server(settings, work, port)
        nodes = [
            FleetNode(f"gpu-{i:03d}", create_token(url, f"gpu-{i:03d}"), 8, {"cluster": "bench"})
            for i in range(args.nodes)
        ]
        fleet = SimFleet(
            nodes,
            server_url=f"http://127.0.0.1:{port}",
            spool_root=work / "spool",
            interval_s=args.interval_s,
            batch_interval_s=args.batch_interval_s,
            seed=args.seed,
        )
        rng = random.Random(args.seed)
        targets = rng.sample([(n.hostname, g) for n in nodes for g in range(8)], args.faults)
        plan = sorted((rng.uniform(0, args.window_s), h, g) for h, g in targets)
        injected: dict[tuple[str, str], float] = {}
        fleet.start()
        try:
            time.sleep(max(8.0, args.batch_interval_s * 2))  # every node has reported
            started = time.monotonic()
            for offset, host, gpu in plan:
                time.sleep(max(0.0, started + offset - time.monotonic()))
                fleet.inject(host, "gpu_lost", gpu, args.window_s + 120)
                injected[(host, str(gpu))] = time.time()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(received) < len(injected):
                with hook._lock:
                    requests = list(hook.requests)
                for r in requests:
                    arrived = time.time() - (time.monotonic() - r.at)
                    for a in r.json()["alerts"]:
                        labels = a["labels"]
                        key = (labels.get("hostname", ""), labels.get("gpu_index", ""))
                        if labels.get("alertname") == "gpu-lost" and a["status"] == "firing":
                            received.setdefault(key, (arrived, a["startsAt"]))
                time.sleep(0.5)
        finally:
            fleet.stop(timeout_s=20)
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    totals, detect, notify = [], [], []
    for key, at in injected.items():
        if key in received:
            arrived, starts = received[key]
            fired = datetime.fromisoformat(starts.replace("Z", "+00:00")).timestamp()
            totals.append(arrived - at)
            detect.append(fired - at)
            notify.append(arrived - fired)
    print(
        f"{len(injected)} GPU-lost faults on {args.nodes} nodes × 8 GPUs, {url.split(':')[0]}; "
        f"agents {args.interval_s:g} s / batch {args.batch_interval_s:g} s, evaluation every "
        f"{args.eval_interval_s:g} s, group wait {args.group_wait_s:g} s, worker every "
        f"{args.worker_interval_s:g} s"
    )
    print(f"received {len(totals)} of {len(injected)} firing notices")
    print(f"{'seconds':26} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'mean':>7}")
    if totals:
        print(summary("fault → message", totals))
        print(summary("  fault → firing", detect))
        print(summary("  firing → message", notify))


if __name__ == "__main__":
    main()
