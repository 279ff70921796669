"""Xid lines are read whatever prefix the kernel log reader put before them, and their time is
the one the prefix carries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agents.kernel.xid import join_records, parse_kernel_line, parse_kernel_log, parse_xid

NOW = datetime(2025, 1, 3, 12, 0, tzinfo=UTC)
BOOT = datetime(2025, 1, 2, 0, 0, tzinfo=UTC)
FALLEN = "gpu_fallen_off_bus"
XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus."


def _local(text: str) -> str:
    moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S").astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("line", "occurred_at"),
    [
        (f"6,1234,5678901,-;{XID79}", "2025-01-02T00:00:05.678Z"),
        (f"4,99,3600000000,-,caller=T123;{XID79}", "2025-01-02T01:00:00.000Z"),
        (f"[12345.678901] {XID79}", "2025-01-02T03:25:45.678Z"),
        (f"[    5.000100] {XID79}", "2025-01-02T00:00:05.000Z"),
        (f"2025-01-02T03:04:05,123456+00:00 {XID79}", "2025-01-02T03:04:05.123Z"),
        (f"kern  :warn  : 2025-01-02T03:04:05,123456+01:00 {XID79}", "2025-01-02T02:04:05.123Z"),
        (f"2025-01-02T03:04:05+0000 host kernel: {XID79}", "2025-01-02T03:04:05.000Z"),
        (f"Jan 02 03:04:05 gpu-a-017 kernel: {XID79}", _local("2025-01-02 03:04:05")),
        (
            f"Jan  2 03:04:05 gpu-a-017 kernel: [12345.678901] {XID79}",
            _local("2025-01-02 03:04:05"),
        ),
        (f"[Thu Jan  2 03:04:05 2025] {XID79}", _local("2025-01-02 03:04:05")),
        (f"kernel: {XID79}", "2025-01-03T12:00:00.000Z"),
        (XID79, "2025-01-03T12:00:00.000Z"),
    ],
)
def test_each_log_prefix_is_removed_and_its_time_used(line: str, occurred_at: str) -> None:
    event = parse_kernel_line(line, now=NOW, boot_time=BOOT)
    assert event == {
        "occurred_at": occurred_at,
        "kind": "xid",
        "gpu_uuid": None,
        "pci_bus_id": "00000000:18:00.0",
        "xid": 79,
        "message": XID79,
    }


def test_a_time_since_boot_without_the_boot_time_is_dated_now() -> None:
    event = parse_kernel_line(f"[12345.678901] {XID79}", now=NOW)
    assert event is not None
    assert event["occurred_at"] == "2025-01-03T12:00:00.000Z"


def test_a_december_syslog_line_read_in_january_belongs_to_last_year() -> None:
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    event = parse_kernel_line(f"Dec 31 12:00:00 host kernel: {XID79}", now=now)
    assert event is not None
    assert event["occurred_at"] == _local("2025-12-31 12:00:00")


@pytest.mark.parametrize(
    ("line", "xid", "bus"),
    [
        ("NVRM: Xid (0000:03:00): 13, 0002 00000000 0000a1c0 00000e00 00000003", 13, "03:00"),
        ("NVRM: Xid (PCI:18:00): 79, GPU has fallen off the bus.", 79, "18:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 64, pid='<unknown>', name=<unknown>, Dynamic Page "
         "Retirement: New page retired, reboot to activate (0x00000000000abcde).", 64, "3B:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 74, pid=1234, name=python, NVLink: fatal error detected "
         "on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", 74, "3B:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 95, pid=1234, name=python, Uncontained: FBHUB. RST: Yes, "
         "D-RST: No", 95, "3B:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 120, pid='<unknown>', name=<unknown>, GSP task timeout",
         120, "3B:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 140, pid='<unknown>', name=<unknown>, An uncorrectable "
         "ECC error detected", 140, "3B:00"),
        ("NVRM: Xid (PCI:0000:3b:00): 143, GPU Initialization Failure", 143, "3B:00"),
    ],
)  # fmt: skip
def test_xid_lines_of_old_and_new_drivers_give_code_and_nvml_bus_id(
    line: str, xid: int, bus: str
) -> None:
    event = parse_kernel_line(line, now=NOW)
    assert event is not None
    assert (event["kind"], event["xid"], event["pci_bus_id"]) == ("xid", xid, f"00000000:{bus}.0")


@pytest.mark.parametrize(
    "action", ["GPU Reset Required", "Node Reboot Required", "Drain P2P", "PF FLR"]
)
def test_xid_154_exposes_each_recovery_action(action: str) -> None:
    line = (
        "NVRM: Xid (PCI:0000:3b:00): 154, "
        f"GPU recovery action changed from 0x0 (None) to 0x1 ({action})"
    )
    details = parse_xid(line)
    assert details is not None
    assert (details.xid, details.recovery_action) == (154, action)
    event = parse_kernel_line(line, now=NOW)
    assert event is not None
    assert event["message"] == line


@pytest.mark.parametrize(
    ("line", "kind", "bus"),
    [
        ("NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.", FALLEN, "01:00.0"),
        ("NVRM: GPU at PCI:0000:1a:00: GPU has fallen off the bus.", FALLEN, "1A:00.0"),
        ("3,812,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: (PCI ID: 10de:26b5) "
         "installed in this system has\\x0aNVRM: fallen off the bus and is not responding to "
         "commands.\\x0a", FALLEN, "B3:00.0"),
        ("NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)", "gpu_lost", "09:00.0"),
    ],
)  # fmt: skip
def test_a_lost_gpu_without_xid_is_an_event_with_its_bus_id(line: str, kind: str, bus: str) -> None:
    event = parse_kernel_line(line, now=NOW, boot_time=BOOT)
    assert event is not None
    assert (event["kind"], event["xid"], event["pci_bus_id"]) == (kind, None, f"00000000:{bus}")


def test_the_kmsg_escaped_newlines_become_the_message_lines() -> None:
    record = "3,812,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: fallen off the bus."
    event = parse_kernel_line(record, now=NOW, boot_time=BOOT)
    assert event is not None
    assert event["message"] == "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: fallen off the bus."
    assert event["occurred_at"] == "2025-01-02T00:30:43.308Z"


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.133.20",
        "[    1.0] NVRM: GPU at PCI:0000:01:00: GPU-00000000-0000-0000-0000-000000000001",
        "NVRM: GPU Board Serial Number: 0",
        "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context",
        "Out of memory: Killed process 123, UID 48, (httpd)",
        "",
    ],
)
def test_other_kernel_lines_give_no_event(line: str) -> None:
    assert parse_kernel_line(line, now=NOW) is None


def test_the_same_xid_twice_is_two_events() -> None:
    events = parse_kernel_log([f"[1.0] {XID79}", f"[2.0] {XID79}"], now=NOW, boot_time=BOOT)
    assert [e["occurred_at"] for e in events] == [
        "2025-01-02T00:00:01.000Z",
        "2025-01-02T00:00:02.000Z",
    ]


def test_indented_lines_continue_their_record_and_kmsg_dictionary_lines_are_dropped() -> None:
    lines = [
        "6,1,10,-;NVRM: first",
        " SUBSYSTEM=pci",
        " DEVICE=+pci:0000:18:00.0",
        "[ 2.0] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "        NVRM: fallen off the bus.",
        "",
        "[ 3.0] last",
    ]
    assert list(join_records(lines)) == [
        "6,1,10,-;NVRM: first",
        "[ 2.0] NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: fallen off the bus.",
        "[ 3.0] last",
    ]
