"""An ingest batch is decoded and stored with the cyclic garbage collector off
(:mod:`app.gc_tuning`): its young collections walked every batch in flight, a quarter of the
server's CPU under load. Over HTTP, against a live server in this process."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from app.ingest import router, service
from tests.app.helpers import post_batch
from tests.factories import batch, create_token
from tests.live_server import LiveServer


def test_a_batch_is_decoded_and_stored_with_the_collector_off(
    server: LiveServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, bool] = {}
    parse, store = router.parse_batch, service.store_batch

    def parse_noting(document: Any) -> Any:
        seen["decode"] = gc.isenabled()
        return parse(document)

    def store_noting(*args: Any, **kwargs: Any) -> Any:
        seen["store"] = gc.isenabled()
        return store(*args, **kwargs)

    monkeypatch.setattr(router, "parse_batch", parse_noting)
    monkeypatch.setattr(service, "store_batch", store_noting)
    token = create_token(db_url, "node-a")

    response = post_batch(server.url, token, batch(samples_per_gpu=2))

    assert response.status_code == 200, response.text
    assert response.json()["samples_stored"] == 4
    assert seen == {"decode": False, "store": False}
