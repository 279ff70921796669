"""Fault: the webhook receiver refuses every request (HTTP 503) for 10 minutes.

A real server (jobs on, the default rule pack) pages faults of simulated agents to a local
webhook receiver that answers 503 for ``--refuse`` seconds from the first page, then 200.
Time is compressed by ``--scale`` (default 10: 60 s of refusal against a backoff capped at
30 s instead of 300 s and a deadline of 360 s instead of 3,600 s; ``--scale 1`` runs the
real 10 minutes with the default settings). Each page must arrive exactly once after the
receiver is back, nothing lost. Then the give-up case: the receiver refuses past the deadline
(scaled too): every page ends ``failed`` with the record "gave up at the deadline after N
attempts", shown on the channel's delivery page and counted in
``fleetwatch_notifications_total{outcome="failed"}``.

    python bench/faults/webhook_refusing.py [--refuse 600] [--scale 10]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.fleetspec import FleetNode  # noqa: E402
from agents.simfleet import SimFleet  # noqa: E402
from bench.faults.paging import (  # noqa: E402
    FAULTS,
    SERVER_ENV,
    page_check,
    pages,
    prepare_alerting,
)
from tests.factories import create_token  # noqa: E402
from tests.live_server import free_port  # noqa: E402
from tests.notify_helpers import Answer, Receiver  # noqa: E402
from tests.server_process import ServerProcess, fresh_database, summary, wait_for  # noqa: E402

AGENT_OPTIONS = {"backoff_base_s": 0.2, "backoff_cap_s": 1.0, "shutdown_timeout_s": 10.0}
#: The production notify settings (app/config.py): backoff cap and deadline, seconds.
BACKOFF_CAP_S = 300.0
DEADLINE_S = 3600.0


class Switch:
    """The receiver's answer: 503 while ``refusing``, else 200."""

    def __init__(self) -> None:
        self.refusing = True
        self.lock = threading.Lock()

    def __call__(self, at: float) -> Answer:
        with self.lock:
            return Answer(503, b"service unavailable") if self.refusing else Answer(200)


@dataclass
class RefusalResult:
    """What one run measured."""

    refused_requests: int = 0
    missing: int = 0
    doubled: int = 0
    unwanted: int = 0
    delivered_after_back_s: float | None = None
    gave_up: int = 0
    gave_up_rows: int = 0
    record: str = ""
    page_shows: bool = False
    failed_counter: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


def accepted_bodies(hook: Receiver) -> list[Any]:
    """The bodies of the requests the receiver answered 200."""
    with hook._lock:
        return [r.json() for r in hook.requests if r.status == 200]


def _env(scale: float, deadline_s: float) -> dict[str, str]:
    return {
        **SERVER_ENV,
        "FLEETWATCH_NOTIFY_BACKOFF_BASE_S": f"{1.0 / scale:g}",
        "FLEETWATCH_NOTIFY_BACKOFF_CAP_S": f"{BACKOFF_CAP_S / scale:g}",
        "FLEETWATCH_NOTIFY_DEADLINE_S": f"{deadline_s:g}",
        "FLEETWATCH_NOTIFY_WORKER_INTERVAL_S": f"{max(0.1, 1.0 / scale):g}",
    }


def _fleet(db_url: str, hosts: list[str], url: str, spool: Path) -> SimFleet:
    nodes = [FleetNode(h, create_token(db_url, h), 8, {"cluster": "hook"}) for h in hosts]
    return SimFleet(
        nodes,
        server_url=url,
        spool_root=spool,
        interval_s=0.5,
        batch_interval_s=1.0,
        agent_options=AGENT_OPTIONS,
    )


