"""The alert-path self-test end to end: ``fleetwatch-agent --once --inject-test-xid 79`` on a
simulated node sends a synthetic Xid marked test to a real server evaluating the default pack
every second; health, the alert, the incident and the webhook page all say TEST, nothing
counts it as a real fault, and after the self-test window health no longer does. On Postgres
and SQLite."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope, utcnow
from app.demo import add_webhook, apply_default_rules
from app.fleet.service import get_node_view
from app.health.rules import rules_from_settings
from app.health.service import evaluate_node
from app.incidents import offenders
from tests.e2e.test_notify_demo import demo_settings, serve
from tests.factories import create_token
from tests.notify_helpers import receiver

HOST = "selftest-001"


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Iterator[Settings]:
    # The agent sends once and exits: with the demo's 5-s stale window a slow machine saw the
    # node go stale before the Xid paged, and the stale page (which mutes the rest) came instead.
    yield from demo_settings(db_url, tmp_path, stale_after_s=600)


def agent(url: str, token: str, spool: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """One ``fleetwatch-agent --once`` of a simulated node."""
    command = [sys.executable, "-m", "agents", "--collector", "sim", "--hostname", HOST]
    command += ["--server", url, "--token", token, "--spool-dir", str(spool), "--once", *extra]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def firing(bodies: list[dict[str, object]]) -> list[dict[str, object]]:
    return [
        a
        for body in bodies
        for a in body["alerts"]  # type: ignore[attr-defined]
        if a["status"] == "firing"
    ]


def test_a_test_xid_pages_once_marked_test_and_counts_as_no_real_fault(
    settings: Settings, db_url: str, tmp_path: Path
) -> None:
    apply_default_rules(settings)
    token = create_token(db_url, HOST)
    with receiver() as hook:
        add_webhook(settings, url=hook.url + "/hook", secret=None)
        server, thread, url = serve(settings)
        try:
            sent = agent(url, token, tmp_path / "spool", "--inject-test-xid", "79")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not firing(hook.bodies()):
                time.sleep(0.5)
            time.sleep(3.0)  # a second page would come by now
            health = httpx.get(f"{url}/api/v1/nodes/{HOST}/health", timeout=10).json()
            incidents = httpx.get(f"{url}/api/v1/incidents", timeout=10).json()
        finally:
            server.should_exit = True
            thread.join(timeout=15)
        pages = firing(hook.bodies())

    assert sent.returncode == 0, sent.stderr
    assert "sending a TEST Xid 79 for GPU 0" in sent.stderr
    [page] = pages
    assert page["labels"]["alertname"] == "gpu-critical-xid"  # type: ignore[index]
    assert page["labels"]["test"] == "true"  # type: ignore[index]
    assert page["annotations"]["summary"].startswith("[TEST] ")  # type: ignore[index]
    assert page["annotations"]["description"].startswith("TEST — a self-test fault")  # type: ignore[index]
    [gpu0] = [g for g in health["gpus"] if g["index"] == 0]
    [reason] = gpu0["reasons"]
    assert (reason["code"], reason["test"]) == ("xid_79", True)
    assert reason["text"].startswith("TEST: Xid 79 (")
    assert [(i["xids"], i["test"]) for i in incidents] == [([79], True)]

    # Never a real fault: no repeat offender however low the bar; and after the self-test
    # window health counts it no more (its alert then resolves).
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            assert offenders.repeat_nodes(session, now=utcnow(), min_incidents=1) == []
            assert offenders.repeat_gpus(session, now=utcnow(), min_incidents=1) == []
            view = get_node_view(session, hostname=HOST, stale_after_s=3600.0, now=utcnow())
            later = utcnow() + timedelta(minutes=16)
            after = evaluate_node(
                session, view=view, rules=rules_from_settings(settings), now=later
            )
    finally:
        engine.dispose()
    assert [r.code for g in after.gpus for r in g.reasons] == []
