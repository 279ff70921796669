"""``fleetwatch`` command line: ``migrate``, ``serve``, ``token create|revoke``, ``node
retire|return``, ``rules apply|export``, ``demo`` … on the database; ``nodes``, ``alerts``,
``incidents``, ``silence``, ``ack``, ``health`` against a server (:mod:`app.client_cli`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from app.config import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

cli = typer.Typer(help="Fleetwatch: GPU-cluster operations dashboard.", no_args_is_help=True)
token_cli = typer.Typer(help="Per-node ingest tokens.", no_args_is_help=True)
cli.add_typer(token_cli, name="token")
node_cli = typer.Typer(help="Take nodes out of the fleet and back.", no_args_is_help=True)
cli.add_typer(node_cli, name="node")
rules_cli = typer.Typer(help="Alert rules as YAML files.", no_args_is_help=True)
cli.add_typer(rules_cli, name="rules")
from app.series.rollups.cli import rollups_cli  # noqa: E402

cli.add_typer(rollups_cli, name="rollups")
from app.series.cli import storage_cli  # noqa: E402

cli.add_typer(storage_cli, name="storage")
from app.lifecycle.cli import lifecycle_cli  # noqa: E402

cli.add_typer(lifecycle_cli, name="lifecycle")
from app.maintenance.cli import maintenance_cli  # noqa: E402

cli.add_typer(maintenance_cli, name="maintenance")
from app.access.cli import api_token_cli, enroll_token_cli, user_cli  # noqa: E402

cli.add_typer(user_cli, name="user")
cli.add_typer(api_token_cli, name="api-token")
cli.add_typer(enroll_token_cli, name="enroll-token")
from app.client_cli import register as register_client_commands  # noqa: E402

register_client_commands(cli)

DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL (postgresql://… or sqlite:///…); default FLEETWATCH_DATABASE_URL, "
        "else the embedded SQLite file.",
    ),
]


def _settings(**overrides: Any) -> Settings:
    """Load settings or exit 2 with the message naming the bad setting."""
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SettingsError as exc:
        typer.echo(f"fleetwatch: {exc}", err=True)
        raise typer.Exit(2) from None


def _prepare_sqlite_dir(settings: Settings) -> None:
    """Create the data directory the embedded SQLite database lives in."""
    if settings.database_url is None:
        settings.data_dir.mkdir(parents=True, exist_ok=True)


def _display_url(settings: Settings) -> str:
    from sqlalchemy.engine import make_url

    return make_url(settings.effective_database_url).render_as_string(hide_password=True)


def _require_migrated(settings: Settings, hint: str = "") -> None:
    """Exit 2 with advice when the database is missing or not at the newest schema, instead of
    a traceback (and without creating an empty SQLite file)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from app.db import make_engine
    from app.migrate import is_up_to_date

    url = settings.effective_database_url
    parsed = make_url(url)
    problem = None
    is_file_db = parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "")
    if is_file_db and parsed.database != ":memory:" and not Path(str(parsed.database)).is_file():
        problem = "does not exist yet"
    if problem is None:
        engine = make_engine(url)
        try:
            if not is_up_to_date(engine, url):
                problem = "is not at the newest schema"
        except SQLAlchemyError as exc:
            _fail_unreachable(settings, exc)
        finally:
            engine.dispose()
    if problem:
        typer.echo(
            f"fleetwatch: database {_display_url(settings)} {problem}: "
            f"run 'fleetwatch migrate' first{hint}",
            err=True,
        )
        raise typer.Exit(2)


_UNREACHABLE_ADVICE = (
    "check FLEETWATCH_DATABASE_URL (or --database-url) and that the database server is up"
)


def _fail_unreachable(settings: Settings, exc: Exception) -> NoReturn:
    """Exit 2 with one line naming the database that cannot be opened and why: a database
    that is not up yet (a migrate Job started before Postgres) is no reason for a traceback,
    nor for the advice to migrate."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    typer.echo(
        f"fleetwatch: database {_display_url(settings)} cannot be opened "
        f"({exc.__class__.__name__}: {first}): {_UNREACHABLE_ADVICE}",
        err=True,
    )
    raise typer.Exit(2)


def _upgrade(settings: Settings) -> None:
    """Migrate the database to the newest schema; one line, not a traceback, when it cannot
    be reached."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from app.migrate import upgrade

    try:
        upgrade(settings.effective_database_url)
    except (OperationalError, InterfaceError) as exc:
        _fail_unreachable(settings, exc)


def _fail(message: str) -> None:
    """Exit 2 with ``fleetwatch: message`` on stderr."""
    typer.echo(f"fleetwatch: {message}", err=True)
    raise typer.Exit(2)


