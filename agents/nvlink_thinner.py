"""Which rounds of NVLink readings the agent sends: every ``interval_s``, and at once when a
link changes in a way an SRE acts on.

Every link is sent when the interval has passed since the last full round. In between, a link
is sent alone when its state, speed, peer (PCI bus id, device type) or an error counter (CRC,
replay, recovery) differs from what was last sent for it, or when it is new (a GPU back).
Throughput alone never triggers a send: it moves every round. One link going bad therefore
costs one row per round, not the node's 144. A link whose ``state`` changed (down, back up) or
that disappeared since the previous round is also *urgent* (:attr:`NvlinkThinner.urgent`): the
agent then cuts its batch at once, as for a new event, so the page does not wait for the batch
interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from agents.send_schedule import FullRounds

#: The longest interval accepted, seconds (a day).
MAX_INTERVAL_S = 86400.0
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
    """Decides per round which NVLink readings go into the batch.

    ``interval_s`` 0 sends every round (the agent's behaviour before this class existed).

    Raises:
        ValueError: ``interval_s`` is negative or more than a day.
    """

    def __init__(self, interval_s: float) -> None:
        if not 0 <= interval_s <= MAX_INTERVAL_S:
            raise ValueError(
                f"NVLink interval must be 0 to {MAX_INTERVAL_S:.0f} s, got {interval_s}"
            )
        self.interval = timedelta(seconds=interval_s)
        self._rounds = FullRounds(self.interval) if self.interval else None
        self._sent: dict[tuple[str, int], tuple[Any, ...]] = {}
        self._states: dict[tuple[str, int], Any] = {}
        #: Whether the last :meth:`due` saw a link change state or vanish (not its first round).
        self.urgent = False

    def due(self, links: Sequence[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
        """The entries of ``links`` (``nvlinks`` entries read at ``now``) to send: all of them
        when the interval is over, else those that changed (empty when none did). What is
        sent becomes the reference for the next rounds."""
        current = {_key(e): tuple(e.get(k) for k in WATCHED) for e in links}
        states = {_key(e): e.get("state") for e in links}
        self.urgent = bool(self._states) and any(
            states.get(key, "gone") != state for key, state in self._states.items()
        )
        self._states = states
        if self._rounds is None or self._rounds.due(now):
            self._sent = current
            return list(links)
        changed = [e for e in links if self._sent.get(_key(e)) != current[_key(e)]]
        for entry in changed:
            self._sent[_key(entry)] = current[_key(entry)]
        return changed


def _key(entry: dict[str, Any]) -> tuple[str, int]:
    return str(entry.get("gpu_uuid")), int(entry.get("link", -1))
