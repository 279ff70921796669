"""The table form of a batch's bulk lists (:mod:`app.ingest.table_form`): ``{"fields",
"rows"}`` means the list of objects ``dict(zip(fields, row))``, read to the same rows, the
same values left out and the same errors, whichever path the server reads it by; a malformed
table is refused naming where; a bad row is left out alone."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from agents.simulated.collector import SimulatedCollector
from app.ingest import table_form
from app.ingest.rows import SECTION_NAMES, ParsedBatch, parse_batch
from tests.app import section_factories
from tests.app.helpers import counts, post_batch, section_counts
from tests.factories import batch, create_token, iso
from tests.fuzzing import settings  # noqa: F401  (loads the project's hypothesis profile)
from tests.live_server import LiveServer

BULK = ("samples", *SECTION_NAMES)


def _as_tables(payload: dict[str, Any]) -> dict[str, Any]:
    out = dict(payload)
    for name in BULK:
        entries = payload.get(name)
        if entries:
            fields = list(dict.fromkeys(k for e in entries for k in e))
            out[name] = {"fields": fields, "rows": [[e.get(f) for f in fields] for e in entries]}
    return out


def _agent_batch(at: datetime, ticks: int = 3) -> dict[str, Any]:
    """A batch as the simulated agent writes it: 8 GPUs, every metric, every section."""
    collector = SimulatedCollector(hostname="table-a", seed=3)
    payload = batch("table-a", samples_per_gpu=0, start=at)
    payload["gpus"] = collector.inventory()
    payload["samples"] = [
        s for i in range(ticks) for s in collector.sample(at + timedelta(seconds=10 * i))
    ]
    payload = section_factories.with_sections(payload, at)
    payload.pop("topology")
    return json.loads(json.dumps(payload))  # as the server receives it


def _read(document: dict[str, Any]) -> tuple[Any, ...]:
    parsed: ParsedBatch = parse_batch(copy.deepcopy(document))
    salvage = parsed.salvage
    return (
        parsed.samples,
        parsed.sections,
        salvage.listed,
        dict(salvage.by_reason),
        salvage.samples,
        parsed.head.model_dump(),
    )


def test_an_agent_batch_in_the_table_form_reads_as_its_list_of_objects() -> None:
    payload = _agent_batch(datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1))
    tables = _as_tables(payload)
    assert all(table_form.is_table(tables[name]) for name in BULK if payload.get(name))
    assert _read(tables) == _read(payload)
    assert len(_read(tables)[0]) == 24


_VALUES = st.one_of(
    st.none(),
    st.integers(-5, 200),
    st.floats(allow_nan=True, allow_infinity=False, width=32),
    st.sampled_from(["x", "", "P0", "up", "GPU-9", "2026-12-06T01:00:00Z"]),
    st.booleans(),
)


@given(data=st.data())
def test_any_table_reads_as_the_list_of_objects_it_stands_for(data: st.DataObject) -> None:
    """Drawn tables of samples and NVLinks: fields dropped, reordered or unknown, values
    mostly right and now and then wrong, rows now and then short, long or not lists. Whatever
    the server does with the list of objects (rows, values left out, errors), it does with the
    table."""
    at = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
    payload = _agent_batch(at, ticks=2)
    payload["samples"] = payload["samples"][:4]
    payload["nvlinks"] = payload["nvlinks"][:6]
    for name in ("samples", "nvlinks"):
        entries = payload[name]
        fields = list(entries[0])
        fields = data.draw(st.permutations(fields), label=f"{name} order")
        drop = data.draw(st.sets(st.sampled_from(fields), max_size=3), label=f"{name} dropped")
        fields = [f for f in fields if f not in drop]
        if data.draw(st.booleans(), label=f"{name} unknown field"):
            fields.append("not_a_field")
        # Half the tables are as an agent writes them (read by the columns); the others are
        # spoiled here and there (read, mended or refused a row at a time).
        spoiled = data.draw(st.booleans(), label=f"{name} spoiled")
        rows: list[Any] = []
        for entry in entries:
            row: Any = [entry.get(f) for f in fields]
            for i in range(len(row)):
                if spoiled and data.draw(st.integers(0, 30), label="bad value?") == 0:
                    row[i] = data.draw(_VALUES, label="value")
            shape = data.draw(st.integers(0, 20), label="row shape") if spoiled else 3
            if shape == 0:
                row = row[:-1]
            elif shape == 1:
                row = [*row, 1]
            elif shape == 2:
                row = data.draw(st.sampled_from([None, 3, "row", {}]), label="not a list")
            rows.append(row)
        payload[name] = {"fields": fields, "rows": rows}
    expanded = dict(payload)
    for name in ("samples", "nvlinks"):
        fields = payload[name]["fields"]
        expanded[name] = [
            dict(zip(fields, row, strict=True))
            if isinstance(row, list) and len(row) == len(fields)
            else None
            for row in payload[name]["rows"]
        ]
    try:
        wanted = _read(expanded)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as raised:
            _read(payload)
        assert raised.value.errors() == exc.errors()
        return
    assert _read(payload) == wanted


@pytest.mark.parametrize(
    ("table", "loc", "says"),
    [
        ({"fields": ["gpu_uuid"]}, ["body", "samples"], "'fields' and 'rows'"),
        ({"fields": [], "rows": []}, ["body", "samples", "fields"], "non-empty list"),
        ({"fields": ["a", 2], "rows": []}, ["body", "samples", "fields"], "field names"),
        ({"fields": ["a", "b", "a"], "rows": []}, ["body", "samples", "fields"], "'a' more"),
        ({"fields": ["a"], "rows": {"0": []}}, ["body", "samples", "rows"], "list of rows"),
    ],
)
def test_a_malformed_table_is_refused_naming_where(
    server: LiveServer, db_url: str, table: dict[str, Any], loc: list[str], says: str
) -> None:
    token = create_token(db_url, "node-a")
    payload = batch(samples_per_gpu=1)
    payload["samples"] = table
    response = post_batch(server.url, token, payload)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert [e["loc"] for e in errors] == [loc]
    assert says in errors[0]["msg"]
    assert counts(db_url)["samples"] == 0


def test_a_table_form_batch_is_stored_as_the_same_batch_of_objects_with_bad_rows_left_out(
    server: LiveServer, db_url: str
) -> None:
    token = create_token(db_url, "table-a")
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=2)
    payload = _agent_batch(at)
    tables = _as_tables(payload)
    tables["samples"]["rows"][5] = tables["samples"]["rows"][5][:-1]  # one value short
    tables["nvlinks"]["rows"][0] = "not a row"
    # An object is not a row either, even one with the section's keys and right values.
    tables["disks"]["rows"][1] = payload["disks"][1]
    answer = post_batch(server.url, token, tables).json()

    assert answer["samples_stored"] == 23
    assert answer["sections_stored"]["nvlinks"] == len(payload["nvlinks"]) - 1
    left_out = {(*item["loc"], item["reason"], item["action"]) for item in answer["left_out"]}
    assert left_out == {
        ("samples", 5, "model_type", "entry_left_out"),
        ("nvlinks", 0, "model_type", "entry_left_out"),
        ("disks", 1, "model_type", "entry_left_out"),
    }
    stored = section_counts(db_url)
    assert stored["nvlink_sample"] == len(payload["nvlinks"]) - 1
    assert stored["disk_sample"] == len(payload["disks"]) - 1
    assert counts(db_url)["samples"] == 23

    # The rows left out, sent again as objects in a batch of their own, go in: nothing else
    # of the first batch was lost or stored twice.
    again = batch("table-a", samples_per_gpu=0, start=at)
    again["gpus"], again["samples"] = payload["gpus"], [payload["samples"][5]]
    again["nvlinks"] = [payload["nvlinks"][0]]
    again["disks"] = [payload["disks"][1]]
    answer = post_batch(server.url, token, again).json()
    assert answer["samples_stored"] == 1 and answer["sections_stored"]["nvlinks"] == 1
    assert answer["sections_stored"]["disks"] == 1
    assert section_counts(db_url)["disk_sample"] == len(payload["disks"])
    assert counts(db_url)["samples"] == 24
    assert iso(at)  # the batch's times are the agent's own (RFC 3339)
