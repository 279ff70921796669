"""``create_app()``: routers, static files, error handlers and the lifespan. No business logic."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import __version__, probes, wakeups
from app.access import admin_pages
from app.access import router as access_router
from app.access.middleware import AccessMiddleware
from app.access.roles import Role
from app.alerts import pages as alert_pages
from app.alerts import router as alerts_router
from app.alerts import rule_reach
from app.alerts.scheduler import AlertEvaluator
from app.alerts.triggers import AlertingHealthRefresher, batch_wakes_alerts
from app.audit import router as audit_router
from app.auth import router as enroll_router
from app.config import PROJECT_ROOT, Settings, get_settings
from app.csrf import OriginCheckMiddleware
from app.db import make_engine, make_session_factory, session_scope
from app.dcgm import router as dcgm_router
from app.dcgm.jobs import ScrapeJob
from app.errors import FleetwatchError
from app.exporter import router as metrics_router
from app.fleet import pages as fleet_pages
from app.fleet import retire_pages
from app.fleet import router as fleet_router
from app.gc_tuning import tune_gc
from app.gpus import router as gpu_router
from app.health import router as health_router
from app.health.jobs import HealthRefresher
from app.health.rules import rules_from_settings
from app.incidents import pages as incident_pages
from app.incidents import router as incidents_router
from app.ingest import router as ingest_router
from app.job_lock import once_per_database
from app.job_scheduler import DrainingScheduler
from app.lifecycle import pages as lifecycle_pages
from app.lifecycle import router as lifecycle_router
from app.maintenance import pages as maintenance_pages
from app.maintenance import router as maintenance_router
from app.migrate import is_up_to_date
from app.nics import router as nic_router
from app.notify import pages as notify_pages
from app.notify import router as notify_router
from app.notify import ui_pages as notify_ui_pages
from app.notify.jobs import NotifyJobs
from app.nvlinks import router as nvlink_router
from app.reliability import pages as reliability_pages
from app.remediation import mirror
from app.remediation.automation import AutomationJob
from app.remediation.service import Backends
from app.remediation.worker import ActionWorker
from app.retention.jobs import AccessRetention, prune_job
from app.runbooks import router as runbooks_router
from app.scheduler_logging import JOB_DEFAULTS, install_skipped_run_filter
from app.security_headers import SecurityHeadersMiddleware
from app.series import pages as series_pages
from app.series.jobs import compact_job
from app.series.rollups.jobs import rollup_job
from app.storage import pages as storage_pages
from app.storage import router as storage_router
from app.topology import drift_router as topology_drift_router
from app.topology import pages as topology_pages
from app.topology import router as topology_router
from app.topology.drift_state import drift_job
from app.tz_check import PageTzCheckMiddleware
from app.url_check import NulInUrlMiddleware
from app.web import render_error_page
from app.workloads import capture as workload_capture
from app.workloads import pages as workload_pages
from app.workloads import router as workloads_router

log = logging.getLogger(__name__)

SWAGGER_UI_VERSION = "5.17.14"


def _pulled_waker(app: FastAPI) -> Callable[[int, Any], None]:
    """After a pulled batch is committed, what ``POST /api/v1/ingest`` does after a pushed
    one: the health refresher and (for an event or a GPU not ok) the alert evaluator wake."""

    def wake(node_id: int, stored: Any) -> None:
        refresher = getattr(app.state, "health_refresher", None)
        if refresher is not None:
            refresher.wake()
        evaluator = getattr(app.state, "alert_evaluator", None)
        if evaluator is not None and batch_wakes_alerts(stored.batch, stored.result):
            evaluator.wake([node_id])

    return wake


class SchemaNotMigrated(RuntimeError):
    """The database is not at the newest migration; run ``fleetwatch migrate``."""


#: Field names whose value a validation error never echoes back.
SECRET_FIELDS = frozenset({"password", "token", "secret", "client_secret", "webhook_secret"})


def _names_a_secret(loc: Any) -> bool:
    """Whether a validation error's ``loc`` (``("body", "password")`` …) is a secret field."""
    return any(isinstance(part, str) and part in SECRET_FIELDS for part in loc)


