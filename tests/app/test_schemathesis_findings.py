"""What schemathesis found against the live server (tests/app/test_api_schemathesis.py, issue
14), each held here: an id beyond the database's integer range reached a query and Postgres
refused it with a server error (500); now it is refused with 422 naming the field."""

from __future__ import annotations

import httpx
import pytest

from tests.live_server import LiveServer

TOO_BIG = 1098991645362687836160  # the example schemathesis sent


@pytest.mark.parametrize(
    ("method", "path", "body", "loc"),
    [
        ("GET", f"/api/v1/incidents/{TOO_BIG}", None, ["path", "incident_id"]),
        ("POST", f"/api/v1/actions/{2**60}/retry", {}, ["path", "action_id"]),
        ("POST", "/api/v1/routes", {"channel_id": 2**56 + 1}, ["body", "channel_id"]),
        ("POST", "/api/v1/routes", {"channel_id": 0}, ["body", "channel_id"]),
        ("POST", f"/api/v1/tokens/{TOO_BIG}/revoke", None, ["path", "token_id"]),
        ("POST", f"/api/v1/enrollment-tokens/{TOO_BIG}/revoke", None, ["path", "token_id"]),
    ],
)
def test_an_id_beyond_the_database_range_is_a_422_naming_it_not_a_500(
    server: LiveServer, method: str, path: str, body: object, loc: list[str]
) -> None:
    response = httpx.request(method, f"{server.url}{path}", json=body, timeout=30)
    assert response.status_code == 422, response.text
    assert loc in [error["loc"] for error in response.json()["detail"]]


def test_the_incident_page_of_an_id_beyond_the_range_is_not_a_500(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/incidents/{TOO_BIG}", timeout=30)
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize("kind", ["tokens", "agent-tokens"])
@pytest.mark.parametrize("raw", [str(TOO_BIG), "1_0", "²", "0"])
def test_the_admin_pages_refuse_a_token_id_out_of_range_with_a_400(
    server: LiveServer, kind: str, raw: str
) -> None:
    response = httpx.post(f"{server.url}/admin/{kind}/{raw}/revoke", timeout=30)
    assert response.status_code == 400, response.text
    assert "token id: expected an integer 1..2147483647" in response.text


def test_an_id_within_the_range_that_does_not_exist_is_still_a_404(server: LiveServer) -> None:
    assert httpx.get(f"{server.url}/api/v1/incidents/{2**31 - 1}", timeout=30).status_code == 404


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"before_id": 212331284920}, "before_id"),
        ({"until": "9500-01-01T00:00:00+00:00"}, "until"),
        ({"since": "2026-01-01T00:00:00"}, "since"),
    ],
)
def test_the_audit_filters_refuse_an_id_or_time_out_of_range_naming_it(
    server: LiveServer, query: dict[str, object], named: str
) -> None:
    response = httpx.get(f"{server.url}/api/v1/audit", params=query, timeout=30)
    assert 400 <= response.status_code < 500, response.text
    assert named in response.text


def test_an_enrollment_token_name_with_a_nul_is_refused_naming_it(server: LiveServer) -> None:
    response = httpx.post(
        f"{server.url}/api/v1/enrollment-tokens", json={"name": "rack\x00r12"}, timeout=30
    )
    assert response.status_code == 400, response.text
    assert "name: 1-64 characters, no control characters" in response.text
