"""Which rounds of NVLink readings the agent sends: every ``interval_s``, and at once when a
link changes in a way an SRE acts on.

A round is sent when the interval has passed since the last one sent, when the set of links
differs (a GPU lost or back), or when any link's state, speed, peer (PCI bus id, device type) or
error counter (CRC, replay, recovery) differs from what was last sent. Throughput alone never
triggers a send: it moves every round.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

#: Fields whose change is sent at once.
WATCHED = (
    "state",
    "speed_gbps",
    "remote_pci_bus_id",
    "remote_device_type",
    "crc_errors",
    "replay_errors",
    "recovery_errors",
)


class NvlinkThinner:
    """Decides per round whether the NVLink readings go into the batch.

    ``interval_s`` 0 sends every round (the agent's behaviour before this class existed).
    """

    def __init__(self, interval_s: float) -> None:
        self.interval = timedelta(seconds=interval_s)
        self._sent_at: datetime | None = None
        self._sent: dict[tuple[str, int], tuple[Any, ...]] = {}

    def due(self, links: Sequence[dict[str, Any]], now: datetime) -> bool:
        """Whether the readings ``links`` (``nvlinks`` entries) taken at ``now`` are sent;
        when they are, they become the reference for the next rounds."""
        current = {
            (str(e.get("gpu_uuid")), int(e.get("link", -1))): tuple(e.get(k) for k in WATCHED)
            for e in links
        }
        interval_over = self._sent_at is None or now - self._sent_at >= self.interval
        if not interval_over and current == self._sent:
            return False
        self._sent_at = now
        self._sent = current
        return True
