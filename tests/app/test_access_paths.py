"""Access decisions hold under a path prefix: an app served with an ASGI ``root_path``
(``uvicorn --root-path /fleetwatch`` behind a proxy that strips the prefix; uvicorn puts it back
in the scope's ``path``) is matched to its routes the way the router matches them (the path
less the root path), so a prefixed path is never an unchecked one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.access.models import User
from app.access.roles import Role
from app.db import session_scope, utcnow
from tests.access_helpers import add_token, firing_instance
from tests.conftest import make_settings
from tests.dbs import session_factory
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

PREFIX = "/fleetwatch"
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}


@pytest.fixture
def prefixed(db_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    server = LiveServer(make_settings(db_url, tmp_path), as_admin=False, root_path=PREFIX)
    server.start()
    with httpx.Client(base_url=server.url) as client:
        yield client
    server.stop()


def test_a_path_under_the_root_path_is_checked_like_the_route_it_reaches(
    prefixed: httpx.Client, db_url: str
) -> None:
    nodes = prefixed.get("/api/v1/nodes")
    assert nodes.status_code == 401, nodes.text
    page = prefixed.get("/admin/access", follow_redirects=False)
    assert page.status_code == 303
    created = prefixed.post(
        "/api/v1/users", json={"name": "intruder", "role": "admin", "password": "x" * 20}
    )
    assert created.status_code == 401, created.text
    with session_factory(db_url) as factory, session_scope(factory) as session:
        assert session.scalars(select(User.name).where(User.name == "intruder")).all() == []
    viewer = add_token(db_url, "wall", Role.viewer, None)
    read = prefixed.get("/api/v1/nodes", headers={"Authorization": f"Bearer {viewer}"})
    assert read.status_code == 200, read.text
    users = prefixed.get("/api/v1/users", headers={"Authorization": f"Bearer {viewer}"})
    assert users.status_code == 403, users.text


@pytest.fixture
def production(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(make_settings(db_url, tmp_path), as_admin=False)
    server.start()
    yield server
    server.stop()
    wipe_alerts(db_url)


def test_the_audit_trail_keeps_what_an_ack_or_a_silence_recorded(
    production: LiveServer, db_url: str
) -> None:
    """An API token acks and silences in someone's name: the audit row says whose, and what
    the ack or silence was (after), and what an expiry changed (before/after)."""
    admin = {"Authorization": f"Bearer {add_token(db_url, 'trail-admin', Role.admin, None)}"}
    bot = {"Authorization": f"Bearer {add_token(db_url, 'trail-bot', Role.responder, None)}"}
    api = f"{production.url}/api/v1"
    rule = {"name": "trail-rule", "condition": HOT}
    assert httpx.post(f"{api}/rules", json=rule, headers=admin).status_code == 201
    alert_id = firing_instance(db_url, "trail-rule")
    acked = httpx.post(
        f"{api}/alerts/{alert_id}/ack", json={"owner": "alice", "note": "on it"}, headers=bot
    )
    assert acked.status_code == 201, acked.text
    silence = {
        "matchers": [{"name": "alertname", "value": "trail-rule"}],
        "ends_at": (utcnow() + timedelta(hours=1)).isoformat(),
        "created_by": "dave",
        "comment": "disk swap",
    }
    made = httpx.post(f"{api}/silences", json=silence, headers=bot)
    assert made.status_code == 201, made.text
    silence_id = made.json()["id"]
    ended = httpx.post(f"{api}/silences/{silence_id}/expire", headers=bot)
    assert ended.status_code == 200, ended.text

    trail = httpx.get(f"{api}/audit", params={"actor": "token:trail-bot"}, headers=admin).json()
    by_action = {e["action"]: e for e in trail}
    ack = by_action["POST /api/v1/alerts/{alert_id}/ack"]["detail"]
    assert ack["acting_as"] == "alice"
    assert ack["after"] == {"owner": "alice", "note": "on it"}
    created = by_action["POST /api/v1/silences"]["detail"]
    assert created["acting_as"] == "dave"
    assert (created["object"], created["key"], created["before"]) == ("silence", silence_id, None)
    assert created["after"]["matchers"] == made.json()["matchers"]
    assert created["after"]["comment"] == "disk swap"
    expired = by_action["POST /api/v1/silences/{silence_id}/expire"]["detail"]
    at = datetime.fromisoformat
    assert at(expired["before"]["ends_at"]) == at(made.json()["ends_at"])
    assert at(expired["after"]["ends_at"]) == at(ended.json()["ends_at"])


def test_an_htmx_refresh_sends_an_anonymous_browser_to_log_in_back_to_its_page(
    production: LiveServer,
) -> None:
    """A partial's refresh (session expired) sends the browser to the login page with the page
    it shows as ``next``, not the partial (a bare fragment after the login)."""
    shown = f"{production.url}/alerts?state=firing"
    partial = httpx.get(
        f"{production.url}/alerts/_list?state=firing",
        headers={"HX-Request": "true", "HX-Current-URL": shown},
    )
    assert partial.status_code == 401
    assert partial.headers["hx-redirect"] == "/login?next=%2Falerts%3Fstate%3Dfiring"
    # Without the header (or with one that is not a URL path) the request's own path is kept.
    bare = httpx.get(f"{production.url}/alerts/_list", headers={"HX-Request": "true"})
    assert bare.headers["hx-redirect"] == "/login?next=%2Falerts%2F_list"


def test_an_over_long_password_or_name_on_the_login_form_is_a_wrong_login_not_json(
    production: LiveServer,
) -> None:
    """A pasted passphrase past 1,024 characters (or a name past 64) gets the login form back
    with its message, as any wrong login does, never a JSON validation error in the browser."""
    for name, password in (("admin", "p" * 1100), ("u" * 100, "p" * 20)):
        answer = httpx.post(
            f"{production.url}/login", data={"username": name, "password": password, "next": "/"}
        )
        assert answer.status_code == 401, answer.text[:200]
        assert answer.headers["content-type"].startswith("text/html")
        assert "Wrong user name or password." in answer.text
        assert password not in answer.text  # the validation error echoed it back


def test_a_validation_error_never_echoes_a_password_back(
    production: LiveServer, db_url: str
) -> None:
    admin = {"Authorization": f"Bearer {add_token(db_url, 'echo-admin', Role.admin, None)}"}
    secret = "q" * 1030
    answer = httpx.post(
        f"{production.url}/api/v1/users",
        json={"name": "echo", "role": "viewer", "password": secret},
        headers=admin,
    )
    assert answer.status_code == 422
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", "password"]
    assert "input" not in error
    assert secret not in answer.text


def test_agents_enrolling_at_once_with_a_single_use_token_get_one_token(
    production: LiveServer, db_url: str
) -> None:
    """Eight agents start at once with an enrollment token good for one node: one is
    enrolled, the others are refused as used up (the use count is not raced past)."""
    admin = {"Authorization": f"Bearer {add_token(db_url, 'race-admin', Role.admin, None)}"}
    made = httpx.post(
        f"{production.url}/api/v1/enrollment-tokens",
        json={"name": "race", "max_uses": 1, "ttl_s": 600},
        headers=admin,
    )
    assert made.status_code == 201, made.text
    enroll = {"Authorization": f"Bearer {made.json()['token']}"}
    start = threading.Barrier(8)

    def one(i: int) -> int:
        start.wait()
        return httpx.post(
            f"{production.url}/api/v1/enroll",
            json={"hostname": f"race-node-{i}"},
            headers=enroll,
            timeout=30,
        ).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = sorted(pool.map(one, range(8)))
    assert codes == [201] + [401] * 7
    listed = httpx.get(f"{production.url}/api/v1/enrollment-tokens", headers=admin).json()
    assert [(t["name"], t["uses"]) for t in listed] == [("race", 1)]
