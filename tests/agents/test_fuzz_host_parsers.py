"""Fuzzing the agent's host and kernel-log readers with mutated real captures (issue 14): kernel
log and ``/dev/kmsg`` Xid lines, ``/proc/diskstats``, ``/proc/self/mountstats``, ``mountinfo``,
``/proc/net/*``, ``ibstat``/``ibstatus`` and the ``/sys/class/infiniband`` counters. No
exception escapes; a source reading a bad file gives entries and events the server takes as
they are (checked against the ingest models) or a collection error naming the source.
Profiles and mutations: ``tests/fuzzing.py``."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import given

from agents.host.diskstats import DiskStatsSource, parse_diskstats
from agents.host.ibtools import parse_ibstat, parse_ibstatus
from agents.host.infiniband import InfinibandSource
from agents.host.mountinfo import parse_mountinfo
from agents.host.mountstats import parse_mountstats
from agents.host.nfs import NfsSource
from agents.host.procnet import parse_net_pairs, parse_rpc_nfs
from agents.kernel.kmsg import KmsgSource
from agents.kernel.xid import parse_kernel_log
from app.ingest.schemas import EventIn
from app.nics.schemas import NicPortIn
from app.storage.schemas import DiskIn, NfsMountIn
from tests.fuzzing import Mutation, as_text, captures, mutate, mutated, mutations

NOW = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=10)


def _server_takes(model: Any, entry: dict[str, Any]) -> None:
    """``entry`` passes the server's model as sent, and its numbers are finite."""
    model.model_validate(entry)
    for key, value in entry.items():
        if isinstance(value, float):
            assert math.isfinite(value), (key, value)


def _fresh(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir(parents=True, exist_ok=True)
    return root


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _errors_name(source: Any, name: str) -> None:
    for error in source.collection_errors():
        assert error["source"] == name and error["message"], error


@given(captures("xid"), mutations)
def test_fuzz_kernel_log_gives_events_the_server_takes(
    tmp_path: Path, name: str, changes: list[Mutation]
) -> None:
    data = mutated("xid", name, changes)
    for event in parse_kernel_log(as_text(data).splitlines(), now=NOW, boot_time=NOW):
        _server_takes(EventIn, dict(event))
    log = _fresh(tmp_path, "kmsg") / "kern.log"
    _write(log, data)
    source = KmsgSource(log, from_start=True, procfs=tmp_path / "no-proc")
    try:
        source.collect(NOW)
        for event in source.drain_events():
            _server_takes(EventIn, dict(event))
        _errors_name(source, "kmsg")
    finally:
        source.close()


@given(captures("proc", contains="diskstats"), mutations)
def test_fuzz_diskstats_gives_disks_the_server_takes(
    tmp_path: Path, name: str, changes: list[Mutation]
) -> None:
    data = mutated("proc", name, changes)
    parse_diskstats(as_text(data))
    procfs = _fresh(tmp_path, "proc")
    source = DiskStatsSource(procfs)
    _write(procfs / "diskstats", mutated("proc", name, []))
    source.collect(NOW)
    _write(procfs / "diskstats", data)
    for entry in source.collect(LATER).get("disks", []):
        _server_takes(DiskIn, entry)
    _errors_name(source, "diskstats")


@given(captures("proc", contains="mountstats"), mutations)
def test_fuzz_mountstats_gives_nfs_mounts_the_server_takes(
    tmp_path: Path, name: str, changes: list[Mutation]
) -> None:
    data = mutated("proc", name, changes)
    parse_mountstats(as_text(data))
    procfs = _fresh(tmp_path, "proc")
    source = NfsSource(procfs)
    _write(procfs / "self" / "mountstats", mutated("proc", name, []))
    source.collect(NOW)
    _write(procfs / "self" / "mountstats", data)
    for entry in source.collect(LATER).get("nfs_mounts", []):
        _server_takes(NfsMountIn, entry)
    _errors_name(source, "nfs")
    source.rpc_retransmissions()


@given(captures("proc"), mutations)
def test_fuzz_the_other_proc_parsers_never_raise(name: str, changes: list[Mutation]) -> None:
    text = as_text(mutated("proc", name, changes))
    parse_mountinfo(text)
    parse_net_pairs(text)
    parse_rpc_nfs(text)
    for port in [*parse_ibstat(text), *parse_ibstatus(text)]:
        assert isinstance(port.port, int)
        assert port.rate_gbps is None or math.isfinite(port.rate_gbps)


def _sysfs_from_listing(listing: bytes, root: Path) -> Path:
    """A fake sysfs from a ``grep . /sys/class/infiniband/…`` listing (``path:value`` lines);
    lines whose mutated path no file can have are skipped."""
    for line in listing.split(b"\n"):
        path, colon, value = line.partition(b":")
        if not (colon and path.startswith(b"/sys/")) or b"\x00" in path or b"/.." in path:
            continue
        target = root / path.decode("utf-8", errors="replace").lstrip("/")
        try:
            _write(target, value + b"\n")
        except (OSError, ValueError):
            continue
    return root / "sys"


def _two_devices(listing: bytes) -> bytes:
    """The listing's lines of its first two devices (files are slow to write; two devices have
    every kind of file the others have)."""
    devices = []
    kept = []
    for line in listing.split(b"\n"):
        device = line.split(b"/")[4] if line.count(b"/") > 4 else b""
        if device not in devices:
            devices.append(device)
        if devices.index(device) < 2:
            kept.append(line)
    return b"\n".join(kept)


@given(captures("proc", contains="sys-class-infiniband"), mutations)
def test_fuzz_infiniband_sysfs_gives_ports_the_server_takes(
    tmp_path: Path, name: str, changes: list[Mutation]
) -> None:
    listing = _two_devices(mutated("proc", name, []))
    first = _sysfs_from_listing(listing, _fresh(tmp_path, "before"))
    source = InfinibandSource(first)
    source.collect(NOW)
    after = _fresh(tmp_path, "after")
    shutil.rmtree(after)
    source.sysfs = _sysfs_from_listing(mutate(listing, changes), after)
    for entry in source.collect(LATER).get("nic_ports", []):
        _server_takes(NicPortIn, entry)
    _errors_name(source, "infiniband")
