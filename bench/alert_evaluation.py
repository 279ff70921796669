"""Alert evaluation time: 500 rules over 1,000 nodes × 8 GPUs on Postgres.

Seeds a fresh Postgres database the way ``bench/page_times.py`` does (current state of every
node through the real ingest API with a few faults, then ``--hours`` of GPU and host history
server-side), creates the default rule pack plus generated rules up to ``--rules`` (a mix of
every kind: GPU/disk/NFS/NIC thresholds with last/avg/min/max over 1–10 min windows, scoped to
clusters, pods and racks; Xid and any-event counts; node, GPU and metric absence; ECC and PCIe
replay rates; health and drift), then runs the evaluator ``--repeat`` times, one 10-s tick
apart, each lane in its own transaction as the scheduler runs them, and prints the median and
worst wall time of a tick and of each lane (the event-driven lane is what a wake-up waits
for), the transitions written and the slowest rule kinds.

Before each tick (untimed) the fleet moves on as a live one would: every GPU gets one new
reading at the tick (a copy of its newest), every disk, mount, NFS mount and NIC port one every
``--host-step-s`` (the agent's host interval, 60 s by default), and every node and GPU is seen
then. Without it the seeded data only ages, each tick another few thousand
absence instances fire, and the figure measures an outage of the whole fleet, not a steady
cycle (``--frozen`` measures that storm: the data left as seeded).

    python bench/alert_evaluation.py                       # full size, ~5-10 min of seeding
    python bench/alert_evaluation.py --nodes 50 --hours 0.5
    python bench/alert_evaluation.py --db-url URL          # re-measure a seeded database
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Table, delete, func, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from page_times import seed_current, seed_history, start_server  # noqa: E402

from app.alerts import store  # noqa: E402
from app.alerts.context import load_context  # noqa: E402
from app.alerts.evaluator import evaluate  # noqa: E402
from app.alerts.instance_reads import ActiveInstanceCache  # noqa: E402
from app.alerts.kinds import observe, shared  # noqa: E402
from app.alerts.models import AlertInstance  # noqa: E402
from app.alerts.rulefiles import DEFAULT_RULES_DIR, load_path  # noqa: E402
from app.alerts.scheduler import LANES  # noqa: E402
from app.alerts.spec import RuleSpec  # noqa: E402
from app.db import make_engine, make_session_factory, session_scope, utcnow  # noqa: E402
from app.fleet.models import Gpu, Node  # noqa: E402
from app.gc_tuning import tune_gc  # noqa: E402
from app.health.rules import DEFAULT_RULES  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.series.recent_gpu import RecentGpuSamples  # noqa: E402
from app.series.tables import (  # noqa: E402
    DiskSample,
    MountSample,
    NfsSample,
    NicPortSample,
    gpu_sample,
)
from tests.dbs import admin_url  # noqa: E402
from tests.live_server import free_port  # noqa: E402

#: The seeded readings are not refreshed while measuring: keep the nodes fresh.
RULES = DEFAULT_RULES.__class__(**{**DEFAULT_RULES.__dict__, "stale_after_s": 7200.0})

GPU_METRICS = [
    ("temp_c", ">", 80),
    ("power_w", ">", 650),
    ("util_gpu_pct", "<", 5),
    ("mem_temp_c", ">", 85),
    ("sm_clock_mhz", "<", 800),
    ("thermal_throttled", "==", 1),
    ("power_throttled", "==", 1),
    ("pcie_width_downtrained", "==", 1),
    ("fan_pct", ">", 95),
]
SCOPES = [
    {},
    {"labels": {"cluster": "demo"}},
    {"labels": {"ib_pod": "pod-01"}},
    {"labels": {"team": "inference"}},
    {"nodes": ["gpu-0*"]},
    {"gpu_models": ["*H100*"]},
]


def generated_rules(count: int) -> list[dict[str, Any]]:
    """``count`` rule documents cycling through every kind and several scopes."""
    out: list[dict[str, Any]] = []
    i = 0
    while len(out) < count:
        scope = SCOPES[i % len(SCOPES)]
        metric, op, threshold = GPU_METRICS[i % len(GPU_METRICS)]
        agg = ("last", "avg", "min", "max")[i % 4]
        window = f"{1 + i % 10}m"
        kinds: list[dict[str, Any]] = [
            {
                "kind": "threshold",
                "target": "gpu",
                "metric": metric,
                "aggregation": agg,
                "window": window,
                "op": op,
                "threshold": threshold,
            },
            {
                "kind": "threshold",
                "target": "gpu",
                "metric": metric,
                "aggregation": agg,
                "window": window,
                "op": op,
                "threshold": threshold,
            },
            {
                "kind": "threshold",
                "target": "gpu",
                "metric": metric,
                "aggregation": agg,
                "window": window,
                "op": op,
                "threshold": threshold,
            },
            {
                "kind": "threshold",
                "target": "disk",
                "metric": "avg_wait_s",
                "aggregation": agg,
                "window": window,
                "op": ">",
                "threshold": 0.05,
            },
            {
                "kind": "threshold",
                "target": "nfs",
                "metric": "avg_rtt_s",
                "aggregation": agg,
                "window": window,
                "op": ">",
                "threshold": 0.1,
            },
            {
                "kind": "threshold",
                "target": "nic",
                "metric": "port_active",
                "op": "==",
                "threshold": 0,
            },
            {
                "kind": "event",
                "xids": [48, 79, 94 + i % 3],
                "min_count": 1 + i % 2,
                "window": window,
            },
            {"kind": "event", "event_kinds": ["*"], "min_count": 3, "window": "1h"},
            {
                "kind": "absence",
                "target": ("node", "gpu", "metric")[i % 3],
                **({"metric": "power_w"} if i % 3 == 2 else {}),
                "after": "2m",
            },
            {
                "kind": "rate",
                "metric": ("ecc_corrected_volatile_count", "pcie_replay_count")[i % 2],
                "window": "1h",
                "per": "h",
                "op": ">",
                "threshold": 10,
            },
            {"kind": "health", "target": ("node", "gpu")[i % 2], "states": ["unhealthy"]},
        ]
        if i % 97 == 0:
            kinds.append({"kind": "drift"})
        cond = kinds[i % len(kinds)]
        out.append(
            {
                "name": f"gen-{i:04d}-{cond['kind']}",
                "scope": scope,
                "for": f"{i % 5}m",
                "condition": cond,
            }
        )
        i += 1
    return out


def create_rules(url: str, count: int) -> None:
    """The default pack plus generated rules, ``count`` in all."""
    defaults = [spec for spec, _ in load_path(DEFAULT_RULES_DIR)]
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            for spec in defaults:
                store.create_rule(session, spec=spec)
            for doc in generated_rules(count - len(defaults)):
                store.create_rule(session, spec=RuleSpec.model_validate(doc))
    finally:
        engine.dispose()


HOST_TABLES: list[Table] = [
    DiskSample.__table__,  # type: ignore[list-item]
    MountSample.__table__,  # type: ignore[list-item]
    NfsSample.__table__,  # type: ignore[list-item]
    NicPortSample.__table__,  # type: ignore[list-item]
]


def advance(session: Session, now: datetime, *, hosts: bool = True) -> None:
    """One live tick at ``now``: each GPU's newest sample copied to ``now`` and, with
    ``hosts``, each host entity's newest reading, and every node and GPU seen and sampled at
    ``now``."""
    at = {"now": now}
    cols = [c.name for c in gpu_sample.c if c.name not in ("sampled_at", "received_at")]
    listed = ", ".join(cols)
    session.execute(
        text(
            f"INSERT INTO gpu_sample ({listed}, sampled_at, received_at)"
            f" SELECT {', '.join('s.' + c for c in cols)}, :now, :now FROM gpu_sample s"
            " JOIN gpu g ON g.id = s.gpu_id AND s.sampled_at = g.last_sample_at"
            " ON CONFLICT DO NOTHING"
        ),
        at,
    )
    # What the ingest's write path appends for the evaluator's kept samples (app.series.arrivals).
    session.execute(
        text(
            "INSERT INTO sample_arrival (series, owner_id, first_at, last_at)"
            " SELECT 'gpu_sample', id, :now, :now FROM gpu"
        ),
        at,
    )
    for table in HOST_TABLES if hosts else []:
        keys = [c.name for c in table.primary_key if c.name != "sampled_at"]
        cols = [c.name for c in table.c if c.name != "sampled_at"]
        session.execute(
            text(
                f"INSERT INTO {table.name} ({', '.join(cols)}, sampled_at)"
                f" SELECT DISTINCT ON ({', '.join(keys)}) {', '.join(cols)}, CAST(:now AS"
                f" timestamptz) FROM {table.name} WHERE sampled_at >= (SELECT max(sampled_at)"
                f" FROM {table.name}) - interval '10 minutes'"
                f" ORDER BY {', '.join(keys)}, sampled_at DESC ON CONFLICT DO NOTHING"
            ),
            at,
        )
    session.execute(update(Gpu).values(last_sample_at=now, last_seen_at=now))
    session.execute(update(Node).values(last_sample_at=now, last_seen_at=now))


def measure(url: str, repeat: int, *, frozen: bool = False, host_step_s: int = 60) -> None:
    """Time whole evaluations (after an untimed :func:`advance` each, unless ``frozen``; host
    readings every ``host_step_s``, as agents send them), then each kind's observation
    queries."""
    engine = make_engine(url)
    factory = make_session_factory(engine)
    times: dict[str, list[float]] = {lane: [] for lane in LANES}
    phases: dict[str, list[dict[str, float]]] = {lane: [] for lane in LANES}
    transitions: list[int] = []
    evaluated = 0
    # The timer lane's samples kept between ticks, as the scheduler keeps them (its first
    # tick loads them whole).
    recent = RecentGpuSamples(consume_feed=True)
    # And each lane's active instances, as the scheduler keeps them.
    instances = {lane: ActiveInstanceCache() for lane in LANES}
    try:
        with session_scope(factory) as session:
            # Start clean, and evaluate as a live server would just after the seeded batches
            # arrived (the seed is minutes old by now), one 10 s tick after another.
            session.execute(delete(AlertInstance))
            newest = session.scalar(select(func.max(Node.last_seen_at)))
        # What autovacuum does on a live server: without it every tick scans the dead rows
        # of the instances just deleted.
        vacuum(url, "alert_instance", "alert_event")
        start = (newest or utcnow()) + timedelta(seconds=10)

        def tick(i: int, kept: RecentGpuSamples, caches: dict[str, ActiveInstanceCache]) -> int:
            """Advance to tick ``i`` and evaluate both lanes; returns the transitions."""
            nonlocal evaluated
            now = start + timedelta(seconds=10 * i)
            if not frozen:
                with session_scope(factory) as session:
                    advance(session, now, hosts=(10 * i) % host_step_s == 0)
            changed = evaluated = 0
            for lane, (_, accepts) in LANES.items():  # as the scheduler's tick runs them
                with session_scope(factory) as session:
                    began = time.perf_counter()
                    report = evaluate(
                        session,
                        now=now,
                        health_rules=RULES,
                        only=accepts,
                        recent_gpu=kept if lane == "timer" else None,
                        instances=caches[lane],
                    )
                    times[lane].append(time.perf_counter() - began)
                phases[lane].append(report.phases_s)
                assert not report.failed, report.failed
                changed += report.transitions
                evaluated += report.rules
            return changed

        for i in range(repeat):
            transitions.append(tick(i, recent, instances))
        # A leader that just started (or took over): the instances are stored, its memory is
        # empty, so both are loaded whole.
        restart = tick(
            repeat,
            RecentGpuSamples(consume_feed=True),
            {lane: ActiveInstanceCache() for lane in LANES},
        )
        restarted = {lane: spent.pop() for lane, spent in times.items()}
        for reports in phases.values():
            reports.pop()
        print(f"rules evaluated: {evaluated}; transitions per tick: {transitions}")
        ticks = [sum(parts) for parts in zip(*times.values(), strict=True)]
        print("seconds per tick (first creates the instances; then median and worst):")
        for name, spent in [("whole tick", ticks), *times.items()]:
            rest = spent[1:] or spent
            print(
                f"  {name:12} first {spent[0]:6.2f}; then median "
                f"{statistics.median(rest):6.2f}, worst {max(rest):6.2f}"
            )
        print(
            f"  a restarted leader's first tick: {sum(restarted.values()):6.2f} ("
            + ", ".join(f"{lane} {spent:.2f}" for lane, spent in restarted.items())
            + f"; {restart} transitions)"
        )
        print("median seconds per phase of the ticks after the first:")
        for lane, reports in phases.items():
            rest = reports[1:] or reports
            parts = ", ".join(
                f"{phase} {statistics.median(r.get(phase, 0.0) for r in rest):.2f}"
                for phase in ("context", "observe", "instances", "apply")
            )
            print(f"  {lane:12} {parts}")
        per_kind: dict[str, list[float]] = defaultdict(list)
        print("observation time per kind (shared scans are paid by the first rule using them):")
        with session_scope(factory) as session:
            ctx = load_context(session, now=start, health_rules=RULES)
            rules = [store.spec_of(rule) for rule in store.list_rules(session)]
            shared.plan(ctx, rules)
            for spec in rules:
                began = time.perf_counter()
                observe(ctx, spec)
                per_kind[spec.condition.kind].append(time.perf_counter() - began)
        for kind, spent in sorted(per_kind.items(), key=lambda kv: -sum(kv[1])):
            print(
                f"  {kind:9} {len(spent):4} rules: total {sum(spent):6.2f} s, median "
                f"{statistics.median(spent) * 1000:7.1f} ms, worst {max(spent) * 1000:7.1f} ms"
            )
    finally:
        engine.dispose()


def vacuum(url: str, *tables: str) -> None:
    """``VACUUM ANALYZE`` of ``tables`` (untimed)."""
    engine = make_engine(url).execution_options(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f"VACUUM (ANALYZE) {', '.join(tables)}"))
    finally:
        engine.dispose()


def settle(url: str) -> None:
    """``VACUUM ANALYZE`` the seeded database (untimed), as autovacuum keeps a live one: right
    after writing 1 GB, autovacuum's passes over it otherwise run during the measured ticks (a
    second busy CPU of two) and the planner has no statistics yet."""
    engine = make_engine(url).execution_options(isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("VACUUM (ANALYZE)"))
    finally:
        engine.dispose()


def main() -> None:
    """Seed (unless ``--db-url``), create rules and measure; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rules", type=int, default=500)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--step-s", type=int, default=10, help="GPU sample interval")
    parser.add_argument("--host-step-s", type=int, default=60, help="disk/NFS/NIC interval")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    parser.add_argument(
        "--frozen", action="store_true", help="no new readings between ticks (a fleet outage)"
    )
    parser.add_argument("--db-url", help="measure this already seeded database (rules included)")
    args = parser.parse_args()
    tune_gc()  # the collector's thresholds of a server process (app.main)
    print(
        f"machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"
    )
    if args.db_url:
        upgrade(args.db_url)  # a database seeded by an older revision
        measure(args.db_url, args.repeat, frozen=args.frozen, host_step_s=args.host_step_s)
        return
    name = f"fleetwatch_bench_{uuid.uuid4().hex[:8]}"
    admin = make_engine(admin_url()).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url()).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        port = free_port()
        server = start_server(url, port)
        try:
            began = time.monotonic()
            with tempfile.TemporaryDirectory() as work:
                seed_current(url, f"http://127.0.0.1:{port}", args.nodes, Path(work))
            print(
                f"current state of {args.nodes} nodes ingested in {time.monotonic() - began:.0f} s"
            )
        finally:
            server.terminate()
            server.wait(timeout=15)
        seed_history(url, args.hours, args.step_s, args.host_step_s)
        create_rules(url, args.rules)
        settle(url)
        measure(url, args.repeat, frozen=args.frozen, host_step_s=args.host_step_s)
    finally:
        if args.keep:
            print(f"\nkept: --db-url {url}")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