def _is_postgres(settings: Settings) -> bool:
    from sqlalchemy.engine import make_url

    return make_url(settings.effective_database_url).get_backend_name() == "postgresql"


@cli.command()
def migrate(database_url: DatabaseOpt = None) -> None:
    """Create or upgrade the database schema to the newest migration."""
    settings = _settings(database_url=database_url)
    _prepare_sqlite_dir(settings)
    _upgrade(settings)
    typer.echo(f"database {_display_url(settings)} is at the newest schema")


@cli.command()
def serve(
    database_url: DatabaseOpt = None,
    host: Annotated[str | None, typer.Option(help="listen address (FLEETWATCH_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="listen port (FLEETWATCH_PORT)")] = None,
    migrate_first: Annotated[
        bool, typer.Option("--migrate/--no-migrate", help="upgrade the schema before serving")
    ] = False,
    jobs: Annotated[
        bool,
        typer.Option(
            "--jobs/--no-jobs",
            help="run the background jobs in this process too; --no-jobs beside a "
            "'fleetwatch worker' (Postgres)",
        ),
    ] = True,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=64,
            help="web processes sharing the port (Postgres): ingest and pages on several cores; "
            "with more than 1, the jobs run in one 'fleetwatch worker' child beside them",
        ),
    ] = 1,
) -> None:
    """Run the server (API and pages) in the foreground."""
    import uvicorn

    from app.job_scheduler import exit_if_jobs_left_running
    from app.main import create_app

    settings = _settings(database_url=database_url, host=host, port=port)
    _prepare_sqlite_dir(settings)
    if not jobs and not _is_postgres(settings):
        _fail("--no-jobs needs Postgres: with SQLite the one server process runs the jobs")
    if workers > 1 and not _is_postgres(settings):
        _fail("--workers needs Postgres: SQLite takes one writing process")
    if migrate_first:
        _upgrade(settings)
    _require_migrated(settings, hint=" (or 'fleetwatch serve --migrate')")
    if workers == 1:
        server_app = create_app(settings, run_jobs=jobs)
        try:
            uvicorn.run(
                server_app, host=settings.host, port=settings.port, log_level=settings.log_level
            )
        finally:
            exit_if_jobs_left_running(getattr(server_app.state, "jobs_left_running", []))
        return
    _serve_workers(settings, workers=workers, jobs=jobs)


