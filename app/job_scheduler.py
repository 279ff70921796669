"""The server's job scheduler: APScheduler's background scheduler that knows which of its jobs
are running, so that shutdown waits for them before the database engine is disposed, up to a
deadline.

Why: a job still running when the engine was disposed checked its connection into the disposed
pool afterwards, where it stayed open and owned by nothing until the cyclic collector found it
(a backend held meanwhile, psycopg's ``ResourceWarning``). Why a deadline: jobs are bounded per
call (HTTP and subprocess timeouts) but not per run (a notify tick to a dropping webhook, a
compaction backlog, a slow Slurm controller can take minutes), and a second Ctrl-C or SIGTERM
does not interrupt an application's shutdown (uvicorn only sets ``force_exit``): an unbounded
wait would leave SIGKILL as the only way out.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)

#: Longest shutdown waits for running jobs (seconds) where no setting says
#: (``FLEETWATCH_JOB_DRAIN_S``): under the deployments' stop timeouts (systemd's 30 s).
DRAIN_S = 20.0


def exit_if_jobs_left_running(left_running: list[str]) -> None:
    """End the process at once where a drain gave up on running jobs (``left_running``, what
    :meth:`DrainingScheduler.drain` returned: the app keeps it as
    ``app.state.jobs_left_running``); return where it is empty.

    For the commands that own the process (``serve``, ``worker``, ``demo``), once the app has
    shut down. A normal interpreter exit joins every job thread (``concurrent.futures``' exit
    hook), so a stuck job would hold the process past the drain's deadline without end, a
    second Ctrl-C or SIGTERM notwithstanding. Logs and standard streams are flushed first; the
    exit status is 0 (the stop was asked for; the warning named the jobs)."""
    if not left_running:
        return
    log.warning("exiting without waiting for: %s", ", ".join(left_running))
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class DrainingScheduler(BackgroundScheduler):
    """A :class:`BackgroundScheduler` whose :meth:`drain` stops it and waits for the jobs then
    running. Every job added is wrapped to count its runs in and out (in the thread that runs
    it, so the count is exact; APScheduler's submitted and executed events can arrive in either
    order); a run that starts once draining has begun (submitted just before, or queued behind
    the pool's threads) does nothing."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._running: Counter[str] = Counter()
        self._changed = threading.Condition()
        self._draining = False

    def add_job(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """APScheduler's ``add_job``, ``func`` counted while it runs under the job's ``id``
        (``kwargs["id"]``, else the function's name)."""
        name = str(kwargs.get("id") or getattr(func, "__name__", "job"))

        @functools.wraps(func)
        def counted(*call_args: Any, **call_kwargs: Any) -> Any:
            with self._changed:
                if self._draining:
                    return None
                self._running[name] += 1
            try:
                return func(*call_args, **call_kwargs)
            finally:
                with self._changed:
                    self._running[name] -= 1
                    if self._running[name] == 0:
                        del self._running[name]
                    self._changed.notify_all()

        return super().add_job(counted, *args, **kwargs)

    def running_jobs(self) -> list[str]:
        """The ids of the jobs running now, sorted (a job twice if two runs overlap)."""
        with self._changed:
            return sorted(self._running.elements())

    def drain(self, timeout_s: float | None = None) -> list[str]:
        """Stop starting jobs, then wait up to ``timeout_s`` seconds (default :data:`DRAIN_S`)
        for those running to end. Returns the ids of those still running at the deadline
        (logged as a warning: they go on in their threads while the process stops), ``[]`` when
        all ended."""
        timeout_s = DRAIN_S if timeout_s is None else timeout_s
        with self._changed:
            self._draining = True
        if self.running:
            self.shutdown(wait=False)
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._running and (left := deadline - time.monotonic()) > 0:
                self._changed.wait(left)
            still = sorted(self._running.elements())
        if still:
            log.warning(
                "stopping with jobs still running after %.0f s: %s", timeout_s, ", ".join(still)
            )
        return still
