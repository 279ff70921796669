"""Alerting for the fault scripts: the default rule pack and a webhook channel to a local
receiver, server settings that evaluate every second, faults that must each page exactly once,
and the count of firing notices the receiver got per (hostname, alertname)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.config import load_settings  # noqa: E402
from app.demo import add_webhook, apply_default_rules  # noqa: E402

#: A fixed secret key, so the channel's URL that this process encrypts is readable by the
#: server processes the scripts start.
SECRET_KEY = "fault-scripts-secret-key-not-for-production"
#: ``FLEETWATCH_*`` settings of the servers and workers the scripts start.
SERVER_ENV = {
    "FLEETWATCH_ALERT_EVAL_INTERVAL_S": "1",
    "FLEETWATCH_NOTIFY_ALLOW_HOSTS": "127.0.0.1",
    "FLEETWATCH_SECRET_KEY": SECRET_KEY,
}
#: Fault kind → (simulator fault, GPU index, Xid, the one alert that must page for it).
FAULTS: dict[str, tuple[str, int, int | None, str]] = {
    "xid48": ("xid", 3, 48, "gpu-critical-xid"),
    "lost": ("gpu_lost", 2, None, "gpu-lost"),
}


def prepare_alerting(db_url: str, hook_url: str) -> None:
    """Apply the default rules to ``db_url`` and route every alert to ``hook_url``."""
    settings = load_settings(
        database_url=db_url, notify_allow_hosts=["127.0.0.1"], secret_key=SECRET_KEY
    )
    apply_default_rules(settings)
    add_webhook(settings, url=hook_url, secret=None)


def pages(bodies: list[Any]) -> Counter[tuple[str, str]]:
    """(hostname, alertname) → firing notices in the webhook ``bodies``."""
    out: Counter[tuple[str, str]] = Counter()
    for body in bodies:
        for alert in body.get("alerts", []):
            if alert.get("status") == "firing":
                out[(alert["labels"]["hostname"], alert["labels"]["alertname"])] += 1
    return out


def page_check(got: Counter[tuple[str, str]], wanted: dict[str, str]) -> tuple[int, int, int]:
    """(pages missing, pages more than once, pages of alerts not wanted) for ``wanted``:
    hostname → the one alert that must page."""
    missing = sum(1 for host, name in wanted.items() if got[(host, name)] == 0)
    doubled = sum(n - 1 for n in got.values() if n > 1)
    unwanted = sum(n for (host, name), n in got.items() if wanted.get(host) != name)
    return missing, doubled, unwanted
