"""How the NVML collector lives through what real drivers do: no driver, hung calls, missing
functions, GPUs lost or gone mid-run, counters going backwards, names that are not UTF-8."""

from __future__ import annotations

import ctypes
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from agents.collectors import CollectorUnavailable
from agents.collectors.nvml import NvmlCollector
from agents.nvml.metrics import ALL_METRIC_KEYS
from tests.agents.gpu.fake_devices import FakeLink
from tests.agents.gpu.fake_pynvml import FakeNvml

NOW = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=5)
H100 = "h100-80gb-hbm3-8gpu-hgx-vm-fabric-completed-driver570.xml"
Install = Callable[[str], FakeNvml]


def test_no_driver_makes_the_collector_unavailable_with_the_reason(capture_nvml: Install) -> None:
    capture_nvml("tesla-t4-driver515.xml").init_error = 12  # LIBRARY_NOT_FOUND
    with pytest.raises(CollectorUnavailable, match="no NVIDIA driver found: NVML Shared Library"):
        NvmlCollector()


def test_no_pynvml_makes_the_collector_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(CollectorUnavailable, match="nvidia-ml-py"):
        NvmlCollector()


def test_a_hung_call_costs_that_gpu_its_sample_and_names_the_call(capture_nvml: Install) -> None:
    fake = capture_nvml(H100)
    collector = NvmlCollector(call_timeout_s=0.1)
    fake.devices[2].hang_s["nvmlDeviceGetPowerUsage"] = 0.6
    samples = collector.sample(NOW)
    assert len(samples) == 7
    assert fake.devices[2].uuid not in {s["gpu_uuid"] for s in samples}
    [error] = collector.collection_errors()
    assert error["source"] == "nvml"
    assert error["message"].endswith("nvmlDeviceGetPowerUsage timed out after 0.1 s")
    # While the call is still stuck the GPU is left alone instead of piling up threads.
    assert len(collector.sample(NOW + STEP)) == 7
    assert "still hung" in collector.collection_errors()[0]["message"]
    del fake.devices[2].hang_s["nvmlDeviceGetPowerUsage"]
    time.sleep(0.6)
    assert len(collector.sample(NOW + 2 * STEP)) == 8
    collector.close()


def test_a_function_missing_from_an_old_driver_falls_back_and_is_logged_once(
    capture_nvml: Install, caplog: pytest.LogCaptureFixture
) -> None:
    fake = capture_nvml("rtx-3090-driver590-v13.xml")
    fake.fail("nvmlDeviceGetCurrentClocksEventReasons", 13)  # FUNCTION_NOT_FOUND
    fake.fail("nvmlDeviceGetFanSpeed", 13)
    collector = NvmlCollector()
    caplog.set_level(logging.INFO, logger="agents.nvml.session")
    for n in range(3):
        [sample] = collector.sample(NOW + n * STEP)
    assert sample["clocks_event_reasons"] == 0x4  # from …ClocksThrottleReasons
    assert sample["fan_pct"] is None
    unavailable = collector.inventory()[0]["unavailable"]  # type: ignore[typeddict-item]
    assert unavailable["fan_pct"] == "FUNCTION_NOT_FOUND"
    assert "clocks_event_reasons" not in unavailable
    fan_logs = [r for r in caplog.records if "fan_pct not available" in r.getMessage()]
    assert len(fan_logs) == 1


def test_a_function_the_binding_lacks_is_function_not_found(capture_nvml: Install) -> None:
    fake = capture_nvml("rtx-3090-driver590-v13.xml")
    fake.remove("nvmlDeviceGetCurrentClocksEventReasons")
    [sample] = NvmlCollector().sample(NOW)
    assert sample["clocks_event_reasons"] == 0x4


def test_reserved_memory_needs_memory_info_v2_and_used_memory_does_not(
    capture_nvml: Install,
) -> None:
    capture_nvml("tesla-v100-pcie-32gb-driver460.xml")  # driver 460: no <reserved>
    collector = NvmlCollector()
    [sample] = collector.sample(NOW)
    assert (sample["mem_used_bytes"], sample["mem_reserved_bytes"]) == (12311 * 2**20, None)
    unavailable = collector.inventory()[0]["unavailable"]  # type: ignore[typeddict-item]
    assert unavailable["mem_reserved_bytes"] == "FUNCTION_NOT_FOUND"


def test_no_permission_is_kept_as_the_reason(capture_nvml: Install) -> None:
    fake = capture_nvml("tesla-t4-driver515.xml")
    fake.devices[0].failures["nvmlDeviceGetTotalEnergyConsumption"] = 4
    collector = NvmlCollector()
    collector.sample(NOW)
    unavailable = collector.inventory()[0]["unavailable"]  # type: ignore[typeddict-item]
    assert unavailable["energy_j"] == "NO_PERMISSION"


