"""The kernel log source sends only new NVRM lines as events, survives an unreadable
``/dev/kmsg`` and lost records, and follows a log file through truncation and rotation."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.kernel.kmsg import DevKmsgReader, KmsgSource
from tests.shared_fixtures import fixture_path

XID79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus."
XID13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception"


@pytest.fixture
def opened() -> Iterator[list[KmsgSource]]:
    """Sources a test registers here are closed after it, passed or failed."""
    sources: list[KmsgSource] = []
    yield sources
    for source in sources:
        source.close()


def _procfs(tmp_path: Path, btime: int | None = 1735776000) -> Path:
    """A ``/proc`` whose ``stat`` says the machine booted at 2025-01-02T00:00:00Z."""
    proc = tmp_path / "proc"
    proc.mkdir()
    lines = ["cpu  1 2 3 4", "intr 0", "ctxt 1"] + ([] if btime is None else [f"btime {btime}"])
    (proc / "stat").write_text("\n".join(lines) + "\n", encoding="ascii")
    return proc


class ScriptedRead:
    """Stands in for ``os.read`` on ``/dev/kmsg``: one record or error per call, then EAGAIN."""

    def __init__(self, *steps: bytes | OSError) -> None:
        self.steps = list(steps)

    def __call__(self, fd: int, size: int) -> bytes:
        if not self.steps:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        step = self.steps.pop(0)
        if isinstance(step, OSError):
            raise step
        return step


def _keep(opened: list[KmsgSource], source: KmsgSource) -> KmsgSource:
    opened.append(source)
    return source


def _device(tmp_path: Path, content: str = "") -> Path:
    device = tmp_path / "kmsg"
    device.write_text(content, encoding="utf-8")
    return device


def test_kmsg_records_become_events_dated_from_the_boot_time(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    read = ScriptedRead(
        f"6,100,5678901,-;{XID79}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n".encode(),
        b"6,101,5700000,-;usb 1-1: new high-speed USB device\n",
        f"4,102,7000000,-;{XID13}\n".encode(),
    )
    reader = DevKmsgReader(_device(tmp_path), read=read)
    source = _keep(opened, KmsgSource(procfs=_procfs(tmp_path), reader=reader))
    events = source.drain_events()
    assert [(e["kind"], e["xid"], e["pci_bus_id"], e["occurred_at"]) for e in events] == [
        ("xid", 79, "00000000:18:00.0", "2025-01-02T00:00:05.678Z"),
        ("xid", 13, "00000000:3B:00.0", "2025-01-02T00:00:07.000Z"),
    ]
    assert events[0]["message"] == XID79
    assert source.drain_events() == []
    assert source.collection_errors() == []


def test_overwritten_records_are_counted_and_reading_goes_on(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    read = ScriptedRead(
        BrokenPipeError(errno.EPIPE, "Broken pipe"),
        f"6,900,1000000,-;{XID79}\n".encode(),
        BrokenPipeError(errno.EPIPE, "Broken pipe"),
    )
    reader = DevKmsgReader(_device(tmp_path), read=read)
    source = _keep(opened, KmsgSource(procfs=_procfs(tmp_path), reader=reader))
    assert [e["xid"] for e in source.drain_events()] == [79]
    assert reader.overwritten == 2
    assert source.collection_errors() == [
        {"source": "kmsg", "message": "2 kernel log gap(s): records overwritten before being read"}
    ]
    source.drain_events()
    assert source.collection_errors() == []


def test_history_already_in_the_kernel_log_is_not_sent_again(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    device = _device(tmp_path, f"6,1,1000000,-;{XID79}\n")
    source = _keep(opened, KmsgSource(device=device, procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    with device.open("a", encoding="utf-8") as log:
        log.write(f"6,2,2000000,-;{XID13}\n")
    assert [e["xid"] for e in source.drain_events()] == [13]


class DeniedReader(DevKmsgReader):
    """``/dev/kmsg`` in a container without ``CAP_SYSLOG``."""

    def poll(self, limit: int = 10_000) -> list[str]:
        raise PermissionError(errno.EPERM, "Operation not permitted")


def test_an_unreadable_dev_kmsg_is_one_collection_error_not_a_crash(tmp_path: Path) -> None:
    source = KmsgSource(procfs=_procfs(tmp_path), reader=DeniedReader(Path("/dev/kmsg")))
    assert source.drain_events() == []
    assert source.drain_events() == []
    assert source.collection_errors() == [
        {
            "source": "kmsg",
            "message": "cannot read /dev/kmsg: Operation not permitted; no Xid events",
        }
    ]
    assert source.collection_errors() == []


def test_a_missing_device_is_reported_with_its_path(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    source = _keep(opened, KmsgSource(device=tmp_path / "absent", procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    (error,) = source.collection_errors()
    assert error["message"] == (
        f"cannot read {tmp_path / 'absent'}: No such file or directory; no Xid events"
    )


def test_without_btime_times_since_boot_are_dated_now_and_reported_once(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    read = ScriptedRead(f"6,1,1000000,-;{XID79}\n".encode(), f"6,2,2000000,-;{XID79}\n".encode())
    reader = DevKmsgReader(_device(tmp_path), read=read)
    source = _keep(opened, KmsgSource(procfs=_procfs(tmp_path, btime=None), reader=reader))
    assert len(source.drain_events()) == 2
    (error,) = source.collection_errors()
    assert error["message"].startswith(f"no btime in {tmp_path / 'proc' / 'stat'}")


def test_a_followed_file_sends_only_lines_written_after_start(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(f"[1.0] {XID79}\n", encoding="utf-8")
    source = _keep(opened, KmsgSource(log, procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    with log.open("a", encoding="utf-8") as out:
        out.write(f"[2.5] {XID13}\n[3.0] {XID79[:20]}")
    assert [(e["xid"], e["occurred_at"]) for e in source.drain_events()] == [
        (13, "2025-01-02T00:00:02.500Z")
    ]
    with log.open("a", encoding="utf-8") as out:
        out.write(XID79[20:] + "\n")
    assert [e["xid"] for e in source.drain_events()] == [79]


def test_a_followed_file_is_read_again_from_the_start_after_truncation(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(f"[1.0] {XID79}\n[1.1] {XID79}\n", encoding="utf-8")
    source = _keep(opened, KmsgSource(log, procfs=_procfs(tmp_path)))
    source.drain_events()
    log.write_text(f"[9.0] {XID13}\n", encoding="utf-8")  # copytruncate, then a new line
    assert [e["xid"] for e in source.drain_events()] == [13]


def test_a_rotated_file_is_read_to_its_end_then_the_new_one_from_its_start(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    log = tmp_path / "kern.log"
    log.write_text("", encoding="utf-8")
    source = _keep(opened, KmsgSource(log, procfs=_procfs(tmp_path)))
    source.drain_events()
    with log.open("a", encoding="utf-8") as out:
        out.write(f"[1.0] {XID79}\n")
    log.rename(tmp_path / "kern.log.1")
    assert [e["xid"] for e in source.drain_events()] == [79]  # new file not there yet
    log.write_text(f"[2.0] {XID13}\n[3.0] {XID79}\n", encoding="utf-8")
    assert [e["xid"] for e in source.drain_events()] == [13, 79]
    assert source.collection_errors() == []


def test_a_file_that_appears_later_is_read_from_its_start(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    log = tmp_path / "kern.log"
    source = _keep(opened, KmsgSource(log, procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    assert len(source.collection_errors()) == 1
    log.write_text(f"[1.0] {XID79}\n", encoding="utf-8")
    assert [e["xid"] for e in source.drain_events()] == [79]


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("xid48-dbe-63-row-remap-94-contained-dmesg.log", 11),
        ("xid13-sm-warp-exception-storm-dmesg-iso.log", 17),
    ],
)
def test_a_captured_log_replayed_from_its_start_gives_all_its_events(
    tmp_path: Path, name: str, count: int, opened: list[KmsgSource]
) -> None:
    source = _keep(
        opened, KmsgSource(fixture_path(f"xid/{name}"), from_start=True, procfs=_procfs(tmp_path))
    )
    assert len(source.drain_events()) == count
    assert source.drain_events() == []


def test_an_nvrm_line_is_urgent_between_rounds_and_its_event_is_drained_once(
    tmp_path: Path, opened: list[KmsgSource]
) -> None:
    log_file = tmp_path / "kern.log"
    log_file.write_text("", encoding="utf-8")
    source = _keep(opened, KmsgSource(log_file, procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    with log_file.open("a", encoding="utf-8") as out:
        out.write("usb 1-1: new high-speed USB device number 2\n")
    assert source.urgent_pending() is False

    with log_file.open("a", encoding="utf-8") as out:
        out.write(XID79 + "\n")

    assert source.urgent_pending() is True
    with log_file.open("a", encoding="utf-8") as out:
        out.write(XID13 + "\n")
    events = source.drain_events()
    assert [e["xid"] for e in events if e["kind"] == "xid"] == [79, 13]
    assert source.drain_events() == []
    assert source.urgent_pending() is False


def test_a_flood_read_early_and_at_the_round_stays_within_one_batchs_event_limit(
    tmp_path: Path, opened: list[KmsgSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("agents.kernel.kmsg.MAX_RECORDS", 50)
    log_file = tmp_path / "kern.log"
    log_file.write_text("", encoding="utf-8")
    source = _keep(opened, KmsgSource(log_file, procfs=_procfs(tmp_path)))
    assert source.drain_events() == []
    with log_file.open("a", encoding="utf-8") as out:
        out.write((XID13 + "\n") * 120)

    assert source.urgent_pending() is True
    assert source.urgent_pending() is True

    rounds = [len(source.drain_events()) for _ in range(4)]
    assert rounds == [50, 50, 20, 0]  # nothing lost, never more than the limit per round
