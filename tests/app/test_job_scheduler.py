"""The server's job scheduler (:mod:`app.job_scheduler`): which jobs run, and draining them at
shutdown within a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from app.job_scheduler import DrainingScheduler


def add_now(scheduler: DrainingScheduler, job: Callable[..., Any], **options: Any) -> Any:
    """``job`` as the server adds its jobs (an interval trigger, here hourly), run at once."""
    return scheduler.add_job(
        job, "interval", seconds=3600, next_run_time=datetime.now(UTC), **options
    )


@pytest.fixture
def scheduler() -> Iterator[DrainingScheduler]:
    scheduler = DrainingScheduler(timezone="UTC")
    scheduler.start()
    yield scheduler
    if scheduler.running:
        scheduler.shutdown(wait=True)


def test_draining_waits_for_a_running_job_and_names_none(scheduler: DrainingScheduler) -> None:
    started, release = threading.Event(), threading.Event()
    ended: list[str] = []

    def job() -> None:
        started.set()
        release.wait(5)
        ended.append("job")

    add_now(scheduler, job, id="slow")
    assert started.wait(5)
    assert scheduler.running_jobs() == ["slow"]
    threading.Timer(0.3, release.set).start()
    began = time.monotonic()
    assert scheduler.drain(timeout_s=5) == []
    assert ended == ["job"]
    assert 0.2 < time.monotonic() - began < 4
    assert scheduler.running_jobs() == []
    assert not scheduler.running


def test_draining_gives_up_at_the_deadline_and_names_the_job(
    scheduler: DrainingScheduler, caplog: pytest.LogCaptureFixture
) -> None:
    started, release = threading.Event(), threading.Event()
    add_now(scheduler, lambda: (started.set(), release.wait(10)), id="stuck")
    assert started.wait(5)
    began = time.monotonic()
    try:
        assert scheduler.drain(timeout_s=0.3) == ["stuck"]
        assert 0.25 < time.monotonic() - began < 3
        assert "stopping with jobs still running after 0 s: stuck" in caplog.text
    finally:
        release.set()


def test_a_run_starting_once_draining_began_does_nothing(scheduler: DrainingScheduler) -> None:
    """A run already handed to the pool when draining begins, but not started (every thread
    busy), must not start work that the shutdown then does not wait for."""
    ran: list[int] = []
    scheduler.drain(timeout_s=1)
    job = add_now(scheduler, ran.append, args=[1], id="late")
    job.func()  # as the pool would call it, after draining began
    assert ran == []
    assert scheduler.running_jobs() == []


def test_jobs_running_at_once_are_each_named(scheduler: DrainingScheduler) -> None:
    release = threading.Event()
    both = threading.Barrier(3)

    def job() -> None:
        both.wait(5)
        release.wait(5)

    add_now(scheduler, job, id="twice")
    add_now(scheduler, job, id="twice-b")
    both.wait(5)
    assert scheduler.running_jobs() == ["twice", "twice-b"]
    release.set()
    assert scheduler.drain(timeout_s=5) == []
