"""The client commands: ``fleetwatch nodes|alerts|incidents|silence|ack|health`` against a
running server's JSON API (``--server`` / ``FLEETWATCH_SERVER``), unlike the other commands,
which open the database. One module per concern: :mod:`.http` (requests and their errors),
:mod:`.options` (the shared options), :mod:`.output` (tables, JSON), one per command group."""

from __future__ import annotations

import typer

#: The heading these commands are listed under in ``fleetwatch --help``.
PANEL = "Against a server (--server, FLEETWATCH_SERVER)"


def register(cli: typer.Typer) -> None:
    """Add the client commands to the ``fleetwatch`` app."""
    from app.client_cli import alerts, health, incidents, nodes
    from app.client_cli.silences import silence_cli

    cli.command("nodes", rich_help_panel=PANEL)(nodes.nodes)
    cli.command("alerts", rich_help_panel=PANEL)(alerts.alerts)
    cli.command("ack", rich_help_panel=PANEL)(alerts.ack)
    cli.command("incidents", rich_help_panel=PANEL)(incidents.incidents)
    cli.add_typer(silence_cli, name="silence", rich_help_panel=PANEL)
    cli.command("health", cls=health.GateCommand, rich_help_panel=PANEL)(health.health)
