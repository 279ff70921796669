"""Options every client command takes (``--server``, ``--token``, ``--timeout``, ``--json``),
their checks, and :func:`connect`, which turns an :class:`~app.client_cli.http.ApiError` into
one line on stderr and an exit code."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated
from urllib.parse import urlsplit

import typer

from app.client_cli.http import Api, ApiError

DEFAULT_SERVER = "http://127.0.0.1:8000"
#: What a bearer token may hold (RFC 6750 ``b64token``): no spaces, no control characters.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def checked_server(value: str) -> str:
    """``--server`` / ``FLEETWATCH_SERVER``: an ``http://`` or ``https://`` URL with a host,
    returned without a trailing ``/``.

    Raises:
        typer.BadParameter: anything else.
    """
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise typer.BadParameter(
            f"expected an http:// or https:// URL such as {DEFAULT_SERVER}, got {value!r}"
        )
    if parts.query or parts.fragment:
        raise typer.BadParameter(f"expected a base URL without ?query or #fragment, got {value!r}")
    try:
        _ = parts.port  # a port out of range raises ValueError
    except ValueError:
        raise typer.BadParameter(f"{value!r} has a port that is not 0-65535") from None
    return value.strip().rstrip("/")


def checked_token(value: str | None) -> str | None:
    """``--token`` / ``FLEETWATCH_API_TOKEN``: a bearer token (letters, digits, ``-._~+/``,
    trailing ``=``); empty means none.

    Raises:
        typer.BadParameter: spaces, control characters or other characters a header cannot
            carry as a bearer token.
    """
    if value is None or not value.strip():
        return None
    if not _TOKEN.fullmatch(value.strip()):
        raise typer.BadParameter(
            "expected a bearer token: letters, digits and -._~+/ only (the value is not shown)"
        )
    return value.strip()


ServerOpt = Annotated[
    str,
    typer.Option(
        "--server",
        envvar="FLEETWATCH_SERVER",
        callback=checked_server,
        help="the Fleetwatch server's base URL",
        show_envvar=True,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FLEETWATCH_API_TOKEN",
        callback=checked_token,
        help="API token, sent as 'Authorization: Bearer TOKEN' (for servers that ask for one)",
        show_envvar=True,
        show_default=False,
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.1, max=600, help="seconds to wait for each answer"),
]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="print the API's JSON (for scripts) instead of a table")
]


@contextmanager
def connect(
    server: str, token: str | None, timeout_s: float, *, error_exit: int = 1
) -> Iterator[Api]:
    """An :class:`Api` on ``server``; an :class:`ApiError` raised inside prints
    ``fleetwatch: <message>`` on stderr and exits ``error_exit``."""
    # httpx logs every request at INFO, and the console script logs INFO: not for a client.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    api = Api(server, token=token, timeout_s=timeout_s)
    try:
        yield api
    except ApiError as exc:
        typer.echo(f"fleetwatch: {exc}", err=True)
        raise typer.Exit(error_exit) from None
    finally:
        api.close()
