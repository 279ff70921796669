"""Run a blocking call with a deadline: NVML calls can hang (a GPU falling off the bus, a driver
stuck in a reset) and a hung call must cost one collection round, never the agent.

Calls run one at a time in a daemon worker thread. When one outlives its deadline the worker is
abandoned (it ends by itself if the call ever returns) and the next call gets a fresh worker.
The abandoned call is remembered with the key it was made for (a GPU's UUID), so the caller can
leave that GPU alone instead of piling up threads stuck on it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class CallTimedOut(Exception):
    """A call did not return within its deadline; ``str()`` is ``"<function> timed out after
    N s"``, the text of the collection error."""

    def __init__(self, function: str, timeout_s: float) -> None:
        super().__init__(f"{function} timed out after {timeout_s:g} s")
        self.function = function
        self.timeout_s = timeout_s


@dataclass
class HungCall:
    """A call abandoned at its deadline, maybe still running."""

    function: str
    key: str | None
    started: float
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class _Job:
    call: Callable[[], Any]
    hung: HungCall
    result: Any = None
    error: BaseException | None = None


class _Worker(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="nvml-call", daemon=True)
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.abandoned = False

    def run(self) -> None:
        """Run queued jobs until abandoned or handed ``None``."""
        while not self.abandoned:
            job = self.jobs.get()
            if job is None:
                return
            try:
                job.result = job.call()
            except BaseException as exc:  # handed to the caller, which decides
                job.error = exc
            finally:
                job.hung.done.set()


class TimedCaller:
    """Runs calls one at a time, each within ``timeout_s`` (``None`` or ``0``: inline, no
    deadline). Thread-safe: concurrent callers are serialised."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s or None
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._hung: list[HungCall] = []

    def run(self, function: str, call: Callable[[], Any], *, key: str | None = None) -> Any:
        """Return ``call()``'s result or raise its exception.

        Raises:
            CallTimedOut: ``call`` did not return within ``timeout_s``.
        """
        if self.timeout_s is None:
            return call()
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = _Worker()
                self._worker.start()
            job = _Job(call, HungCall(function, key, time.monotonic()))
            self._worker.jobs.put(job)
            if not job.hung.done.wait(self.timeout_s):
                self._worker.abandoned = True
                self._worker = None
                self._hung.append(job.hung)
                raise CallTimedOut(function, self.timeout_s)
        if job.error is not None:
            raise job.error
        return job.result

    def hung_call(self, key: str) -> HungCall | None:
        """The call abandoned for ``key`` that has still not returned, if any."""
        with self._lock:
            self._hung = [h for h in self._hung if not h.done.is_set()]
            return next((h for h in self._hung if h.key == key), None)

    def close(self) -> None:
        """Let the worker thread end (a hung one ends when its call returns)."""
        with self._lock:
            if self._worker is not None:
                self._worker.abandoned = True
                self._worker.jobs.put(None)
                self._worker = None