def _serve_workers(settings: Settings, *, workers: int, jobs: bool) -> None:
    """``serve --workers N``: uvicorn's N processes on one socket, each building its app from
    the environment (:mod:`app.web_workers`), and with ``jobs`` a ``fleetwatch worker`` child
    for the background jobs, stopped when the server stops. The children count their
    ``fleetwatch_*`` metrics in prometheus-client's multiprocess mode, in
    ``PROMETHEUS_MULTIPROC_DIR`` or else a fresh directory removed at the end, so that every
    scrape sums all of them (:mod:`app.exporter.counters`)."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    import uvicorn

    # The children read their settings from the environment: what the options set goes there.
    os.environ["FLEETWATCH_DATABASE_URL"] = settings.effective_database_url
    metrics_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        metrics_dir = tempfile.mkdtemp(prefix="fleetwatch-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    child = None
    if jobs:
        child = subprocess.Popen([sys.executable, "-m", "app", "worker"])
    try:
        uvicorn.run(
            "app.web_workers:app_factory",
            factory=True,
            workers=workers,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
        )
    finally:
        if child is not None:
            child.terminate()
            try:
                # Its drain of running jobs, then the rest of its shutdown.
                child.wait(timeout=settings.job_drain_s + 15)
            except subprocess.TimeoutExpired:
                child.kill()
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


@cli.command()
def worker(database_url: DatabaseOpt = None) -> None:
    """Run the background jobs (health, alerts, notifications, rollups, compaction, retention,
    drift) without serving HTTP, beside 'fleetwatch serve --no-jobs' processes (Postgres).
    Stops on SIGTERM or Ctrl-C."""
    import signal
    import threading

    from app.job_scheduler import exit_if_jobs_left_running
    from app.worker import run_worker

    settings = _settings(database_url=database_url)
    if not _is_postgres(settings):
        _fail("fleetwatch worker needs Postgres: with SQLite 'fleetwatch serve' runs the jobs")
    _require_migrated(settings)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    typer.echo(f"fleetwatch worker on {_display_url(settings)}")
    left_running = run_worker(settings, stop)
    typer.echo("fleetwatch worker stopped")
    exit_if_jobs_left_running(left_running)


@token_cli.command("create")
def token_create(
    hostname: Annotated[str, typer.Argument(help="the node's hostname, as its agent reports it")],
    database_url: DatabaseOpt = None,
) -> None:
    """Create an ingest token for NODE and print it (once: only its digest is stored)."""
    from app.auth import service as auth_service
    from app.db import make_engine, make_session_factory, session_scope

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            _, token = auth_service.create_token(session, hostname=hostname)
    except ValueError as exc:
        typer.echo(f"fleetwatch: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        engine.dispose()
    typer.echo(token)


@contextmanager
def _session(database_url: str | None) -> Iterator[Session]:
    """A session on the configured database (exit 2 with advice when it is missing or not
    migrated), committed at the end; an error a service raises on purpose (unknown node,
    conflict) exits 1 with its message."""
    from app.db import make_engine, make_session_factory, session_scope
    from app.errors import FleetwatchError

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            yield session
    except FleetwatchError as exc:
        typer.echo(f"fleetwatch: {exc.detail}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()


@node_cli.command("retire")
def node_retire(
    hostname: Annotated[str, typer.Argument(help="the node's hostname")],
    reason: Annotated[
        str, typer.Option("--reason", help="why: decommissioned, replaced, renamed …")
    ],
    database_url: DatabaseOpt = None,
) -> None:
    """Retire NODE: revoke its tokens; it leaves the fleet's lists, counts, health and alerts
    (they resolve at the next evaluation); its history stays. A batch under a new token brings
    it back."""
    from app.fleet import retire

    try:
        with _session(database_url) as session:
            _, revoked = retire.retire(session, hostname=hostname, reason=reason)
    except ValueError as exc:
        typer.echo(f"fleetwatch: --{exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"retired {hostname}; revoked {revoked} token(s)")


@node_cli.command("return")
def node_return(
    hostname: Annotated[str, typer.Argument(help="the node's hostname")],
    database_url: DatabaseOpt = None,
) -> None:
    """Return a retired NODE to the fleet (give its agent a new token if its were revoked)."""
    from app.fleet import retire

    with _session(database_url) as session:
        retire.return_to_service(session, hostname=hostname)
    typer.echo(f"{hostname} is back in the fleet")


@token_cli.command("revoke")
def token_revoke(hostname: str, database_url: DatabaseOpt = None) -> None:
    """Revoke every token of NODE; its agent gets 401 until given a new one."""
    from app.auth import service as auth_service

    with _session(database_url) as session:
        count = auth_service.revoke_tokens(session, hostname=hostname)
    typer.echo(f"revoked {count} token(s) of {hostname}")


@rules_cli.command("apply")
def rules_apply(
    path: Annotated[
        Path | None, typer.Argument(help="a rule file, or a directory of *.yaml / *.yml files")
    ] = None,
    defaults: Annotated[
        bool, typer.Option("--defaults", help="apply the default rule pack shipped with Fleetwatch")
    ] = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Create or update rules by name (idempotent); reports created / updated / unchanged.
    Nothing is applied when any file has an error; errors give file and line (exit 1)."""
    from app.alerts.rule_reach import Kept
    from app.alerts.rulefiles import DEFAULT_RULES_DIR, RuleFilesInvalid, apply_path
    from app.audit import service as audit
    from app.db import make_engine, make_session_factory, session_scope

    if (path is None) == (not defaults):
        typer.echo("fleetwatch: give a FILE|DIR or --defaults (one of them)", err=True)
        raise typer.Exit(2)
    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        with (
            session_scope(make_session_factory(engine)) as session,
            audit.collecting_changes() as changes,
        ):
            report = apply_path(
                session, path=path or DEFAULT_RULES_DIR, defaults=defaults, kept=Kept.of(settings)
            )
            # Only what changed is recorded (an apply of unchanged files is a no-op), with
            # each rule's state before and after, as the API's changes are.
            if changes:
                audit.record(
                    session,
                    actor="cli",
                    action="rules.apply",
                    target={"path": "defaults" if defaults else str(path)},
                    detail=audit.change_detail(changes),
                )
    except RuleFilesInvalid as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    inhibit = report.inhibit
    for word, names in (
        ("created", report.created),
        ("updated", report.updated),
        ("unchanged", report.unchanged),
        ("created inhibition rule", inhibit.created),
        ("updated inhibition rule", inhibit.updated),
        ("unchanged inhibition rule", inhibit.unchanged),
    ):
        for name in names:
            typer.echo(f"{word}: {name}")
    typer.echo(
        f"{len(report.created)} created, {len(report.updated)} updated, "
        f"{len(report.unchanged)} unchanged"
        + (
            f"; inhibition rules: {len(inhibit.created)} created, {len(inhibit.updated)} "
            f"updated, {len(inhibit.unchanged)} unchanged"
            if inhibit.created or inhibit.updated or inhibit.unchanged
            else ""
        )
    )


