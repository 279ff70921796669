"""Every operation of the OpenAPI schema, fuzzed by schemathesis against a real server on
Postgres (issue 14): no server error (5xx) and no response that breaks its documented schema.

The server holds a node with GPUs, samples, an Xid, a rule, a silence and a channel, so the
generated requests reach stored data too; ingest is called with the node's real token (the
generated bodies then meet the validation, not only the 401). Examples per operation:
``FLEETWATCH_API_EXAMPLES`` (default 4 under the ``ci`` fuzz profile, 100 under ``soak``,
tests/fuzzing.py); the run prints the operations and calls made.

    FLEETWATCH_FUZZ=soak .venv/bin/pytest -q -s tests/app/test_api_schemathesis.py
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from app.config import load_settings
from app.main import create_app
from tests.app.helpers import post_batch
from tests.conftest import make_settings
from tests.dbs import wipe
from tests.factories import batch, create_token, xid_batch
from tests.live_server import LiveServer

SOAK = os.environ.get("FLEETWATCH_FUZZ") == "soak"
EXAMPLES = int(os.environ.get("FLEETWATCH_API_EXAMPLES", "100" if SOAK else "4"))
#: CI runs the same examples every time (a new find is the soak run's job, not a random CI failure).
DERANDOMIZE = not SOAK
CALLS: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()


def _served_schema() -> dict[str, Any]:
    """The OpenAPI document the server serves (the app's, built here without a database: the
    fixture checks the running server serves the same)."""
    with tempfile.TemporaryDirectory(prefix="fleetwatch-openapi-") as name:
        folder = Path(name)
        settings = load_settings(database_url=f"sqlite:///{folder}/unused.db", data_dir=folder)
        document: dict[str, Any] = create_app(settings, run_jobs=False).openapi()
        return document


DOCUMENT = _served_schema()
OPERATIONS = {
    op.ok().label: op.ok() for op in schemathesis.openapi.from_dict(DOCUMENT).get_all_operations()
}


@pytest.fixture(scope="module")
def server(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A live server on Postgres with stored data: its URL and node-a's token."""
    wipe(postgres_url)
    live = LiveServer(make_settings(postgres_url, Path(tmp_path_factory.mktemp("api"))))
    live.start()
    token = create_token(postgres_url, "node-a")
    at = datetime.now(UTC) - timedelta(minutes=2)
    assert post_batch(live.url, token, batch(samples_per_gpu=3)).status_code == 200
    assert post_batch(live.url, token, xid_batch("node-a", at)).status_code == 200
    for path, body in (
        ("/api/v1/silences", {"matchers": [{"name": "node", "value": "node-a"}],
                              "ends_at": (at + timedelta(hours=1)).isoformat(),
                              "created_by": "sre", "comment": "fuzz"}),
        ("/api/v1/maintenance", {"nodes": ["node-a"], "starts_at": at.isoformat(),
                                 "ends_at": (at + timedelta(hours=1)).isoformat(),
                                 "author": "sre", "reason": "fuzz"}),
    ):  # fmt: skip
        httpx.post(f"{live.url}{path}", json=body, timeout=30)
    assert httpx.get(f"{live.url}/openapi.json", timeout=30).json() == DOCUMENT
    yield {"url": live.url, "token": token}
    print(
        f"\nschemathesis: {len(CALLS)} operations, {sum(CALLS.values())} calls, "
        f"statuses {dict(sorted(STATUSES.items()))}"
    )
    live.stop()
    wipe(postgres_url)


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_api_operation_gives_no_server_error_and_keeps_its_schema(
    server: dict[str, str], label: str
) -> None:
    operation = OPERATIONS[label]
    headers = (
        {"Authorization": f"Bearer {server['token']}"} if operation.path.endswith("/ingest") else {}
    )

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        response = case.call(base_url=server["url"], headers=headers, timeout=60)
        CALLS[label] += 1
        STATUSES[response.status_code] += 1
        case.validate_response(response, checks=[not_a_server_error, response_schema_conformance])

    call()
