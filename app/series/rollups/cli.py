"""``fleetwatch rollups rebuild [--since]``: recompute the rollup tables from the raw samples,
for a database upgraded to rollups with history already stored, or after a long spool replay of
host samples (which the job folds only within ``rollup_lookback_s``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

rollups_cli = typer.Typer(help="Minute and hour rollups of the samples.", no_args_is_help=True)


@rollups_cli.command("rebuild")
def rebuild(
    since: Annotated[
        str | None,
        typer.Option(help="RFC 3339 time to rebuild from (default: the oldest raw sample)"),
    ] = None,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL; default as for serve")
    ] = None,
) -> None:
    """Recompute every rollup bucket from ``--since`` to now (idempotent; safe while servers
    run: it waits for their fold job's run and holds the next off). Prints the buckets written
    per table."""
    from app.cli import _require_migrated, _settings
    from app.db import make_engine, make_session_factory
    from app.job_lock import holding
    from app.series.rollups.jobs import rebuild as rebuild_rollups
    from app.timebounds import checked_utc

    start = None
    if since is not None:
        try:
            start = checked_utc(datetime.fromisoformat(since.replace("Z", "+00:00")))
        except ValueError as exc:
            typer.echo(f"fleetwatch: --since: {exc}", err=True)
            raise typer.Exit(2) from None
    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        # The servers' fold job writes the same buckets: wait for its run, then hold it off.
        with holding(engine, "rollup-fold"):
            totals = rebuild_rollups(make_session_factory(engine), since=start)
    finally:
        engine.dispose()
    for table, (minutes, hours) in totals.items():
        typer.echo(f"{table}: {minutes} minute and {hours} hour buckets")
