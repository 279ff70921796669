"""Every route × every kind of caller, on a server with the production defaults (no
anonymous access, no test admin): the policy table has a decision for every route of the app,
and the server refuses exactly what the decision refuses.

Callers: anonymous, viewer, responder of team A, editor of team A, editor of team B, admin
(all logged in through ``POST /login``), an API token (responder, every team) and a node's
agent token. Team-scoped routes are called on objects owned by team A (a rule, a channel, a
route, a silence, a runbook edit), recreated before each route in case the previous one
deleted them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from app.access import policy
from app.access.roles import Role
from app.errors import Conflict
from app.main import create_app
from tests.access_helpers import (
    Caller,
    add_agent_token,
    add_token,
    add_user,
    firing_instance,
    log_in,
)
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import wipe_alerts
from tests.live_server import LiveServer
from tests.notify_helpers import wipe_notify

TEAM_A, TEAM_B = "team-a", "team-b"
HOT = {"kind": "threshold", "target": "gpu", "metric": "temp_c", "op": ">", "threshold": 85}
#: What a refusal by the access layer says (API detail, page text) — other 401/403 answers
#: (a wrong password on the login form) are the endpoint's own.
REFUSAL = re.compile(
    r"log in or send|; this needs|owned by team|an agent token may only|"
    r"unknown, expired or revoked|has no access decision"
)


def app_routes() -> list[tuple[str, str]]:
    """(method, path template) of every route of the app, as the router has them."""
    app = create_app(make_settings("sqlite://", Path("/nonexistent")), run_jobs=False)
    found = []
    for ctx in iter_route_contexts(app.routes):
        if ctx.methods and ctx.path:
            found.extend((m, ctx.path) for m in sorted(ctx.methods))
    return found


ROUTES = app_routes()


def test_every_route_has_a_decision() -> None:
    missing = [r for r in ROUTES if policy.decision(*r) is None]
    assert missing == [], f"routes without an access decision in app/access/policy.py: {missing}"
    stale = sorted(set(policy.POLICY) - set(ROUTES))
    assert stale == [], f"decisions for routes the app no longer has: {stale}"


def test_only_login_logout_and_signed_ack_links_change_things_without_a_role() -> None:
    open_writes = sorted(
        r
        for r in ROUTES
        if r[0] not in ("GET", "HEAD") and isinstance(policy.decision(*r), policy.Public)
    )
    assert open_writes == [
        ("POST", "/login"),
        ("POST", "/logout"),
        ("POST", "/notify/ack/{token}"),
    ]
    assert [r for r in ROUTES if isinstance(policy.decision(*r), policy.AgentToken)] == [
        ("POST", "/api/v1/ingest")
    ]
    assert [r for r in ROUTES if isinstance(policy.decision(*r), policy.EnrollmentToken)] == [
        ("POST", "/api/v1/enroll")
    ]


@pytest.fixture
def live(postgres_url: str, tmp_path: Path) -> Iterator[tuple[LiveServer, dict[str, Caller]]]:
    settings = make_settings(postgres_url, tmp_path, notify_allow_hosts=["127.0.0.1"])
    server = LiveServer(settings, as_admin=False)
    server.start()
    url = postgres_url
    for name, role, teams in (
        ("rr-viewer", Role.viewer, ()),
        ("rr-responder-a", Role.responder, (TEAM_A,)),
        ("rr-editor-a", Role.editor, (TEAM_A,)),
        ("rr-editor-b", Role.editor, (TEAM_B,)),
        ("rr-admin", Role.admin, ()),
    ):
        with contextlib.suppress(Conflict):  # users outlive a wipe: a second test has them
            add_user(url, name, role, teams)
    session = {
        name: log_in(server.url, name)
        for name in ("rr-viewer", "rr-responder-a", "rr-editor-a", "rr-editor-b", "rr-admin")
    }

    def user(label: str, name: str, role: Role, teams: frozenset[str] | None) -> Caller:
        return Caller(label, role, teams, cookies={"fw_session": session[name]})

    token = add_token(url, "rr-automation", Role.responder, None)
    agent = add_agent_token(url, "rr-node")
    callers = {
        c.label: c
        for c in (
            Caller("anonymous", None),
            user("viewer", "rr-viewer", Role.viewer, frozenset()),
            Caller("agent-token", None, headers={"Authorization": f"Bearer {agent}"}, agent=True),
            user("responder-A", "rr-responder-a", Role.responder, frozenset({TEAM_A})),
            # Before editor A and the admin: they may delete team A's objects.
            user("editor-B", "rr-editor-b", Role.editor, frozenset({TEAM_B})),
            Caller("api-token", Role.responder, None, headers={"Authorization": f"Bearer {token}"}),
            user("editor-A", "rr-editor-a", Role.editor, frozenset({TEAM_A})),
            user("admin", "rr-admin", Role.admin, None),
        )
    }
    admin_token = add_token(url, "rr-setup", Role.admin, None)
    callers["_setup"] = Caller(
        "_setup", Role.admin, None, headers={"Authorization": f"Bearer {admin_token}"}
    )
    yield server, callers
    server.stop()
    wipe_alerts(url)
    wipe_notify(url)
    wipe(url)


class Fresh:
    """httpx's module functions (``get``, ``post``, ``put``) over one client: a request keeps
    no cookie of an earlier answer, as with the module functions, without a new client (and its
    TLS context, ~20 ms) for each of the thousand set-up requests."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        self.client.cookies.clear()
        return self.client.request(method, url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)