@rules_cli.command("export")
def rules_export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="write here instead of stdout")
    ] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Print every stored rule and inhibition rule as YAML that ``rules apply`` takes back
    unchanged."""
    from app.alerts.rulefiles import export_yaml
    from app.db import make_engine, make_session_factory, session_scope

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            text = export_yaml(session)
    finally:
        engine.dispose()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")


@cli.command()
def demo(
    port: Annotated[int, typer.Option(help="port of the demo server")] = 8000,
    host: Annotated[str, typer.Option(help="listen address")] = "127.0.0.1",
    nodes: Annotated[int, typer.Option(min=1, max=2000, help="simulated nodes")] = 16,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            min=1, max=16, help="GPUs per node (default: a mix of 8-GPU HGX and 4-GPU PCIe nodes)"
        ),
    ] = None,
    interval: Annotated[float, typer.Option(min=0.2, help="agent sampling interval, s")] = 1.0,
    random_faults: Annotated[
        bool, typer.Option("--random-faults/--no-random-faults", help="inject faults now and then")
    ] = True,
    database_url: DatabaseOpt = None,
    webhook: Annotated[
        str | None,
        typer.Option(help="also POST every team's alerts to this URL (generic webhook)"),
    ] = None,
    webhook_secret: Annotated[
        str | None, typer.Option(help="HMAC-SHA256 key signing the webhook's requests")
    ] = None,
    pull_dcgm: Annotated[
        list[str] | None,
        typer.Option(
            "--pull-dcgm",
            metavar="URL",
            help="also scrape this dcgm-exporter /metrics URL (repeatable): its node shows "
            "beside the simulated ones (docs/dcgm-pull.md; python -m app.dcgm.serve FILE "
            "serves a capture)",
        ),
    ] = None,
) -> None:
    """Migrate, serve, and run a simulated fleet pushing over real HTTP. Ctrl-C stops all."""
    import os
    from urllib.parse import urlsplit

    from app.demo import run_demo

    # The demo's agents batch every 5 s: a node silent for 30 s is stale (unless set otherwise).
    stale = None if os.environ.get("FLEETWATCH_STALE_AFTER_S") else 30.0
    settings = _settings(database_url=database_url, host=host, port=port, stale_after_s=stale)
    if webhook:
        host_name = (urlsplit(webhook).hostname or "").lower()
        if urlsplit(webhook).scheme not in ("http", "https") or not host_name:
            typer.echo("fleetwatch: --webhook: expected an http:// or https:// URL", err=True)
            raise typer.Exit(2)
        # The user named this receiver: let it be local (the SSRF guard still covers others).
        allow = [*settings.notify_allow_hosts, host_name]
        settings = settings.model_copy(update={"notify_allow_hosts": allow})
    if pull_dcgm:
        from app.dcgm.targets import TargetsError, check_url

        try:
            urls = [check_url(u) for u in pull_dcgm]
        except TargetsError as exc:
            typer.echo(f"fleetwatch: --pull-dcgm: {exc}", err=True)
            raise typer.Exit(2) from None
        # Scraped as often as the simulated agents push, so the pulled node is never stale.
        interval_set = os.environ.get("FLEETWATCH_DCGM_SCRAPE_INTERVAL_S")
        update: dict[str, object] = {"dcgm_endpoints": [*settings.dcgm_endpoints, *urls]}
        if not interval_set:
            update["dcgm_scrape_interval_s"] = 5.0
        settings = settings.model_copy(update=update)
    _prepare_sqlite_dir(settings)
    raise typer.Exit(
        run_demo(
            settings,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            interval_s=interval,
            random_faults=random_faults,
            work_dir=Path(settings.data_dir) / "demo",
            webhook=webhook,
            webhook_secret=webhook_secret,
        )
    )


@cli.command()
def simulate(
    server: Annotated[str, typer.Option(help="base URL of a running Fleetwatch server")],
    nodes: Annotated[int, typer.Option(min=1, max=2000, help="simulated nodes")] = 16,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            min=1, max=16, help="GPUs per node (default: a mix of 8-GPU HGX and 4-GPU PCIe nodes)"
        ),
    ] = None,
    interval: Annotated[float, typer.Option(min=0.2, help="agent sampling interval, s")] = 1.0,
    random_faults: Annotated[
        bool, typer.Option("--random-faults/--no-random-faults", help="inject faults now and then")
    ] = True,
    database_url: DatabaseOpt = None,
) -> None:
    """Create tokens and run a simulated fleet against a server that runs elsewhere."""
    from app.demo import run_fleet

    settings = _settings(database_url=database_url)
    raise typer.Exit(
        run_fleet(
            settings,
            server_url=server.rstrip("/"),
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            interval_s=interval,
            random_faults=random_faults,
            work_dir=Path(settings.data_dir) / "simulate",
        )
    )


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for noisy in ("alembic", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cli()
