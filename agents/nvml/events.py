"""Xid events from NVML: one event set with every GPU registered for
``nvmlEventTypeXidCriticalError``, polled without blocking (``nvmlEventSetWait`` with a 0 ms
timeout) at each collection round. Each occurrence is its own event.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from agents.nvml.session import GpuGone, NvmlSession, Unavailable
from agents.nvml.worker import CallTimedOut

log = logging.getLogger(__name__)

XID_CRITICAL_ERROR = 0x8  # nvmlEventTypeXidCriticalError
MAX_EVENTS_PER_POLL = 1000


@dataclass(frozen=True)
class XidOccurrence:
    """One Xid: the device handle NVML names and the Xid code."""

    handle: Any
    xid: int


class XidWatcher:
    """The event set; registration failures (unsupported GPU, no permission) are logged once
    and leave that GPU without NVML Xid events (the kernel log still has them)."""

    def __init__(self, session: NvmlSession) -> None:
        self.session = session
        self._set: Any = None
        self._registered: set[str] = set()
        self.errors: list[str] = []

    def register(self, handle: Any, key: str) -> None:
        """``nvmlDeviceRegisterEvents(handle, nvmlEventTypeXidCriticalError, set)`` once per
        GPU key, creating the set (``nvmlEventSetCreate``) on first use."""
        if key in self._registered:
            return
        self._registered.add(key)
        try:
            if self._set is None:
                self._set = self.session.call("nvmlEventSetCreate")
            types = getattr(self.session.nvml, "nvmlEventTypeXidCriticalError", XID_CRITICAL_ERROR)
            self.session.call("nvmlDeviceRegisterEvents", handle, types, self._set, gpu=key)
        except (Unavailable, GpuGone, CallTimedOut) as exc:
            log.info("GPU %s: no NVML Xid events: %s", key, exc)

    def poll(self) -> list[XidOccurrence]:
        """The Xids waiting in the set (``nvmlEventSetWait`` with timeout 0 until
        ``NVML_ERROR_TIMEOUT``)."""
        if self._set is None:
            return []
        found: list[XidOccurrence] = []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = self.session.call("nvmlEventSetWait", self._set, 0)
            except Unavailable as exc:
                if exc.reason != "TIMEOUT":
                    log.debug("nvmlEventSetWait: %s", exc)
                break
            except (GpuGone, CallTimedOut) as exc:
                message = f"nvmlEventSetWait: {exc}"
                if message not in self.errors:  # polled every watch interval: once per round
                    self.errors.append(message)
                break
            if int(data.eventType) & XID_CRITICAL_ERROR:
                found.append(XidOccurrence(data.device, int(data.eventData)))
        return found

    def close(self) -> None:
        """``nvmlEventSetFree``."""
        if self._set is not None:
            try:
                self.session.call("nvmlEventSetFree", self._set)
            except (Unavailable, GpuGone, CallTimedOut) as exc:
                log.debug("nvmlEventSetFree: %s", exc)
            self._set = None
