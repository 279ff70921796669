"""GPU samples read a metric at a time (:func:`app.ingest.rows._sample_columns`, the path for
samples that all carry the same keys) give the rows the entry-at-a-time reading gives, and
samples whose keys differ are never read by the first sample's keys alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.simulated.collector import SimulatedCollector
from app.ingest import rows
from app.ingest.rows import parse_batch
from app.ingest.salvage import Salvage
from app.metrics.catalog import METRICS
from tests.factories import batch, iso

AT = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
POSITION = {m.name: i for i, m in enumerate(METRICS)}


def _agent_samples(ticks: int = 6) -> list[dict[str, Any]]:
    """What the simulated agent sends: every metric of the catalog per sample, 8 GPUs."""
    collector = SimulatedCollector(hostname="gpu-columns", seed=7)
    made = [s for i in range(ticks) for s in collector.sample(AT + timedelta(seconds=10 * i))]
    return json.loads(json.dumps(made))  # as the server receives them


def _by_entries(entries: list[dict[str, Any]]) -> list[rows.SampleRow]:
    return rows._sample_entries(entries, rows._Times(), Salvage())


def _value(row: rows.SampleRow, name: str) -> Any:
    return row[2][POSITION[name]]


def test_agent_samples_read_by_columns_equal_the_entry_reading() -> None:
    entries = _agent_samples()
    assert len(entries[0]) == len(METRICS) + 2  # the agent sends the whole catalog
    by_columns = rows._sample_columns(entries, rows._Times())
    assert by_columns is not None
    assert by_columns == _by_entries(entries)
    first = entries[0]
    row = by_columns[0]
    assert row[0] == first["gpu_uuid"]
    assert row[1] == datetime.fromisoformat(first["sampled_at"])
    assert _value(row, "energy_j") == first["energy_j"]
    assert _value(row, "mem_free_bytes") == first["mem_free_bytes"]
    assert _value(row, "fan_pct") is None


def test_implausible_values_are_nulled_alone_and_named() -> None:
    entries = _agent_samples(ticks=2)
    entries[3]["util_gpu_pct"] = 101
    entries[5]["temp_c"] = 4294967295  # NVML's "not supported" sentinel
    entries[5]["pstate"] = 3.0  # a whole float in an integer field is that integer
    entries[7]["clocks_event_reasons"] = 1.5  # a fraction in an integer field is nulled
    entries[9]["power_w"] = float("nan")
    by_columns = rows._sample_columns(entries, rows._Times())
    assert by_columns is not None
    assert by_columns == _by_entries(entries)
    assert _value(by_columns[3], "util_gpu_pct") is None
    assert by_columns[3][3] == ("util_gpu_pct",)
    assert _value(by_columns[5], "temp_c") is None
    assert _value(by_columns[5], "pstate") == 3
    assert type(_value(by_columns[5], "pstate")) is int
    assert by_columns[5][3] == ("temp_c",)
    assert _value(by_columns[7], "clocks_event_reasons") is None
    assert _value(by_columns[9], "power_w") is None
    assert _value(by_columns[9], "temp_c") == entries[9]["temp_c"]
    assert by_columns[0][3] == ()


def test_a_sample_with_a_key_the_first_lacks_keeps_its_value() -> None:
    payload = batch(gpus=1, samples_per_gpu=3, start=AT)
    payload["samples"][1]["fan_pct"] = 55
    parsed = parse_batch(payload)
    assert _value(parsed.samples[1], "fan_pct") == 55
    assert _value(parsed.samples[0], "fan_pct") is None
    assert parsed.samples == _by_entries(payload["samples"])


def test_a_sample_with_other_keys_as_many_as_the_first_keeps_its_values() -> None:
    payload = batch(gpus=1, samples_per_gpu=3, start=AT)
    first, _, third = payload["samples"]
    del third["temp_c"]
    third["mem_temp_c"] = 61
    assert len(third) == len(first)
    parsed = parse_batch(payload)
    assert _value(parsed.samples[2], "mem_temp_c") == 61
    assert _value(parsed.samples[2], "temp_c") is None
    assert _value(parsed.samples[0], "temp_c") == first["temp_c"]
    assert parsed.samples == _by_entries(payload["samples"])


def test_a_sample_that_is_not_plain_is_mended_alone() -> None:
    payload = batch(gpus=2, samples_per_gpu=2, start=AT)
    payload["samples"][2]["power_w"] = "512,3"  # a locale's decimal comma: not a number
    assert rows._sample_columns(payload["samples"], rows._Times()) is None
    parsed = parse_batch(payload)
    assert len(parsed.samples) == 4
    assert _value(parsed.samples[2], "power_w") is None
    assert _value(parsed.samples[3], "power_w") == payload["samples"][3]["power_w"]
    assert parsed.salvage.by_reason == {"samples.number_type": 1}


def test_unknown_keys_are_ignored_by_both_readings() -> None:
    payload = batch(gpus=1, samples_per_gpu=2, start=AT)
    for entry in payload["samples"]:
        entry["future_metric_w"] = 5.0  # a newer agent's metric this server does not know
    by_columns = rows._sample_columns(payload["samples"], rows._Times())
    assert by_columns is not None
    assert by_columns == _by_entries(payload["samples"])
    assert by_columns[1][1] == datetime.fromisoformat(payload["samples"][1]["sampled_at"])
    assert iso(by_columns[0][1]) == payload["samples"][0]["sampled_at"]
