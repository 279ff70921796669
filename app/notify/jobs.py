"""Scheduled work of notifications: the delivery worker every ``notify_worker_interval_s`` and
the repeat scan (with the incident messages' changes and closes) every ``REPEAT_SCAN_S``;
started from the app's lifespan (:func:`app.main.create_app`), errors logged, never raised into
the scheduler.

Between ticks the worker is woken by the commit of outbox rows (:meth:`NotifyJobs.wake`: an
in-process signal from :func:`app.wakeups.signal_on_commit`, and on Postgres the ``NOTIFY`` on
:data:`app.wakeups.OUTBOX_CHANNEL` that every process's listener hears); the timer stays as the
fallback and for rows that become due later (group wait, retries)."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import session_scope, utcnow
from app.notify.ack_links import AckSigner
from app.notify.incident_rows import enqueue_changes
from app.notify.outbox import enqueue_repeats
from app.notify.secrets import SecretBox, install_log_redaction, secret_key
from app.notify.worker import DeliveryWorker, TickReport, WorkerOptions
from app.wake_thread import WakeThread

log = logging.getLogger(__name__)

REPEAT_SCAN_S = 15.0


def external_url(settings: Settings) -> str:
    """Base URL for links in notices: ``external_url``, else ``http://host:port`` (loopback
    when listening on every address)."""
    if settings.external_url:
        return settings.external_url.rstrip("/")
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    return f"http://{host}:{settings.port}"


def signer_for(settings: Settings) -> AckSigner:
    """The ack-link signer with the server's key and ``notify_ack_link_ttl_s``."""
    return AckSigner(secret_key(settings), ttl_s=settings.notify_ack_link_ttl_s)


def worker_options(settings: Settings) -> WorkerOptions:
    """:class:`WorkerOptions` from the ``notify_*`` settings."""
    return WorkerOptions(
        timeout_s=settings.notify_timeout_s,
        deadline_s=settings.notify_deadline_s,
        backoff_base_s=settings.notify_backoff_base_s,
        backoff_cap_s=settings.notify_backoff_cap_s,
        allow_hosts=tuple(settings.notify_allow_hosts),
        external_url=external_url(settings),
        rate_limits=tuple(sorted(settings.notify_rate_limits.items())),
        max_pace_wait_s=settings.notify_max_pace_wait_s,
        last_try_margin_s=settings.notify_last_try_margin_s,
        hold_for_jobs_s=hold_for_jobs_s(settings),
        incident_quiet_s=settings.incident_quiet_s,
    )


def hold_for_jobs_s(settings: Settings) -> float:
    """How long a first page about a node with a new incident waits for the capture of the
    node's jobs (:mod:`app.workloads.capture`, run every ``action_worker_interval_s``): two
    runs and the time of its commands, 20 s at the defaults; 0 where no scheduler is read."""
    if not (settings.slurm_scontrol or settings.kubeconfig):
        return 0.0
    return 2 * settings.action_worker_interval_s + 10.0


class NotifyJobs:
    """The worker and the repeat scan of one process."""

    def __init__(self, settings: Settings, factory: sessionmaker[Session]) -> None:
        install_log_redaction()
        self.factory = factory
        self.deadline_s = settings.notify_deadline_s
        self.incident_quiet_s = settings.incident_quiet_s
        self.worker = DeliveryWorker(
            factory,
            box=SecretBox.from_settings(settings),
            signer=signer_for(settings),
            options=worker_options(settings),
        )
        self._last_repeat = 0.0
        self._lock = threading.Lock()
        self._wakes = WakeThread(self.job, name="notify-wake")

    def tick(self) -> TickReport:
        """The repeat scan when due, then one worker tick."""
        with self._lock:
            if time.monotonic() - self._last_repeat >= REPEAT_SCAN_S:
                self._last_repeat = time.monotonic()
                with session_scope(self.factory) as session:
                    enqueue_repeats(session, deadline_s=self.deadline_s)
                    enqueue_changes(
                        session,
                        now=utcnow(),
                        quiet_s=self.incident_quiet_s,
                        deadline_s=self.deadline_s,
                    )
            return self.worker.run_once()

    def job(self) -> None:
        """Scheduler wrapper: errors are logged, never raised."""
        try:
            report = self.tick()
            if report.messages:
                log.info(
                    "notifications: %d messages, %d delivered, %d retried, %d failed",
                    report.messages,
                    report.delivered,
                    report.retried,
                    report.failed,
                )
        except Exception:
            log.exception("notification worker tick failed")

    def wake(self) -> None:
        """Outbox rows were committed: run a worker tick now (never blocks)."""
        self._wakes.wake()

    def start(self) -> None:
        """Start the thread that serves :meth:`wake` (a daemon)."""
        self._wakes.start()

    def close(self) -> None:
        """Stop the wake-up thread and close the worker's HTTP client."""
        self._wakes.close(timeout_s=30)
        self.worker.close()
