"""Factories for the node sections of an ingest payload (docs/ingest.md, "Node sections"):
an HGX-like node with NVLinks, NVMe disks, mounts, an NFS home, InfiniBand ports, a topology,
MIG instances and processes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.factories import iso

NFS_READ_BYTES = 18446744073709551000  # above 2**63: exact only as NUMERIC / text


def nvlinks(gpu_entry: dict[str, Any], at: datetime, *, links: int = 18, **over: Any) -> list[dict]:
    """``links`` up links of ``gpu_entry`` to NVSwitches, each overridable by ``over``."""
    return [
        {
            "gpu_uuid": gpu_entry["uuid"],
            "link": link,
            "sampled_at": iso(at),
            "state": "up",
            "speed_gbps": 26.562,
            "remote_pci_bus_id": f"00000000:{0xC7 + link % 4:02X}:00.0",
            "remote_device_type": "nvswitch",
            "tx_bytes_per_s": 1.25e9,
            "rx_bytes_per_s": 1.5e9,
            "crc_errors": 0,
            "replay_errors": 0,
            "recovery_errors": 0,
            **over,
        }
        for link in range(links)
    ]


def disk(at: datetime, device: str = "nvme0n1", **over: Any) -> dict[str, Any]:
    """A busy NVMe disk."""
    return {
        "sampled_at": iso(at),
        "device": device,
        "read_bytes_per_s": 1.5e8,
        "write_bytes_per_s": 2.0e7,
        "read_iops": 1200.0,
        "write_iops": 80.5,
        "busy_pct": 35.2,
        "avg_wait_s": 0.0004,
        **over,
    }


def mount(at: datetime, mountpoint: str = "/data", **over: Any) -> dict[str, Any]:
    """An XFS filesystem at ``mountpoint``, 1.2 of 7.6 TB used."""
    return {
        "sampled_at": iso(at),
        "mountpoint": mountpoint,
        "device": "/dev/md0",
        "fstype": "xfs",
        "used_bytes": 1_200_000_000_000,
        "total_bytes": 7_600_000_000_000,
        **over,
    }


def nfs_mount(at: datetime, **over: Any) -> dict[str, Any]:
    """/home over NFS 4.2, with a read counter above 2**63."""
    return {
        "sampled_at": iso(at),
        "mountpoint": "/home",
        "export": "nfs-server-a:/export/home",
        "version": "4.2",
        "read_bytes": NFS_READ_BYTES,
        "write_bytes": 1234,
        "ops": 99182,
        "retransmits": 3,
        "read_bytes_per_s": 5.2e6,
        "write_bytes_per_s": 0.0,
        "ops_per_s": 12.5,
        "retransmits_per_s": 0.0,
        "avg_rtt_s": 0.0008,
        **over,
    }


def nic_port(at: datetime, device: str = "mlx5_0", **over: Any) -> dict[str, Any]:
    """An active 400 Gb/s InfiniBand port."""
    return {
        "sampled_at": iso(at),
        "device": device,
        "port": 1,
        "link_layer": "InfiniBand",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate_gbps": 400.0,
        "tx_bytes_per_s": 3.1e9,
        "rx_bytes_per_s": 2.9e9,
        "symbol_error_count": 0,
        "link_downed_count": 0,
        "link_error_recovery_count": 0,
        "port_rcv_errors_count": 0,
        "port_xmit_discards_count": 0,
        **over,
    }


def topology(
    gpu_entries: list[dict[str, Any]], at: datetime, *, nvlinks_per_pair: int = 18, **over: Any
) -> dict[str, Any]:
    """An HGX topology: every GPU pair ``NV<nvlinks_per_pair>``, one NIC next to GPU 0."""
    half = max(1, len(gpu_entries) // 2)
    devices: list[dict[str, Any]] = [
        {
            "id": f"GPU{g['index']}",
            "kind": "gpu",
            "gpu_uuid": g["uuid"],
            "pci_bus_id": g["pci_bus_id"],
            "numa_node": 0 if g["index"] < half else 1,
            "cpu_affinity": "0-51" if g["index"] < half else "52-103",
            "pcie_gen_current": 5,
            "pcie_gen_max": 5,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
        }
        for g in gpu_entries
    ]
    devices.append(
        {
            "id": "NIC0",
            "kind": "nic",
            "name": "mlx5_0",
            "pci_bus_id": "0000:1a:00.0",
            "numa_node": 0,
            "link_layer": "InfiniBand",
        }
    )
    links = [
        {"a": f"GPU{a['index']}", "b": f"GPU{b['index']}", "type": f"NV{nvlinks_per_pair}"}
        for i, a in enumerate(gpu_entries)
        for b in gpu_entries[i + 1 :]
    ]
    links += [
        {"a": f"GPU{g['index']}", "b": "NIC0", "type": "PIX" if g["index"] == 0 else "NODE"}
        for g in gpu_entries
    ]
    return {
        "collected_at": iso(at),
        "source": "nvml",
        "partial": False,
        "errors": [],
        "devices": devices,
        "links": links,
        **over,
    }


def gpu_extras() -> dict[str, Any]:
    """The agent 0.2 additions to a ``gpus[]`` entry: N/A reasons, MIG instances, processes."""
    return {
        "unavailable": {"fan_pct": "NOT_SUPPORTED", "mem_temp_c": "NOT_SUPPORTED"},
        "mig_instances": [
            {
                "uuid": "MIG-5b1f5f1c-0000-4000-8000-000000000001",
                "gpu_instance_id": 1,
                "compute_instance_id": 0,
                "profile": "1g.10gb",
                "mem_total_bytes": 10468982784,
                "mem_used_bytes": 13631488,
            }
        ],
        "processes": [
            {"pid": 4123, "used_memory_bytes": 61203283968, "name": "python3", "user": "alice"},
            {"pid": 777, "used_memory_bytes": 1048576, "name": None, "user": None},
        ],
    }


def with_sections(payload: dict[str, Any], at: datetime) -> dict[str, Any]:
    """``payload`` (from :func:`tests.factories.batch`) with every node section filled."""
    gpus = payload["gpus"]
    payload["gpus"] = [dict(g, **gpu_extras()) if g["index"] == 0 else g for g in gpus]
    payload["collection"] = {
        "collector": "nvml",
        "errors": [{"source": "nvml", "message": "nvmlDeviceGetPowerUsage timed out after 5 s"}],
    }
    payload["nvlinks"] = [link for g in gpus for link in nvlinks(g, at)]
    payload["disks"] = [disk(at, "nvme0n1"), disk(at, "nvme1n1", busy_pct=2.0)]
    payload["mounts"] = [mount(at, "/"), mount(at, "/data")]
    payload["nfs_mounts"] = [nfs_mount(at)]
    payload["nic_ports"] = [nic_port(at, f"mlx5_{i}") for i in range(2)]
    payload["topology"] = topology(gpus, at)
    return payload
