"""The simulated collector looks like the captured machines, is deterministic, and its faults
produce the data a real fault would."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.collectors import CollectorUnavailable, create_collector
from agents.kernel.xid import parse_kernel_log
from agents.payload import METRIC_KEYS, format_timestamp
from agents.simulated.collector import SimulatedCollector
from agents.simulated.faults import (
    CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN,
    CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN,
)
from agents.simulated.shapes import HGX_H100_8, PCIE_L40S_4, shape_for_gpu_count
from agents.simulated.workload import diurnal_factor

START = datetime(2026, 11, 29, 14, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=5)

# The plausible ranges of docs/ingest.md.
RANGES: dict[str, tuple[float, float]] = {
    "util_gpu_pct": (0, 100),
    "util_mem_pct": (0, 100),
    "util_enc_pct": (0, 100),
    "util_dec_pct": (0, 100),
    "mem_used_bytes": (0, 2**50),
    "mem_free_bytes": (0, 2**50),
    "mem_reserved_bytes": (0, 2**50),
    "power_w": (0, 5000),
    "power_limit_w": (0, 5000),
    "energy_j": (0, 1e15),
    "temp_c": (-40, 200),
    "mem_temp_c": (-40, 200),
    "sm_clock_mhz": (0, 20000),
    "mem_clock_mhz": (0, 20000),
    "graphics_clock_mhz": (0, 20000),
    "fan_pct": (0, 150),
    "pstate": (0, 15),
    "clocks_event_reasons": (0, 2**40),
    "pcie_tx_bytes_per_s": (0, 1e12),
    "pcie_rx_bytes_per_s": (0, 1e12),
    "nvlink_tx_bytes_per_s": (0, 1e13),
    "nvlink_rx_bytes_per_s": (0, 1e13),
    "ecc_corrected_volatile_count": (0, 1e9),
    "ecc_uncorrected_volatile_count": (0, 1e9),
    "ecc_corrected_aggregate_count": (0, 1e9),
    "ecc_uncorrected_aggregate_count": (0, 1e9),
    "pcie_replay_count": (0, 1e9),
    "pcie_link_gen": (1, 8),
    "pcie_link_gen_max": (1, 8),
    "pcie_link_width": (1, 64),
    "pcie_link_width_max": (1, 64),
    "retired_pages_sbe_count": (0, 1e6),
    "retired_pages_dbe_count": (0, 1e6),
    "retired_pages_pending": (0, 1),
    "remapped_rows_correctable_count": (0, 1e6),
    "remapped_rows_uncorrectable_count": (0, 1e6),
    "remapped_rows_pending": (0, 1),
    "remapped_rows_failure": (0, 1),
}


def _run(collector: SimulatedCollector, steps: int, start: datetime = START) -> list[list[Any]]:
    return [collector.sample(start + STEP * i) for i in range(steps)]


def _after(collector: SimulatedCollector, start_step: int, steps: int) -> list[list[Any]]:
    return [collector.sample(START + STEP * (start_step + i)) for i in range(steps)]


def test_every_metric_stays_inside_the_documented_plausible_range() -> None:
    for gpus in (8, 4):
        collector = SimulatedCollector(f"node-{gpus}", gpus)
        for round_ in _run(collector, 240):
            for sample in round_:
                assert set(METRIC_KEYS) <= set(RANGES)
                assert set(sample) - {"gpu_uuid", "sampled_at"} == set(RANGES)
                for key, (low, high) in RANGES.items():
                    value = sample[key]
                    assert value is None or low <= value <= high, (key, value)


def test_power_stays_between_idle_and_the_limit_and_memory_adds_up_to_total() -> None:
    collector = SimulatedCollector("gpu-a-017", 8)
    for round_ in _run(collector, 120):
        for sample in round_:
            assert 0.9 * HGX_H100_8.power_idle_w <= sample["power_w"] <= HGX_H100_8.power_limit_w
            parts = sample["mem_used_bytes"] + sample["mem_free_bytes"]
            parts += sample["mem_reserved_bytes"]
            assert abs(parts - HGX_H100_8.mem_total_bytes) <= 2 * 1024 * 1024


def test_load_comes_and_goes_with_jobs_and_power_follows_utilization() -> None:
    collector = SimulatedCollector("gpu-a-017", 8)
    rounds = _run(collector, 720)  # one hour
    utils = [s["util_gpu_pct"] for r in rounds for s in r]
    assert min(utils) == 0 and max(utils) >= 85
    busy = [s for r in rounds for s in r if s["util_gpu_pct"] >= 80]
    idle = [s for r in rounds for s in r if s["util_gpu_pct"] == 0]
    assert busy and idle
    assert min(s["power_w"] for s in busy) > max(s["power_w"] for s in idle)
    assert max(s["sm_clock_mhz"] for s in busy) == HGX_H100_8.sm_clock_max_mhz
    assert max(s["nvlink_tx_bytes_per_s"] for s in busy) > 0


def test_energy_counter_integrates_power_and_never_goes_back() -> None:
    collector = SimulatedCollector("gpu-a-017", 8)
    rounds = _run(collector, 60)
    energies = [r[0]["energy_j"] for r in rounds]
    assert energies == sorted(energies)
    mean_power = sum(r[0]["power_w"] for r in rounds[1:]) / (len(rounds) - 1)
    gained = energies[-1] - energies[0]
    assert 0.8 * mean_power * 295 < gained < 1.2 * mean_power * 295


def test_the_day_cycle_peaks_in_the_afternoon_and_dips_at_night() -> None:
    day = datetime(2026, 11, 29, tzinfo=UTC).timestamp()
    assert diurnal_factor(day + 14 * 3600) > 0.85
    assert diurnal_factor(day + 2 * 3600) < 0.25


def test_same_seed_gives_the_same_samples_and_events() -> None:
    first, second = SimulatedCollector("n1", 8, seed=7), SimulatedCollector("n1", 8, seed=7)
    for collector in (first, second):
        collector.inject("xid", gpu_index=3, xid=13)
    assert _run(first, 50) == _run(second, 50)
    assert first.drain_events() == second.drain_events()


def test_hostname_seeds_by_default_and_different_nodes_differ() -> None:
    assert _run(SimulatedCollector("n1", 8), 20) == _run(SimulatedCollector("n1", 8), 20)
    assert _run(SimulatedCollector("n1", 8), 20) != _run(SimulatedCollector("n2", 8), 20)


def test_gpu_uuids_are_stable_per_hostname_whatever_the_seed() -> None:
    a = [g["uuid"] for g in SimulatedCollector("n1", 8, seed=1).inventory()]
    b = [g["uuid"] for g in SimulatedCollector("n1", 8, seed=2).inventory()]
    c = [g["uuid"] for g in SimulatedCollector("n2", 8, seed=1).inventory()]
    assert a == b and a != c and len(set(a)) == 8
    assert all(re.fullmatch(r"GPU-[0-9a-f-]{36}", u) for u in a)


def test_eight_gpus_make_an_hgx_h100_node_as_captured() -> None:
    collector = SimulatedCollector("n1", 8)
    gpus = collector.inventory()
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert [str(g["pci_bus_id"])[9:11] for g in gpus] == [
        "04",
        "05",
        "0B",
        "0C",
        "84",
        "85",
        "8B",
        "8C",
    ]
    assert gpus[0]["mem_total_bytes"] == 85520809984
    assert collector.node_info() == {
        "driver_version": "570.86.15",
        "cuda_version": "12.8",
        "expected_gpu_count": 8,
    }
    sample = collector.sample(START)[0]
    assert sample["power_limit_w"] == 700.0 and sample["mem_clock_mhz"] == 2619
    assert sample["nvlink_tx_bytes_per_s"] is not None and sample["mem_temp_c"] is not None


def test_four_gpus_make_a_pcie_l40s_node_without_nvlink() -> None:
    collector = SimulatedCollector("n1", 4)
    assert collector.shape is PCIE_L40S_4
    samples = _run(collector, 30)[-1]
    assert all(s["nvlink_tx_bytes_per_s"] is None for s in samples)
    assert all(s["mem_temp_c"] is None and s["power_limit_w"] == 350.0 for s in samples)
    assert collector.node_info()["driver_version"] == "595.80"


def test_other_gpu_counts_take_the_nearest_shape_with_distinct_bus_ids() -> None:
    two, sixteen = shape_for_gpu_count(2), shape_for_gpu_count(16)
    assert two.gpu_name == "NVIDIA L40S" and two.gpu_count == 2
    assert sixteen.gpu_name == "NVIDIA H100 80GB HBM3" and len(set(sixteen.pci_bus_ids)) == 16
    with pytest.raises(ValueError):
        shape_for_gpu_count(-1)


def test_lost_gpu_reports_lost_state_null_metrics_and_events() -> None:
    collector = SimulatedCollector("n1", 8)
    _run(collector, 5)
    collector.inject("gpu_lost", gpu_index=2)
    rounds = _after(collector, 5, 20)
    gpu = collector.inventory()[2]
    assert gpu["state"] == "lost" and "GPU_IS_LOST" in (gpu["state_reason"] or "")
    for round_ in rounds:
        assert all(round_[2][k] is None for k in RANGES)
        assert round_[3]["util_gpu_pct"] is not None
    events = collector.drain_events()
    assert [(e["kind"], e["xid"]) for e in events] == [("xid", 79), ("gpu_lost", None)]
    assert events[0]["message"] == "NVRM: Xid (PCI:0000:0b:00): 79, GPU has fallen off the bus."
    assert all(e["gpu_uuid"] == gpu["uuid"] for e in events)


def test_lost_gpu_comes_back_after_its_duration_like_a_reset_gpu() -> None:
    collector = SimulatedCollector("n1", 8)
    collector.sample(START)
    collector.inject("gpu_lost", gpu_index=1, duration_s=60)
    collector.sample(START + STEP)
    assert collector.inventory()[1]["state"] == "lost"
    last = _after(collector, 2, 20)[-1]
    assert collector.inventory()[1]["state"] == "ok"
    assert last[1]["temp_c"] is not None and last[1]["ecc_corrected_volatile_count"] == 0


def test_xid_fault_emits_an_nvrm_line_and_xid_48_counts_an_uncorrectable_error() -> None:
    collector = SimulatedCollector("n1", 8)
    before = collector.sample(START)[0]["ecc_uncorrected_volatile_count"]
    collector.inject("xid", gpu_index=0, xid=48)
    after = collector.sample(START + STEP)[0]["ecc_uncorrected_volatile_count"]
    (event,) = collector.drain_events()
    assert event["kind"] == "xid" and event["xid"] == 48
    assert event["pci_bus_id"] == "00000000:04:00.0"
    assert re.match(
        r"NVRM: Xid \(PCI:0000:04:00\): 48, pid='<unknown>', name=<unknown>, An "
        r"uncorrectable double bit error \(DBE\)",
        event["message"] or "",
    )
    assert after == before + 1


def test_off_bus_loses_the_gpu_with_only_the_kernel_line_and_no_xid() -> None:
    collector = SimulatedCollector("n1", 8)
    collector.sample(START)
    collector.inject("off_bus", gpu_index=2, duration_s=60)
    sample = collector.sample(START + STEP)[2]

    (event,) = collector.drain_events()
    assert collector.inventory()[2]["state"] == "lost"
    assert sample["util_gpu_pct"] is None
    assert (event["kind"], event["xid"]) == ("gpu_fallen_off_bus", None)
    assert event["message"] == "NVRM: GPU at PCI:0000:0b:00: GPU has fallen off the bus."
    # The agent's kernel-log parser reads the line as the same event.
    [parsed] = parse_kernel_log([event["message"]])
    assert (parsed["kind"], parsed["pci_bus_id"]) == ("gpu_fallen_off_bus", "00000000:0B:00.0")


def test_nvml_hang_drops_the_gpus_samples_and_reports_a_collection_error_each_round() -> None:
    collector = SimulatedCollector("n1", 8)
    collector.sample(START)
    collector.inject("nvml_hang", gpu_index=5, duration_s=30)

    hung = [collector.sample(START + STEP * k) for k in (1, 2, 3)]
    errors = collector.collection_errors()
    back = collector.sample(START + STEP * 8)

    uuid = collector.inventory()[5]["uuid"]
    assert all(len(r) == 7 and uuid not in {s["gpu_uuid"] for s in r} for r in hung)
    assert [e["source"] for e in errors] == ["nvml"]
    assert errors[0]["message"].startswith(f"GPU 5 ({uuid}): nvmlDeviceGetUtilizationRates")
    assert collector.inventory()[5]["state"] == "ok"  # still enumerated, only unreadable
    assert len(back) == 8 and collector.collection_errors() == []
    assert collector.drain_events() == []


def test_xid_repeat_logs_the_xid_once_per_sample_three_times() -> None:
    collector = SimulatedCollector("n1", 8)
    collector.sample(START)
    collector.inject("xid_repeat", gpu_index=1)
    for k in range(1, 6):
        collector.sample(START + STEP * k)

    events = collector.drain_events()
    assert [(e["kind"], e["xid"]) for e in events] == [("xid", 48)] * 3
    assert [e["occurred_at"] for e in events] == [
        format_timestamp(START + STEP * k) for k in (1, 2, 3)
    ]


def test_lost_at_start_leaves_the_gpu_out_of_the_inventory_but_not_the_pci_count() -> None:
    collector = SimulatedCollector("n1", 8)
    collector.inject("lost_at_start", gpu_index=3)

    samples = collector.sample(START)

    assert [g["index"] for g in collector.inventory()] == [0, 1, 2, 4, 5, 6, 7]
    assert len(samples) == 7 and len(collector.nvlinks(START)) == 7 * 18
    assert collector.node_info()["expected_gpu_count"] == 8
    assert collector.gpu_loads()[3] is None


@pytest.mark.parametrize("code", [13, 31, 94, 119])
def test_xid_messages_follow_the_kernel_log_format(code: int) -> None:
    collector = SimulatedCollector("n1", 8)
    collector.inject("xid", gpu_index=4, xid=code)
    collector.sample(START)
    (event,) = collector.drain_events()
    assert re.match(rf"NVRM: Xid \(PCI:0000:84:00\): {code}, pid=", event["message"] or "")


def test_thermal_throttle_heats_the_gpu_drops_its_clock_and_sets_the_reason_bits() -> None:
    collector = SimulatedCollector("n1", 8)
    _run(collector, 3)
    busy = next(g.index for g in collector.gpus if collector.workload.job_on(g.index))
    collector.inject("thermal_throttle", gpu_index=busy, duration_s=300)
    rounds = _after(collector, 3, 36)
    hot = rounds[-1][busy]
    assert 87 <= hot["temp_c"] <= 93
    thermal_bits = CLOCKS_EVENT_REASON_HW_THERMAL_SLOWDOWN | CLOCKS_EVENT_REASON_SW_THERMAL_SLOWDOWN
    assert hot["clocks_event_reasons"] & thermal_bits == thermal_bits
    assert hot["sm_clock_mhz"] < 0.7 * HGX_H100_8.sm_clock_max_mhz
    events = collector.drain_events()
    assert [e["kind"] for e in events] == ["thermal_throttle"]
    assert events[0]["gpu_uuid"] == collector.gpus[busy].uuid
    cooled = _after(collector, 60, 40)[-1][busy]
    assert cooled["temp_c"] < 87 and cooled["clocks_event_reasons"] & thermal_bits == 0


def test_agent_stop_fault_asks_the_agent_to_play_dead_for_its_duration() -> None:
    collector = SimulatedCollector("n1", 8)
    assert collector.paused_until() is None
    collector.inject("agent_stop", duration_s=90)
    until = collector.paused_until()
    assert until is not None and until > datetime.now(UTC) + timedelta(seconds=80)


def test_unknown_fault_kind_or_gpu_index_is_refused() -> None:
    collector = SimulatedCollector("n1", 4)
    with pytest.raises(ValueError, match="unknown fault kind"):
        collector.inject("meltdown")
    with pytest.raises(ValueError, match="out of range"):
        collector.inject("gpu_lost", gpu_index=4)


def test_registry_builds_the_simulator_and_explains_why_nvml_cannot_run_here() -> None:
    assert isinstance(create_collector("simulated", hostname="n1", gpu_count=4), SimulatedCollector)
    with pytest.raises(CollectorUnavailable, match="no NVIDIA driver found"):
        create_collector("nvml")
    with pytest.raises(KeyError, match=r"known: .*nvml, simulated"):
        create_collector("dcgm")
