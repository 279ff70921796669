"""A request whose database connection drops (Postgres restarted, a failover, a connection cut;
bench/faults/pg_connections_dropped.py cuts them for real) is answered 503 with
``Retry-After``, which agents retry, instead of an unhandled server error with a traceback per
request (issue 14); the next request is served on a fresh connection."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from app.fleet import service as fleet_service
from app.ingest import service as ingest_service
from tests.app.helpers import counts, post_batch
from tests.factories import batch, create_token
from tests.live_server import LiveServer


def test_ingest_during_a_dropped_database_connection_gets_503_and_stores_nothing(
    server: LiveServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(samples_per_gpu=2)

    def dropped(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError(
            "INSERT …", {}, Exception("terminating connection due to administrator command")
        )

    with monkeypatch.context() as patch:
        patch.setattr(ingest_service, "store_batch", dropped)
        response = post_batch(server.url, token, payload)

    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    assert response.json()["detail"] == (
        "database unavailable, try again: terminating connection due to administrator command"
    )
    assert counts(db_url)["samples"] == 0
    again = post_batch(server.url, token, payload)  # the agent's retry, same batch
    assert again.status_code == 200 and again.json()["samples_stored"] == 4


@pytest.mark.parametrize(
    ("path", "kind"), [("/api/v1/nodes/node-a", "json"), ("/nodes/node-a", "html")]
)
def test_a_read_during_a_dropped_database_connection_is_a_503(
    server: LiveServer, db_url: str, monkeypatch: pytest.MonkeyPatch, path: str, kind: str
) -> None:
    token = create_token(db_url, "node-a")
    assert post_batch(server.url, token, batch(samples_per_gpu=1)).status_code == 200

    def dropped(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("SELECT …", {}, Exception("server closed the connection"))

    with monkeypatch.context() as patch:
        patch.setattr(fleet_service, "get_node_view", dropped)
        response = httpx.get(f"{server.url}{path}", timeout=30)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert "database unavailable, try again: server closed the connection" in response.text
    assert response.headers["content-type"].startswith(
        "application/json" if kind == "json" else "text/html"
    )
    assert httpx.get(f"{server.url}{path}", timeout=30).status_code == 200
