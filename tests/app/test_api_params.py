"""Ids outside 1 .. 2^31 - 1 (Postgres INTEGER id columns) in JSON API paths and queries answer
422 naming the parameter, never a 500 from the database driver; real server, both backends."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.api_params import MAX_ID
from tests.live_server import LiveServer

HUGE = "99999999999999999999"

CASES = [
    ("GET", f"/api/v1/alerts/{HUGE}", None, "alert_id"),
    ("POST", f"/api/v1/alerts/{HUGE}/ack", {"by": "alice"}, "alert_id"),
    ("POST", f"/api/v1/silences/{HUGE}/expire", None, "silence_id"),
    ("GET", f"/api/v1/channels/{HUGE}", None, "channel_id"),
    ("PATCH", f"/api/v1/channels/{HUGE}", {}, "channel_id"),
    ("DELETE", f"/api/v1/channels/{HUGE}", None, "channel_id"),
    ("POST", f"/api/v1/channels/{HUGE}/test", None, "channel_id"),
    ("GET", f"/api/v1/channels/{HUGE}/deliveries", None, "channel_id"),
    ("GET", f"/api/v1/routes?channel_id={HUGE}", None, "channel_id"),
    ("GET", f"/api/v1/routes/{HUGE}", None, "route_id"),
    ("PUT", f"/api/v1/routes/{HUGE}", {}, "route_id"),
    ("DELETE", f"/api/v1/routes/{HUGE}", None, "route_id"),
    ("GET", f"/api/v1/alerts/{2**63}", None, "alert_id"),
    ("POST", f"/api/v1/silences/{2**31}/expire", None, "silence_id"),
    ("GET", f"/api/v1/channels/{MAX_ID + 1}", None, "channel_id"),
    ("GET", "/api/v1/channels/0", None, "channel_id"),
    ("DELETE", "/api/v1/routes/-1", None, "route_id"),
]


def error_params(body: dict[str, Any]) -> set[str]:
    """The parameter names in a FastAPI 422 body (last element of each ``loc``)."""
    return {str(err["loc"][-1]) for err in body["detail"]}


@pytest.mark.parametrize(("method", "path", "body", "param"), CASES)
def test_out_of_range_ids_answer_422_naming_the_parameter(
    server: LiveServer, method: str, path: str, body: Any, param: str
) -> None:
    response = httpx.request(method, f"{server.url}{path}", json=body, timeout=30)
    assert response.status_code == 422, response.text
    assert param in error_params(response.json())


@pytest.mark.parametrize(
    "path",
    [f"/api/v1/alerts/{MAX_ID}", f"/api/v1/channels/{MAX_ID}", f"/api/v1/routes/{MAX_ID}"],
)
def test_the_largest_id_is_a_plain_404(server: LiveServer, path: str) -> None:
    response = httpx.get(f"{server.url}{path}", timeout=30)
    assert response.status_code == 404, response.text


PAGE_CASES = [
    ("GET", f"/alerts/{MAX_ID + 1}", "alert id"),
    ("POST", f"/alerts/{HUGE}/ack", "alert id"),
    ("POST", f"/silences/{MAX_ID + 1}/expire", "silence id"),
    ("GET", f"/notifications/channels/{MAX_ID + 1}", "channel id"),
    ("GET", f"/notifications/channels/{MAX_ID + 1}/edit", "channel id"),
    ("GET", f"/notifications/routes/{HUGE}/edit", "route id"),
    ("GET", "/alerts/0", "alert id"),
]


@pytest.mark.parametrize(("method", "path", "name"), PAGE_CASES)
def test_pages_refuse_out_of_range_ids_with_a_400_naming_them(
    server: LiveServer, method: str, path: str, name: str
) -> None:
    response = httpx.request(method, f"{server.url}{path}", timeout=30)
    assert response.status_code == 400, response.text
    assert f"{name}: expected an integer 1..{MAX_ID}" in response.text


def test_the_largest_page_id_is_a_plain_404(server: LiveServer) -> None:
    response = httpx.get(f"{server.url}/alerts/{MAX_ID}", timeout=30)
    assert response.status_code == 404, response.text
