"""``fleetwatch lifecycle show|set|quarantine|resume|run-actions``: a node's lifecycle from
the command line, on the database directly (as ``fleetwatch node retire``)."""

from __future__ import annotations

import getpass
import shlex
import socket
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from app.remediation.models import NodeAction

lifecycle_cli = typer.Typer(
    help="A node's lifecycle: quarantine, repair, return to service (Slurm drain / resume).",
    no_args_is_help=True,
)

DatabaseOpt = Annotated[
    str | None, typer.Option("--database-url", help="SQLAlchemy URL; default as for serve")
]
HostArg = Annotated[str, typer.Argument(help="the node's hostname")]
ReasonOpt = Annotated[str, typer.Option("--reason", help="why (a Slurm drain's Reason)")]
ActorOpt = Annotated[
    str | None, typer.Option("--actor", help="who asks (default: user@host of this shell)")
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="log the scheduler actions as dry_run; run nothing")
]
NoRunOpt = Annotated[
    bool,
    typer.Option(
        "--no-run", help="leave the actions to the server's worker instead of running them here"
    ),
]


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()} (cli)"


@lifecycle_cli.command("show")
def show(hostname: HostArg, database_url: DatabaseOpt = None) -> None:
    """The node's state, its transitions and its logged actions (newest first)."""
    from app.cli import _session
    from app.fleet import service as fleet_service
    from app.lifecycle import service
    from app.remediation import service as remediation

    with _session(database_url) as session:
        node = fleet_service.get_node_by_hostname(session, hostname=hostname)
        now = service.current(session, node.id)
        since = f" since {now.since.isoformat()}" if now.since else ""
        typer.echo(f"{hostname}: {now.state}{since}" + (f" — {now.reason}" if now.reason else ""))
        for row in service.history(session, node.id):
            typer.echo(
                f"  {row.at.isoformat()}  {row.from_state} → {row.to_state}  by {row.actor} "
                f"({row.cause}{':' + row.cause_ref if row.cause_ref else ''}): {row.reason}"
            )
        for action in remediation.actions_of(session, node.id):
            typer.echo(_action_line(action))


def _action_line(action: NodeAction) -> str:
    tail = f" → exit {action.returncode}" if action.returncode is not None else ""
    output = f": {action.output}" if action.output else ""
    return (
        f"  action {action.id} {action.system} {action.verb} {action.target} "
        f"[{action.status}, {action.attempts} attempt(s)]{tail}{output}\n"
        f"    $ {shlex.join(str(part) for part in action.command)}"
    )


