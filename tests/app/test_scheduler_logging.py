"""APScheduler's skipped-run warning for a busy 1-s job is rate-limited, not logged every time."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from app.scheduler_logging import (
    JOB_DEFAULTS,
    SCHEDULER_LOGGER,
    SkippedRunFilter,
    install_skipped_run_filter,
)

SKIP = "maximum number of running instances reached"


def skip_record(job: str) -> logging.LogRecord:
    """A record shaped like APScheduler 3.x's skipped-run warning."""
    return logging.LogRecord(
        SCHEDULER_LOGGER,
        logging.WARNING,
        __file__,
        1,
        'Execution of job "%s" skipped: maximum number of running instances reached (%d)',
        (job, 1),
        None,
    )


def test_one_warning_per_job_per_interval_with_the_count_folded_in() -> None:
    now = [0.0]
    filt = SkippedRunFilter(interval_s=300, clock=lambda: now[0])
    passed = []
    for second in range(601):
        now[0] = float(second)
        for job in ("notify-worker", "alert-evaluation"):
            record = skip_record(job)
            if filt.filter(record):
                passed.append((second, job, record.getMessage()))
    assert [(s, j) for s, j, _ in passed] == [
        (0, "notify-worker"),
        (0, "alert-evaluation"),
        (300, "notify-worker"),
        (300, "alert-evaluation"),
        (600, "notify-worker"),
        (600, "alert-evaluation"),
    ]
    assert passed[2][2].endswith("(299 more skipped since the last warning)")
    other = logging.LogRecord(SCHEDULER_LOGGER, logging.WARNING, __file__, 1, "other", (), None)
    assert filt.filter(other)


def test_a_real_scheduler_busy_job_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    install_skipped_run_filter()
    assert install_skipped_run_filter() is install_skipped_run_filter()  # idempotent
    release = threading.Event()
    runs = []

    def busy() -> None:
        runs.append(time.monotonic())
        release.wait(5)

    scheduler = BackgroundScheduler(timezone="UTC", job_defaults=JOB_DEFAULTS)
    scheduler.add_job(busy, "interval", seconds=0.1, id="busy-job")
    caplog.set_level(logging.WARNING, logger="apscheduler")
    scheduler.start()
    try:
        time.sleep(1.5)
    finally:
        release.set()
        scheduler.shutdown(wait=True)
    skips = [r for r in caplog.records if SKIP in r.getMessage()]
    missed = [r for r in caplog.records if "was missed by" in r.getMessage()]
    assert len(runs) >= 1
    assert len(skips) == 1
    assert missed == []
