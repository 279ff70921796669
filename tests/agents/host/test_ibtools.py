"""ibstat and ibstatus output, as pasted from real nodes, parse into ports with sysfs' words."""

from __future__ import annotations

from agents.host.ibtools import IbToolPort, parse_ibstat, parse_ibstatus
from tests.agents.host.fakefs import proc_fixture


def _summary(ports: list[IbToolPort]) -> list[tuple[object, ...]]:
    return [(p.ca, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports]


def test_ibstat_of_an_a100_node_with_8_hdr_cas_ignores_the_trailing_ibpanic() -> None:
    ports = parse_ibstat(proc_fixture("ibstat-a100-8x-hdr200-ib.txt"))
    assert _summary(ports) == [
        (f"mlx5_{i}", 1, "ACTIVE", "LinkUp", 200.0, "InfiniBand") for i in range(8)
    ]
    assert {p.ca_type for p in ports} == {"MT4124"}


def test_ibstat_of_an_h100_node_reports_down_and_polling_ports() -> None:
    ports = parse_ibstat(proc_fixture("ibstat-h100-12ca-some-down-polling.txt"))
    assert len(ports) == 12
    down = [(p.ca, p.state, p.phys_state, p.rate_gbps) for p in ports if p.state != "ACTIVE"]
    assert down == [("mlx5_11", "DOWN", "Polling", 40.0), ("mlx5_5", "DOWN", "Disabled", 40.0)]
    assert {p.link_layer for p in ports} == {"Ethernet"}
    assert (ports[1].ca, ports[1].ca_type, ports[1].rate_gbps) == ("mlx5_1", "MT4125", 100.0)
    assert sorted(p.rate_gbps or 0 for p in ports).count(400.0) == 6


def test_ibstat_of_an_h100_node_with_9_active_cas_includes_the_roce_bond() -> None:
    ports = parse_ibstat(proc_fixture("ibstat-h100-9ca-all-active.txt"))
    assert _summary(ports)[-1] == ("mlx5_bond_0", 1, "ACTIVE", "LinkUp", 200.0, "Ethernet")
    assert ports[-1].ca_type == "MT41692"
    assert _summary(ports)[:8] == [
        (ca, 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
        for ca in ("mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9")
    ]


def test_ibstatus_takes_the_words_after_the_state_numbers() -> None:
    ports = parse_ibstatus(proc_fixture("ibstatus-a100-8x-hdr.txt"))
    assert _summary(ports) == [
        *[(f"mlx5_{i}", 1, "ACTIVE", "LinkUp", 200.0, "InfiniBand") for i in range(8)],
        ("mlx5_8", 1, "ACTIVE", "LinkUp", 40.0, "Ethernet"),
    ]
    assert {p.ca_type for p in ports} == {None}


def test_ibstat_state_words_map_to_sysfs_words() -> None:
    text = (
        "CA 'mlx5_2'\n\tCA type: MT4123\n\tPort 1:\n\t\tState: Initializing\n"
        "\t\tPhysical state: LinkUp\n\tPort 2:\n\t\tState: Armed\n"
    )
    assert [(p.port, p.state, p.ca_type) for p in parse_ibstat(text)] == [
        (1, "INIT", "MT4123"),
        (2, "ARMED", "MT4123"),
    ]