def ensure_team_a_objects(
    base: str, url: str, setup: Caller, http: Fresh | None = None
) -> dict[str, str]:
    """A rule (with a firing alert), a channel, a route, a silence and a runbook edit owned by
    team A (created when missing); their keys. Requests go through ``http`` (default: httpx's
    module functions)."""
    api = f"{base}/api/v1"
    h = setup.headers
    web: Any = http or httpx
    if web.get(f"{api}/rules/rule-a", headers=h).status_code == 404:
        made = web.post(
            f"{api}/rules",
            headers=h,
            json={"name": "rule-a", "condition": HOT, "owner_team": TEAM_A},
        )
        assert made.status_code == 201, made.text
    channels = [c for c in web.get(f"{api}/channels", headers=h).json() if c["name"] == "chan-a"]
    if not channels:
        made = web.post(
            f"{api}/channels",
            headers=h,
            json={
                "name": "chan-a",
                "kind": "webhook",
                "url": "http://127.0.0.1:9/h",
                "team": TEAM_A,
            },
        )
        assert made.status_code == 201, made.text
        channels = [made.json()]
    channel_id = str(channels[0]["id"])
    routes = [r for r in web.get(f"{api}/routes", headers=h).json() if r["team"] == TEAM_A]
    if not routes:
        made = web.post(
            f"{api}/routes", headers=h, json={"channel_id": int(channel_id), "team": TEAM_A}
        )
        assert made.status_code == 201, made.text
        routes = [made.json()]
    silences = web.get(f"{api}/silences", headers=h, params={"include_expired": True}).json()
    silences = [s for s in silences if s["team"] == TEAM_A]
    if not silences:
        silences = [make_silence(api, h, "rule-a", TEAM_A, http)]
    runbook = web.get(f"{api}/runbooks/runbook-a", headers=h)
    if runbook.status_code == 404:
        made = web.put(
            f"{api}/runbooks/runbook-a", headers=h, json={"markdown": "# A", "team": TEAM_A}
        )
        assert made.status_code == 200 and made.json()["team"] == TEAM_A, made.text
    return {
        "channel_id": channel_id,
        "route_id": str(routes[0]["id"]),
        "alert_id": firing_instance(url, "rule-a"),
        "silence_id": str(silences[0]["id"]),
    }


def make_silence(
    api: str, headers: dict[str, str], rule: str, team: str | None, http: Fresh | None = None
) -> Any:
    """A two-hour silence of ``rule``'s alerts, owned by ``team``; its JSON (requested through
    ``http``, default: httpx's module functions)."""
    web: Any = http or httpx
    body: dict[str, Any] = {
        "matchers": [{"name": "alertname", "op": "=", "value": rule}],
        "ends_at": "2099-01-01T00:00:00Z",
        "created_by": "rr",
    }
    if team is not None:
        body["team"] = team
    made = web.post(f"{api}/silences", headers=headers, json=body)
    assert made.status_code == 201, made.text
    return made.json()


def fill(template: str, keys: dict[str, str]) -> str:
    """The template with its parameters replaced by test values (team A's objects where the
    route is team-scoped)."""
    values = {
        "hostname": "rr-node",
        "gpu": "0",
        "alert_id": "999999",
        "incident_id": "999999",
        "job_id": "999999",
        "window_id": "999999",
        "silence_id": "999999",
        "delivery_id": "999999",
        "action_id": "999999",
        "token_id": "999999",
        "token": "not-a-signed-link",
        "action": "disable",
        **keys,
        "name": "rule-a"
        if "/rules/" in template
        else ("runbook-a" if "/runbooks/" in template else "rr-none"),
    }
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values[m.group(1)], template)


