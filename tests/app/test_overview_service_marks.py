"""The overview marks the nodes out of service (Q, R, V, RMA) and in maintenance (M) on their
tiles, under the health and the value overlays, and its ``service`` filter keeps the nodes in
service, out of it, or in maintenance; an unknown value is a 400 naming ``service``. Postgres
and SQLite."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from app.db import session_scope
from app.maintenance.models import MaintenanceWindow
from tests.app.helpers import post_batch
from tests.dbs import session_factory
from tests.factories import batch, create_token
from tests.live_server import LiveServer


@pytest.fixture
def fleet(server: LiveServer, db_url: str) -> Iterator[LiveServer]:
    """s1 quarantined, s2 in maintenance, s3 in service, s4 quarantined and in maintenance."""
    for host in ("s1", "s2", "s3", "s4"):
        assert post_batch(server.url, create_token(db_url, host), batch(host)).status_code == 200
    for host in ("s1", "s4"):
        moved = httpx.post(
            f"{server.url}/api/v1/nodes/{host}/lifecycle",
            json={"to_state": "quarantined", "reason": "Xid 79 on GPU 2"},
        )
        assert moved.status_code == 200, moved.text
    ends = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    for host in ("s2", "s4"):
        made = httpx.post(
            f"{server.url}/api/v1/maintenance",
            json={"hostname": host, "reason": "BIOS", "ends_at": ends, "created_by": "eve"},
        )
        assert made.status_code == 201, made.text
    yield server
    with session_factory(db_url) as factory, session_scope(factory) as session:
        session.execute(MaintenanceWindow.__table__.delete())


def _tiles(html: str) -> dict[str, str]:
    """Hostname → the class attribute of its tile."""
    return {
        host: css
        for css, host in re.findall(r'<a class="ov-node ([^"]*)" href="/nodes/([^"]+)"', html)
    }


@pytest.mark.parametrize("overlay", ["health", "temp"])
def test_tiles_are_marked_and_filtered(fleet: LiveServer, overlay: str) -> None:
    page = httpx.get(f"{fleet.url}/", params={"overlay": overlay, "expand": "1"}).text
    tiles = _tiles(page)
    assert "svc-out" in tiles["s1"] and "svc-out" in tiles["s4"]
    assert "svc-maintenance" in tiles["s2"]
    assert "svc" not in tiles["s3"]
    assert re.search(r'title="Quarantined since [^"]*: Xid 79 on GPU 2">Q<', page)
    assert re.search(r'title="In maintenance until [^"]*: BIOS">M<', page)
    assert re.search(r'title="Quarantined since [^"]*· in maintenance until [^"]*">Q\+M<', page)
    for wanted, hosts in (("out", {"s1", "s4"}), ("maintenance", {"s2", "s4"}), ("in", {"s3"})):
        shown = httpx.get(f"{fleet.url}/", params={"overlay": overlay, "service": wanted})
        assert shown.status_code == 200
        assert set(_tiles(shown.text)) == hosts, wanted
        assert f'<option value="{wanted}" selected>' in shown.text


def test_the_table_view_is_filtered_and_bad_values_refused(fleet: LiveServer) -> None:
    table = httpx.get(f"{fleet.url}/", params={"view": "table", "service": "out"}).text
    assert '/nodes/s1"' in table and '/nodes/s4"' in table and '/nodes/s3"' not in table
    assert '/nodes/s3"' in httpx.get(f"{fleet.url}/", params={"view": "table"}).text
    partial = httpx.get(f"{fleet.url}/fleet/_nodes", params={"service": "in", "push": "1"})
    assert partial.headers["HX-Push-Url"] == "/?service=in"
    bad = httpx.get(f"{fleet.url}/", params={"service": "gone"})
    assert bad.status_code == 400 and "service" in bad.text


def _row_marks(html: str) -> dict[str, str]:
    """Hostname → the service mark after its name in the table ('' where none)."""
    rows = re.findall(
        r'<th scope="row"><a href="/nodes/([^"#]+)">[^<]*</a>(?: <span class="row-svc '
        r'[^"]*" title="[^"]*">([^<]*)<)?',
        html,
    )
    return dict(rows)


def test_the_table_view_marks_rows_as_the_tiles_do(fleet: LiveServer) -> None:
    table = httpx.get(f"{fleet.url}/", params={"view": "table"}).text

    assert _row_marks(table) == {"s1": "Q", "s2": "M", "s3": "", "s4": "Q+M"}
    assert re.search(r'class="row-svc svc-out" title="Quarantined since [^"]*: Xid 79', table)
    assert 'class="row-svc svc-maintenance" title="In maintenance until' in table


def test_a_cached_table_row_follows_its_node_back_into_service(fleet: LiveServer) -> None:
    before = httpx.get(f"{fleet.url}/", params={"view": "table"}).text
    back = httpx.post(
        f"{fleet.url}/api/v1/nodes/s1/lifecycle",
        json={"to_state": "in_service", "reason": "GPU 2 replaced"},
    )
    assert back.status_code == 200, back.text

    after = httpx.get(f"{fleet.url}/", params={"view": "table"}).text

    assert _row_marks(before)["s1"] == "Q"
    assert _row_marks(after)["s1"] == ""