def test_a_gpu_lost_mid_run_is_marked_lost_while_the_others_keep_reporting(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml(H100)
    collector = NvmlCollector()
    collector.sample(NOW)
    fake.devices[3].lost = True
    samples = collector.sample(NOW + STEP)
    assert len(samples) == 8
    assert all(samples[3][k] is None for k in ALL_METRIC_KEYS)
    assert all(s["power_w"] is not None for i, s in enumerate(samples) if i != 3)
    entry = collector.inventory()[3]
    assert (entry["state"], entry["state_reason"]) == (
        "lost",
        "NVML_ERROR_GPU_IS_LOST (nvmlDeviceGetUtilizationRates)",
    )
    assert "unavailable" not in entry
    [event] = collector.drain_events()
    assert (event["kind"], event["gpu_uuid"]) == ("gpu_lost", fake.devices[3].uuid)
    collector.sample(NOW + 2 * STEP)
    assert collector.drain_events() == []  # one event per change
    fake.devices[3].lost = False
    assert collector.sample(NOW + 3 * STEP)[3]["power_w"] == 68.89
    assert collector.inventory()[3]["state"] == "ok"


def test_an_unknown_error_marks_the_gpu_unknown_error(capture_nvml: Install) -> None:
    fake = capture_nvml("tesla-t4-driver515.xml")
    fake.devices[0].failures["nvmlDeviceGetTemperature"] = 999
    collector = NvmlCollector()
    [sample] = collector.sample(NOW)
    assert sample["temp_c"] is None and sample["power_w"] is None
    assert collector.inventory()[0]["state"] == "unknown_error"
    assert [e["kind"] for e in collector.drain_events()] == ["gpu_unknown_error"]


def test_counters_going_backwards_never_give_negative_values(capture_nvml: Install) -> None:
    fake = capture_nvml("tesla-t4-driver515.xml")
    device = fake.devices[0]
    device.energy_mj = iter([5_000_000, 5_000_500, 1_200])  # driver reload in between
    device.nvlinks = [FakeLink(tx_kib=1_000, rx_kib=1_000)]
    collector = NvmlCollector()
    first = collector.sample(NOW)[0]
    device.nvlinks[0].tx_kib = device.nvlinks[0].rx_kib = 3_000
    second = collector.sample(NOW + STEP)[0]
    device.nvlinks[0].tx_kib = device.nvlinks[0].rx_kib = 10  # counter reset
    third = collector.sample(NOW + 2 * STEP)[0]
    assert [s["energy_j"] for s in (first, second, third)] == [5000.0, 5000.5, 1.2]
    assert first["nvlink_tx_bytes_per_s"] is None
    assert second["nvlink_tx_bytes_per_s"] > 0
    assert third["nvlink_tx_bytes_per_s"] is None and third["nvlink_rx_bytes_per_s"] is None


def test_a_device_name_that_is_not_utf8_is_decoded_with_replacement(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml("tesla-t4-driver515.xml")
    fake.devices[0].name = b"Tesla \xff\xfeT4"
    assert NvmlCollector().inventory()[0]["name"] == "Tesla \ufffd\ufffdT4"


def test_fewer_gpus_than_at_start_are_reported_missing(capture_nvml: Install) -> None:
    fake = capture_nvml(H100)
    collector = NvmlCollector()
    collector.sample(NOW)
    fake.visible = fake.devices[:3] + fake.devices[5:]
    samples = collector.sample(NOW + STEP)
    assert len(samples) == 8
    assert [s["power_w"] is None for s in samples] == [False] * 6 + [True] * 2
    events = collector.drain_events()
    assert [(e["kind"], e["gpu_uuid"]) for e in events] == [
        ("gpu_missing", fake.devices[3].uuid),
        ("gpu_missing", fake.devices[4].uuid),
    ]
    assert "NVML sees 6 GPU(s), 8 at start" in (events[0]["message"] or "")
    assert [g["state"] for g in collector.inventory()][-2:] == ["lost", "lost"]


def test_each_xid_from_the_event_set_is_its_own_event(capture_nvml: Install) -> None:
    fake = capture_nvml(H100)
    collector = NvmlCollector()
    gpu2, gpu5 = fake.devices[2], fake.devices[5]
    fake.pending_xids = [(gpu2, 79), (gpu2, 79), (gpu5, 48)]
    collector.sample(NOW)
    events = collector.drain_events()
    assert [(e["kind"], e["xid"], e["pci_bus_id"]) for e in events] == [
        ("xid", 79, "00000000:0B:00.0"),
        ("xid", 79, "00000000:0B:00.0"),
        ("xid", 48, "00000000:85:00.0"),
    ]
    assert fake.calls.count("nvmlEventSetWait") == 4  # until NVML_ERROR_TIMEOUT, no blocking


def test_an_xid_waiting_in_the_event_set_is_urgent_between_rounds_and_reported_once(
    capture_nvml: Install,
) -> None:
    fake = capture_nvml(H100)
    collector = NvmlCollector()
    collector.sample(NOW)
    collector.drain_events()
    assert collector.urgent_pending() is False

    fake.pending_xids = [(fake.devices[6], 79)]

    assert collector.urgent_pending() is True
    assert collector.urgent_pending() is True  # still waiting for the round
    collector.sample(NOW + STEP)
    events = collector.drain_events()
    assert [(e["kind"], e["xid"]) for e in events] == [("xid", 79)]
    assert collector.urgent_pending() is False


def test_the_real_binding_without_a_driver_makes_the_collector_unavailable() -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(CollectorUnavailable, match=r"no NVIDIA driver found: .*libnvidia-ml"):
        NvmlCollector()
