"""GPU samples read a metric at a time (:func:`app.ingest.rows._sample_columns`, the path for
samples that all carry the same keys) give the rows the entry-at-a-time reading gives, and
samples whose keys differ are never read by the first sample's keys alone."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.simulated.collector import SimulatedCollector
from app.ingest import rows
from app.ingest.rows import parse_batch
from app.ingest.salvage import Salvage
from app.metrics.catalog import METRICS
from tests.app import section_factories
from tests.factories import batch, iso
from tests.fuzzing import settings  # noqa: F401  (loads the project's hypothesis profile)

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


_NAMES = [m.name for m in METRICS[:6]] + ["pstate", "energy_j"]
#: Mostly numbers, implausible ones and NVML sentinels among them; now and then no number.
_NUMBERS = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 100, 101, 3.0, 1.5, -0.0, 4294967295, 65535, 2.5e9]),
)
_VALUES = st.one_of(_NUMBERS, _NUMBERS, _NUMBERS, st.sampled_from([True, "12,5", [], {}]))


@st.composite
def _entries(draw: st.DrawFn) -> list[Any]:
    """Samples that mostly share their keys (the column path's case) with odd values, and
    sometimes a key more or less, a non-object entry, or an odd UUID or time."""
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=6, unique=True))
    count = draw(st.integers(min_value=1, max_value=6))
    made: list[Any] = []
    for i in range(count):
        entry: dict[str, Any] = {
            "gpu_uuid": draw(st.sampled_from(["GPU-a", "GPU-b"] * 6 + ["GPU-\u202e", "", 5])),
            "sampled_at": draw(
                st.sampled_from([iso(AT + timedelta(seconds=i))] * 8 + ["2026-11-29 16:00", 1.5])
            ),
        }
        entry.update({name: draw(_VALUES) for name in names})
        if draw(st.integers(min_value=0, max_value=19)) == 0:
            entry[draw(st.sampled_from(_NAMES))] = draw(_VALUES)  # maybe a key more
        if draw(st.integers(min_value=0, max_value=19)) == 0:
            entry.pop(draw(st.sampled_from(list(entry))), None)  # maybe a key less
        made.append(entry if draw(st.integers(min_value=0, max_value=39)) else [entry])
    return made


@given(_entries())
def test_the_column_reading_equals_the_entry_reading_whenever_it_answers(
    entries: list[Any],
) -> None:
    """Where the column path takes a list at all, its rows are the entry path's, value for
    value and with the same nulled names (order aside); where it declines, the entry path
    (which mends) reads it."""
    by_columns = rows._sample_columns(entries, rows._Times())
    if by_columns is None:
        return
    try:
        by_entries = _by_entries(entries)
    except rows._NotPlain:  # pragma: no cover - the column path took what cannot be mended
        pytest.fail("the column path took a list the entry path refuses")
    assert len(by_columns) == len(by_entries)
    for fast, slow in zip(by_columns, by_entries, strict=True):
        assert fast[:2] == slow[:2]
        assert [_same(v) for v in fast[2]] == [_same(v) for v in slow[2]]
        assert Counter(fast[3]) == Counter(slow[3])


def _same(value: Any) -> Any:
    """A value with its type, so that 3 and 3.0 (and True and 1) differ."""
    return (type(value), repr(value))


def _link_entries() -> list[dict[str, Any]]:
    inventory = batch("gpu-links", gpus=2, samples_per_gpu=0)["gpus"]
    return [
        link
        for at in (AT, AT + timedelta(seconds=60))
        for g in inventory
        for link in section_factories.nvlinks(g, at, links=4)
    ]


def _section_by_names(entries: list[dict[str, Any]], names: tuple[str, ...]) -> list[list[Any]]:
    return [[entry.get(name, rows._ABSENT) for entry in entries] for name in names]


def _nvlink_rows(entries: list[dict[str, Any]]) -> list[rows.SectionRow]:
    spec = next(s for s in rows.SECTION_SPECS if s.name == "nvlinks")
    return rows._section_rows(entries, spec, rows._Times())


def test_section_entries_with_the_same_keys_give_the_rows_read_name_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = _link_entries()
    entries[3]["crc_errors"] = 2**63  # implausible for a counter column: nulled alone
    entries[5]["extra"] = "ignored"
    picked = _nvlink_rows(entries)
    monkeypatch.setattr(rows, "_section_columns", _section_by_names)
    assert picked == _nvlink_rows(entries)
    assert len(picked) == len(entries) and any(nulled for _, nulled in picked)


def test_a_section_entry_lacking_an_optional_key_takes_its_default_whichever_entry_it_is() -> None:
    entries = _link_entries()
    reference = _nvlink_rows(entries)
    for at in (0, len(entries) - 1):
        lacking = [dict(e) for e in entries]
        del lacking[at]["tx_bytes_per_s"]
        got = _nvlink_rows(lacking)
        column = rows._PLANS["nvlinks"].names.index("tx_bytes_per_s")
        assert got[at][0][column] is None
        assert [r for i, r in enumerate(got) if i != at] == [
            r for i, r in enumerate(reference) if i != at
        ]
