"""Pure helpers behind the node sections: plausibility, the topology matrix, display filters."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from app.metrics.plausible import Bound, clean_numbers, plausible
from app.nvlinks.service import GpuLinks
from app.series.writes import natural_key
from app.topology.matrix import build_matrix, nvlink_count
from app.topology.service import digest
from app.web import fmt_count, fmt_ms, fmt_rate


@pytest.mark.parametrize(
    ("value", "bound", "expected"),
    [
        (5, Bound(0, 10), 5),
        (10.0, Bound(0, 10, integer=True), 10),
        (2.5, Bound(0, 10, integer=True), None),
        (-1, Bound(0, 10), None),
        (float("nan"), Bound(0, 10), None),
        (float("inf"), Bound(0, 1e300), None),
        (True, Bound(0, 10), None),
        (2**64 - 1, Bound(0, 2**64 - 1, integer=True), 2**64 - 1),
        (2**64, Bound(0, 2**64 - 1, integer=True), None),
    ],
)
def test_plausible_keeps_values_in_range_and_nulls_the_rest(
    value: float, bound: Bound, expected: float | None
) -> None:
    assert plausible(value, bound) == expected


def test_clean_numbers_counts_what_it_nulls_under_the_section_name() -> None:
    nulled: Counter[str] = Counter()
    row = clean_numbers(
        {"device": "sda", "busy_pct": 250.0, "avg_wait_s": None, "read_iops": 3.0},
        {"busy_pct": Bound(0, 100), "avg_wait_s": Bound(0, 1), "read_iops": Bound(0, 10)},
        prefix="disks",
        nulled=nulled,
    )
    assert row == {"device": "sda", "busy_pct": None, "avg_wait_s": None, "read_iops": 3.0}
    assert nulled == {"disks.busy_pct": 1}


def test_the_matrix_orders_gpus_then_nics_and_fills_both_halves() -> None:
    document = {
        "devices": [
            {"id": "NIC0", "kind": "nic", "name": "mlx5_0"},
            {"id": "GPU10", "kind": "gpu", "cpu_affinity": "52-103", "numa_node": 1},
            {"id": "GPU2", "kind": "gpu", "cpu_affinity": "0-51", "numa_node": 0},
        ],
        "links": [
            {"a": "GPU2", "b": "GPU10", "type": "NV17"},
            {"a": "NIC0", "b": "GPU2", "type": "PIX"},
            {"a": "GPU10", "b": "GPU99", "type": "NV18"},  # an unknown device: ignored
        ],
    }

    matrix = build_matrix(document)

    assert matrix.columns == ("GPU2", "GPU10", "NIC0")
    assert [row.cells for row in matrix.rows] == [
        ("X", "NV17", "PIX"),
        ("NV17", "X", ""),
        ("PIX", "", "X"),
    ]
    assert [(r.cpu_affinity, r.numa_node) for r in matrix.rows] == [
        ("0-51", 0),
        ("52-103", 1),
        (None, None),
    ]
    assert matrix.nic_names == (("NIC0", "mlx5_0"),)
    assert matrix.max_nvlinks == 17
    assert nvlink_count("NV4") == 4 and nvlink_count("PIX") is None


def test_the_topology_digest_ignores_only_the_collection_time() -> None:
    base = {"collected_at": "2026-11-29T12:00:00Z", "devices": [], "links": [], "partial": False}

    assert digest(base) == digest({**base, "collected_at": "2026-11-29T13:00:00Z"})
    assert digest(base) != digest({**base, "partial": True})


def test_gpu_link_totals_skip_unknown_values() -> None:
    links = [
        _link(state="up", speed_gbps=26.562, tx_bytes_per_s=1.0, crc_errors=None),
        _link(state="down", speed_gbps=None, tx_bytes_per_s=None, crc_errors=7),
    ]
    entry = GpuLinks(gpu=None, links=links)  # type: ignore[arg-type]

    assert entry.up == 1
    assert [link.state for link in entry.not_up] == ["down"]
    assert entry.speeds_gbps == [26.562]
    assert entry.tx_bytes_per_s == 1.0
    assert entry.crc_errors == 7
    assert entry.replay_errors is None


def _link(**values: object) -> object:
    defaults = {"rx_bytes_per_s": None, "replay_errors": None, "recovery_errors": None}
    return SimpleNamespace(**(defaults | values))


def test_display_filters_keep_big_counters_exact() -> None:
    assert fmt_count(18446744073709551000) == "18,446,744,073,709,551,000"
    assert fmt_count(None) == "N/A"
    assert fmt_ms(0.0004) == "0.40 ms"
    assert fmt_ms(0.25) == "250 ms"
    assert fmt_rate(1536) == "1.5 KiB/s"
    assert sorted(["mlx5_10", "mlx5_2", "nvme10n1", "nvme2n1"], key=natural_key) == [
        "mlx5_2",
        "mlx5_10",
        "nvme2n1",
        "nvme10n1",
    ]
