"""The lifecycle on pages, through a real server on Postgres and SQLite: the node page shows
the state, the form and the action log; an incident whose repair needs a drain recommends
quarantining its node, and one click quarantines it with the incident as cause and reason; the
forms refuse bad input naming the field and never redirect off the site."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape
from pathlib import Path
from typing import Any

import httpx

from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.factories import batch, create_token, xid_batch
from tests.live_server import LiveServer

ECHO = "/bin/echo"


def _start(db_url: str, tmp_path: Path) -> LiveServer:
    live = LiveServer(make_settings(db_url, tmp_path, slurm_scontrol=ECHO))
    live.start()
    return live


def _lifecycle(live: LiveServer, host: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{live.url}/api/v1/nodes/{host}/lifecycle").json()
    return body


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_node_page_moves_the_node_and_shows_the_action_log(db_url: str, tmp_path: Path) -> None:
    live = _start(db_url, tmp_path)
    try:
        token = create_token(db_url, "node-a")
        assert post_batch(live.url, token, batch("node-a")).status_code == 200
        page = httpx.get(f"{live.url}/nodes/node-a")
        assert page.status_code == 200
        assert 'id="lifecycle-state" data-state="in_service"' in page.text
        assert "Schedulers acted on: slurm" in _text(page.text)
        assert '<option value="quarantined">Quarantined</option>' in page.text
        assert '<option value="rma">' not in page.text  # not a next state of in service

        moved = httpx.post(
            f"{live.url}/nodes/node-a/lifecycle",
            data={"to_state": "quarantined", "reason": "fans loud", "dry_run": "on"},
        )
        assert moved.status_code == 303
        assert moved.headers["location"] == "/nodes/node-a#lifecycle"
        page = httpx.get(f"{live.url}/nodes/node-a")
        assert 'data-state="quarantined"' in page.text
        text = _text(page.text)
        assert "by web (person): fans loud" in text
        assert "slurm drain node-a dry_run" in text
        assert f"{ECHO} update NodeName=node-a State=DRAIN 'Reason=fleetwatch: fans loud'" in text
        assert '<option value="remediating">Remediating</option>' in page.text
    finally:
        live.stop()


def test_an_incident_recommends_quarantine_and_one_click_accepts_it(
    db_url: str, tmp_path: Path
) -> None:
    live = _start(db_url, tmp_path)
    try:
        token = create_token(db_url, "node-b")
        now = datetime.now(UTC) - timedelta(seconds=5)
        assert post_batch(live.url, token, xid_batch("node-b", now, xid=79)).status_code == 200
        (incident,) = httpx.get(f"{live.url}/api/v1/incidents").json()
        page = httpx.get(f"{live.url}/incidents/{incident['id']}")
        assert page.status_code == 200
        assert 'id="accept-quarantine"' in page.text
        form = re.search(r'<form[^>]*class="lifecycle-accept".*?</form>', page.text, re.S)
        assert form is not None
        fields = dict(re.findall(r'name="([a-z_]+)"[^>]*value="([^"]*)"', form.group(0)))
        assert fields["cause"] == "incident" and fields["cause_ref"] == str(incident["id"])
        reason = unescape(fields["reason"])
        assert reason.startswith(f"incident #{incident['id']}: Xid 79 on GPU 0 — ")

        clicked = httpx.post(f"{live.url}/nodes/node-b/lifecycle", data=fields)
        assert clicked.status_code == 303
        assert clicked.headers["location"] == f"/incidents/{incident['id']}#lifecycle-recommend"
        state = _lifecycle(live, "node-b")
        assert (state["state"], state["cause"], state["cause_ref"]) == (
            "quarantined",
            "incident",
            str(incident["id"]),
        )
        assert state["reason"] == reason
        assert state["actions"][0]["command"][-1] == f"Reason=fleetwatch: {reason}"[:200]
        page = httpx.get(f"{live.url}/incidents/{incident['id']}")
        assert 'id="accept-quarantine"' not in page.text  # done: not recommended again
        assert 'id="incident-node-state">Quarantined<' in page.text
        node_page = httpx.get(f"{live.url}/nodes/node-b").text
        assert f'href="/incidents/{incident["id"]}"' in node_page
    finally:
        live.stop()


def test_the_form_refuses_bad_input_and_off_site_redirects(db_url: str, tmp_path: Path) -> None:
    live = _start(db_url, tmp_path)
    try:
        token = create_token(db_url, "node-c")
        assert post_batch(live.url, token, batch("node-c")).status_code == 200
        url = f"{live.url}/nodes/node-c/lifecycle"
        for data, field in [
            ({"to_state": "gone", "reason": "x"}, "to_state"),
            ({"to_state": "quarantined", "reason": " "}, "reason"),
            ({"to_state": "quarantined", "reason": "x", "cause": "rule"}, "cause"),
        ]:
            refused = httpx.post(url, data=data)
            assert refused.status_code == 400, data
            assert field in refused.text
        assert httpx.post(url, data={"to_state": "validating", "reason": "x"}).status_code == 409
        assert httpx.post(f"{live.url}/nodes/nobody/lifecycle", data={}).status_code == 404
        for back in (
            "https://evil.example/",
            "//evil.example/x",
            "/\\evil.example",
            "/x\r\nSet-Cookie: a=b",
            "/nodes/ä",
        ):
            moved = httpx.post(url, data={"to_state": "quarantined", "reason": "x", "back": back})
            assert moved.status_code == 303
            assert moved.headers["location"] == "/nodes/node-c#lifecycle"
            httpx.post(url, data={"to_state": "in_service", "reason": "back"})
        assert _lifecycle(live, "node-c")["state"] == "in_service"
    finally:
        live.stop()


def test_the_overview_lists_the_nodes_out_of_service(db_url: str, tmp_path: Path) -> None:
    live = _start(db_url, tmp_path)
    try:
        for host in ("node-d", "node-e"):
            token = create_token(db_url, host)
            assert post_batch(live.url, token, batch(host)).status_code == 200
        empty = httpx.get(f"{live.url}/").text
        assert "Every node is in service." in empty
        httpx.post(
            f"{live.url}/api/v1/nodes/node-e/lifecycle",
            json={"to_state": "quarantined", "reason": "<b>PSU</b> alarm"},
        )
        page = httpx.get(f"{live.url}/").text
        panel = re.search(r'<section class="panel out-of-service".*?</section>', page, re.S)
        assert panel is not None
        assert "(1)" in panel.group(0) and 'href="/nodes/node-e#lifecycle"' in panel.group(0)
        assert "&lt;b&gt;PSU&lt;/b&gt; alarm" in panel.group(0) and "node-d" not in panel.group(0)
    finally:
        live.stop()