def run(
    db_url: str, work: Path, *, refuse_s: float = 600.0, scale: float = 10.0, nodes: int = 4
) -> RefusalResult:
    """Run both cases on ``db_url`` (migrated, empty); logs and spools under ``work``."""
    result = RefusalResult()
    switch = Switch()
    hook = Receiver(respond=switch).start()
    try:
        prepare_alerting(db_url, hook.url + "/hook")
        kinds = list(FAULTS)
        # 1. Refused for refuse_s / scale seconds, then back: every page delivered once.
        hosts = [f"hook-{i:03d}" for i in range(nodes)]
        faulted = {h: kinds[i % len(kinds)] for i, h in enumerate(hosts)}
        server = ServerProcess(
            db_url, free_port(), work / "server.log", env=_env(scale, DEADLINE_S / scale)
        )
        server.start()
        fleet = _fleet(db_url, hosts, server.url, work / "spool")
        fleet.start()
        try:
            time.sleep(4.0)
            for host, kind in faulted.items():
                fault, index, xid, _ = FAULTS[kind]
                fleet.inject(host, fault, index, 3600.0, xid)
            wait_for(lambda: len(hook.requests) > 0, timeout_s=60)  # the first page is refused
            time.sleep(refuse_s / scale)
            with switch.lock:
                switch.refusing = False
                back = time.monotonic()
                result.refused_requests = len(hook.requests)
            wanted = {h: FAULTS[k][3] for h, k in faulted.items()}
            got = wait_for(
                lambda: page_check(pages(accepted_bodies(hook)), wanted)[0] == 0,
                timeout_s=2 * BACKOFF_CAP_S / scale + 60,
            )
            if got is not None:
                result.delivered_after_back_s = time.monotonic() - back
            time.sleep(5.0)
            result.missing, result.doubled, result.unwanted = page_check(
                pages(accepted_bodies(hook)), wanted
            )
        finally:
            fleet.stop(timeout_s=30)
            server.stop()
        # 2. Refused past the deadline: given up, with a record, on the page, counted.
        deadline_s = max(10.0, 60.0 / scale)
        with switch.lock:
            switch.refusing = True
        server = ServerProcess(
            db_url, free_port(), work / "server-2.log", env=_env(scale, deadline_s)
        )
        server.start()
        hosts = [f"hook-late-{i:03d}" for i in range(2)]
        fleet = _fleet(db_url, hosts, server.url, work / "spool-2")
        fleet.start()
        try:
            time.sleep(4.0)
            for host in hosts:
                fleet.inject(host, "gpu_lost", 1, 3600.0, None)
            [channel] = server.api.get(f"{server.url}/api/v1/channels", timeout=10).json()
            log_url = f"{server.url}/api/v1/channels/{channel['id']}/deliveries"

            def failed() -> list[dict[str, Any]]:
                rows = server.api.get(log_url, params={"status": "failed"}, timeout=10).json()
                return [r for r in rows if "hook-late" in r["summary"]]

            wait_for(lambda: len(failed()) >= len(hosts), timeout_s=deadline_s + 60)
            rows = failed()
            result.gave_up_rows = len(rows)
            result.gave_up = sum(1 for r in rows if "gave up at the deadline" in r["last_error"])
            result.record = rows[0]["last_error"] if rows else ""
            channel_page = f"{server.url}/notifications/channels/{channel['id']}"
            page = server.api.get(channel_page, timeout=10)
            result.page_shows = "gave up at the deadline" in page.text
            metrics = server.api.get(f"{server.url}/metrics", timeout=10).text
            result.failed_counter = _counter(metrics, 'outcome="failed"')
        finally:
            fleet.stop(timeout_s=30)
            server.stop()
    finally:
        hook.stop()
    return result


def _counter(metrics: str, label: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("fleetwatch_notifications_total{") and label in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--refuse", type=float, default=600.0, help="seconds refused (unscaled)")
    parser.add_argument("--scale", type=float, default=10.0, help="time compression factor")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with fresh_database() as url, tempfile.TemporaryDirectory(prefix="fw-hook-") as tmp:
        r = run(url, Path(tmp), refuse_s=args.refuse, scale=args.scale)
    back = r.delivered_after_back_s
    print(
        summary(
            f"webhook receiver refusing {args.refuse:g} s (time / {args.scale:g})",
            [
                ("refused requests (503) while down", r.refused_requests),
                ("pages missing / doubled / unwanted", f"{r.missing} / {r.doubled} / {r.unwanted}"),
                (
                    "receiver back -> every page delivered, s",
                    "never"
                    if back is None
                    else f"{back:.1f} (x{args.scale:g} = {back * args.scale:.0f} s unscaled)",
                ),
                ("past the deadline: rows failed / with record", f"{r.gave_up_rows} / {r.gave_up}"),
                ("the record", r.record[:200]),
                ("shown on /notifications/channels/<id>", r.page_shows),
                ("fleetwatch_notifications_total{failed}", r.failed_counter),
            ],
        )
    )
    ok = (r.missing, r.doubled) == (0, 0) and r.gave_up >= 2 and r.page_shows
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
