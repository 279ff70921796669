"""The fleet overview over HTTP reading the stored health (``node_health_state``), on both
backends: tiles and table rows follow the stored answer (the per-process caches are keyed by it),
the 5-s refresh answers 204 while nothing shown changed, and the refresher thread stores a new
batch's health within seconds, woken or on its timer."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import select

from app.config import load_settings
from app.db import make_engine, make_session_factory, session_scope
from app.fleet.models import Node
from app.fleet.pages import live_version
from app.health import state
from app.health.jobs import HealthRefresher
from app.health.models import NodeHealthState
from app.health.rules import rules_from_settings
from tests.app.test_overview_pages import cells_of, seed, tiles_of
from tests.app.test_pages import ingest
from tests.factories import batch, gpu, iso, store_payload
from tests.live_server import LiveServer


def refresh(server: LiveServer) -> state.RefreshReport:
    """Store every due node's health, as the server's refresher does."""
    url = server.settings.effective_database_url
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return state.refresh(
                session, rules=rules_from_settings(server.settings), now=datetime.now(UTC)
            )
    finally:
        engine.dispose()


def node_id(server: LiveServer, hostname: str) -> int:
    """The id of node ``hostname``."""
    engine = make_engine(server.settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return session.scalars(select(Node.id).where(Node.hostname == hostname)).one()
    finally:
        engine.dispose()


def xid_79_on_gpu_a_1(server: LiveServer) -> None:
    """gpu-a-1 (of :func:`seed`) reports an Xid 79 on its GPU 0, through the ingest API."""
    gpus = [gpu(i, hostname="gpu-a-1") for i in range(2)]
    xid = {"kind": "xid", "xid": 79, "occurred_at": iso(datetime.now(UTC))}
    labels = {"cluster": "a", "ib_pod": "p1"}
    ingest(
        server,
        batch("gpu-a-1", gpus=gpus, labels=labels, events=[xid | {"gpu_uuid": gpus[0]["uuid"]}]),
    )


def test_the_refresh_answers_204_until_what_it_shows_changes(server: LiveServer) -> None:
    seed(server)
    assert refresh(server).evaluated == 3
    first = httpx.get(f"{server.url}/fleet/_nodes", timeout=30)
    version = first.headers["X-Live-Version"]
    assert first.status_code == 200 and "gpu-a-1" in first.text
    again = httpx.get(f"{server.url}/fleet/_nodes", params={"seen": version}, timeout=30)
    assert (again.status_code, again.content, again.headers["X-Live-Version"]) == (
        204,
        b"",
        version,
    )
    # A filter change always gets the region (and the URL to push), whatever it sent.
    pushed = httpx.get(
        f"{server.url}/fleet/_nodes", params={"seen": version, "push": "1"}, timeout=30
    )
    assert pushed.status_code == 200

    # gpu-a-1 gets an Xid 79 on GPU 0: stored after a refresh, its tile and the version change.
    xid_79_on_gpu_a_1(server)
    report = refresh(server)
    assert report.changed == 1
    assert report.changed_ids == (node_id(server, "gpu-a-1"),)  # what wakes the alerts for it
    changed = httpx.get(f"{server.url}/fleet/_nodes", params={"seen": version}, timeout=30)
    assert changed.status_code == 200 and changed.headers["X-Live-Version"] != version
    cells = cells_of(tiles_of(changed.text)["gpu-a-1"])
    assert [c[0] for c in cells] == ["s-unhealthy", "s-healthy"]
    assert "Xid 79" in cells[0][1]


def test_table_rows_follow_the_stored_answer(server: LiveServer) -> None:
    seed(server)
    refresh(server)
    table = httpx.get(f"{server.url}/", params={"view": "table"}, timeout=30).text
    row = table[table.index('href="/nodes/gpu-a-1"') :].split("</tr>")[0]
    assert "Healthy" in row and "2</td>" in row
    xid_79_on_gpu_a_1(server)
    refresh(server)
    table = httpx.get(f"{server.url}/", params={"view": "table"}, timeout=30).text
    row = table[table.index('href="/nodes/gpu-a-1"') :].split("</tr>")[0]
    assert "Unhealthy" in row and "Healthy<" not in row


def test_the_version_leaves_out_what_changes_with_the_clock_alone() -> None:
    body = (
        b'<li><time datetime="2026-12-01T10:00:00+00:00" data-ago=" ago">4 s ago</time></li>'
        b'<p class="updated" data-now="2026-12-01T10:00:04+00:00">Updated 10:00:04Z</p>'
    )
    later = body.replace(b"4 s ago", b"9 s ago").replace(b"10:00:04", b"10:00:09")
    other_event = body.replace(b"10:00:00+00:00", b"10:00:01+00:00")
    assert live_version(body) == live_version(later)
    assert live_version(body) != live_version(other_event)
    assert live_version(body) != live_version(body.replace(b"<li>", b"<li class='x'>"))


def _stored_nodes(url: str) -> int:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            return session.query(NodeHealthState).count()
    finally:
        engine.dispose()


def _wait_for(url: str, count: int, timeout_s: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if _stored_nodes(url) >= count:
            return time.monotonic() - began
        time.sleep(0.05)
    raise AssertionError(f"{count} node(s) not stored within {timeout_s} s")


def test_the_refresher_stores_a_new_batch_when_woken_and_on_its_timer(db_url: str) -> None:
    settings = load_settings(database_url=db_url)
    engine = make_engine(db_url)
    now = datetime.now(UTC)
    store_payload(db_url, batch("n-01", gpus=[gpu(0, hostname="n-01")]), received_at=now)
    woken = HealthRefresher(
        make_session_factory(engine),
        rules=rules_from_settings(settings),
        interval_s=3600,  # only a wake can make it run within the test
        recheck_after_s=60,
        debounce_s=0.05,
    )
    woken.start()
    try:
        woken.wake()
        assert _wait_for(db_url, 1, 10) < 10
    finally:
        woken.close()
    store_payload(
        db_url,
        batch("n-02", gpus=[gpu(0, hostname="n-02")]),
        received_at=now + timedelta(seconds=1),
    )
    timed = HealthRefresher(
        make_session_factory(engine),
        rules=rules_from_settings(settings),
        interval_s=0.2,
        recheck_after_s=60,
    )
    timed.start()
    try:
        _wait_for(db_url, 2, 10)
        assert timed.last_report is not None
    finally:
        timed.close()
        engine.dispose()
