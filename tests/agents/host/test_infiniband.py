"""InfiniBand/RoCE ports from sysfs: the H100 9-HCA listing read from a fake sysfs tree gives
exact states, rates and counters; data rates are in bytes (words × 4); missing files are null."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.host.ibtools import parse_ibstat
from agents.host.infiniband import InfinibandSource, rate_gbps, read_ib_ports, state_word
from tests.agents.host.fakefs import proc_fixture, write_file

T0 = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
LISTING = "sys-class-infiniband-h100-9hca-grep-listing.txt"
PORT = "class/infiniband/mlx5_0/ports/1"


def test_the_listing_materialises_into_one_file_per_line(shared_ib_sysfs: Path) -> None:
    assert (shared_ib_sysfs / PORT / "state").read_text() == "4: ACTIVE\n"
    assert (shared_ib_sysfs / "class/infiniband/mlx5_0/fw_ver").read_text() == "28.41.1000\n"
    files = [p for p in (shared_ib_sysfs / "class/infiniband").rglob("*") if p.is_file()]
    assert len(files) == len(proc_fixture(LISTING).splitlines()) == 486


def test_nine_hcas_report_state_rate_link_layer_and_error_counts(shared_ib_sysfs: Path) -> None:
    entries = InfinibandSource(shared_ib_sysfs).collect(T0)["nic_ports"]
    assert [e["device"] for e in entries] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9",
        "mlx5_bond_0",
    ]  # fmt: skip
    assert entries[0] == {
        "sampled_at": "2026-11-29T16:00:00.000Z",
        "device": "mlx5_0",
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "tx_bytes_per_s": None,
        "rx_bytes_per_s": None,
        "symbol_error_count": 0,
        "link_downed_count": 0,
        "link_error_recovery_count": 0,
        "port_rcv_errors_count": 14,
        "port_xmit_discards_count": 0,
    }
    assert entries[1]["link_downed_count"] == 255
    bond = entries[-1]
    assert (bond["link_layer"], bond["rate_gbps"], bond["state"]) == ("Ethernet", 200.0, "ACTIVE")


def test_raw_counters_and_hw_counters_are_read_exactly(shared_ib_sysfs: Path) -> None:
    ports = read_ib_ports(shared_ib_sysfs)
    assert len(ports) == 9
    mlx5_1 = ports[1]
    assert mlx5_1.counters["port_rcv_data"] == 205128687774249
    assert mlx5_1.counters["port_xmit_data"] == 230442669431839
    assert mlx5_1.counters["port_xmit_wait"] == 2489603687
    assert len(mlx5_1.counters) == 21
    assert mlx5_1.hw_counters["roce_adp_retrans"] == 3
    assert mlx5_1.hw_counters["rx_write_requests"] == 3809045607


def test_the_sysfs_listing_agrees_with_ibstat_of_the_same_node(shared_ib_sysfs: Path) -> None:
    from_sysfs = [
        (p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer)
        for p in read_ib_ports(shared_ib_sysfs)
    ]
    from_ibstat = [
        (p.ca, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer)
        for p in parse_ibstat(proc_fixture("ibstat-h100-9ca-all-active.txt"))
    ]
    assert from_sysfs == from_ibstat


def _set_data(ib_sysfs: Path, xmit: int, rcv: int) -> None:
    write_file(ib_sysfs, f"{PORT}/counters/port_xmit_data", f"{xmit}\n")
    write_file(ib_sysfs, f"{PORT}/counters/port_rcv_data", f"{rcv}\n")


def test_data_rates_are_bytes_from_4_byte_words_and_null_after_a_wrap(ib_sysfs: Path) -> None:
    source = InfinibandSource(ib_sysfs)
    base = 230442669431839
    _set_data(ib_sysfs, base, base)
    source.collect(T0)
    _set_data(ib_sysfs, base + 10_000_000, base + 2_500_000)
    entry = source.collect(T0 + timedelta(seconds=10))["nic_ports"][0]
    assert (entry["tx_bytes_per_s"], entry["rx_bytes_per_s"]) == (4_000_000.0, 1_000_000.0)
    _set_data(ib_sysfs, 12, base + 5_000_000)
    entry = source.collect(T0 + timedelta(seconds=20))["nic_ports"][0]
    assert (entry["tx_bytes_per_s"], entry["rx_bytes_per_s"]) == (None, None)


def test_a_32_bit_data_counter_stuck_at_its_maximum_gives_no_rate(ib_sysfs: Path) -> None:
    source = InfinibandSource(ib_sysfs)
    _set_data(ib_sysfs, 2**32 - 1, 1000)
    source.collect(T0)
    _set_data(ib_sysfs, 2**32 - 1, 1250)
    entry = source.collect(T0 + timedelta(seconds=1))["nic_ports"][0]
    assert (entry["tx_bytes_per_s"], entry["rx_bytes_per_s"]) == (None, 1000.0)


def test_missing_files_give_nulls_not_a_crash(ib_sysfs: Path) -> None:
    (ib_sysfs / PORT / "rate").unlink()
    (ib_sysfs / PORT / "state").unlink()
    for counter in (ib_sysfs / PORT / "counters").iterdir():
        counter.unlink()
    (ib_sysfs / PORT / "counters").rmdir()
    entry = InfinibandSource(ib_sysfs).collect(T0)["nic_ports"][0]
    assert (entry["state"], entry["rate_gbps"], entry["phys_state"]) == (None, None, "LinkUp")
    assert entry["symbol_error_count"] is None and entry["port_rcv_errors_count"] is None


def test_a_node_without_rdma_devices_has_no_section_and_no_error(tmp_path: Path) -> None:
    source = InfinibandSource(tmp_path)
    assert source.collect(T0) == {}
    assert source.collection_errors() == []


def test_state_and_rate_words_are_parsed_like_the_kernel_writes_them() -> None:
    assert (state_word("4: ACTIVE"), state_word("1: DOWN"), state_word("5: LinkUp")) == (
        "ACTIVE",
        "DOWN",
        "LinkUp",
    )
    assert (rate_gbps("400 Gb/sec (4X NDR)"), rate_gbps("2.5 Gb/sec (1X SDR)")) == (400.0, 2.5)
    assert (rate_gbps(""), rate_gbps("unknown"), state_word(None)) == (None, None, None)
