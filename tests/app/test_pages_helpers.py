"""Pure helpers behind the pages: URL filters, triage order, clock event reason names."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from app.fleet.pages import FleetFilters, fleet_counts, health_rank
from app.web import clock_event_reason_names, fmt_skew


def test_filters_from_the_url_are_lenient_and_round_trip() -> None:
    filters = FleetFilters.parse(" gpu-a ", ["cluster=a", "", "oops", "team = llm"], "bogus")

    assert filters.q == "gpu-a"
    assert filters.labels == {"cluster": "a", "team": "llm"}
    assert filters.invalid == ("oops",)
    assert filters.sort == "hostname"
    assert filters.query() == "?q=gpu-a&label=cluster%3Da&label=team%3Dllm"
    assert filters.query(label_drop="cluster", label_add=("rack", "r07")) == (
        "?q=gpu-a&label=team%3Dllm&label=rack%3Dr07"
    )
    assert FleetFilters.parse(None, [], None).query() == ""
    assert FleetFilters.parse(None, [], "health").query() == "?sort=health"


def view(freshness: str, lost: int = 0, gpus: int = 8) -> Any:
    return SimpleNamespace(freshness=freshness, lost_gpu_count=lost, gpu_count=gpus)


def test_triage_order_is_lost_gpus_then_stale_then_never_seen_then_healthy() -> None:
    views = [view("fresh"), view("never_seen", gpus=0), view("stale"), view("fresh", lost=1)]

    assert sorted(health_rank(v) for v in views) == [0, 1, 2, 3]
    assert health_rank(view("stale", lost=2)) == 0


def test_counts_add_up_nodes_by_freshness_and_gpus_not_ok() -> None:
    views = [view("fresh"), view("fresh", lost=2), view("stale"), view("never_seen", gpus=0)]

    assert fleet_counts(views) == {
        "nodes": 4,
        "fresh": 2,
        "stale": 1,
        "never_seen": 1,
        "gpus": 24,
        "gpus_not_ok": 2,
    }


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (None, None),
        (0, []),
        (0x1, ["GpuIdle"]),
        (0x44, ["SwPowerCap", "HwThermalSlowdown"]),
        (0x1FF, ["GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown",
                 "SyncBoost", "SwThermalSlowdown", "HwThermalSlowdown",
                 "HwPowerBrakeSlowdown", "DisplayClockSetting"]),
        (0x8 | 0x400, ["HwSlowdown", "0x400"]),
    ],
)  # fmt: skip
def test_clock_event_reasons_are_named_from_the_nvml_bits(
    mask: int | None, names: list[str] | None
) -> None:
    assert clock_event_reason_names(mask) == names


def test_skew_is_signed() -> None:
    assert fmt_skew(3.24) == "+3.2 s"
    assert fmt_skew(-0.4) == "-0.4 s"
    assert fmt_skew(None) == "N/A"
