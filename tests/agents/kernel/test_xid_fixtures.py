"""Every captured kernel log gives exactly the Xid and lost-GPU events it holds, one per line."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from agents.kernel.xid import XidDetails, parse_kernel_log, parse_xid
from agents.payload import EventDict
from tests.shared_fixtures import fixture_names, fixture_path

NOW = datetime(2025, 6, 1, tzinfo=UTC)
BOOT = datetime(2025, 5, 1, tzinfo=UTC)
B01 = "00000000:01:00.0"


def _events(name: str) -> list[EventDict]:
    lines = fixture_path(f"xid/{name}").read_text(encoding="utf-8").splitlines()
    return parse_kernel_log(lines, now=NOW, boot_time=BOOT)


def _xid(event: EventDict) -> XidDetails:
    details = parse_xid(event["message"] or "")
    assert details is not None
    return details


def _local(text: str) -> str:
    """``dmesg -T`` and journal times are the machine's local time."""
    moment = datetime.strptime(text, "%Y-%m-%d %H:%M:%S").astimezone(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


# Per capture: the (kind, xid, pci_bus_id) of each event in order.
EXPECTED: dict[str, Sequence[tuple[str, int | None, str]]] = {
    "fallen-off-bus-multiline-no-xid-probe-failed.log": [
        ("gpu_fallen_off_bus", None, "00000000:B3:00.0")
    ],
    "h100-xe9680-xid119-gsp-rpc-timeout-dmesg.log": [("xid", 119, "00000000:9B:00.0")] * 5,
    "rtx4090-xid31-mmu-fault-host0-with-uuid-serial-lines.log": [("xid", 31, B01)] * 2,
    "rtx5070ti-xid31-new-channel-format-serial-zero.log": [("xid", 31, B01)],
    "rtx5080-after-xid79-rm-init-adapter-failed-journal.log": [
        ("gpu_lost", None, "00000000:09:00.0")
    ]
    * 2,
    "xid13-sm-warp-exception-storm-dmesg-iso.log": [("xid", 13, "00000000:38:00.0")] * 16
    + [("xid", 43, "00000000:38:00.0")],
    "xid144-145-149-nvlink5-subcodes-nonzero-pci-domain.log": [
        ("xid", 144, B01),
        ("xid", 149, "00000000:00:00.0"),
        ("xid", 149, "00000000:00:00.0"),
        ("xid", 149, "00000019:01:00.0"),
        ("xid", 145, "00000018:01:00.0"),
    ],
    "xid45-caused-by-previous-xid145-149-nvlink.log": [
        ("xid", 45, f"00000000:{bus}:00.0") for bus in ("DC", "ED", "BA", "97", "DC", "BA", "ED")
    ],
    "xid48-dbe-63-row-remap-94-contained-dmesg.log": [
        ("xid", 48, "00000000:19:00.0"),
        ("xid", 63, "00000000:19:00.0"),
    ]
    + [("xid", 94, "00000000:19:00.0")] * 9,
    "xid51-bad-tsg-then-xid154-pf-flr-reset-required.log": [
        ("xid", 51, "00000000:0D:00.0"),
        ("xid", 154, "00000000:0D:00.0"),
    ],
    "xid63-row-remapper-a100.log": [("xid", 63, "00000000:10:1C.0")],
    "xid79-fallen-off-bus-then-xid154-os-reboot-gpu-is-lost.log": [
        ("xid", 79, B01),
        ("gpu_fallen_off_bus", None, B01),
        ("xid", 154, B01),
    ],
}


def test_every_captured_kernel_log_has_its_expectations() -> None:
    assert set(fixture_names("xid")) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_capture_gives_one_event_per_occurrence(name: str) -> None:
    events = _events(name)
    assert [(e["kind"], e["xid"], e["pci_bus_id"]) for e in events] == EXPECTED[name]
    assert all(e["gpu_uuid"] is None for e in events)
    assert all(e["message"] and e["message"].startswith("NVRM: ") for e in events)


def test_a_gpu_that_falls_off_the_bus_at_probe_time_gives_one_event_from_three_lines() -> None:
    (event,) = _events("fallen-off-bus-multiline-no-xid-probe-failed.log")
    assert event["message"] == (
        "NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "NVRM: fallen off the bus and is not responding to commands."
    )
    assert event["occurred_at"] == "2025-05-01T00:30:43.308Z"  # boot + 1843.308145 s


def test_dmesg_human_times_are_read_as_local_time() -> None:
    events = _events("h100-xe9680-xid119-gsp-rpc-timeout-dmesg.log")
    assert [e["occurred_at"] for e in events] == [
        _local(f"2025-02-23 {t}")
        for t in ("16:24:18", "16:24:24", "16:24:30", "16:27:12", "16:30:13")
    ]
    assert [_xid(e).pid for e in events] == [
        2024380, 2024380, 2024380, 1263500, 1240590
    ]  # fmt: skip


def test_journal_lines_keep_the_adapter_error_and_take_the_year_of_now() -> None:
    events = _events("rtx5080-after-xid79-rm-init-adapter-failed-journal.log")
    assert events[0]["message"] == "NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)"
    assert events[0]["occurred_at"] == _local("2025-05-27 16:50:10")


def test_iso_times_of_dmesg_decode_are_kept_to_the_millisecond() -> None:
    events = _events("xid13-sm-warp-exception-storm-dmesg-iso.log")
    assert events[0]["occurred_at"] == "2025-01-21T04:41:44.283Z"
    assert events[-1]["message"] == (
        "NVRM: Xid (PCI:0000:38:00): 43, pid=2924364, name=pt_main_thread, Ch 00000008"
    )
    details = _xid(events[0])
    assert (details.pid, details.process_name) == (None, None)
    assert (
        details.text == "Graphics SM Global Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors"
    )


def _details(name: str) -> list[XidDetails]:
    return [_xid(event) for event in _events(name)]


def test_xid_31_channel_is_read_in_the_old_and_the_new_format() -> None:
    (old, _) = _details("rtx4090-xid31-mmu-fault-host0-with-uuid-serial-lines.log")
    (new,) = _details("rtx5070ti-xid31-new-channel-format-serial-zero.log")
    assert (old.pid, old.process_name, old.channel) == (14292, "python", "00000030")
    assert (new.pid, new.process_name, new.channel) == (13705, "UnrealEditor", "0x0000000c")
    assert new.text.startswith("intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2")


def test_nvlink5_xids_expose_severity_and_link() -> None:
    details = _details("xid144-145-149-nvlink5-subcodes-nonzero-pci-domain.log")
    assert [(d.xid, d.severity, d.link) for d in details] == [
        (144, "Nonfatal", 0),
        (149, "Fatal", 0),
        (149, "Fatal", 0),
        (149, "Fatal", -1),
        (145, "Nonfatal", 13),
    ]


def test_xid_45_names_the_nvlink_xid_that_caused_it() -> None:
    details = _details("xid45-caused-by-previous-xid145-149-nvlink.log")
    assert [d.caused_by_xid for d in details] == [149, 145, 145, 145, 149, 145, 145]
    assert details[1].channel == "0000000c"


def test_xid_154_keeps_the_recovery_action_in_the_message_and_exposes_it() -> None:
    flr = _events("xid51-bad-tsg-then-xid154-pf-flr-reset-required.log")[1]
    reboot = _events("xid79-fallen-off-bus-then-xid154-os-reboot-gpu-is-lost.log")[2]
    assert flr["message"] == (
        "NVRM: Xid (PCI:0000:0d:00): 154, "
        "GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)"
    )
    assert _xid(flr).recovery_action == "PF FLR"
    assert _xid(reboot).recovery_action == "OS Reboot"


def test_xid_48_63_94_come_in_order_with_their_process() -> None:
    details = _details("xid48-dbe-63-row-remap-94-contained-dmesg.log")
    assert (
        details[1].text
        == "Row Remapper: New row (0x00000012bac1c3e0) marked for remapping, reset gpu to activate."
    )
    assert details[2].text == "Contained: SM (0x1). RST: No, D-RST: No"
    assert [(d.process_name, d.channel) for d in details[3:5]] == [
        ("python3.10", "00000008"),
        ("python3.10", "00000009"),
    ]


def test_a_line_without_timestamp_is_dated_now() -> None:
    (event,) = _events("xid63-row-remapper-a100.log")
    assert event["occurred_at"] == "2025-06-01T00:00:00.000Z"
    assert _xid(event).pid == 1896
