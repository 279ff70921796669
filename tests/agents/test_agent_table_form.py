"""The agent's table form: it sends its batches as lists of objects until the server's answer
lists ``table`` in ``bulk_forms``, then spools the next batches in the table form (a batch
keeps its form when re-sent), which the real server stores as the same rows; a server that
refuses a table-form batch for good gets the same batch at once as objects, and the agent goes
back to objects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.agent import Agent, AgentConfig
from agents.payload import as_objects, as_table_form, bulk_length
from agents.simulated.collector import SimulatedCollector
from tests.agents.agent_receiver import Receiver, Reply
from tests.app.helpers import counts, section_counts
from tests.factories import create_token
from tests.live_server import LiveServer


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


def test_a_server_refusing_the_table_form_gets_the_same_batch_as_objects_at_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The receiver stands for a server older than the table form: 422 for a bulk list that
    is not a list (as pydantic answered), then the objects are acknowledged."""
    refusal = {"detail": [{"loc": ["body", "samples"], "msg": "Input should be a valid list"}]}
    receiver.script(Reply(status=422, body=json.dumps(refusal).encode()))
    agent = _agent(tmp_path / "spool", receiver.url, "gpu-t-002", "fwt_token")
    agent.table_form = True  # learned from a server that was then downgraded
    agent.collect()
    agent.cut_batch()
    spooled = agent.spool.oldest()
    assert spooled is not None and isinstance(spooled.payload["samples"], dict)
    assert agent.push_pending(ignore_backoff=True)

    table, objects = receiver.payloads()
    assert isinstance(table["samples"], dict) and isinstance(objects["samples"], list)
    assert table["batch_id"] == objects["batch_id"]
    assert {k: v for k, v in objects.items() if k != "sent_at"} == {
        k: v for k, v in as_objects(table).items() if k != "sent_at"
    }
    assert not agent.table_form and agent.batches_sent == 1 and agent.batches_rejected == 0
    assert len(agent.spool) == 0

    agent.collect()
    agent.cut_batch()
    assert agent.push_pending(ignore_backoff=True)
    assert isinstance(receiver.payloads()[-1]["samples"], list)  # objects from then on


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