def _move(
    hostname: str,
    to_state: str,
    reason: str,
    actor: str | None,
    dry_run: bool,
    no_run: bool,
    database_url: str | None,
) -> None:
    from app.cli import _session, _settings
    from app.db import make_engine, make_session_factory
    from app.fleet import service as fleet_service
    from app.lifecycle import service
    from app.remediation import service as remediation
    from app.remediation.worker import ActionWorker

    if actor is not None and not actor.strip():
        typer.echo("fleetwatch: --actor: say who, or leave it out for user@host", err=True)
        raise typer.Exit(2)
    backends = remediation.Backends.of(_settings(database_url=database_url))
    try:
        with _session(database_url) as session:
            node = fleet_service.get_node_by_hostname(session, hostname=hostname)
            changed = service.transition(
                session,
                node=node,
                to_state=to_state,
                reason=reason,
                cause="person",
                actor=actor or _default_actor(),
                backends=backends,
                dry_run=dry_run,
            )
            ids = [a.id for a in changed.actions]
            before = changed.transition.from_state
            node_id = node.id
    except ValueError as exc:
        field, _, message = str(exc).partition(": ")
        name = "STATE" if field == "to_state" else f"--{field}"
        typer.echo(f"fleetwatch: {name}: {message}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"{hostname}: {before} → {to_state}")
    if not ids:
        if backends.names:
            typer.echo(f"  no scheduler action (schedulers managed: {', '.join(backends.names)})")
        else:
            typer.echo(
                "fleetwatch: warning: these settings manage no scheduler (neither "
                "FLEETWATCH_SLURM_SCONTROL nor FLEETWATCH_KUBECONFIG is set): nothing was "
                "drained or resumed; if the server manages one, set the same here",
                err=True,
            )
        return
    settings = _settings(database_url=database_url)
    engine = make_engine(settings.effective_database_url)
    try:
        factory = make_session_factory(engine)
        if not dry_run and not no_run:
            ActionWorker(
                factory, timeout_s=backends.timeout_s, kubeconfig=backends.kubeconfig
            ).run_once(node_id=node_id)
        from app.db import session_scope
        from app.remediation.models import NodeAction

        with session_scope(factory) as session:
            failed = False
            for action_id in ids:
                action = session.get_one(NodeAction, action_id)
                typer.echo(_action_line(action))
                failed |= action.status != remediation.SUCCEEDED and action.attempts > 0
    finally:
        engine.dispose()
    if failed:
        typer.echo(
            "  an action failed: the server's worker retries it (see 'lifecycle show')", err=True
        )
        raise typer.Exit(1)


@lifecycle_cli.command("set")
def set_state(
    hostname: HostArg,
    state: Annotated[
        str, typer.Argument(help="in_service, quarantined, remediating, validating or rma")
    ],
    reason: ReasonOpt,
    actor: ActorOpt = None,
    dry_run: DryRunOpt = False,
    no_run: NoRunOpt = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Move NODE to STATE; leaving in_service drains it in Slurm, entering it resumes it. The
    actions run here and now (exit 1 if one fails; the server retries it)."""
    _move(hostname, state, reason, actor, dry_run, no_run, database_url)


@lifecycle_cli.command("quarantine")
def quarantine(
    hostname: HostArg,
    reason: ReasonOpt,
    actor: ActorOpt = None,
    dry_run: DryRunOpt = False,
    no_run: NoRunOpt = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Quarantine NODE: drain it in Slurm with Reason "fleetwatch: <reason>"."""
    _move(hostname, "quarantined", reason, actor, dry_run, no_run, database_url)


@lifecycle_cli.command("resume")
def resume(
    hostname: HostArg,
    reason: ReasonOpt,
    actor: ActorOpt = None,
    dry_run: DryRunOpt = False,
    no_run: NoRunOpt = False,
    database_url: DatabaseOpt = None,
) -> None:
    """Return NODE to service: resume it in Slurm."""
    _move(hostname, "in_service", reason, actor, dry_run, no_run, database_url)


@lifecycle_cli.command("run-actions")
def run_actions(database_url: DatabaseOpt = None) -> None:
    """Run the due actions of the log now (the server's worker does this every
    FLEETWATCH_ACTION_WORKER_INTERVAL_S)."""
    from app.cli import _require_migrated, _settings
    from app.db import make_engine, make_session_factory
    from app.remediation.worker import ActionWorker

    settings = _settings(database_url=database_url)
    _require_migrated(settings)
    engine = make_engine(settings.effective_database_url)
    try:
        report = ActionWorker(
            make_session_factory(engine),
            timeout_s=settings.action_timeout_s,
            kubeconfig=settings.kubeconfig,
        ).run_once()
    finally:
        engine.dispose()
    typer.echo(f"{report.succeeded} succeeded, {report.retried} to retry, {report.failed} failed")
    if report.failed or report.retried:
        raise typer.Exit(1)


@lifecycle_cli.command("breaker")
def breaker(database_url: DatabaseOpt = None) -> None:
    """The automatic-quarantine circuit breaker and the newest automation decisions."""
    from app.cli import _session, _settings
    from app.remediation import automation

    limits = automation.Limits.of(_settings(database_url=database_url))
    with _session(database_url) as session:
        gate = automation.breaker_state(session)
        if gate.open and gate.opened_at is not None:
            typer.echo(f"OPEN since {gate.opened_at.isoformat()}: {gate.reason}")
        else:
            reset = (
                f" (reset {gate.reset_at.isoformat()} by {gate.reset_by})" if gate.reset_at else ""
            )
            typer.echo(f"closed{reset}")
        typer.echo(
            f"limits: {limits.max_nodes} nodes or {limits.max_pct:g} % of a "
            f"{limits.group_label} group within {limits.window_s:g} s"
        )
        for d in automation.recent(session, limit=20):
            typer.echo(
                f"  {d.at.isoformat()}  {d.rule} [{d.mode}] {d.hostname}: {d.outcome} — {d.detail}"
            )


@lifecycle_cli.command("breaker-reset")
def breaker_reset(actor: ActorOpt = None, database_url: DatabaseOpt = None) -> None:
    """Close the circuit breaker: automatic quarantines go on."""
    from app.cli import _session
    from app.remediation import automation

    if actor is not None and not actor.strip():
        typer.echo("fleetwatch: --actor: say who, or leave it out for user@host", err=True)
        raise typer.Exit(2)
    try:
        with _session(database_url) as session:
            automation.reset_breaker(session, actor=actor or _default_actor())
    except ValueError as exc:
        typer.echo(f"fleetwatch: --{exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo("circuit breaker closed: automatic quarantines go on")


@lifecycle_cli.command("retry")
def retry(
    action_id: Annotated[
        int,
        typer.Argument(help="the failed action's id (lifecycle show)", min=1, max=2**31 - 1),
    ],
    actor: ActorOpt = None,
    database_url: DatabaseOpt = None,
) -> None:
    """Log a failed action again, with the command built from these settings, and run it."""
    from app.cli import _session, _settings
    from app.db import make_engine, make_session_factory
    from app.remediation import service as remediation
    from app.remediation.worker import ActionWorker

    settings = _settings(database_url=database_url)
    backends = remediation.Backends.of(settings)
    with _session(database_url) as session:
        action = remediation.retry(
            session, action_id=action_id, actor=actor or _default_actor(), backends=backends
        )
        new_id, node_id = action.id, action.node_id
    engine = make_engine(settings.effective_database_url)
    try:
        factory = make_session_factory(engine)
        ActionWorker(
            factory, timeout_s=backends.timeout_s, kubeconfig=backends.kubeconfig
        ).run_once(node_id=node_id)
        from app.db import session_scope
        from app.remediation.models import NodeAction

        with session_scope(factory) as session:
            done = session.get_one(NodeAction, new_id)
            typer.echo(_action_line(done))
            ok = done.status in (remediation.SUCCEEDED, remediation.SKIPPED)
    finally:
        engine.dispose()
    if not ok:
        raise typer.Exit(1)