def create_app(settings: Settings | None = None, *, run_jobs: bool = True) -> FastAPI:
    """Build the FastAPI application for ``settings`` (default: from the environment).

    The database must already be migrated (``fleetwatch migrate``); start-up fails with
    :class:`SchemaNotMigrated` otherwise, rather than serving errors later.
    """
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = settings.effective_database_url
        engine = make_engine(url)
        if not is_up_to_date(engine, url):
            engine.dispose()
            raise SchemaNotMigrated(
                f"database {engine.url.render_as_string(hide_password=True)} is not migrated: "
                "run 'fleetwatch migrate' first"
            )
        app.state.engine = engine
        app.state.session_factory = make_session_factory(engine)
        app.state.read_session_factory = make_session_factory(engine, read_only=True)
        app.state.token_session_factory = make_session_factory(engine, one_statement=True)
        install_skipped_run_filter()
        tune_gc()
        scheduler = DrainingScheduler(timezone="UTC", job_defaults=JOB_DEFAULTS)
        if run_jobs:
            with session_scope(app.state.session_factory) as session:
                for line in rule_reach.stored_beyond(session, rule_reach.Kept.of(settings)):
                    log.warning("%s (the rule judges only what is kept)", line)
            scheduler.add_job(
                once_per_database(engine, "retention-prune", prune_job),
                "interval",
                seconds=settings.prune_interval_s,
                args=[
                    app.state.session_factory,
                    settings.retention_days,
                    settings.raw_retention_days,
                    AccessRetention(
                        audit_retention_days=settings.audit_retention_days,
                        session_idle_s=settings.session_idle_s,
                        login_failure_window_s=settings.login_failure_window_s,
                    ),
                ],
                id="retention-prune",
                coalesce=True,
                max_instances=1,
            )
            scheduler.add_job(
                once_per_database(engine, "series-compaction", compact_job),
                "interval",
                seconds=settings.compact_interval_s,
                args=[
                    app.state.session_factory,
                    settings.compact_after_s,
                    settings.health_throttle_window_s,
                    settings.compact_minutes_after_days,
                    settings.health_event_window_s,
                    settings.compact_host_minutes_after_days,
                ],
                id="series-compaction",
                coalesce=True,
                max_instances=1,
            )
            scheduler.add_job(
                once_per_database(engine, "topology-drift", drift_job),
                "interval",
                seconds=settings.drift_interval_s,
                args=[app.state.session_factory, settings.drift_max_age_s],
                id="topology-drift",
                # At once, not one interval after start: a restarted server would otherwise
                # compute the drift on every page read until then (700 ms at 1,000 nodes).
                next_run_time=datetime.now(UTC),
                coalesce=True,
                max_instances=1,
            )
            scheduler.add_job(
                once_per_database(engine, "rollup-fold", rollup_job),
                "interval",
                seconds=settings.rollup_interval_s,
                args=[
                    app.state.session_factory,
                    settings.rollup_lookback_s,
                    settings.rollup_minute_retention_days,
                    settings.rollup_hour_retention_days,
                ],
                id="rollup-fold",
                coalesce=True,
                max_instances=1,
            )
            refresher_args: dict[str, Any] = {
                "rules": rules_from_settings(settings),
                "interval_s": settings.health_refresh_interval_s,
                "recheck_after_s": settings.health_recheck_s,
            }
            wake_ups: dict[str, Callable[[str], None]] = {}
            if settings.alerts_enabled:
                evaluator = AlertEvaluator(
                    engine,
                    app.state.session_factory,
                    health_rules=rules_from_settings(settings),
                    debounce_s=settings.alert_wake_debounce_s,
                )
                app.state.alert_evaluator = evaluator
                evaluator.start()
                wake_ups[wakeups.ALERTS_CHANNEL] = evaluator.wake_from_peer
                scheduler.add_job(
                    evaluator.job,
                    "interval",
                    seconds=settings.alert_eval_interval_s,
                    id="alert-evaluation",
                    coalesce=True,
                    max_instances=1,
                )
                app.state.health_refresher = AlertingHealthRefresher(
                    app.state.session_factory, on_change=evaluator.wake, **refresher_args
                )
            else:
                app.state.health_refresher = HealthRefresher(
                    app.state.session_factory, **refresher_args
                )
            app.state.health_refresher.start()
            # Batches stored by web processes without the jobs (fleetwatch serve --no-jobs).
            refresher = app.state.health_refresher
            wake_ups[wakeups.INGEST_CHANNEL] = lambda _payload: refresher.wake()
            if settings.notify_enabled:
                app.state.notify_jobs = NotifyJobs(settings, app.state.session_factory)
                app.state.notify_jobs.start()
                jobs = app.state.notify_jobs
                wake_ups[wakeups.OUTBOX_CHANNEL] = lambda _payload: jobs.wake()
                wakeups.subscribe(wakeups.OUTBOX_CHANNEL, app.state.notify_jobs.wake)
                scheduler.add_job(
                    app.state.notify_jobs.job,
                    "interval",
                    seconds=settings.notify_worker_interval_s,
                    id="notify-worker",
                    coalesce=True,
                    max_instances=1,
                )
            app.state.action_worker = ActionWorker(
                app.state.session_factory,
                timeout_s=settings.action_timeout_s,
                kubeconfig=settings.kubeconfig,
            )
            app.state.action_worker.start()
            action_worker = app.state.action_worker
            wake_ups[wakeups.ACTIONS_CHANNEL] = lambda _payload: action_worker.wake()
            wakeups.subscribe(wakeups.ACTIONS_CHANNEL, action_worker.wake)
            scheduler.add_job(
                action_worker.job,
                "interval",
                seconds=settings.action_worker_interval_s,
                id="action-worker",
                # At once: actions logged before a restart run on start.
                next_run_time=datetime.now(UTC),
                coalesce=True,
                max_instances=1,
            )
            automation = AutomationJob(app.state.session_factory, settings)
            scheduler.add_job(
                once_per_database(engine, "automation", automation.job),
                "interval",
                seconds=settings.action_worker_interval_s,
                id="automation",
                coalesce=True,
                max_instances=1,
            )
            backends = Backends.of(settings)
            if backends.scontrol is not None and not shutil.which(backends.scontrol):
                log.warning(
                    "FLEETWATCH_SLURM_SCONTROL=%s is not an executable command: drains and "
                    "resumes will fail until it is",
                    backends.scontrol,
                )
            if backends.names:
                scheduler.add_job(
                    once_per_database(engine, "workload-capture", workload_capture.job),
                    "interval",
                    seconds=settings.action_worker_interval_s,
                    args=[app.state.session_factory, backends],
                    id="workload-capture",
                    coalesce=True,
                    max_instances=1,
                )
            if settings.mirror_cordons and backends.scontrol and backends.kubeconfig:
                scheduler.add_job(
                    once_per_database(engine, "scheduler-mirror", mirror.job),
                    "interval",
                    seconds=mirror.MIRROR_INTERVAL_S,
                    args=[app.state.session_factory, backends],
                    id="scheduler-mirror",
                    coalesce=True,
                    max_instances=1,
                )
            elif settings.mirror_cordons:
                log.warning(
                    "FLEETWATCH_MIRROR_CORDONS is on but Slurm and Kubernetes are not both "
                    "managed (FLEETWATCH_SLURM_SCONTROL, FLEETWATCH_KUBECONFIG): nothing to mirror"
                )
            if settings.dcgm_endpoints or settings.dcgm_endpoints_file is not None:
                app.state.dcgm_job = ScrapeJob(
                    settings, app.state.session_factory, on_stored=_pulled_waker(app)
                )
                scheduler.add_job(
                    once_per_database(engine, "dcgm-pull", app.state.dcgm_job.job),
                    "interval",
                    seconds=settings.dcgm_scrape_interval_s,
                    id="dcgm-pull",
                    next_run_time=datetime.now(UTC),  # a pulled node shows at once
                    coalesce=True,
                    max_instances=1,
                )
            if wake_ups and engine.dialect.name == "postgresql":
                app.state.pg_listener = wakeups.PgListener(wakeups.libpq_url(engine), wake_ups)
                app.state.pg_listener.start()
            scheduler.start()
        try:
            yield
        finally:
            # No more wake-ups from other processes, then the jobs running now end (up to
            # job_drain_s) before engine.dispose() below: a job's connection checked in after it
            # went into the disposed pool, left open (tests/app/test_shutdown_waits_for_jobs.py).
            if getattr(app.state, "pg_listener", None) is not None:
                app.state.pg_listener.close()
            app.state.jobs_left_running = scheduler.drain(settings.job_drain_s)
            if getattr(app.state, "health_refresher", None) is not None:
                app.state.health_refresher.close()
            if getattr(app.state, "alert_evaluator", None) is not None:
                app.state.alert_evaluator.close()
            if getattr(app.state, "action_worker", None) is not None:
                wakeups.unsubscribe(wakeups.ACTIONS_CHANNEL, app.state.action_worker.wake)
                app.state.action_worker.close()
            if getattr(app.state, "notify_jobs", None) is not None:
                wakeups.unsubscribe(wakeups.OUTBOX_CHANNEL, app.state.notify_jobs.wake)
                app.state.notify_jobs.close()
            engine.dispose()

    app = FastAPI(
        title="Fleetwatch",
        version=__version__,
        summary="GPU-cluster operations: ingest API and read API",
        lifespan=lifespan,
        docs_url=None,  # served below from vendored assets: clusters are often air-gapped
        redoc_url=None,
    )
    app.state.settings = settings
    # The health rules in force, built once (the ingest groups every batch's events by them).
    app.state.health_rules = rules_from_settings(settings)
    # Whether this process runs the background jobs: the ingest router tells a worker process
    # about new batches when it does not (fleetwatch serve --no-jobs, fleetwatch worker).
    app.state.runs_jobs = run_jobs
    # Level 6 (zlib's default), not 9: a 1,000-node overview (900 KB) compresses in 9 ms instead
    # of 27 ms, 5 % larger.
    # Innermost: access is decided after the CSRF check and with the route known.
    app.add_middleware(
        AccessMiddleware,
        anonymous_role=None if settings.anonymous_role == "none" else Role[settings.anonymous_role],
        session_idle_s=settings.session_idle_s,
    )
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=6)
    app.add_middleware(PageTzCheckMiddleware)
    app.add_middleware(OriginCheckMiddleware, external_url=settings.external_url)
    app.add_middleware(SecurityHeadersMiddleware, external_url=settings.external_url)
    app.add_middleware(NulInUrlMiddleware)  # outermost

    app.mount("/static", StaticFiles(directory=PROJECT_ROOT / "static"), name="static")
    app.include_router(probes.router)
    app.include_router(ingest_router.router)
    app.include_router(dcgm_router.router)
    app.include_router(dcgm_router.pages)
    app.include_router(fleet_router.router)
    for feature in (storage_router, nic_router, nvlink_router, topology_router, health_router):
        app.include_router(feature.router)
    app.include_router(alerts_router.router)
    app.include_router(incidents_router.router)
    app.include_router(lifecycle_router.router)
    app.include_router(lifecycle_pages.router)
    app.include_router(maintenance_router.router)
    app.include_router(maintenance_pages.router)
    app.include_router(reliability_pages.router)
    app.include_router(incident_pages.router)
    app.include_router(workloads_router.router)
    app.include_router(workload_pages.router)
    app.include_router(notify_router.router)
    app.include_router(notify_pages.router)
    app.include_router(notify_ui_pages.router)
    app.include_router(fleet_pages.router)
    app.include_router(retire_pages.router)
    app.include_router(alert_pages.router)
    app.include_router(topology_pages.router)
    app.include_router(storage_pages.router)
    app.include_router(gpu_router.router)
    app.include_router(topology_drift_router.router)
    app.include_router(runbooks_router.router)
    app.include_router(series_pages.router)
    app.include_router(metrics_router.router)
    app.include_router(access_router.router)
    app.include_router(access_router.api)
    app.include_router(admin_pages.router)
    app.include_router(enroll_router.router)
    app.include_router(audit_router.router)
    app.include_router(audit_router.api)

    @app.exception_handler(FleetwatchError)
    async def _domain_error(request: Request, exc: FleetwatchError) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        if request.url.path.startswith("/api/"):
            return JSONResponse(
                {"detail": exc.detail}, status_code=exc.status_code, headers=headers
            )
        return render_error_page(request, status_code=exc.status_code, detail=exc.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path.startswith("/api/") or request.url.path.startswith("/static/"):
            return await http_exception_handler(request, exc)
        return render_error_page(request, status_code=exc.status_code, detail=str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(request: Request, exc: RequestValidationError) -> Response:
        if any(_names_a_secret(e.get("loc", ())) for e in exc.errors()):
            # A password, token or secret is never echoed back (nor kept by a proxy's log);
            # no input is echoed then, which also keeps NaN or a lone surrogate out of JSON.
            errors = [
                {k: v for k, v in e.items() if k not in ("input", "ctx")} for e in exc.errors()
            ]
            return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)
        try:
            return await request_validation_exception_handler(request, exc)
        except ValueError:  # the echoed input holds NaN/inf or a lone surrogate: JSON cannot
            errors = [
                {k: v for k, v in e.items() if k not in ("input", "ctx")} for e in exc.errors()
            ]
            return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)

    @app.exception_handler(OperationalError)
    async def _database_unavailable(request: Request, exc: OperationalError) -> Response:
        # A dropped connection (Postgres restarted, a failover, a connection cut), a
        # serialization failure, SQLite busy: the request may succeed at once when tried again
        # (the pool replaces the connection). 503 with Retry-After, which agents and clients
        # retry, and one log line instead of an unhandled error's traceback per request.
        reason = str(exc.orig).strip().splitlines()[0][:200] if exc.orig else type(exc).__name__
        log.warning("database unavailable for %s %s: %s", request.method, request.url.path, reason)
        detail = f"database unavailable, try again: {reason}"
        headers = {"Retry-After": "1"}
        if request.url.path.startswith("/api/"):
            return JSONResponse({"detail": detail}, status_code=503, headers=headers)
        page = render_error_page(request, status_code=503, detail=detail)
        page.headers["Retry-After"] = "1"
        return page

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        # FastAPI's get_swagger_ui_html starts Swagger UI from an inline script, which the
        # Content-Security-Policy refuses: the same page with the start-up in a static file.
        return HTMLResponse(
            "<!doctype html><html><head><title>Fleetwatch API</title>"
            '<link rel="icon" href="/static/favicon.svg">'
            f'<link rel="stylesheet" href="/static/vendor/swagger-ui-{SWAGGER_UI_VERSION}.css">'
            '</head><body><div id="swagger-ui"></div>'
            f'<script src="/static/vendor/swagger-ui-bundle-{SWAGGER_UI_VERSION}.js"></script>'
            '<script src="/static/js/swagger_init.js"></script>'
            "</body></html>"
        )

    return app
