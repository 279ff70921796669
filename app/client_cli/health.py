"""``fleetwatch health [--node X]``: one node's health state and reasons, told by the exit code
too, so a Slurm ``HealthCheckProgram``, a job prolog or any script can gate on it.

Exit codes (:data:`EXIT_CODES`): 0 healthy, 1 degraded, 2 unhealthy, 3 unknown (stale, never
seen), 4 no such node, 5 no answer (server unreachable, a server error, a refused request, a
bad option: "cannot tell", never mistaken for a state), 6 out of service: a healthy or
degraded node taken out of service in its lifecycle (quarantined, remediating, validating,
rma), so a gate that lets 0 and 1 through never sends a job to a node being repaired.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import quote

import typer
from typer.core import TyperCommand

from app.client_cli.http import Api, HttpError
from app.client_cli.options import (
    DEFAULT_SERVER,
    JsonOpt,
    ServerOpt,
    TimeoutOpt,
    TokenOpt,
    connect,
)
from app.client_cli.output import COLOURS, age, echo, print_json

EXIT_CODES = {"healthy": 0, "degraded": 1, "unhealthy": 2, "unknown": 3}
EXIT_NOT_FOUND = 4
EXIT_NO_ANSWER = 5
EXIT_OUT_OF_SERVICE = 6
#: The health states an out-of-service lifecycle overrides: 2 and 3 already stop a gate.
_FIT_STATES = frozenset({"healthy", "degraded"})
#: click's usage error (bad or missing option), taken from typer's own ``BadParameter``:
#: recent typer releases carry their own copy of click, older ones use click itself.
_UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class GateCommand(TyperCommand):
    """A command whose usage errors (a mistyped option, a bad ``--server``) exit
    :data:`EXIT_NO_ANSWER` instead of click's 2, which here means "unhealthy"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """Parse as click does; a usage error keeps its message and exits 5."""
        try:
            return super().parse_args(ctx, args)
        except _UsageError as exc:
            exc.exit_code = EXIT_NO_ANSWER  # type: ignore[attr-defined]
            raise


def reason_lines(reasons: list[dict[str, Any]], *, now: datetime) -> list[str]:
    """One line per reason (``[unhealthy] GPU 3: Xid 79 … (since 5m ago)``), and its suggested
    action below it."""
    lines = []
    for r in reasons:
        where = f"GPU {r['gpu_index']}: " if r.get("gpu_index") is not None else ""
        since = f" (since {age(r['since'], now=now)})" if r.get("since") else ""
        test = " [self-test]" if r.get("test") else ""
        lines.append(f"  [{r['state']}] {where}{r['text']}{since}{test}")
        if r.get("action"):
            lines.append(f"      suggested: {r['action']['title']}")
    return lines


def health(
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="the node's hostname as its agent reports it (default: this machine's)",
            show_default=False,
        ),
    ] = None,
    json_: JsonOpt = False,
    server: ServerOpt = DEFAULT_SERVER,
    token: TokenOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """A node's health and reasons; the exit code tells the state (0 healthy).

    Exit 0 healthy, 1 degraded, 2 unhealthy, 3 unknown (stale or never seen), 4 node not
    found, 5 server unreachable, server error or bad option, 6 healthy or degraded but out of
    service (quarantined, remediating, validating, rma). --json: GET
    /api/v1/nodes/{hostname}/health as it is.
    """
    if node is not None and not node.strip():
        # `--node "$SLURMD_NODENAME"` with the variable unset: not this machine, quietly.
        typer.echo(
            "fleetwatch: --node is empty: give a hostname, or leave --node out for this machine's",
            err=True,
        )
        raise typer.Exit(EXIT_NO_ANSWER)
    hostname = node.strip() if node is not None else socket.gethostname()
    with connect(server, token, timeout, error_exit=EXIT_NO_ANSWER) as api:
        try:
            body = api.get(f"/nodes/{quote(hostname, safe='')}/health")
        except HttpError as exc:
            # Only the server's own "no node named …" means the node is unknown: any other
            # 404 (a --server pointing at the wrong path or another web server) is no answer.
            if exc.status != 404 or "no node named" not in str(exc):
                raise
            typer.echo(f"fleetwatch: {exc}", err=True)
            raise typer.Exit(EXIT_NOT_FOUND) from None
        state = body.get("state") if isinstance(body, dict) else None
        if state not in EXIT_CODES:
            typer.echo(f"fleetwatch: the server gave no health state for {hostname}", err=True)
            raise typer.Exit(EXIT_NO_ANSWER)
        service = _lifecycle_state(api, hostname) if state in _FIT_STATES else "in_service"
    code = EXIT_CODES[state] if service == "in_service" else EXIT_OUT_OF_SERVICE
    if json_:
        print_json(body)
    else:
        shown = typer.style(state, fg=COLOURS[state])
        out = "" if service == "in_service" else f" (out of service: {service})"
        echo(f"{body['hostname']}: {shown}{out}")
        for line in reason_lines(body.get("reasons", []), now=datetime.now(UTC)):
            echo(line)
    raise typer.Exit(code)


def _lifecycle_state(api: Api, hostname: str) -> str:
    """The node's lifecycle state (``in_service``, ``quarantined`` …) from GET
    /api/v1/nodes/{hostname}/lifecycle; exits :data:`EXIT_NO_ANSWER` where the answer has none
    (a gate must not read "cannot tell" as "in service")."""
    body = api.get(f"/nodes/{quote(hostname, safe='')}/lifecycle")
    state = body.get("state") if isinstance(body, dict) else None
    if not isinstance(state, str):
        typer.echo(f"fleetwatch: the server gave no lifecycle state for {hostname}", err=True)
        raise typer.Exit(EXIT_NO_ANSWER)
    return state
