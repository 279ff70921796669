"""Parser for ``nvidia-smi nvlink -s`` (``--status``), for nodes read without NVML.

Per GPU a header ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)``, then one ``Link N: 26.562 GB/s``
line per link (``Link N: <inactive>`` for a link that is down), or one line saying why there is
nothing: ``Nvlink queries are not supported for Devices in MIG mode``, ``NVML: Unable to retrieve
Nvlink information as all links are inActive``, ``Device does not have or support Nvlink``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agents.payload import format_timestamp

# ASCII digits of bounded length: int() refuses 4,300 digits and more, float() "1.2.3"; a link
# number above 255 or a UUID over 96 characters is no NVLink's (the server's limits).
_GPU = re.compile(r"^GPU ([0-9]{1,4}): (.*?)(?: \(UUID: ([^)]{1,96})\))?\s*$")
_LINK = re.compile(r"^Link ([0-9]{1,3}): (?:([0-9]{1,6}(?:\.[0-9]{1,6})?) GB/s|<inactive>)\s*$")
MAX_LINK = 255

#: Why a GPU lists no links, by a phrase of nvidia-smi's message (matched case-insensitively).
REASONS = {
    "not supported for devices in mig mode": "mig_mode",
    "all links are inactive": "all_links_inactive",
    "does not have or support nvlink": "not_supported",
}


@dataclass
class NvlinkStatus:
    """One GPU's links: ``speeds_gbps`` maps link number → GB/s per direction as printed, or
    ``None`` for ``<inactive>``; ``reason`` (``mig_mode``, ``all_links_inactive``,
    ``not_supported``, or the message itself when unknown) when nvidia-smi gave no links."""

    index: int
    name: str
    uuid: str | None
    speeds_gbps: dict[int, float | None] = field(default_factory=dict)
    reason: str | None = None


def parse_nvlink_status(text: str) -> list[NvlinkStatus]:
    """Every GPU of an ``nvidia-smi nvlink -s`` output, in order; lines before the first GPU
    header and blank lines are ignored."""
    gpus: list[NvlinkStatus] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if header := _GPU.match(line):
            gpus.append(NvlinkStatus(int(header[1]), header[2], header[3]))
            continue
        if not gpus:
            continue
        if (link := _LINK.match(line)) and int(link[1]) <= MAX_LINK:
            gpus[-1].speeds_gbps[int(link[1])] = float(link[2]) if link[2] else None
            continue
        lowered = line.lower()
        gpus[-1].reason = next((v for k, v in REASONS.items() if k in lowered), line)
    return gpus


def nvlinks_section(
    statuses: list[NvlinkStatus], sampled_at: datetime, uuids_by_index: dict[int, str] | None = None
) -> list[dict[str, Any]]:
    """The payload's ``nvlinks`` entries (docs/ingest.md) that ``nvlink -s`` can tell: state
    ``up`` with its speed, or ``down`` for ``<inactive>``; counters and remotes are ``None``.
    A GPU without a UUID (neither printed nor in ``uuids_by_index``) is left out."""
    stamp = format_timestamp(sampled_at)
    entries = []
    for gpu in statuses:
        uuid = gpu.uuid or (uuids_by_index or {}).get(gpu.index)
        if uuid is None:
            continue
        for link, speed in sorted(gpu.speeds_gbps.items()):
            entries.append(
                {
                    "gpu_uuid": uuid,
                    "link": link,
                    "sampled_at": stamp,
                    "state": "down" if speed is None else "up",
                    "speed_gbps": speed,
                    "remote_pci_bus_id": None,
                    "remote_device_type": None,
                    "tx_bytes_per_s": None,
                    "rx_bytes_per_s": None,
                    "crc_errors": None,
                    "replay_errors": None,
                    "recovery_errors": None,
                }
            )
    return entries
