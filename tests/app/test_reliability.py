"""The reliability view on Postgres and SQLite, with figures checked by hand: two clusters,
a node out of service for a known stretch, job-fatal and other incidents; the availability,
MTBI, MTTR and taxonomy; the API, the CSV (spreadsheet formulas defused) and the page; bad
parameters refused naming them."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from app.db import session_scope
from app.fleet.models import Node
from app.lifecycle.models import LifecycleTransition
from app.reliability import taxonomy
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import batch, create_token, xid_batch
from tests.live_server import LiveServer


@pytest.mark.parametrize(
    ("kinds", "xids", "category"),
    [
        (["xid"], [79], "GPU lost / fallen off the bus"),
        (["gpu_fallen_off_bus"], [], "GPU lost / fallen off the bus"),
        (["xid"], [48, 94], "GPU memory (ECC, row remap)"),
        (["xid"], [74], "NVLink"),
        (["xid"], [119], "GSP / firmware"),
        (["xid"], [13, 31], "Other Xid"),
        (["gpu_lost"], [74], "GPU lost / fallen off the bus"),
        ([], [], "Other"),
    ],
)
def test_the_taxonomy_of_an_incident(kinds: list[str], xids: list[int], category: str) -> None:
    assert taxonomy.category(kinds, xids) == category


def test_the_figures_per_group(db_url: str, tmp_path: Path) -> None:
    live = LiveServer(make_settings(db_url, tmp_path))
    live.start()
    try:
        now = datetime.now(UTC)
        for host, cluster in (("a1", "alpha"), ("a2", "alpha"), ("b1", "=cmd()")):
            token = create_token(db_url, host)
            assert (
                post_batch(live.url, token, batch(host, labels={"cluster": cluster})).status_code
                == 200
            )
        # Seen for 10 days (so a 7-day range holds 7 × 24 node-hours each).
        with session_factory(db_url) as factory, session_scope(factory) as session:
            session.execute(update(Node).values(first_seen_at=now - timedelta(days=10)))
        for host, cluster, xid in (("a1", "alpha", 79), ("b1", "=cmd()", 63)):
            fault = xid_batch(host, now - timedelta(minutes=5), xid=xid)
            fault["node"]["labels"] = {"cluster": cluster}
            assert post_batch(live.url, create_token(db_url, host), fault).status_code == 200
        # a2 out of service 12 h, back 1 day ago (a repair of 12 h).
        for to_state in ("quarantined", "in_service"):
            moved = httpx.post(
                f"{live.url}/api/v1/nodes/a2/lifecycle", json={"to_state": to_state, "reason": "x"}
            )
            assert moved.status_code == 200
        with session_factory(db_url) as factory, session_scope(factory) as session:
            ids = list(
                session.scalars(select(LifecycleTransition.id).order_by(LifecycleTransition.id))
            )
            session.execute(
                update(LifecycleTransition)
                .where(LifecycleTransition.id == ids[0])
                .values(at=now - timedelta(hours=36))
            )
            session.execute(
                update(LifecycleTransition)
                .where(LifecycleTransition.id == ids[1])
                .values(at=now - timedelta(hours=24))
            )

        body = httpx.get(f"{live.url}/api/v1/reliability", params={"range": "7d"}).json()
        groups = {g["group"]: g for g in body["groups"]}
        alpha, other, fleet = groups["alpha"], groups["=cmd()"], body["fleet"]
        assert (alpha["nodes"], other["nodes"], fleet["nodes"]) == (2, 1, 3)
        assert alpha["node_hours"] == pytest.approx(2 * 168, abs=0.1)
        assert alpha["out_of_service_hours"] == pytest.approx(12, abs=0.01)
        assert alpha["availability_pct"] == pytest.approx(100 * (336 - 12) / 336, abs=0.01)
        assert (alpha["incidents"], alpha["interruptions"]) == (1, 1)  # Xid 79: job-fatal
        assert alpha["mtbi_h"] == pytest.approx(336, abs=0.1)
        assert (alpha["repairs"], alpha["mttr_h"]) == (1, pytest.approx(12, abs=0.01))
        assert (other["incidents"], other["interruptions"], other["mtbi_h"]) == (1, 0, None)
        assert other["availability_pct"] == 100.0 and other["mttr_h"] is None
        assert fleet["availability_pct"] == pytest.approx(100 * (504 - 12) / 504, abs=0.01)
        assert body["taxonomy"] == [
            {"category": "GPU lost / fallen off the bus", "incidents": 1, "share_pct": 50.0},
            {"category": "GPU memory (ECC, row remap)", "incidents": 1, "share_pct": 50.0},
        ]

        exported = httpx.get(f"{live.url}/reliability.csv", params={"range": "7d"})
        assert exported.status_code == 200
        assert exported.headers["content-type"].startswith("text/csv")
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert [r["group"] for r in rows] == ["alpha", "'=cmd()", "fleet"]
        assert float(rows[0]["out_of_service_hours"]) == pytest.approx(12, abs=0.01)

        page = httpx.get(f"{live.url}/reliability", params={"range": "7d"})
        assert page.status_code == 200
        assert (
            'id="reliability-table"' in page.text and "GPU lost / fallen off the bus" in page.text
        )
        assert "=cmd()" in page.text  # shown as text, escaped by the template
    finally:
        live.stop()


@pytest.mark.parametrize(
    ("params", "field"),
    [({"range": "1y"}, "range"), ({"group": "a b"}, "group"), ({"group": "x" * 129}, "group")],
)
def test_bad_parameters_are_refused_naming_them(
    server: LiveServer, params: dict[str, Any], field: str
) -> None:
    for path in ("/api/v1/reliability", "/reliability", "/reliability.csv"):
        response = httpx.get(f"{server.url}{path}", params=params)
        assert response.status_code == 400, (path, response.text)
        assert field in response.text
