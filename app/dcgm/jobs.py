"""The scheduled scrape of every configured dcgm-exporter endpoint.

Endpoints are fetched in parallel (``FLEETWATCH_DCGM_SCRAPE_CONCURRENCY`` at a time, each
bounded by ``FLEETWATCH_DCGM_SCRAPE_TIMEOUT_S``) and stored one transaction per endpoint, so one
endpoint that is down, slow or serves garbage never holds up or fails the others: its row says
why (``GET /api/v1/dcgm/endpoints``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import session_scope, utcnow
from app.dcgm import service as dcgm_service
from app.dcgm import targets as dcgm_targets
from app.dcgm.parse import Parsed, parse
from app.dcgm.scrape import Fetched, fetch
from app.dcgm.targets import Target, TargetsError, hide_password, shown_url
from app.dcgm.translate import Translation, translate
from app.health.rules import rules_from_settings

log = logging.getLogger(__name__)
_THREAD_PREFIX = "dcgm-pull"
_DCGM_PREFIXES = ("DCGM_FI_", "DCGM_EXP_")


def _not_a_scrape(record: logging.LogRecord) -> bool:
    """httpx logs every request at INFO: one line per endpoint per round would bury the log
    (500 endpoints every 30 s). Failures are logged here, once each, instead."""
    return not (record.threadName or "").startswith(_THREAD_PREFIX)


logging.getLogger("httpx").addFilter(_not_a_scrape)

#: Called after a scrape is committed: (node id, stored scrape), to wake health and alerts.
OnStored = Callable[[int, dcgm_service.Stored], None]


def configured_targets(settings: Settings) -> list[Target]:
    """The endpoints of ``FLEETWATCH_DCGM_ENDPOINTS`` and of the file, the file read now.

    Raises:
        TargetsError: the file cannot be read (the message names it and the entry).
    """
    static = dcgm_targets.from_urls(settings.dcgm_endpoints)
    from_file = (
        dcgm_targets.read_file(settings.dcgm_endpoints_file)
        if settings.dcgm_endpoints_file is not None
        else []
    )
    return dcgm_targets.merge(static, from_file)


def policy_of(settings: Settings) -> dcgm_service.IngestPolicy:
    """The ingest settings pulled batches are stored under."""
    return dcgm_service.IngestPolicy(
        future_tolerance_s=settings.future_tolerance_s,
        retention_days=settings.retention_days,
        raw_retention_days=settings.raw_retention_days,
        stale_after_s=settings.stale_after_s,
        health_rules=rules_from_settings(settings),
        incident_quiet_s=settings.incident_quiet_s,
    )


@dataclass
class ScrapeJob:
    """The job the scheduler runs every ``FLEETWATCH_DCGM_SCRAPE_INTERVAL_S``."""

    settings: Settings
    session_factory: sessionmaker[Session]
    on_stored: OnStored | None = None
    #: Why the endpoints file could not be read at the latest run (None: it could).
    targets_error: str | None = None
    #: The targets of the endpoints file as last read well (None: never read well yet).
    last_good_file: list[Target] | None = None

    def targets(self) -> list[Target]:
        """The endpoints to scrape now. A file that cannot be read (half-written by the job
        regenerating it, a typo, gone) keeps the targets it had when last read well, as
        Prometheus's file_sd does, and the error is kept in :attr:`targets_error`: dropping
        them would make every pulled node stale, and page, over a configuration slip."""
        static = dcgm_targets.from_urls(self.settings.dcgm_endpoints)
        path = self.settings.dcgm_endpoints_file
        if path is None:
            self.targets_error = None
            return static
        try:
            self.last_good_file = dcgm_targets.read_file(path)
            self.targets_error = None
        except TargetsError as exc:
            self.targets_error = str(exc)
            kept = len(self.last_good_file or [])
            log.error("dcgm pull: %s; scraping its last good %d target(s)", exc, kept)
        return dcgm_targets.merge(static, self.last_good_file or [])

    def job(self) -> None:
        """Scrape every endpoint once; never raises into the scheduler."""
        targets = self.targets()
        if targets:
            run_once(
                targets,
                self.session_factory,
                policy=policy_of(self.settings),
                timeout_s=self.settings.dcgm_scrape_timeout_s,
                concurrency=self.settings.dcgm_scrape_concurrency,
                on_stored=self.on_stored,
            )


def run_once(
    targets: list[Target],
    session_factory: sessionmaker[Session],
    *,
    policy: dcgm_service.IngestPolicy,
    timeout_s: float,
    concurrency: int = 16,
    on_stored: OnStored | None = None,
) -> None:
    """Fetch and translate every target in parallel, then store each in its own transaction
    (a failure is recorded on the endpoint's row and logged, never raised)."""
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with (
        httpx.Client(timeout=timeout_s, limits=limits, follow_redirects=True) as client,
        ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=_THREAD_PREFIX) as pool,
    ):
        fetched = list(pool.map(lambda t: _read(client, t), targets))
    configured = frozenset(t.url for t in targets)
    for target, (got, translation) in zip(targets, fetched, strict=True):
        _store(target, got, translation, session_factory, policy, on_stored, configured)


