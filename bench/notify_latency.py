"""Fault → webhook message latency: inject GPU faults (GPU lost, Xid 79, Xid 48, NVLink down)
into a simulated fleet and time each until a local webhook receiver gets the first firing
notice naming that GPU from a rule that fault should fire.

Runs everything on this machine the way ``fleetwatch demo --webhook`` does: a fresh database
(SQLite in a temporary folder by default, or ``--db-url``), the default rule pack, a generic
webhook channel with a catch-all route, ``fleetwatch serve`` in its own process (rule
evaluation every ``--eval-interval-s``, the delivery worker every ``--worker-interval-s``), and
a simulated fleet pushing over real HTTP (agents sample every ``--interval-s`` and send a batch
every ``--batch-interval-s``, as in the demo). ``--faults`` faults on distinct GPUs, their
kinds cycling through ``--kinds``, start at random moments within ``--window-s`` seconds; for
each, the time from injection to the receiver getting the first firing notice naming that GPU
from one of the rules the kind fires (:data:`EXPECTED`) is split into detection (injection →
the alert's ``startsAt``, i.e. the evaluation that fired it) and notification (``startsAt`` →
received: group wait, worker wake-up or tick, HTTP). Prints p50/p90/p99/max of each, overall
and per kind. On Postgres ``--worker`` runs the jobs in ``fleetwatch worker`` beside
``fleetwatch serve --no-jobs``, as a large fleet would.

The catch-all route waits ``--group-wait-s`` (5 s, the default of a route for every severity);
``--group-wait-s 0`` is what a route of critical alerts only gets by default. Agents cut a
batch at once on a new event, the ingest wakes the evaluator and the outbox commit wakes the
worker, so the intervals bound only what those wake-ups miss.

    python bench/notify_latency.py                          # demo defaults, 60 faults, ~3 min
    python bench/notify_latency.py --faults 30 --window-s 60 --group-wait-s 0   # ~1.5 min
    python bench/notify_latency.py --nodes 1000 --interval-s 5 --batch-interval-s 10 \
        --group-wait-s 0 --db-url postgresql+psycopg://127.0.0.1/DB --worker  # agent defaults
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
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
from app.auth import service as auth_service  # noqa: E402
from app.config import Settings, load_settings  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope  # noqa: E402
from app.demo import add_webhook, apply_default_rules  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.notify import service as notify_service  # noqa: E402
from app.notify.schemas import RouteIn  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import receiver  # noqa: E402

#: Fault kind → (SimFleet.inject arguments, the rules it should fire: any one of them counts).
EXPECTED: dict[str, tuple[dict[str, object], frozenset[str]]] = {
    "gpu_lost": ({"kind": "gpu_lost"}, frozenset({"gpu-lost"})),
    "xid79": ({"kind": "xid", "xid": 79}, frozenset({"gpu-lost", "gpu-critical-xid"})),
    "xid48": ({"kind": "xid", "xid": 48}, frozenset({"gpu-critical-xid", "gpu-double-bit-ecc"})),
    "nvlink_down": ({"kind": "nvlink_down"}, frozenset({"gpu-nvlink-down"})),
}


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


def _env(settings: Settings, work: Path) -> dict[str, str]:
    return dict(
        os.environ,
        FLEETWATCH_DATABASE_URL=settings.effective_database_url,
        FLEETWATCH_DATA_DIR=str(work),  # the same secret key file as the channel was made with
        FLEETWATCH_ALERT_EVAL_INTERVAL_S=str(settings.alert_eval_interval_s),
        FLEETWATCH_NOTIFY_WORKER_INTERVAL_S=str(settings.notify_worker_interval_s),
        FLEETWATCH_NOTIFY_ALLOW_HOSTS=json.dumps(settings.notify_allow_hosts),
        FLEETWATCH_STALE_AFTER_S=str(settings.stale_after_s),
        FLEETWATCH_LOG_LEVEL="warning",
    )


def start_server(
    settings: Settings, work: Path, port: int, *, jobs: bool = True
) -> subprocess.Popen[bytes]:
    """``fleetwatch serve`` in its own process (its own interpreter lock, as in production)
    with the bench's settings (``--no-jobs`` unless ``jobs``); waits until /healthz answers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(port)]
        + ([] if jobs else ["--no-jobs"]),
        env=_env(settings, work),
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


def start_worker(settings: Settings, work: Path) -> subprocess.Popen[bytes]:
    """``fleetwatch worker`` (rule evaluation, delivery and the other jobs) with the same
    settings as the server."""
    return subprocess.Popen(
        [sys.executable, "-m", "app", "worker"],
        env=_env(settings, work),
        stdout=subprocess.DEVNULL,
    )


#: Fault kind → the ``python -m agents.simfleet --fault`` KIND.
CLI_KIND = {
    "gpu_lost": "gpu_lost",
    "xid79": "xid79",
    "xid48": "xid48",
    "nvlink_down": "nvlink_down",
}
_FAULT_LINE = re.compile(r"^(\S+ \S+) INFO agents\.simfleet: fault: (\S+) \S+ gpu=(\d+)")


