"""What the parser fuzzing (tests/agents/test_fuzz_*.py, issue 14) found, each held here at the
right behaviour with the smallest input that showed it. Before, every one of these raised out of
its parser (taking the whole reading, or every kernel line of the poll, with it) or produced a
value the server would have had to leave out."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agents.host.diskstats import DiskStatsSource
from agents.host.ibtools import parse_ibstat, parse_ibstatus
from agents.host.infiniband import rate_gbps, read_ib_ports
from agents.kernel.xid import parse_kernel_line, parse_xid
from agents.numbers import ascii_int
from agents.nvidia_smi import parse_nvidia_smi_xml
from agents.spool import Spool
from agents.topology.matrix import parse_topo_matrix, topology_section
from agents.topology.nvlink_text import parse_nvlink_status
from tests.shared_fixtures import fixture_path

NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
XID = "NVRM: Xid (PCI:0000:18:00): {}, pid=1234, name=python3, GPU has fallen off the bus."


@pytest.mark.parametrize(
    "prefix",
    [
        "[99999999999999.000000] ",  # seconds since boot beyond any date: OverflowError
        f"6,1,{'9' * 400},-;",  # /dev/kmsg microseconds beyond a float: OverflowError
    ],
)
def test_a_kernel_line_with_an_impossible_time_keeps_its_event_at_the_read_time(
    prefix: str,
) -> None:
    event = parse_kernel_line(prefix + XID.format(79), now=NOW, boot_time=NOW)
    assert event is not None
    assert event["occurred_at"] == "2026-11-29T16:00:00.000Z"
    assert event["xid"] == 79


@pytest.mark.parametrize(
    ("code", "xid"),
    [("7" * 5000, None), ("18446744073709551615", None), ("2147483647", 2147483647), ("79", 79)],
)
def test_an_xid_code_no_xid_can_have_is_kept_as_an_xid_event_without_its_code(
    code: str, xid: int | None
) -> None:
    event = parse_kernel_line(XID.format(code), now=NOW)
    assert event is not None and event["kind"] == "xid"
    assert event["xid"] == xid
    assert event["pci_bus_id"] == "00000000:18:00.0"


def test_an_xid_pid_of_thousands_of_digits_is_unknown_not_a_crash() -> None:
    details = parse_xid(XID.format(79).replace("pid=1234", f"pid={'1' * 5000}"))
    assert details is not None and details.pid is None and details.xid == 79


@pytest.mark.parametrize(
    ("line", "speeds"),
    [
        ("Link 0: 1.2.3 GB/s", {}),  # float("1.2.3") raised
        ("Link 300: 26.562 GB/s", {}),  # no NVLink is numbered above 255
        ("Link 17: 26.562 GB/s", {17: 26.562}),
        ("Link 3: <inactive>", {3: None}),
    ],
)
def test_an_nvlink_status_line_that_no_link_can_have_is_left_out_alone(
    line: str, speeds: dict[int, float | None]
) -> None:
    text = f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t {line}\n\t Link 1: 26.562 GB/s\n"
    (gpu,) = parse_nvlink_status(text)
    assert gpu.speeds_gbps == {**speeds, 1: 26.562}


def test_an_nvlink_gpu_header_with_thousands_of_digits_is_no_gpu() -> None:
    assert parse_nvlink_status(f"GPU {'9' * 5000}: X\n Link 0: 25 GB/s\n") == []


def test_a_topo_p2p_matrix_read_as_topo_m_gives_a_partial_topology_without_links() -> None:
    """The server's link types are topo -m codes: a P2P status (``OK``) was sent as a link
    type, and the server left out the whole topology."""
    text = fixture_path("topo/h100-8gpu-p2p-read-ok.txt").read_text(encoding="utf-8")
    section = topology_section(parse_topo_matrix(text))
    assert section["links"] == []
    assert section["partial"] is True
    assert section["errors"][0].startswith("nvidia-smi topo -m: 28 cell(s) hold no link code")
    assert len(section["devices"]) == 8


def test_a_topo_m_cell_with_an_odd_code_leaves_out_that_link_only() -> None:
    text = fixture_path("topo/h100-8gpu-nv18-condensed.txt").read_text(encoding="utf-8")
    garbled = text.replace("NV18", "NVX", 1)
    section = topology_section(parse_topo_matrix(garbled))
    clean = topology_section(parse_topo_matrix(text))
    assert len(section["links"]) == len(clean["links"]) - 1
    assert "partial" not in clean and section["partial"] is True


@pytest.mark.parametrize("numa", ["²", "--5", "9" * 5000])
def test_a_topo_m_numa_affinity_that_is_no_number_is_unknown(numa: str) -> None:
    text = fixture_path("topo/h100-8gpu-nv18-condensed.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("GPU0"))
    cells = lines[row].split()
    cells[-1] = numa  # NUMA Affinity (this capture has no GPU NUMA ID column)
    lines[row] = "\t".join(cells)
    matrix = parse_topo_matrix("\n".join(lines))
    assert matrix.gpus[0].numa_affinity is None


def test_nvidia_smi_processes_with_a_pid_no_linux_process_can_have_are_left_out() -> None:
    text = fixture_path("nvidia-smi-xml/tesla-t4-driver515.xml").read_text(encoding="utf-8")
    process = (
        "<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A"
        "</compute_instance_id><pid>{}</pid><type>C</type><process_name>python</process_name>"
        "<used_memory>100 MiB</used_memory></process_info>"
    )
    listed = "".join(process.format(pid) for pid in ("18446744073709551615", "0", "4321"))
    text = text.replace("<processes>", f"<processes>{listed}", 1)
    (gpu,) = parse_nvidia_smi_xml(text).gpus
    assert [p["pid"] for p in gpu.processes][:1] == [4321]
    assert all(0 < p["pid"] <= 4_194_304 for p in gpu.processes)


def test_nvidia_smi_attached_gpus_that_is_no_number_is_unknown() -> None:
    text = fixture_path("nvidia-smi-xml/tesla-t4-driver515.xml").read_text(encoding="utf-8")
    start = text.index("<attached_gpus>") + len("<attached_gpus>")
    end = text.index("</attached_gpus>")
    assert parse_nvidia_smi_xml(text[:start] + "²" + text[end:]).attached_gpus is None


def test_infiniband_ports_and_counters_that_are_no_numbers_are_left_out(tmp_path: Path) -> None:
    ports = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports"
    for number in ("1", "²", "300", "9" * 30):
        (ports / number / "counters").mkdir(parents=True)
    (ports / "1" / "state").write_text("4: ACTIVE\n")
    (ports / "1" / "counters" / "symbol_error").write_text("²\n")
    (ports / "1" / "counters" / "link_downed").write_text("3\n")
    (ports / "1" / "counters" / "port_rcv_errors").write_text(f"{'1' * 5000}\n")
    (port,) = read_ib_ports(tmp_path)
    assert (port.device, port.port, port.state) == ("mlx5_0", 1, "ACTIVE")
    assert port.counters == {"link_downed": 3}


def test_a_spool_file_whose_sequence_is_no_number_is_set_aside_not_a_crash(
    tmp_path: Path,
) -> None:
    (tmp_path / "²-batch.json.gz").write_bytes(b"x")
    spool = Spool(tmp_path, max_bytes=2**20)
    assert len(spool) == 0


@pytest.mark.parametrize(
    ("text", "value"),
    [("42", 42), (" 7\n", 7), ("²", None), ("٣", None), ("-1", None), ("1" * 21, None)],
)
def test_ascii_int_reads_only_what_a_kernel_or_tool_prints_as_a_number(
    text: str, value: int | None
) -> None:
    assert ascii_int(text) == value


def test_an_ibstat_port_line_with_thousands_of_digits_is_no_port() -> None:
    """int() refuses 4,300 digits and more: the whole ibstat output was lost."""
    text = f"CA 'mlx5_0'\n\tCA type: MT4129\n\tPort {'1' * 5000}:\n\tPort 1:\n\t\tState: Active\n"
    assert [(p.ca, p.port, p.state) for p in parse_ibstat(text)] == [("mlx5_0", 1, "ACTIVE")]
    status = f"Infiniband device 'mlx5_0' port {'7' * 5000} status:\n\tstate: 4: ACTIVE\n"
    assert parse_ibstatus(status) == []


@pytest.mark.parametrize("rate", ["inf Gb/sec (4X NDR)", "nan", "1e400", "-400 Gb/sec"])
def test_an_infiniband_rate_that_is_no_finite_rate_is_unknown(rate: str) -> None:
    assert rate_gbps(rate) is None
    assert rate_gbps("400 Gb/sec (4X NDR)") == 400.0


def test_a_diskstats_line_whose_name_is_longer_than_the_server_takes_is_left_out_named(
    tmp_path: Path,
) -> None:
    long_name = "dm-" + "7" * 80
    text = (
        f"   8       0 sda 1 0 8 0 1 0 8 0 0 0 0 0 0 0 0 0 0\n"
        f" 253       7 {long_name} 1 0 8 0 1 0 8 0 0 0 0 0 0 0 0 0 0\n"
    )
    (tmp_path / "diskstats").write_text(text)
    source = DiskStatsSource(tmp_path)
    entries = source.collect(datetime(2026, 11, 29, 16, 0, tzinfo=UTC))["disks"]
    assert [e["device"] for e in entries] == ["sda"]
    (error,) = source.collection_errors()
    assert error["source"] == "diskstats" and "device name too long, left out" in error["message"]


def _t4_with(tag: str, value: str) -> str:
    text = fixture_path("nvidia-smi-xml/tesla-t4-driver515.xml").read_text(encoding="utf-8")
    start = text.index(f"<{tag}>") + len(f"<{tag}>")
    return text[:start] + value + text[text.index(f"</{tag}>", start) :]


def test_an_nvidia_smi_number_of_thousands_of_digits_is_unreadable_not_the_whole_document() -> None:
    """int() refused it and every GPU of the document was lost."""
    (gpu,) = parse_nvidia_smi_xml(_t4_with("total", f"{'7' * 5000} MiB")).gpus
    assert gpu.info["mem_total_bytes"] is None
    assert gpu.info["name"] == "Tesla T4"


@pytest.mark.parametrize("total", ["-1 MiB", "2000000000 MiB"])
def test_an_nvidia_smi_total_memory_no_gpu_has_is_null(total: str) -> None:
    (gpu,) = parse_nvidia_smi_xml(_t4_with("total", total)).gpus
    assert gpu.info["mem_total_bytes"] is None


def test_an_nvidia_smi_product_name_is_cut_to_what_the_server_takes() -> None:
    (gpu,) = parse_nvidia_smi_xml(_t4_with("product_name", "T" * 600)).gpus
    assert gpu.info["name"] == "T" * 256


def test_a_topo_m_cpu_affinity_longer_than_the_server_takes_is_unknown() -> None:
    text = fixture_path("topo/h100-8gpu-nv18-condensed.txt").read_text(encoding="utf-8")
    matrix = parse_topo_matrix(text.replace("0-51", "7" * 300 + "-23", 1))
    assert matrix.gpus[0].cpu_affinity is None
    assert matrix.gpus[1].cpu_affinity is not None


def test_an_nvidia_smi_mig_instance_id_no_instance_has_is_null() -> None:
    text = fixture_path("nvidia-smi-xml/a100-sxm4-80gb-mig-4x1g-driver535.xml").read_text(
        encoding="utf-8"
    )
    start = text.index("<gpu_instance_id>") + len("<gpu_instance_id>")
    end = text.index("</gpu_instance_id>", start)
    garbled = text[:start] + "18446744073709551615" + text[end:]
    instances = parse_nvidia_smi_xml(garbled).gpus[0].mig_instances
    assert instances is not None and instances[0]["gpu_instance_id"] is None
    assert all(i["gpu_instance_id"] is not None for i in instances[1:])