def expected_allowed(decision: policy.Decision, caller: Caller, team_scoped: bool) -> bool:
    """What the decision says for ``caller`` (team A owns every team-scoped object here)."""
    if isinstance(decision, policy.Public):
        return True
    if isinstance(decision, policy.AgentToken):
        return caller.agent
    if isinstance(decision, policy.EnrollmentToken):
        return False  # none of these callers holds an enrollment token
    assert isinstance(decision, policy.Need)
    if caller.role is None or caller.role < decision.role:
        return False
    if team_scoped and decision.team_of is not None:
        return caller.teams is None or caller.role == Role.admin or TEAM_A in caller.teams
    return True


def refused(answer: httpx.Response, decision: policy.Decision) -> bool:
    """Whether the access layer refused: 401/403 with its wording, or a page's redirect to the
    login form (on agent routes the ingest's own 401/403)."""
    if isinstance(decision, (policy.AgentToken, policy.EnrollmentToken)):
        return answer.status_code in (401, 403)
    location = answer.headers.get("location", "")
    if answer.status_code == 303 and location.startswith("/login?next="):
        return True
    return answer.status_code in (401, 403) and REFUSAL.search(answer.text) is not None


def call(client: httpx.Client, method: str, path: str, caller: Caller) -> httpx.Response:
    body: dict[str, Any] = {}
    if path == "/api/v1/enroll":
        body["json"] = {"hostname": "rr-enrolled"}  # well formed: the token decides
    elif path.startswith("/api/") and method in ("POST", "PUT", "PATCH"):
        body["json"] = {}
    elif method == "POST":
        body["data"] = {}
    headers = dict(caller.headers)
    if caller.cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in caller.cookies.items())
    client.cookies.clear()  # never keep what an answer set (a login's new session)
    return client.request(method, path, headers=headers, **body)


def test_every_route_for_every_caller(
    live: tuple[LiveServer, dict[str, Caller]], postgres_url: str
) -> None:
    server, callers = live
    url = postgres_url
    setup = callers.pop("_setup")
    # Log-out last: it ends the callers' sessions.
    routes = sorted(ROUTES, key=lambda r: r == ("POST", "/logout"))
    mismatches = []
    checked = 0
    client = httpx.Client(base_url=server.url, follow_redirects=False, timeout=60)
    setup_http = Fresh(httpx.Client())
    for method, template in routes:
        if method == "HEAD":
            continue
        decision = policy.decision(method, template)
        assert decision is not None
        keys = ensure_team_a_objects(server.url, url, setup, setup_http)
        path = fill(template, keys)
        for caller in callers.values():
            answer = call(client, method, path, caller)
            want = expected_allowed(decision, caller, team_scoped=True)
            if want == refused(answer, decision):
                mismatches.append(
                    f"{caller.label:12} {method} {path}: {answer.status_code} "
                    f"(expected {'allowed' if want else 'refused'}) {answer.text[:120]!r}"
                )
            checked += 1
    client.close()
    setup_http.client.close()
    assert mismatches == [], "\n".join(mismatches)
    # Every (route, caller) pair was tried: the size of the table.
    assert checked == len([r for r in ROUTES if r[0] != "HEAD"]) * len(callers)