def start_fleets(
    nodes: list[FleetNode],
    plan: list[tuple[float, str, int, str]],
    *,
    procs: int,
    url: str,
    interval_s: float,
    batch_interval_s: float,
    warmup_s: float,
    work: Path,
    seed: int,
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """``procs`` processes of ``python -m agents.simfleet`` (one interpreter lock each: 1,000
    agent threads in one process starve on it), nodes dealt round-robin, each fault scheduled
    in its node's process ``warmup_s`` + its offset after that fleet starts. Returns each
    process and its log file (the fault lines carry the moment of injection)."""
    out = []
    for i in range(procs):
        mine = nodes[i::procs]
        hosts = {n.hostname for n in mine}
        fleet_file = work / f"fleet-{i}.json"
        fleet_file.write_text(
            json.dumps(
                {
                    "nodes": [
                        {"hostname": n.hostname, "token": n.token, "gpu_count": 8,
                         "labels": dict(n.labels)}
                        for n in mine
                    ]
                }
            )
        )  # fmt: skip
        faults = [
            f"--fault={h}:{CLI_KIND[kind]}@{warmup_s + offset:.3f}:{gpu}"
            for offset, h, gpu, kind in plan
            if h in hosts
        ]
        log_path = work / f"fleet-{i}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agents.simfleet", "--server", url, "--fleet-file",
                 str(fleet_file), "--interval", str(interval_s), "--batch-interval",
                 str(batch_interval_s), "--spool-dir", str(work / f"spool-{i}"),
                 "--seed", str(seed + i), *faults],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
            )  # fmt: skip
        out.append((proc, log_path))
    return out


def injected_at(logs: list[Path]) -> dict[tuple[str, str], float]:
    """(hostname, GPU index) → Unix time of injection, from the fleets' fault log lines."""
    found = {}
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            m = _FAULT_LINE.match(line)
            if m:
                at = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
                found[(m[2], m[3])] = at
    return found


def tokens(url: str, hostnames: list[str]) -> dict[str, str]:
    """A node token for each of ``hostnames``, in one session."""
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return {h: auth_service.create_token(session, hostname=h)[1] for h in hostnames}
    finally:
        engine.dispose()


