"""The simulated node's storage: three NVMe disks, their filesystems and an NFS home.

* ``nvme0n1`` holds ``/`` (ext4): a trickle of logs and package reads.
* ``nvme1n1`` holds ``/data`` (xfs): the datasets, read at a rate that follows GPU load.
* ``nvme2n1`` holds ``/scratch`` (xfs): checkpoints written in bursts; it fills up and is
  cleaned, as scratch space is.
* ``/home`` is NFS 4.2 from ``nfs-home-01``, with 64-bit cumulative counters.

``storage_slow`` makes ``/data``'s disk wait tens of milliseconds per I/O (busy near 100 %) and
the NFS round trips slow, with retransmits. The first reading has no rates (``null``), as a real
agent's first reading of ``/proc/diskstats`` has no interval to compute them over.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

TB = 10**12
IO_SIZE = 128 * 1024  # bytes per I/O of a streaming read or checkpoint write
DATA_READ_PEAK = 3.0e9  # /data read rate with every GPU busy, B/s
CHECKPOINT_WRITE = 2.2e9  # /scratch write rate during a checkpoint, B/s
#: Values computed over the interval since the previous reading (none on the first).
RATE_KEYS = frozenset(
    {
        "read_bytes_per_s",
        "write_bytes_per_s",
        "read_iops",
        "write_iops",
        "busy_pct",
        "avg_wait_s",
        "ops_per_s",
        "retransmits_per_s",
        "avg_rtt_s",
    }
)


@dataclass
class _Mount:
    mountpoint: str
    device: str
    fstype: str
    total_bytes: int
    used_bytes: int


@dataclass
class SimStorage:
    """Disks, mounts and the NFS mount of one node, advanced by :meth:`read`."""

    rng: random.Random
    slow: bool = False
    checkpoint_left_s: float = 0.0
    mounts: list[_Mount] = field(default_factory=list)
    nfs: dict[str, int] = field(default_factory=dict)
    _first: bool = True

    def __post_init__(self) -> None:
        rng = self.rng
        self.mounts = [
            _Mount("/", "/dev/nvme0n1p2", "ext4", 1_920_383_410_176, int(0.31 * 1.92 * TB)),
            _Mount("/data", "/dev/nvme1n1", "xfs", 7_681_501_126_656, int(0.62 * 7.68 * TB)),
            _Mount("/scratch", "/dev/nvme2n1", "xfs", 3_840_755_982_336, int(0.35 * 3.84 * TB)),
        ]
        # Counters since the mount, weeks ago: large, and one of them above 2**63.
        self.nfs = {
            "read_bytes": 2**63 + rng.randrange(10**15),
            "write_bytes": rng.randrange(10**12, 10**14),
            "ops": rng.randrange(10**8, 10**10),
            "retransmits": rng.randrange(0, 50),
        }

    def read(self, stamp: str, dt_s: float, load: float) -> dict[str, list[dict[str, Any]]]:
        """The ``disks``, ``mounts`` and ``nfs_mounts`` entries dated ``stamp`` after ``dt_s``
        seconds at mean GPU load ``load`` (0-1)."""
        rng, first = self.rng, self._first
        self._first = False
        if self.checkpoint_left_s > 0:
            self.checkpoint_left_s -= dt_s
        elif load > 0.2 and rng.random() < dt_s / 600.0:
            self.checkpoint_left_s = rng.uniform(20.0, 45.0)
        data_read = DATA_READ_PEAK * load * rng.uniform(0.8, 1.2) * (0.3 if self.slow else 1.0)
        scratch_write = CHECKPOINT_WRITE if self.checkpoint_left_s > 0 else rng.uniform(0, 2e6)
        disks = [
            self._disk(stamp, "nvme0n1", rng.uniform(1e5, 2e6), rng.uniform(5e5, 5e6), False),
            self._disk(stamp, "nvme1n1", data_read, rng.uniform(1e5, 1e6), self.slow),
            self._disk(stamp, "nvme2n1", rng.uniform(1e5, 1e6), scratch_write, False),
        ]
        self._grow(dt_s, scratch_write)
        nfs = self._nfs(stamp, dt_s)
        if first:
            for entry in [*disks, nfs]:
                entry.update(dict.fromkeys(RATE_KEYS & entry.keys()))
        mounts = [
            {
                "sampled_at": stamp,
                "mountpoint": m.mountpoint,
                "device": m.device,
                "fstype": m.fstype,
                "used_bytes": m.used_bytes,
                "total_bytes": m.total_bytes,
            }
            for m in self.mounts
        ]
        return {"disks": disks, "mounts": mounts, "nfs_mounts": [nfs]}

    def _disk(
        self, stamp: str, device: str, read_bps: float, write_bps: float, slow: bool
    ) -> dict[str, Any]:
        rng = self.rng
        read_iops, write_iops = read_bps / IO_SIZE, write_bps / IO_SIZE
        busy = min(100.0, (read_bps + write_bps) / 3.5e9 * 100.0 + rng.uniform(0.2, 1.5))
        wait = rng.uniform(0.00015, 0.0006)
        if slow:
            busy, wait = rng.uniform(97.0, 100.0), rng.uniform(0.04, 0.2)
        return {
            "sampled_at": stamp,
            "device": device,
            "read_bytes_per_s": round(read_bps, 1),
            "write_bytes_per_s": round(write_bps, 1),
            "read_iops": round(read_iops, 1),
            "write_iops": round(write_iops, 1),
            "busy_pct": round(busy, 1),
            "avg_wait_s": round(wait, 6),
        }

    def _grow(self, dt_s: float, scratch_write: float) -> None:
        scratch = self.mounts[2]
        scratch.used_bytes += int(scratch_write * dt_s)
        if scratch.used_bytes > 0.85 * scratch.total_bytes:  # the nightly clean-up, sooner
            scratch.used_bytes = int(0.4 * scratch.total_bytes)
        self.mounts[0].used_bytes += int(self.rng.uniform(0, 2e5) * dt_s)  # logs

    def _nfs(self, stamp: str, dt_s: float) -> dict[str, Any]:
        rng = self.rng
        rates = {
            "read_bytes": rng.uniform(2e5, 8e6),
            "write_bytes": rng.uniform(5e4, 2e6),
            "ops": rng.uniform(20.0, 200.0),
            "retransmits": rng.uniform(0.5, 3.0) if self.slow else 0.0,
        }
        for key, rate in rates.items():
            self.nfs[key] = min(2**64 - 1, self.nfs[key] + int(rate * dt_s))
        rtt = rng.uniform(0.05, 0.3) if self.slow else rng.uniform(0.0004, 0.0012)
        return {
            "sampled_at": stamp,
            "mountpoint": "/home",
            "export": "nfs-home-01:/export/home",
            "version": "4.2",
            **self.nfs,
            "read_bytes_per_s": round(rates["read_bytes"], 1),
            "write_bytes_per_s": round(rates["write_bytes"], 1),
            "ops_per_s": round(rates["ops"], 2),
            "retransmits_per_s": round(rates["retransmits"], 2),
            "avg_rtt_s": round(rtt, 6),
        }
