"""Quiet APScheduler's "skipped: maximum number of running instances" warnings.

Every periodic job runs with ``max_instances=1`` and ``coalesce=True``: while a run is still
going, APScheduler 3.x (``BaseScheduler._process_jobs``) logs a WARNING on the
``apscheduler.scheduler`` logger at each due time it cannot start, i.e. once a second for the
1-s notification worker on a busy machine. A skipped run loses nothing (the next run does the
work), so :class:`SkippedRunFilter` lets the first such warning per job through and then at
most one per ``interval_s``, with the number of skips folded into the message; the others are
dropped. Other scheduler warnings are untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

SCHEDULER_LOGGER = "apscheduler.scheduler"
_SKIP_TEXT = "skipped: maximum number of running instances"
#: APScheduler job defaults: one run at a time, missed runs folded into one, and a late run
#: still runs however late (``None``) instead of being logged as missed.
JOB_DEFAULTS: dict[str, object] = {"coalesce": True, "max_instances": 1, "misfire_grace_time": None}


class SkippedRunFilter(logging.Filter):
    """Rate-limit the skipped-run warning: per job, one record per ``interval_s`` seconds
    (``clock`` is ``time.monotonic`` unless given, for tests)."""

    def __init__(self, interval_s: float = 300.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a skipped-run record within ``interval_s`` of the last one let through for
        the same job; a let-through record gains ``(N more skipped since)``."""
        if _SKIP_TEXT not in str(record.msg):
            return True
        # args[0] is the Job, whose str() carries the next run time: key on its id.
        first = record.args[0] if isinstance(record.args, tuple) and record.args else ""
        job = str(getattr(first, "id", first))
        now = self.clock()
        last = self._last.get(job)
        if last is not None and now - last < self.interval_s:
            self._suppressed[job] = self._suppressed.get(job, 0) + 1
            return False
        self._last[job] = now
        skipped = self._suppressed.pop(job, 0)
        if skipped:
            record.msg = f"{record.msg} ({skipped} more skipped since the last warning)"
        return True


def install_skipped_run_filter(interval_s: float = 300.0) -> SkippedRunFilter:
    """Attach one :class:`SkippedRunFilter` to ``apscheduler.scheduler`` (idempotent: an
    existing one is returned)."""
    logger = logging.getLogger(SCHEDULER_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, SkippedRunFilter):
            return existing
    added = SkippedRunFilter(interval_s)
    logger.addFilter(added)
    return added
