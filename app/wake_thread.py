"""A daemon thread that runs a job each time it is woken (a commit that queued work for it),
beside the scheduler's timer that stays the fallback: the notification worker and the action
worker use one each."""

from __future__ import annotations

import threading
from collections.abc import Callable


class WakeThread:
    """Runs ``job`` (which must not raise) once per :meth:`wake`; wake-ups that come while it
    runs fold into one more run."""

    def __init__(self, job: Callable[[], None], *, name: str) -> None:
        self._job = job
        self._name = name
        self._woken = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """Ask for a run now (never blocks)."""
        self._woken.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._woken.wait()
            self._woken.clear()
            if self._stop.is_set():
                return
            self._job()

    def start(self) -> None:
        """Start the thread (a daemon)."""
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def close(self, *, timeout_s: float) -> None:
        """Stop the thread, waiting up to ``timeout_s`` for a run in progress."""
        self._stop.set()
        self._woken.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
