"""How the client commands print: plain aligned columns for people (a state word coloured only
on a terminal, never with ``NO_COLOR`` set), the API's JSON for scripts, and short ages."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import typer

#: Colours of the state words (health, alert state, severity) on a terminal.
COLOURS = {
    "unhealthy": "red",
    "critical": "red",
    "firing": "red",
    "degraded": "yellow",
    "warning": "yellow",
    "pending": "yellow",
    "unknown": "magenta",
    "healthy": "green",
    "open": "yellow",
}
#: The last column never shrinks below this to fit a terminal.
MIN_LAST_WIDTH = 20
GAP = "  "


@dataclass(frozen=True)
class Column:
    """A table column: its heading, the widest a cell may be (longer text ends in ``…``),
    and whether its words are coloured by :data:`COLOURS`."""

    title: str
    max_width: int = 40
    coloured: bool = False


def use_colour() -> bool | None:
    """``False`` when ``NO_COLOR`` is set; else ``None``: click colours only a terminal."""
    return False if os.environ.get("NO_COLOR") else None


def echo(text: str = "") -> None:
    """Print a line on stdout (colour codes dropped where :func:`use_colour` says so)."""
    typer.echo(text, color=use_colour())


def print_json(data: Any) -> None:
    """The API's JSON, indented, keys in the API's order, non-ASCII kept."""
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines, tabs) as one space; ``None`` → ``-``."""
    return "-" if text is None or text == "" else " ".join(str(text).split())


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one ``…`` when cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def table_lines(
    columns: Sequence[Column],
    rows: Iterable[Sequence[Any]],
    *,
    width: int | None = None,
    colour: bool = False,
) -> list[str]:
    """The heading and one line per row, columns aligned and separated by two spaces; cells
    flattened to one line and cut to their column's ``max_width`` (the last column also to
    what fits in ``width`` characters, when given); with ``colour``, the state words of
    coloured columns get ANSI colours."""
    cells = [[one_line(c) for c in row] for row in rows]
    widths = [
        min(max([len(col.title)] + [len(r[i]) for r in cells]), col.max_width)
        for i, col in enumerate(columns)
    ]
    if width is not None and columns:
        used = sum(widths[:-1]) + len(GAP) * (len(columns) - 1)
        widths[-1] = max(min(widths[-1], width - used), MIN_LAST_WIDTH)
    lines = [_line([c.title for c in columns], widths, columns, colour=False)]
    lines += [_line(r, widths, columns, colour=colour) for r in cells]
    return lines


def _line(
    cells: Sequence[str], widths: Sequence[int], columns: Sequence[Column], *, colour: bool
) -> str:
    parts = []
    for text, width, column in zip(cells, widths, columns, strict=True):
        shown = truncate(text, width)
        pad = " " * (width - len(shown))
        if colour and column.coloured and shown in COLOURS:
            shown = typer.style(shown, fg=COLOURS[shown])
        parts.append(shown + pad)
    return GAP.join(parts).rstrip()


def print_table(columns: Sequence[Column], rows: Sequence[Sequence[Any]], *, empty: str) -> None:
    """Print ``rows`` as :func:`table_lines`, or the line ``empty`` when there are none. On a
    terminal the last column is fitted to its width and state words are coloured."""
    if not rows:
        echo(empty)
        return
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else None
    for line in table_lines(columns, rows, width=width, colour=tty and use_colour() is None):
        echo(line)


def parse_time(text: str | None) -> datetime | None:
    """An API time (ISO 8601 with zone) as an aware datetime; ``None`` stays ``None``."""
    if not text:
        return None
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def span(seconds: float) -> str:
    """``42s``, ``5m``, ``3h 12m``, ``2d 4h``: the two largest units."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m" if s % 3600 >= 60 else f"{s // 3600}h"
    return f"{s // 86400}d {s % 86400 // 3600}h" if s % 86400 >= 3600 else f"{s // 86400}d"


def age(text: str | None, *, now: datetime, never: str = "never") -> str:
    """``12s ago`` / ``in 2h`` for an API time relative to ``now``; ``never`` for none."""
    at = parse_time(text)
    if at is None:
        return never
    delta = (now - at).total_seconds()
    return f"{span(delta)} ago" if delta >= 0 else f"in {span(delta)}"