def test_silences_and_runbook_edits_belong_to_teams(
    live: tuple[LiveServer, dict[str, Caller]],
) -> None:
    """Team A's responder expires team A's silence, not team B's; a new silence is owned by
    the team the body names, else its rules' one team, else the caller's one team; nobody
    silences the rules of a team they do not act for. A runbook edit keeps its team; team B's
    editor cannot change team A's."""
    server, callers = live
    api = f"{server.url}/api/v1"
    setup = callers["_setup"].headers
    for name, team in (("rule-a", TEAM_A), ("rule-b", TEAM_B)):
        made = httpx.post(
            f"{api}/rules", headers=setup, json={"name": name, "condition": HOT, "owner_team": team}
        )
        assert made.status_code == 201, made.text
    responder_a = callers["responder-A"].cookies

    def expire(silence: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{api}/silences/{silence['id']}/expire", cookies=responder_a)

    silence_a = make_silence(api, setup, "rule-a", TEAM_A)
    silence_b = make_silence(api, setup, "rule-b", TEAM_B)
    refused_b = expire(silence_b)
    assert refused_b.status_code == 403 and "owned by team team-b" in refused_b.text
    assert expire(silence_a).status_code == 200
    page_b = httpx.post(f"{server.url}/silences/{silence_b['id']}/expire", cookies=responder_a)
    assert page_b.status_code == 403
    # Left out, the team comes from the matched rules (the admin's too), else the caller's.
    assert make_silence(api, setup, "rule-b", None)["team"] == TEAM_B
    assert make_silence(api, setup, "rr-none", None)["team"] is None
    ends = "2099-01-01T00:00:00Z"

    def silence_as_a(matchers: list[dict[str, str]], **extra: str) -> httpx.Response:
        body = {"matchers": matchers, "ends_at": ends, "created_by": "x", **extra}
        return httpx.post(f"{api}/silences", cookies=responder_a, json=body)

    by_host = silence_as_a([{"name": "hostname", "op": "=", "value": "rr-node"}])
    assert by_host.status_code == 201 and by_host.json()["team"] == TEAM_A
    assert by_host.json()["created_by"] == "rr-responder-a"
    of_b = silence_as_a([{"name": "alertname", "op": "=", "value": "rule-b"}])
    assert of_b.status_code == 403 and "team team-b" in of_b.text
    named_a = silence_as_a([{"name": "alertname", "op": "=~", "value": "rule-.*"}], team=TEAM_A)
    assert named_a.status_code == 201  # the rules are of two teams: none decides
    given_b = silence_as_a([{"name": "alertname", "op": "=", "value": "rule-a"}], team=TEAM_B)
    assert given_b.status_code == 403
    trail = httpx.get(f"{api}/audit", headers=setup, params={"action": "/expire"}).json()
    assert [(e["action"], e["target"]["silence_id"], e["status"]) for e in trail[:3]] == [
        ("POST /silences/{silence_id}/expire", str(silence_b["id"]), 403),
        ("POST /api/v1/silences/{silence_id}/expire", str(silence_a["id"]), 200),
        ("POST /api/v1/silences/{silence_id}/expire", str(silence_b["id"]), 403),
    ]
    assert trail[1]["detail"]["before"]["team"] == TEAM_A

    editor_a, editor_b = callers["editor-A"].cookies, callers["editor-B"].cookies
    made = httpx.put(f"{api}/runbooks/rb-team", cookies=editor_a, json={"markdown": "# one"})
    assert made.status_code == 200 and made.json()["team"] == TEAM_A
    taken = httpx.put(f"{api}/runbooks/rb-team", cookies=editor_b, json={"markdown": "# two"})
    assert taken.status_code == 403 and "owned by team team-a" in taken.text
    assert httpx.delete(f"{api}/runbooks/rb-team", cookies=editor_b).status_code == 403
    kept = httpx.put(f"{api}/runbooks/rb-team", cookies=editor_a, json={"markdown": "# three"})
    assert kept.status_code == 200 and kept.json()["team"] == TEAM_A
    moved = httpx.put(
        f"{api}/runbooks/rb-team", cookies=editor_a, json={"markdown": "# 4", "team": TEAM_B}
    )
    assert moved.status_code == 403
    assert httpx.delete(f"{api}/runbooks/rb-team", cookies=editor_a).status_code == 204


def test_the_silence_form_gives_the_silence_a_team(
    live: tuple[LiveServer, dict[str, Caller]],
) -> None:
    server, callers = live
    setup = callers["_setup"].headers
    rule = {"name": "rule-b", "condition": HOT, "owner_team": TEAM_B}
    assert httpx.post(f"{server.url}/api/v1/rules", headers=setup, json=rule).status_code == 201
    responder_a = callers["responder-A"].cookies

    def post(value: str, team: str) -> httpx.Response:
        form = {
            "matcher_name": "alertname", "matcher_op": "=", "matcher_value": value,
            "duration": "2h", "created_by": "x", "comment": "form", "team": team,
        }  # fmt: skip
        return httpx.post(f"{server.url}/silences", data=form, cookies=responder_a)

    assert post("rule-b", "").status_code == 403
    assert post("rr-none", TEAM_B).status_code == 403
    assert post("rr-none", "").status_code == 303
    page = httpx.get(f"{server.url}/silences", cookies=responder_a).text
    assert re.search(r'rr-responder-a <span class="chip silence-team">team-a</span>', page)
    [made] = httpx.get(f"{server.url}/api/v1/silences", headers=setup).json()
    assert (made["team"], made["created_by"]) == (TEAM_A, "rr-responder-a")
