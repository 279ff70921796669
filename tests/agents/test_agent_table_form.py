"""The agent's table form: it sends its batches as lists of objects until the server's answer
lists ``table`` in ``bulk_forms``, then spools the next batches in the table form (a batch
keeps its form when re-sent), which the real server stores as the same rows; a server that
refuses a table-form batch for good gets the same batch at once as objects, and the agent goes
back to objects."""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agents.agent import Agent, AgentConfig
from agents.payload import as_objects, as_table_form, bulk_length
from agents.push import Pusher
from agents.simulated.collector import SimulatedCollector
from tests.app.helpers import counts, section_counts
from tests.conftest import make_settings
from tests.factories import create_token
from tests.live_server import LiveServer


@pytest.fixture
def live(db_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(make_settings(db_url, tmp_path / "server"))
    server.start()
    yield server
    server.stop()


def _agent(spool: Path, url: str, hostname: str, token: str) -> Agent:
    config = AgentConfig(
        hostname=hostname, spool_dir=spool, server_url=url, token=token, nvlink_interval_s=0
    )
    return Agent(config, SimulatedCollector(hostname, 8, seed=1))  # 8 GPUs: NVLinks too


def test_the_agent_sends_objects_until_the_server_says_it_reads_the_table_form(
    live: LiveServer, db_url: str, tmp_path: Path
) -> None:
    token = create_token(db_url, "gpu-t-001")
    agent = _agent(tmp_path / "spool", live.url, "gpu-t-001", token)
    agent.collect()
    first = agent.take_payload()
    assert first is not None and isinstance(first["samples"], list)
    agent.spool.put(first)
    assert agent.push_pending(ignore_backoff=True) and agent.table_form

    agent.collect()
    agent.cut_batch()
    spooled = agent.spool.oldest()
    assert spooled is not None
    assert set(spooled.payload["samples"]) == {"fields", "rows"}
    assert spooled.sample_count == 8
    assert isinstance(spooled.payload["nvlinks"], dict)
    links = bulk_length(spooled.payload["nvlinks"])
    assert agent.push_pending(ignore_backoff=True)
    assert agent.samples_acked == 16 and counts(db_url)["samples"] == 16
    assert section_counts(db_url)["nvlink_sample"] == len(first["nvlinks"]) + links


class _OlderServer(BaseHTTPRequestHandler):
    """An ingest endpoint that reads lists of objects only, as servers before the table form
    did (422 for a bulk list that is not a list); records every body it gets."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        body = json.loads(gzip.decompress(raw))
        type(self).bodies.append(body)
        if not isinstance(body.get("samples"), list):
            answer, status = {"detail": [{"loc": ["body", "samples"], "msg": "not a list"}]}, 422
        else:
            answer, status = {"batch_id": body["batch_id"], "samples_rejected": 0}, 200
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_refusing_the_table_form_gets_the_same_batch_as_objects_at_once(
    tmp_path: Path,
) -> None:
    _OlderServer.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OlderServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        agent = _agent(tmp_path / "spool", url, "gpu-t-002", "fwt_token")
        agent.pusher = Pusher(url, "fwt_token")
        agent.table_form = True  # learned from a server that was then downgraded
        agent.collect()
        agent.cut_batch()
        spooled = agent.spool.oldest()
        assert spooled is not None and isinstance(spooled.payload["samples"], dict)
        assert agent.push_pending(ignore_backoff=True)
    finally:
        server.shutdown()
        server.server_close()
    table, objects = _OlderServer.bodies
    assert isinstance(table["samples"], dict) and isinstance(objects["samples"], list)
    assert table["batch_id"] == objects["batch_id"]
    assert {k: v for k, v in objects.items() if k != "sent_at"} == {
        k: v for k, v in as_objects(table).items() if k != "sent_at"
    }
    assert not agent.table_form and agent.batches_sent == 1 and agent.batches_rejected == 0
    assert len(agent.spool) == 0


def test_the_table_form_round_trips_and_leaves_lists_with_other_keys_as_objects() -> None:
    payload: dict[str, Any] = {
        "batch_id": "b",
        "samples": [{"gpu_uuid": "GPU-1", "temp_c": 40}, {"gpu_uuid": "GPU-1", "temp_c": None}],
        "disks": [{"device": "a", "busy_pct": 1.0}, {"device": "b"}],
        "nvlinks": [],
        "events": [{"kind": "xid"}],
    }
    tables = as_table_form(payload)
    assert tables["samples"] == {
        "fields": ["gpu_uuid", "temp_c"],
        "rows": [["GPU-1", 40], ["GPU-1", None]],
    }
    assert tables["disks"] is payload["disks"] and tables["nvlinks"] == []
    assert tables["events"] is payload["events"]
    assert as_objects(tables) == payload
    assert bulk_length(tables["samples"]) == 2 and bulk_length(payload["disks"]) == 2
