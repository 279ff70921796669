"""When to send the topology: at start, whenever it changes, and every ``resend_s`` otherwise."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any


class TopologyTracker:
    """Decides whether a freshly read topology goes into the next batch.

    The comparison ignores ``collected_at``, so an unchanged machine is re-sent only hourly.
    """

    def __init__(self, resend_s: float = 3600.0) -> None:
        self.resend_s = resend_s
        self._digest: str | None = None
        self._sent_at = 0.0

    @staticmethod
    def digest(topology: dict[str, Any]) -> str:
        """SHA-256 of the topology without its timestamp, keys sorted."""
        body = {k: v for k, v in topology.items() if k != "collected_at"}
        return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()

    def due(self, topology: dict[str, Any] | None) -> dict[str, Any] | None:
        """``topology`` if it is new, changed or due for its hourly resend; else ``None``."""
        if topology is None:
            return None
        digest = self.digest(topology)
        now = time.monotonic()
        if digest != self._digest or now - self._sent_at >= self.resend_s:
            self._digest = digest
            self._sent_at = now
            return topology
        return None
