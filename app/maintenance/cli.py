"""``fleetwatch maintenance list|start|end``: maintenance windows from the command line, on
the database directly (as ``fleetwatch lifecycle``)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated

import typer

maintenance_cli = typer.Typer(
    help="Maintenance windows: nodes whose alerts are muted and that automation leaves alone.",
    no_args_is_help=True,
)

DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL; default as for serve")
]
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(=~|!~|!=|=)(.*)", re.DOTALL)


def parse_matcher(text: str) -> dict[str, str]:
    """``rack=r12``, ``gpu_model!=H100``, ``hostname=~gpu-0[1-4]`` → a matcher.

    Raises:
        typer.BadParameter: not ``name`` ``op`` ``value`` with op ``=``, ``!=``, ``=~``, ``!~``,
            or a regex RE2 cannot compile.
    """
    from pydantic import ValidationError

    from app.alerts.schemas import Matcher

    found = _MATCHER.fullmatch(text.strip())
    if found is None:
        raise typer.BadParameter(
            f"{text!r}: expected LABEL=VALUE (or !=, =~ regex, !~ regex), e.g. rack=r12"
        )
    name, op, value = found.groups()
    try:
        return Matcher(name=name, op=op, value=value).model_dump()  # type: ignore[arg-type]
    except ValidationError as exc:
        raise typer.BadParameter(f"{text!r}: {exc.errors()[0]['msg']}") from None


def _when(text: str, option: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{option}: {text!r} is not an ISO 8601 time (e.g. 2026-12-05T22:00:00Z)"
        ) from None
    if value.tzinfo is None:
        raise typer.BadParameter(f"{option}: {text!r} needs a time zone (Z or +01:00)")
    return value


@maintenance_cli.command("start")
def start(
    hostname: Annotated[str | None, typer.Argument(help="one node (or use --match)")] = None,
    match: Annotated[
        list[str] | None,
        typer.Option("--match", help="LABEL=VALUE (also !=, =~, !~); all must hold; repeatable"),
    ] = None,
    reason: Annotated[str, typer.Option("--reason", help="why (required)")] = "",
    for_: Annotated[
        str | None, typer.Option("--for", help="how long, e.g. 4h, 90m, 2d (or --until)")
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="end, ISO 8601 with zone")] = None,
    begins: Annotated[
        str | None, typer.Option("--start", help="start, ISO 8601 with zone (default: now)")
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="who (default: user@host)")] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Put one node or the nodes --match selects in maintenance; prints the window."""
    from app.alerts import service as alerts_service
    from app.alerts.spec import parse_duration
    from app.cli import _session
    from app.db import utcnow
    from app.fleet import service as fleet_service
    from app.lifecycle.cli import _default_actor
    from app.maintenance import service

    if (hostname is None) == (not match):
        raise typer.BadParameter("give exactly one of a HOSTNAME or --match LABEL=VALUE")
    if (for_ is None) == (until is None):
        raise typer.BadParameter("give --for DURATION or --until TIME")
    matchers = [parse_matcher(m) for m in match or []]
    starts_at = _when(begins, "--start") if begins else utcnow()
    if for_ is not None:
        try:
            ends_at = starts_at + timedelta(seconds=parse_duration(for_))
        except (ValueError, OverflowError) as exc:
            raise typer.BadParameter(f"--for: {exc}") from None
    else:
        ends_at = _when(until or "", "--until")
    with _session(database_url) as session:
        if hostname is not None:
            node = fleet_service.get_node_by_hostname(session, hostname=hostname)
            matchers = service.host_matchers(node.hostname)
        window = service.create(
            session,
            matchers=matchers,
            reason=reason,
            starts_at=starts_at,
            ends_at=ends_at,
            created_by=by or _default_actor(),
        )
        alerts_service.refresh_silenced(session)
        nodes = service.selected(session, matchers)
        typer.echo(
            f"maintenance window {window.id}: {len(nodes)} node(s) "
            f"{window.starts_at.isoformat()} → {window.ends_at.isoformat()}: {', '.join(nodes)}"
        )


@maintenance_cli.command("end")
def end(
    window_id: Annotated[
        int,
        typer.Argument(help="the window's id (fleetwatch maintenance list)", min=1, max=2**31 - 1),
    ],
    by: Annotated[str | None, typer.Option("--by", help="who (default: user@host)")] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """End a window now (cancel one not started yet)."""
    from app.alerts import service as alerts_service
    from app.cli import _session
    from app.lifecycle.cli import _default_actor
    from app.maintenance import service

    with _session(database_url) as session:
        window = service.end(session, window_id=window_id, actor=by or _default_actor())
        alerts_service.refresh_silenced(session)
        typer.echo(f"maintenance window {window.id} ended at {window.ends_at.isoformat()}")


@maintenance_cli.command("list")
def list_windows(
    all_: Annotated[bool, typer.Option("--all", help="ended windows too")] = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Windows in force or to come (with --all, every window, newest first)."""
    from app.cli import _session
    from app.maintenance import service

    with _session(database_url) as session:
        windows = service.listing(session, include_ended=all_)
        if not windows:
            typer.echo("no maintenance window" + ("" if all_ else " in force or to come"))
        for w in windows:
            scope = " ".join(f"{m['name']}{m['op']}{m['value']}" for m in w.matchers)
            nodes = service.selected(session, w.matchers)
            typer.echo(
                f"{w.id}  {w.starts_at.isoformat()} → {w.ends_at.isoformat()}  [{scope}] "
                f"{len(nodes)} node(s)  by {w.created_by}"
                + (f", ended by {w.ended_by}" if w.ended_by else "")
                + f": {w.reason}"
            )
