"""``fleetwatch silence --match … --for …`` (create), ``fleetwatch silence list`` and
``fleetwatch silence expire ID``: Alertmanager-style silences over ``/api/v1/silences``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from app.client_cli.options import (
    DEFAULT_SERVER,
    JsonOpt,
    ServerOpt,
    TimeoutOpt,
    TokenOpt,
    connect,
)
from app.client_cli.output import Column, age, echo, print_json, print_table

silence_cli = typer.Typer(
    help="Silences: mute the alerts whose labels match, for a while.\n\n"
    "Create one with 'fleetwatch silence --match LABEL=VALUE --for 2h --comment TEXT'; "
    "list and expire them with the commands below.",
    no_args_is_help=True,
)

COLUMNS = (
    Column("ID", 8),
    Column("MATCHERS", 50),
    Column("STARTS", 10),
    Column("ENDS", 12),
    Column("BY", 24),
    Column("COMMENT", 60),
)


def parse_matchers(values: list[str]) -> list[dict[str, str]]:
    """``--match``: each ``name=value``, ``name!=value``, ``name=~regex`` or
    ``name!~regex`` as a matcher object (regexes are RE2, matched against the whole value).

    Raises:
        typer.BadParameter: naming ``--match``: another form, a bad label name or a regex RE2
            cannot compile.
    """
    from app.maintenance.cli import parse_matcher

    try:
        return [parse_matcher(v) for v in values]
    except typer.BadParameter as exc:
        raise typer.BadParameter(exc.message, param_hint="'--match'") from None


def parse_for(value: str) -> float:
    """``--for``: a Prometheus-style duration (``90m``, ``2h``, ``1d12h``) → seconds > 0.

    Raises:
        typer.BadParameter: naming ``--for``: not a duration, zero, or over a year.
    """
    from app.alerts.spec import parse_duration

    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--for'") from None
    if seconds <= 0:
        raise typer.BadParameter(
            f"a silence lasts longer than {value!r} (e.g. 30m, 2h, 1d)", param_hint="'--for'"
        )
    return seconds


def matchers_text(matchers: list[dict[str, Any]]) -> str:
    """``alertname=gpu-lost hostname=~gpu-0.*``: the matchers as they are typed."""
    return " ".join(f"{m['name']}{m['op']}{m['value']}" for m in matchers)


@silence_cli.callback(invoke_without_command=True)
def create(
    ctx: typer.Context,
    match: Annotated[
        list[str] | None,
        typer.Option(
            "--match",
            help="LABEL=VALUE (also !=, =~ regex, !~ regex); repeatable, all must hold",
        ),
    ] = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="how long: 30m, 2h, 1d (at most 365d)")
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help="who silences (default: user@host)")
    ] = None,
    comment: Annotated[str | None, typer.Option("--comment", help="why (required)")] = None,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Create a silence from now for --for, or run a command below.

    --json: the silence as POST /api/v1/silences answers. Exit 1 when the server refuses (its
    reason is printed) or cannot be reached.
    """
    from app.lifecycle.cli import _default_actor

    if ctx.invoked_subcommand is not None:
        if match or for_ or comment:
            raise typer.BadParameter(
                "--match, --for and --comment create a silence; "
                f"'silence {ctx.invoked_subcommand}' takes none of them"
            )
        return
    if not match:
        raise typer.BadParameter("give at least one LABEL=VALUE", param_hint="'--match'")
    matchers = parse_matchers(match)
    if for_ is None:
        raise typer.BadParameter("how long, e.g. --for 2h", param_hint="'--for'")
    seconds = parse_for(for_)
    if not comment or not comment.strip():
        raise typer.BadParameter("say why the alerts are muted", param_hint="'--comment'")
    ends_at = datetime.now(UTC) + timedelta(seconds=seconds)
    body = {
        "matchers": matchers,
        "ends_at": ends_at.isoformat(),
        "created_by": by if by is not None else _default_actor(),
        "comment": comment,
    }
    with connect(server, token, timeout) as api:
        made = api.post("/silences", body)
    if json_:
        print_json(made)
        return
    echo(
        f"silence {made['id']}: {matchers_text(made['matchers'])} until {made['ends_at']} "
        f"by {made['created_by']}: {made['comment']}"
    )


@silence_cli.command("list")
def list_silences(
    all_: Annotated[bool, typer.Option("--all", help="expired silences too")] = False,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Silences not yet ended, newest first (--all: expired ones too).

    --json: GET /api/v1/silences as it is.
    """
    with connect(server, token, timeout) as api:
        rows = api.get("/silences", include_expired="true" if all_ else None)
    if json_:
        print_json(rows)
        return
    now = datetime.now(UTC)
    cells = [
        [
            s["id"],
            matchers_text(s["matchers"]),
            age(s["starts_at"], now=now),
            age(s["ends_at"], now=now),
            s["created_by"],
            s["comment"],
        ]
        for s in rows
    ]
    print_table(COLUMNS, cells, empty="no silence" + ("" if all_ else " in force or to come"))


@silence_cli.command("expire")
def expire(
    silence_id: Annotated[int, typer.Argument(min=1, help="the silence's id (silence list)")],
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """End a silence now.

    --json: the silence as the API answers. Exit 1 for an unknown id.
    """
    with connect(server, token, timeout) as api:
        done = api.post(f"/silences/{silence_id}/expire")
    if json_:
        print_json(done)
        return
    echo(f"silence {done['id']} expired at {done['ends_at']}")
