"""Whether a command line a deployment file runs is one the ``fleetwatch`` or
``fleetwatch-agent`` command line takes: the real parsers read it, so an option renamed in the
code fails the deployment's test instead of its first start."""

from __future__ import annotations

from collections.abc import Sequence

from typer.testing import CliRunner

from agents.main import build_parser
from app.cli import cli


def fleetwatch_error(argv: Sequence[str]) -> str | None:
    """``None`` when ``fleetwatch argv[1:]`` is a command with options it has, else the usage
    error (checked with ``--help`` appended: parsed in full, nothing run)."""
    assert argv[0] == "fleetwatch", argv
    result = CliRunner().invoke(cli, [*argv[1:], "--help"])
    return None if result.exit_code == 0 else result.output


def agent_args(argv: Sequence[str]) -> dict[str, object]:
    """The options ``fleetwatch-agent argv`` parses to (argparse exits on an unknown one)."""
    return vars(build_parser().parse_args(list(argv)))
