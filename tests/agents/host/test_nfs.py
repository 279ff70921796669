"""NFS mountstats: v3, v4.0–4.2, RDMA with nconnect, UDP and the 64-bit rollover parse exactly;
the nfs_mounts entries keep 64-bit counters exact end to end and rates follow the wrap rule."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.host.mountstats import EVENT_FIELDS, parse_mountstats
from agents.host.nfs import NfsSource, mount_totals
from agents.payload import build_payload, encode_payload
from tests.agents.host.fakefs import proc_fixture, write_file

T0 = datetime(2026, 11, 29, 16, 0, 0, tzinfo=UTC)
NEAR_2_64 = 18446744073709551000


def test_one_client_with_v3_v40_v41_and_v42_mounts_gives_each_its_version() -> None:
    mounts = parse_mountstats(proc_fixture("mountstats-el8-nfsv3-v40-v41-v42-mix.txt"))
    assert [(m.export, m.mountpoint, m.version) for m in mounts] == [
        ("nfs-server-b:/exports", "/mnt/nfsv4.2", "4.2"),
        ("nfs-server-a:/exports", "/mnt/nfsv4.1", "4.1"),
        ("192.0.2.2:/exports", "/mnt/nfsv4.0", "4.0"),
        ("192.0.2.3:/exports", "/mnt/nfsv3", "3"),
    ]
    v42, v3 = mounts[0], mounts[3]
    assert (v42.statvers, v42.age_s, v42.options["proto"]) == ("1.1", 92, "tcp")
    assert len(v42.operations) == 61 and len(v3.operations) == 22
    assert v3.operations["WRITE"] == {
        "ops": 16,
        "transmissions": 16,
        "timeouts": 0,
        "bytes_sent": 2099456,
        "bytes_received": 2176,
        "queue_ms": 101,
        "rtt_ms": 81,
        "execute_ms": 183,
        "errors": 8,
    }
    assert v3.transports[0].protocol == "tcp"
    assert v3.transports[0].counters == {
        "port": 782, "bind_count": 1, "connect_count": 1, "connect_time_s": 0, "idle_time_s": 21,
        "sends": 23, "recvs": 23, "bad_xids": 0, "req_u": 42, "bklog_u": 0, "max_slots": 6,
        "sending_u": 28, "pending_u": 19,
    }  # fmt: skip
    assert list(v3.events) == list(EVENT_FIELDS)
    assert (v3.events["inode_revalidate"], v3.events["vfs_update_page"]) == (2, 256)
    assert mount_totals(v3) == {
        "read_bytes": 0,
        "write_bytes": 1048576,
        "ops": 42,
        "retransmits": 2,
        "data_ops": 16,
        "data_rtt_ms": 81,
    }


def test_nfs_over_rdma_with_nconnect_keeps_every_transport_and_exact_byte_counters(
    tmp_path: Path,
) -> None:
    mounts = parse_mountstats(proc_fixture("mountstats-el8.7-hpc-nfs-over-rdma.txt"))
    assert len(mounts) == 10
    assert {m.version for m in mounts} == {"3"}
    assert all(len(m.transports) == 8 for m in mounts)
    group = next(m for m in mounts if m.mountpoint == "/storage/group")
    assert group.options["nconnect"] == "8" and group.options["proto"] == "rdma"
    assert group.bytes == {
        "normal_read_bytes": 5990252963873,
        "normal_write_bytes": 271047280191,
        "direct_read_bytes": 0,
        "direct_write_bytes": 0,
        "server_read_bytes": 1730835995062,
        "server_write_bytes": 212213971093,
        "read_pages": 422603768,
        "write_pages": 51862807,
    }
    rdma = group.transports[0]
    assert rdma.protocol == "rdma" and len(rdma.counters) == 27
    assert (rdma.counters["connect_count"], rdma.counters["sends"]) == (111, 5001450)
    assert (rdma.counters["req_u"], rdma.counters["bklog_u"]) == (16468960, 244630485)
    assert rdma.counters["total_rdma_request"] == 216488884485
    assert mount_totals(group) == {
        "read_bytes": 1730835995062,
        "write_bytes": 212213971093,
        "ops": 40005576,
        "retransmits": 0,
        "data_ops": 39324437,
        "data_rtt_ms": 76434156,
    }
    write_file(tmp_path, "self/mountstats", proc_fixture("mountstats-el8.7-hpc-nfs-over-rdma.txt"))
    entries = NfsSource(tmp_path).collect(T0)["nfs_mounts"]
    assert [(e["mountpoint"], e["read_bytes"]) for e in entries] == [
        ("/storage/group", 1730835995062),
        ("/storage/home", 13941630626),
        ("/storage/icds", 3117996888),
        ("/storage/work", 23191576124),
        ("/storage/prod", 317803),
        ("/storage/test", 0),
        ("/storage/pcp-data", 1319950703),
    ]


def test_a_nas_client_on_statvers_1_0_per_op_lines_counts_retransmits(tmp_path: Path) -> None:
    mounts = parse_mountstats(proc_fixture("mountstats-nas-nfsv3-10-mounts.txt"))
    assert len(mounts) == 10
    music = mounts[0]
    assert (music.export, music.mountpoint) == (
        "nas-server:/share/MD0_DATA/music",
        "/nas-server/music",
    )
    assert music.operations["GETATTR"] == {
        "ops": 4125,
        "transmissions": 4322,
        "timeouts": 1,
        "bytes_sent": 467292,
        "bytes_received": 461888,
        "queue_ms": 310200,
        "rtt_ms": 37328,
        "execute_ms": 347664,
    }
    write_file(tmp_path, "self/mountstats", proc_fixture("mountstats-nas-nfsv3-10-mounts.txt"))
    entry = NfsSource(tmp_path).collect(T0)["nfs_mounts"][0]
    assert (entry["ops"], entry["retransmits"], entry["read_bytes"]) == (13227, 206, 167)


def test_the_rollover_fixture_keeps_the_wrapped_64_bit_counter_exact(tmp_path: Path) -> None:
    text = proc_fixture("mountstats-nfs4-nfs3-udp-rollover.txt")
    mounts = parse_mountstats(text)
    assert [(m.mountpoint, m.fstype, m.version) for m in mounts] == [
        ("/mnt/nfs/test", "nfs4", "4.0"),
        ("/mnt/nfs/test-dupe", "nfs4", "4.0"),
        ("/mnt/nfs/test-dupe", "nfs", "3"),
    ]
    access = mounts[1].operations["ACCESS"]
    assert access["queue_ms"] == 18446743919241604546
    assert (access["ops"], access["transmissions"]) == (2927395007, 2927394995)
    assert mounts[2].transports[0].protocol == "udp"
    assert mounts[2].transports[0].counters == {
        "port": 832, "bind_count": 0, "sends": 6428, "recvs": 6428, "bad_xids": 0,
        "req_u": 12154, "bklog_u": 0, "max_slots": 24, "sending_u": 26, "pending_u": 5726,
    }  # fmt: skip
    write_file(tmp_path, "self/mountstats", text)
    entries = NfsSource(tmp_path).collect(T0)["nfs_mounts"]
    # test-dupe was mounted over: the v3 mount on top is the one that is reported.
    assert [(e["mountpoint"], e["version"], e["ops"], e["retransmits"]) for e in entries] == [
        ("/mnt/nfs/test", "4.0", 1298, 0),
        ("/mnt/nfs/test-dupe", "3", 2927396305, 0),
    ]
    assert entries[0]["read_bytes"] == 1210214218


def _mountstats(read_bytes: int, read_ops: int, read_trans: int, read_rtt: int, other: int) -> str:
    return (
        "device rootfs mounted on / with fstype rootfs\n"
        "device nfs-server-a:/export/home mounted on /home with fstype nfs4 statvers=1.1\n"
        "\topts:\trw,vers=4.2,proto=tcp\n"
        f"\tbytes:\t0 0 0 0 {read_bytes} 1234 0 0\n"
        "\tper-op statistics\n"
        f"\t        READ: {read_ops} {read_trans} 0 0 0 0 {read_rtt} 0 0\n"
        "\t       WRITE: 10 10 0 0 0 0 10 0 0\n"
        f"\t     GETATTR: {other} {other} 0 0 0 0 {other * 100} 0 0\n"
    )


def _collect(source: NfsSource, procfs: Path, text: str, seconds: int) -> dict[str, object]:
    write_file(procfs, "self/mountstats", text)
    return source.collect(T0 + timedelta(seconds=seconds))["nfs_mounts"][0]


def test_rates_come_from_two_readings_and_rtt_averages_read_and_write_only(tmp_path: Path) -> None:
    source = NfsSource(tmp_path)
    first = _collect(source, tmp_path, _mountstats(NEAR_2_64 - 10**8, 100, 100, 50, 5), 0)
    assert first == {
        "sampled_at": "2026-11-29T16:00:00.000Z",
        "mountpoint": "/home",
        "export": "nfs-server-a:/export/home",
        "version": "4.2",
        "read_bytes": NEAR_2_64 - 10**8,
        "write_bytes": 1234,
        "ops": 115,
        "retransmits": 0,
        "read_bytes_per_s": None,
        "write_bytes_per_s": None,
        "ops_per_s": None,
        "retransmits_per_s": None,
        "avg_rtt_s": None,
    }
    second = _collect(source, tmp_path, _mountstats(NEAR_2_64, 120, 123, 80, 30), 10)
    assert second["read_bytes"] == NEAR_2_64
    assert (second["ops"], second["retransmits"]) == (160, 3)
    assert (second["read_bytes_per_s"], second["write_bytes_per_s"]) == (10_000_000.0, 0.0)
    assert (second["ops_per_s"], second["retransmits_per_s"]) == (4.5, 0.3)
    assert second["avg_rtt_s"] == 0.0015


def test_a_64_bit_rollover_nulls_the_interval_and_counters_stay_exact_in_json(
    tmp_path: Path,
) -> None:
    source = NfsSource(tmp_path)
    _collect(source, tmp_path, _mountstats(NEAR_2_64, 100, 100, 50, 5), 0)
    wrapped = _collect(source, tmp_path, _mountstats(500, 120, 120, 80, 5), 10)
    assert wrapped["read_bytes"] == 500
    rates = ("read_bytes_per_s", "write_bytes_per_s", "ops_per_s", "retransmits_per_s")
    assert [wrapped[k] for k in (*rates, "avg_rtt_s")] == [None] * 5
    write_file(tmp_path, "self/mountstats", _mountstats(NEAR_2_64, 1, 1, 1, 1))
    section = source.collect(T0)
    payload = build_payload({"hostname": "gpu-a-017"}, [], [], [], sections=section)
    decoded = json.loads(encode_payload(payload))
    assert decoded["nfs_mounts"][0]["read_bytes"] == NEAR_2_64
    assert b"18446744073709551000" in encode_payload(payload)


def test_a_containerised_agent_reads_the_mountstats_of_pid_1(tmp_path: Path) -> None:
    write_file(tmp_path, "1/mountstats", _mountstats(7, 1, 1, 1, 1))
    [entry] = NfsSource(tmp_path, pid="1").collect(T0)["nfs_mounts"]
    assert (entry["mountpoint"], entry["read_bytes"]) == ("/home", 7)


def test_rpc_retransmissions_come_from_proc_net_rpc_nfs(tmp_path: Path) -> None:
    source = NfsSource(tmp_path)
    assert source.rpc_retransmissions() is None
    write_file(tmp_path, "net/rpc/nfs", proc_fixture("proc-net-rpc-nfs-client.txt"))
    assert source.rpc_retransmissions() == 374636


def test_a_mount_point_longer_than_the_server_accepts_is_left_out_with_an_error(
    tmp_path: Path,
) -> None:
    long_point = "/mnt/" + "x" * 600
    text = _mountstats(1, 1, 1, 1, 1).replace("/home", long_point) + _mountstats(1, 1, 1, 1, 1)
    source = NfsSource(tmp_path)
    write_file(tmp_path, "self/mountstats", text)
    assert [e["mountpoint"] for e in source.collect(T0)["nfs_mounts"]] == ["/home"]
    [error] = source.collection_errors()
    assert error["message"].endswith("mountpoint too long, left out")


def test_a_missing_mountstats_is_a_collection_error(tmp_path: Path) -> None:
    source = NfsSource(tmp_path)
    assert source.collect(T0) == {}
    [error] = source.collection_errors()
    assert error["source"] == "nfs" and "mountstats" in error["message"]


def test_lines_with_fewer_or_extra_fields_are_tolerated() -> None:
    text = (
        "device srv:/x mounted on /x with fstype nfs\n"
        "\topts:\tvers=4,minorversion=1\n"
        "\tbytes:\t1 2 3\n"
        "\txprt:\ttcp 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"
        "\tper-op statistics\n"
        "\t        READ: 5 6 0 1 2 3 4 5 6 7 8 9\n"
        "\t       WRITE: 5 6\n"
    )
    [mount] = parse_mountstats(text)
    assert (mount.version, mount.statvers, mount.bytes) == (
        "4.1",
        None,
        {"normal_read_bytes": 1, "normal_write_bytes": 2, "direct_read_bytes": 3},
    )
    assert len(mount.transports[0].counters) == 13
    assert len(mount.operations["READ"]) == 9
    assert mount.operations["WRITE"] == {"ops": 5, "transmissions": 6}
    assert mount_totals(mount) == {
        "read_bytes": None,
        "write_bytes": None,
        "ops": 10,
        "retransmits": 2,
        "data_ops": None,
        "data_rtt_ms": None,
    }
