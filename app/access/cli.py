"""``fleetwatch user create|passwd|list``, ``fleetwatch api-token create|list|revoke`` and
``fleetwatch enroll-token create|list|revoke`` on the database (for the first admin, before
anyone can log in)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from app.access.roles import Role

user_cli = typer.Typer(help="Local users (log in to the pages).", no_args_is_help=True)
api_token_cli = typer.Typer(help="API tokens for automation.", no_args_is_help=True)
enroll_token_cli = typer.Typer(
    help="Enrollment tokens: new nodes' agents exchange one for their own token.",
    no_args_is_help=True,
)

DatabaseOpt = Annotated[
    str | None,
    typer.Option("--database-url", help="SQLAlchemy URL; default FLEETWATCH_DATABASE_URL."),
]


def _role(text: str) -> Role:
    try:
        return Role.parse(text)
    except ValueError as exc:
        typer.echo(f"fleetwatch: --role: {exc}", err=True)
        raise typer.Exit(2) from None


@user_cli.command("create")
def user_create(
    name: Annotated[str, typer.Argument(help="the login name")],
    admin: Annotated[bool, typer.Option("--admin", help="same as --role admin")] = False,
    role: Annotated[
        str, typer.Option("--role", help="viewer, responder, editor or admin")
    ] = "viewer",
    team: Annotated[
        list[str] | None, typer.Option("--team", help="a team (repeat for more)")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="read the password from standard input")
    ] = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Create a user and print its one-time password (unless --password-stdin)."""
    from app.access import users
    from app.audit import service as audit
    from app.cli import _session

    chosen = Role.admin if admin else _role(role)
    password = sys.stdin.readline().rstrip("\n") if password_stdin else None
    with _session(database_url) as session:
        user, secret = users.create_user(
            session, name=name, role=chosen, teams=team or [], password=password
        )
        audit.record(
            session,
            actor="cli",
            action="user.create",
            target={"user": user.name},
            detail={"after": {"role": user.role, "teams": sorted(team or [])}},
        )
    typer.echo(f"created {chosen.name} {name}" + (f" in {', '.join(team)}" if team else ""))
    if password is None:
        typer.echo(f"one-time password: {secret}")


@user_cli.command("passwd")
def user_passwd(
    name: Annotated[str, typer.Argument(help="the login name")],
    database_url: DatabaseOpt = None,
) -> None:
    """Set NAME's password from standard input (its open sessions are ended)."""
    from app.access import sessions, users
    from app.audit import service as audit
    from app.cli import _session

    password = sys.stdin.readline().rstrip("\n")
    with _session(database_url) as session:
        users.set_password(session, name=name, password=password)
        sessions.revoke_user_sessions(session, users.get_user(session, name).id)
        audit.record(session, actor="cli", action="user.passwd", target={"user": name})
    typer.echo(f"password of {name} changed")


@user_cli.command("list")
def user_list(database_url: DatabaseOpt = None) -> None:
    """Every user: name, role, teams."""
    from app.access import users
    from app.cli import _session

    with _session(database_url) as session:
        for user, teams in users.list_users(session):
            state = "" if user.active else " (disabled)"
            typer.echo(f"{user.name}\t{user.role}\t{','.join(sorted(teams)) or '-'}{state}")