def _read(client: httpx.Client, target: Target) -> tuple[Fetched, Translation | None]:
    got = fetch(client, target.url)
    if got.text is None:
        return got, None
    try:
        parsed = parse(got.text)
        if not any(series.name.startswith(_DCGM_PREFIXES) for series in parsed.series):
            # A proxy's error or login page answered with 200, an empty answer, another
            # exporter's port: stored, it would be a node named after the URL's host with no
            # GPUs, beside the real one.
            return Fetched(None, _no_sample(got.text, parsed), got.at, got.duration_s), None
        return got, translate(parsed, target=target, scraped_at=got.at)
    except Exception as exc:  # a bug: one page must not take the round with it
        log.exception("dcgm pull: reading the page of %s failed", shown_url(target.url))
        error = f"reading the page failed: {type(exc).__name__}: {exc}"
        return Fetched(None, error, got.at, got.duration_s), None


def _no_sample(text: str, parsed: Parsed) -> str:
    """Why a page without a single DCGM sample is not a scrape (with its first refused line)."""
    if parsed.series:
        return (
            f"no DCGM_FI_* or DCGM_EXP_* series on the page ({len(parsed.series)} other "
            "series): is it a dcgm-exporter?"
        )
    if not text.strip():
        return "no Prometheus sample on the page (it is empty)"
    if parsed.bad_lines:
        number, why = parsed.bad_lines[0]
        return f"no Prometheus sample on the page (line {number}: {why})"
    return "no Prometheus sample on the page"


def _store(
    target: Target,
    got: Fetched,
    translation: Translation | None,
    session_factory: sessionmaker[Session],
    policy: dcgm_service.IngestPolicy,
    on_stored: OnStored | None,
    configured: frozenset[str],
) -> None:
    error = got.error
    if translation is not None:
        try:
            with session_scope(session_factory) as session:
                stored = dcgm_service.store_scrape(
                    session,
                    target=target,
                    translation=translation,
                    scraped_at=got.at,
                    duration_s=got.duration_s,
                    received_at=utcnow(),
                    policy=policy,
                    configured_urls=configured,
                )
                node_id = stored.node_id
        except dcgm_service.NotStored as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("dcgm pull: storing the scrape of %s failed", shown_url(target.url))
            error = f"storing the scrape failed: {type(exc).__name__}: {exc}"
        else:
            if on_stored is not None:
                on_stored(node_id, stored)
            return
    error = hide_password(error or "unknown error", target.url)
    log.warning("dcgm pull: %s: %s", shown_url(target.url), error)
    try:
        with session_scope(session_factory) as session:
            dcgm_service.record_failure(
                session,
                url=target.url,
                error=error,
                scraped_at=got.at,
                duration_s=got.duration_s,
            )
    except Exception:
        log.exception("dcgm pull: recording the failure of %s failed", shown_url(target.url))
