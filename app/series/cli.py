"""``fleetwatch storage compact`` and ``fleetwatch storage stats``."""

from __future__ import annotations

from typing import Annotated

import typer

storage_cli = typer.Typer(help="The sample store: compaction and sizes.", no_args_is_help=True)

#: The longest ``--after`` accepted: ten years, in seconds.
MAX_AFTER_S = 3650 * 86400.0

DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL; default as for serve")
]


@storage_cli.command("compact")
def compact(
    after: Annotated[
        float | None,
        typer.Option(
            help="pack samples older than this many seconds (default FLEETWATCH_COMPACT_AFTER_S)"
        ),
    ] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Pack raw GPU, NVLink, disk, mount, NFS and IB port samples older than the horizon into
    blocks, 128 GPUs or 32 nodes per transaction (resumable: stop it at any time, run it
    again). Safe while the server runs.

    Only whole blocks are packed (GPU: hours, NVLink: 6 hours, host tables: days), and each GPU
    and node keeps its newest 10 minutes raw; samples stay raw as long as an enabled alert
    rule's window on them or the health throttle (GPU) and event (IB ports) windows reach back,
    and GPU samples until the rollups have folded them. GPU 1-minute rollups older than
    FLEETWATCH_COMPACT_MINUTES_AFTER_DAYS are packed by day, the disk, NFS and IB port ones
    after FLEETWATCH_COMPACT_HOST_MINUTES_AFTER_DAYS."""
    from app.cli import _require_migrated, _settings
    from app.db import make_engine, make_session_factory
    from app.job_lock import holding
    from app.series.jobs import run as run_compact

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    horizon_s = settings.compact_after_s if after is None else after
    if not 0 <= horizon_s <= MAX_AFTER_S:  # also refuses NaN
        typer.echo(f"fleetwatch: --after: expected 0 to {MAX_AFTER_S:.0f} seconds", err=True)
        raise typer.Exit(2)
    engine = make_engine(settings.effective_database_url)
    try:
        if engine.dialect.name != "postgresql":
            typer.echo("SQLite keeps raw rows: nothing to compact")
            return
        with holding(engine, "series-compaction"):  # not beside a server's compaction run
            result = run_compact(
                make_session_factory(engine),
                compact_after_s=horizon_s,
                health_throttle_window_s=settings.health_throttle_window_s,
                health_event_window_s=settings.health_event_window_s,
                minutes_after_days=settings.compact_minutes_after_days,
                host_minutes_after_days=settings.compact_host_minutes_after_days,
            )
    finally:
        engine.dispose()
    for table, reason in result.waiting.items():
        typer.echo(f"{table}: {reason}")
    for table, packed in result.rows_packed.items():
        typer.echo(
            f"{table}: {packed} rows packed into {result.blocks_written[table]} blocks, "
            f"{result.blocks_reopened[table]} blocks re-opened for late rows"
        )


@storage_cli.command("stats")
def stats(
    exact: Annotated[bool, typer.Option(help="count raw rows exactly (slow)")] = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Per sample table: size on disk, rows, samples, values and bytes per value."""
    from app.cli import _require_migrated, _settings
    from app.db import make_engine, make_session_factory, session_scope
    from app.series.stats import table_stats

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            rows = table_stats(session, exact=exact)
    except ValueError as exc:
        typer.echo(f"fleetwatch: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        engine.dispose()
    head = f"{'table':<26}{'tier':<16}{'size':>12}{'rows':>14}{'samples':>14}{'B/value':>9}"
    typer.echo(f"{head}{'rows/s':>10}")
    for s in rows:
        per = "-" if s.bytes_per_value is None else f"{s.bytes_per_value:.2f}"
        rate = "-" if s.rows_per_s is None else f"{s.rows_per_s:.1f}"
        typer.echo(
            f"{s.table:<26}{s.tier:<16}{s.size_bytes / 2**20:>10.1f}Mi{s.rows:>14,}"
            f"{s.samples:>14,}{per:>9}{rate:>10}"
        )