@api_token_cli.command("create")
def api_token_create(
    name: Annotated[str, typer.Argument(help="what the token is for, e.g. ci-silences")],
    role: Annotated[
        str, typer.Option("--role", help="viewer, responder, editor or admin")
    ] = "viewer",
    team: Annotated[str | None, typer.Option("--team", help="the one team it acts for")] = None,
    ttl_days: Annotated[
        float | None, typer.Option("--ttl-days", min=0.001, help="expires after; default never")
    ] = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Create an API token and print it (once: only its digest is stored)."""
    from app.access import tokens
    from app.audit import service as audit
    from app.cli import _session

    chosen = _role(role)
    with _session(database_url) as session:
        row, secret = tokens.create_token(
            session,
            name=name,
            role=chosen,
            team=team,
            created_by="cli",
            ttl_s=ttl_days * 86400 if ttl_days is not None else None,
        )
        audit.record(
            session,
            actor="cli",
            action="token.create",
            target={"token_id": row.id},
            detail={"after": {"name": name, "role": chosen.name, "team": team}},
        )
    typer.echo(secret)


@api_token_cli.command("revoke")
def api_token_revoke(
    token_id: Annotated[int, typer.Argument(help="the token's id (fleetwatch api-token list)")],
    database_url: DatabaseOpt = None,
) -> None:
    """Revoke an API token at once."""
    from app.access import tokens
    from app.audit import service as audit
    from app.cli import _session

    with _session(database_url) as session:
        tokens.revoke(session, token_id=token_id)
        audit.record(session, actor="cli", action="token.revoke", target={"token_id": token_id})
    typer.echo(f"revoked API token {token_id}")


@api_token_cli.command("list")
def api_token_list(database_url: DatabaseOpt = None) -> None:
    """Every API token: id, name, prefix, role, team, expiry, last use, revoked."""
    from app.access import tokens
    from app.cli import _session

    with _session(database_url) as session:
        for row, team in tokens.list_tokens(session):
            typer.echo(
                f"{row.id}\t{row.name}\t{row.prefix}…\t{row.role}\t{team or '*'}\t"
                f"expires={row.expires_at or 'never'}\tlast_used={row.last_used_at or '-'}"
                + ("\trevoked" if row.revoked_at else "")
            )


@enroll_token_cli.command("create")
def enroll_token_create(
    name: Annotated[str, typer.Argument(help="what the token is for, e.g. rack-12")],
    max_uses: Annotated[
        int, typer.Option("--max-uses", min=1, help="how many nodes it may enroll")
    ] = 1,
    ttl_hours: Annotated[
        float,
        typer.Option("--ttl-hours", min=0.001, max=720, help="expires after (at most 30 days)"),
    ] = 24,
    database_url: DatabaseOpt = None,
) -> None:
    """Create an enrollment token and print it (once: only its digest is stored)."""
    from app.audit import service as audit
    from app.auth import enrollment
    from app.cli import _session

    with _session(database_url) as session:
        row, secret = enrollment.create(
            session, name=name, max_uses=max_uses, ttl_s=ttl_hours * 3600, created_by="cli"
        )
        audit.record(
            session,
            actor="cli",
            action="enrollment_token.create",
            target={"token_id": row.id},
            detail={
                "after": {
                    "name": row.name,
                    "max_uses": row.max_uses,
                    "expires_at": row.expires_at.isoformat(),
                }
            },
        )
    typer.echo(secret)


@enroll_token_cli.command("list")
def enroll_token_list(database_url: DatabaseOpt = None) -> None:
    """Every enrollment token: id, name, prefix, uses/max, expiry, state."""
    from app.auth import enrollment
    from app.cli import _session
    from app.db import utcnow

    now = utcnow()
    with _session(database_url) as session:
        for row in enrollment.list_all(session):
            if row.revoked_at is not None:
                state = "revoked"
            elif row.expires_at <= now:
                state = "expired"
            elif row.uses >= row.max_uses:
                state = "used-up"
            else:
                state = "active"
            typer.echo(
                f"{row.id}\t{row.name}\t{row.prefix}…\tuses={row.uses}/{row.max_uses}\t"
                f"expires={row.expires_at.isoformat()}\t{state}"
            )


@enroll_token_cli.command("revoke")
def enroll_token_revoke(
    token_id: Annotated[int, typer.Argument(help="the token's id (fleetwatch enroll-token list)")],
    database_url: DatabaseOpt = None,
) -> None:
    """Revoke an enrollment token at once (nodes it enrolled keep their own tokens)."""
    from app.audit import service as audit
    from app.auth import enrollment
    from app.cli import _session

    with _session(database_url) as session:
        enrollment.revoke(session, token_id=token_id)
        audit.record(
            session, actor="cli", action="enrollment_token.revoke", target={"token_id": token_id}
        )
    typer.echo(f"revoked enrollment token {token_id}")
