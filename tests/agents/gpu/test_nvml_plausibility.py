"""Every value from the NVML binding is checked before it is sent: when the binding and the
driver disagree on a struct's layout (nvmlProcessInfo_t grew between versions) PIDs of 0 or
billions and memory sizes beyond the GPU's come back; such values are never sent, and each
kind is logged once per GPU, not at every sample."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.collectors.nvml import NvmlCollector
from agents.nvml.plausible import MAX_PID, METRIC_BOUNDS, NOT_AVAILABLE
from app.metrics.catalog import METRICS
from tests.agents.gpu.fake_pynvml import FakeNvml

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
T4 = "tesla-t4-driver515.xml"
GIB = 2**30
Install = Callable[[str], FakeNvml]


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and text in r.getMessage()
    ]


def test_impossible_pids_are_dropped_and_impossible_process_memory_is_not_sent(
    capture_nvml: Install, caplog: pytest.LogCaptureFixture
) -> None:
    fake = capture_nvml(T4)
    total = fake.devices[0].mem_total
    assert total is not None
    fake.devices[0].processes = [
        {"pid": 0, "used_memory_bytes": GIB},
        {"pid": MAX_PID + 1, "used_memory_bytes": GIB},
        {"pid": 2**32 + 7, "used_memory_bytes": GIB},
        {"pid": 4242, "used_memory_bytes": NOT_AVAILABLE},
        {"pid": 4243, "used_memory_bytes": total + 1},
        {"pid": 4244, "used_memory_bytes": GIB},
        {"pid": MAX_PID, "used_memory_bytes": 0},
    ]
    collector = NvmlCollector()
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        processes: list[dict[str, Any]] = collector.inventory()[0]["processes"]  # type: ignore[typeddict-item]
    assert [(p["pid"], p["used_memory_bytes"]) for p in processes] == [
        (4242, None),
        (4243, None),
        (4244, GIB),
        (MAX_PID, 0),
    ]
    assert len(_warnings(caplog, "implausible process PID")) == 1
    assert len(_warnings(caplog, "implausible process memory")) == 1
    assert "(0, Linux PIDs are 1 to 4194304)" in _warnings(caplog, "implausible process PID")[0]


def test_a_sentinel_or_out_of_range_metric_is_none_with_its_reason_and_logged_once(
    capture_nvml: Install, caplog: pytest.LogCaptureFixture
) -> None:
    fake = capture_nvml(T4)
    device = fake.devices[0]
    assert device.mem_total is not None
    device.metrics["temp_c"] = 2**32 - 1  # NVML's unsigned int "not available"
    device.metrics["util_gpu_pct"] = 255
    device.metrics["mem_used_bytes"] = device.mem_total + GIB  # more than the GPU has
    collector = NvmlCollector()
    caplog.set_level(logging.WARNING)
    for n in range(3):
        [sample] = collector.sample(NOW + n * STEP)
    assert (sample["temp_c"], sample["util_gpu_pct"], sample["mem_used_bytes"]) == (
        None,
        None,
        None,
    )
    assert sample["power_w"] is not None and sample["util_mem_pct"] is not None
    unavailable = collector.inventory()[0]["unavailable"]  # type: ignore[typeddict-item]
    assert {k: unavailable[k] for k in ("temp_c", "util_gpu_pct", "mem_used_bytes")} == {
        "temp_c": "IMPLAUSIBLE",
        "util_gpu_pct": "IMPLAUSIBLE",
        "mem_used_bytes": "IMPLAUSIBLE",
    }
    assert len(_warnings(caplog, "implausible temp_c")) == 1
    assert "4294967295" in _warnings(caplog, "implausible temp_c")[0]


def test_impossible_mig_instance_ids_and_sizes_are_not_sent(capture_nvml: Install) -> None:
    fake = capture_nvml("a100-sxm4-80gb-mig-4x1g-driver535.xml")
    parent = fake.devices[0]
    assert parent.mem_total is not None
    parent.mig_devices[0].gpu_instance_id = 2**32 - 1
    parent.mig_devices[1].mem_total = parent.mem_total * 2
    instances: list[dict[str, Any]] = NvmlCollector().inventory()[0]["mig_instances"]  # type: ignore[typeddict-item]
    assert instances[0]["gpu_instance_id"] is None
    assert instances[1]["mem_total_bytes"] is None
    assert instances[2]["gpu_instance_id"] is not None
    assert instances[2]["mem_total_bytes"] is not None


def test_an_impossible_total_memory_is_not_sent(capture_nvml: Install) -> None:
    fake = capture_nvml(T4)
    fake.devices[0].mem_total = NOT_AVAILABLE
    assert NvmlCollector().inventory()[0]["mem_total_bytes"] is None


def test_the_agent_bounds_are_the_servers_plausible_ranges() -> None:
    assert {m.name: (m.low, m.high, m.integer) for m in METRICS} == METRIC_BOUNDS