def main() -> None:
    """Parse arguments, run the fleet and faults, print the latency table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=60)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--kinds", default=",".join(EXPECTED), help="comma-separated fault kinds")
    parser.add_argument("--window-s", type=float, default=120.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--batch-interval-s", type=float, default=5.0)
    parser.add_argument("--eval-interval-s", type=float, default=10.0)
    parser.add_argument("--worker-interval-s", type=float, default=1.0)
    parser.add_argument("--group-wait-s", type=float, default=5.0)
    parser.add_argument("--db-url", default=None)
    parser.add_argument("--worker", action="store_true", help="jobs in 'fleetwatch worker'")
    parser.add_argument(
        "--procs", type=int, default=1, help="simulated fleet processes (1: in this process)"
    )
    parser.add_argument(
        "--background",
        type=int,
        default=0,
        help="of --nodes, how many push canned batches (bench/background_fleet.py) instead of "
        "being simulated; faults go to the simulated ones",
    )
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or any(k not in EXPECTED for k in kinds):
        parser.error(f"--kinds: a comma-separated list of {', '.join(EXPECTED)}")
    if not 0 <= args.background < args.nodes:
        parser.error("--background: 0 to --nodes - 1")
    if args.faults > (args.nodes - args.background) * 8:
        parser.error("--faults: at most 8 per simulated node (one per GPU)")
    if args.worker and not args.db_url:
        parser.error("--worker needs --db-url (Postgres): SQLite runs the jobs in the server")

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
    received: dict[tuple[str, str], tuple[float, str, str]] = {}
    hostnames = [f"gpu-{i:04d}" for i in range(args.nodes)]
    node_tokens = tokens(url, hostnames)
    with receiver() as hook:
        add_webhook(settings, url=hook.url + "/bench", secret=None)
        set_group_wait(url, args.group_wait_s)
        port = free_port()
        server = start_server(settings, work, port, jobs=not args.worker)
        worker = start_worker(settings, work) if args.worker else None
        everyone = [FleetNode(h, node_tokens[h], 8, {"cluster": "bench"}) for h in hostnames]
        nodes, canned = (
            everyone[: args.nodes - args.background],
            everyone[len(everyone) - args.background :],
        )
        background = None
        if canned:
            canned_file = work / "background.json"
            canned_file.write_text(
                json.dumps({"nodes": [{"hostname": n.hostname, "token": n.token} for n in canned]})
            )
            background = subprocess.Popen(
                [sys.executable, str(ROOT / "bench" / "background_fleet.py"), "--server",
                 f"http://127.0.0.1:{port}", "--fleet-file", str(canned_file), "--seconds",
                 str(args.window_s + 300), "--batch-interval", str(args.batch_interval_s),
                 "--interval", str(args.interval_s)],
                stdout=subprocess.DEVNULL,
                stderr=(work / "background.log").open("wb"),
            )  # fmt: skip
        rng = random.Random(args.seed)
        targets = rng.sample([(n.hostname, g) for n in nodes for g in range(8)], args.faults)
        plan = sorted(
            (rng.uniform(0, args.window_s), h, g, kinds[i % len(kinds)])
            for i, (h, g) in enumerate(targets)
        )
        kind_of = {(h, str(g)): kind for _, h, g, kind in plan}
        injected: dict[tuple[str, str], tuple[float, str]] = {}
        # Every node has reported (several batches: the first ones carry the inventory).
        warmup_s = max(8.0, args.batch_interval_s * 3)
        fleets: list[tuple[subprocess.Popen[bytes], Path]] = []
        fleet: SimFleet | None = None
        if args.procs > 1:
            fleets = start_fleets(
                nodes,
                plan,
                procs=args.procs,
                url=f"http://127.0.0.1:{port}",
                interval_s=args.interval_s,
                batch_interval_s=args.batch_interval_s,
                warmup_s=warmup_s,
                work=work,
                seed=args.seed,
            )
        else:
            fleet = SimFleet(
                nodes,
                server_url=f"http://127.0.0.1:{port}",
                spool_root=work / "spool",
                interval_s=args.interval_s,
                batch_interval_s=args.batch_interval_s,
                seed=args.seed,
            )
            fleet.start()
        try:
            time.sleep(warmup_s)
            started = time.monotonic()
            for offset, host, gpu, kind in plan:
                time.sleep(max(0.0, started + offset - time.monotonic()))
                if fleet is not None:
                    inject = dict(EXPECTED[kind][0])
                    fleet.inject(
                        host,
                        str(inject.pop("kind")),
                        gpu,
                        args.window_s + 120,
                        **inject,  # type: ignore[arg-type]
                    )
                    injected[(host, str(gpu))] = (time.time(), kind)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if fleets:
                    injected = {
                        k: (at, kind_of[k])
                        for k, at in injected_at([p for _, p in fleets]).items()
                        if k in kind_of
                    }
                if len(received) >= len(plan):
                    break
                with hook._lock:
                    requests = list(hook.requests)
                for r in requests:
                    arrived = time.time() - (time.monotonic() - r.at)
                    for a in r.json()["alerts"]:
                        labels = a["labels"]
                        key = (labels.get("hostname", ""), labels.get("gpu_index", ""))
                        if key not in kind_of or a["status"] != "firing":
                            continue
                        if labels.get("alertname") in EXPECTED[kind_of[key]][1]:
                            received.setdefault(key, (arrived, a["startsAt"], labels["alertname"]))
                time.sleep(0.5)
        finally:
            if fleet is not None:
                fleet.stop(timeout_s=20)
            for proc, _ in fleets:
                proc.send_signal(signal.SIGINT)
            for proc, _ in fleets:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            if fleets:
                injected = {
                    k: (at, kind_of[k])
                    for k, at in injected_at([p for _, p in fleets]).items()
                    if k in kind_of
                }
            if background is not None:
                background.kill()
                background.wait(timeout=30)
                print("".join((work / "background.log").read_text().strip().splitlines()[-1:]))
            for job in (server, worker):
                if job is not None:
                    job.send_signal(signal.SIGINT)
            for job in (server, worker):
                if job is not None:
                    job.wait(timeout=30)
    rows: dict[str, tuple[list[float], list[float], list[float]]] = {}
    for key, (at, kind) in injected.items():
        if key in received:
            arrived, starts, _ = received[key]
            fired = datetime.fromisoformat(starts.replace("Z", "+00:00")).timestamp()
            for name in ("all", kind):
                totals, detect, notify = rows.setdefault(name, ([], [], []))
                totals.append(arrived - at)
                detect.append(fired - at)
                notify.append(arrived - fired)
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}; {url.split(':')[0]}"
        + (", jobs in fleetwatch worker" if args.worker else "")
    )
    print(
        f"{len(injected)} faults ({', '.join(kinds)}) on {args.nodes} nodes × 8 GPUs; agents "
        f"{args.interval_s:g} s / batch {args.batch_interval_s:g} s, evaluation every "
        f"{args.eval_interval_s:g} s, group wait {args.group_wait_s:g} s, worker every "
        f"{args.worker_interval_s:g} s"
        + (f"; fleet in {args.procs} processes" if args.procs > 1 else "")
        + (
            f"; {args.nodes - args.background} simulated, {args.background} canned"
            if args.background
            else ""
        )
    )
    print(
        f"received {sum(len(r[0]) for k, r in rows.items() if k != 'all')} of "
        f"{len(injected)} firing notices"
    )
    missing = sorted(k for k in injected if k not in received)
    if missing:
        print(
            "no notice for: "
            + ", ".join(f"{h} GPU {g} ({injected[(h, g)][1]})" for h, g in missing[:10])
        )
    print(f"{'seconds':26} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} {'mean':>7}")
    for name in ["all"] + [k for k in kinds if k in rows]:
        if name not in rows:
            continue
        totals, detect, notify = rows[name]
        label = "fault → message" if name == "all" else f"{name} ({len(totals)})"
        print(summary(label, totals))
        print(summary("  fault → firing", detect))
        print(summary("  firing → message", notify))


if __name__ == "__main__":
    main()
