"""The payload the agent builds follows docs/ingest.md and always serialises to valid JSON."""

from __future__ import annotations

import json
import math
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agents.agent import snapshot_payload
from agents.jsonsafe import clean_text
from agents.payload import (
    METRIC_KEYS,
    build_node,
    build_payload,
    empty_sample,
    encode_payload,
    format_timestamp,
    make_event,
    stamp_sent_at,
    validate_hostname,
    validate_labels,
)
from agents.simulated.collector import SimulatedCollector

DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest.md"
NOW = datetime(2026, 11, 29, 16, 0, 5, tzinfo=UTC)


def _doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def _doc_example() -> dict[str, Any]:
    block = re.search(r"### Body\s+```json\n(.*?)```", _doc_text(), re.S)
    assert block is not None
    example: dict[str, Any] = json.loads(block.group(1))
    return example


def _doc_metric_names() -> set[str]:
    table = _doc_text().split("| metric | unit | source | plausible range |", 1)[1]
    names: set[str] = set()
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        names.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
    return names


def _sim_payload() -> dict[str, Any]:
    collector = SimulatedCollector("gpu-a-017", 8)
    collector.inject("xid", gpu_index=0, xid=48)
    return snapshot_payload(collector, "gpu-a-017", {"cluster": "a"}, now=NOW)


def test_metric_keys_are_exactly_the_metrics_of_the_docs_table() -> None:
    assert set(METRIC_KEYS) == _doc_metric_names()
    assert len(METRIC_KEYS) == len(set(METRIC_KEYS))


def test_generated_payload_has_the_field_names_of_the_docs_example() -> None:
    example, payload = _doc_example(), _sim_payload()
    sections = {"collection", "nvlinks", "disks", "mounts", "nfs_mounts", "nic_ports", "topology"}
    assert set(example) <= set(payload) <= set(example) | sections
    assert set(payload["node"]) == set(example["node"])
    gpu_extras = {"unavailable", "mig_instances", "processes"}
    assert (
        set(example["gpus"][0]) <= set(payload["gpus"][0]) <= set(example["gpus"][0]) | gpu_extras
    )
    assert set(payload["events"][0]) == set(example["events"][0])
    assert set(example["samples"][0]) <= set(payload["samples"][0])
    for sample in payload["samples"]:
        assert set(METRIC_KEYS) <= set(sample)


def test_payload_carries_schema_version_uuid4_batch_id_and_zulu_times() -> None:
    payload = _sim_payload()
    assert payload["schema_version"] == 1
    assert uuid.UUID(payload["batch_id"]).version == 4
    assert payload["sent_at"] == "2026-11-29T16:00:05.000Z"
    assert payload["samples"][0]["sampled_at"].endswith("Z")
    assert payload["events"][0]["occurred_at"].endswith("Z")
    assert payload["node"]["agent_version"] == "0.1.0"


def test_integer_metrics_are_ints_and_never_booleans() -> None:
    integer = [k for k in METRIC_KEYS if k.endswith("_count") or k in ("pstate",)]
    for sample in _sim_payload()["samples"]:
        for key in [*integer, "clocks_event_reasons"]:
            assert type(sample[key]) is int, key


def test_sent_at_is_unset_until_stamped_at_send_time() -> None:
    payload = build_payload(build_node("n1", {}, _info()), [], [], [])
    assert payload["sent_at"] is None
    later = NOW + timedelta(seconds=3)
    stamped = stamp_sent_at(payload, later)
    assert stamped["sent_at"] == "2026-11-29T16:00:08.000Z"
    assert payload["sent_at"] is None
    assert stamped["batch_id"] == payload["batch_id"]


def test_timestamps_are_converted_to_utc_and_naive_ones_refused() -> None:
    plus_two = datetime(2026, 11, 29, 18, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(plus_two) == "2026-11-29T16:00:00.123Z"
    with pytest.raises(ValueError, match="naive"):
        format_timestamp(datetime(2026, 11, 29, 16, 0, 0))


def test_nan_infinity_booleans_and_strings_in_metrics_become_null() -> None:
    sample = empty_sample("GPU-1", NOW)
    sample.update(power_w=math.nan, temp_c=math.inf, energy_j=-math.inf, pstate=True, fan_pct="N/A")
    sample["util_gpu_pct"] = 50
    text = encode_payload(build_payload(build_node("n1", {}, _info()), [], [sample], []))
    decoded = json.loads(text, parse_constant=_refuse)
    got = decoded["samples"][0]
    assert [got[k] for k in ("power_w", "temp_c", "energy_j", "pstate", "fan_pct")] == [None] * 5
    assert got["util_gpu_pct"] == 50


def test_garbage_names_are_decoded_with_replacement_and_still_valid_json() -> None:
    gpu = {
        "uuid": "GPU-1",
        "index": 0,
        "name": b"NVIDIA \xff\xfe H100\x00",
        "pci_bus_id": "00000000:18:00.0",
        "mem_total_bytes": 1,
        "mig_mode": None,
        "state": "ok",
        "state_reason": "bad \udcff surrogate",
    }
    event = make_event("xid", NOW, xid=13, message="x" * 5000 + "\ud800")
    node = build_node("n1", {"team": "llm"}, {"driver_version": "570\udc80", "cuda_version": None})
    raw = encode_payload(build_payload(node, [gpu], [], [event]))  # type: ignore[list-item]
    decoded = json.loads(raw.decode("utf-8", errors="strict"))
    assert decoded["gpus"][0]["name"] == "NVIDIA \ufffd\ufffd H100\ufffd"
    assert "\ufffd" in decoded["gpus"][0]["state_reason"]
    assert decoded["node"]["driver_version"] == "570\ufffd"
    assert len(decoded["events"][0]["message"]) == 4096


def test_clean_text_keeps_valid_text_untouched() -> None:
    assert clean_text("NVIDIA H100 80GB HBM3 — ok") == "NVIDIA H100 80GB HBM3 — ok"


def test_labels_are_checked_against_the_server_rules() -> None:
    assert validate_labels({"cluster": "a", "ib_pod": "pod-2"}) == {
        "cluster": "a",
        "ib_pod": "pod-2",
    }
    with pytest.raises(ValueError, match="label key"):
        validate_labels({"Rack": "r07"})
    with pytest.raises(ValueError, match="256"):
        validate_labels({"team": "x" * 257})


def test_event_kinds_must_match_the_server_pattern() -> None:
    with pytest.raises(ValueError, match="kind"):
        make_event("Xid-79", NOW)


def _info() -> Any:
    return {"driver_version": "570.86.15", "cuda_version": "12.8"}


def _refuse(constant: str) -> None:
    raise AssertionError(f"non-JSON constant {constant} in output")


@pytest.mark.parametrize(
    ("name", "dns"), [("gpü-01", "xn--gp-01-lva"), ("节点-7", "xn---7-rm4e214d")]
)
def test_a_non_ascii_hostname_is_refused_naming_its_dns_form(name: str, dns: str) -> None:
    """Issue 14: the agent refused a node name like ``gpü-01`` without saying what to use."""
    with pytest.raises(ValueError, match=rf"its DNS form is '{dns}': run with --hostname {dns}"):
        validate_hostname(name)
    assert validate_hostname(dns) == dns
