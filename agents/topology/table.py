"""The grid shared by ``nvidia-smi topo -m`` and ``topo -p2p``: a header of device columns, one row
of codes per device, optional affinity columns, and the legends below.

nvidia-smi separates cells with tabs. Captures pasted into documents have the tabs expanded to
spaces (so empty cells vanish), and a terminal capture wraps the header in ``ESC[4m … ESC[0m``.
With real tabs the driver writes an extra empty cell before ``GPU NUMA ID``, and Windows leaves
``CPU Affinity`` and ``NUMA Affinity`` empty; both are handled here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The per-GPU columns after the device columns, in nvidia-smi's order.
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HEADER = re.compile(r"(?:^|\s)GPU\d+(?:\s|$)")
_COLUMN = re.compile("|".join(re.escape(c) for c in AFFINITY_COLUMNS))
_CODE = re.compile(r"^[A-Z][A-Z0-9]*$")
_LEGEND = re.compile(r"^\s*(\S+)\s*=\s*(.*?)\s*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclass(frozen=True)
class Table:
    """The grid as printed: ``labels`` (columns = rows), ``codes[row][column]``, the affinity
    ``columns`` present, each row's affinity cells by column name, and the legends."""

    labels: tuple[str, ...]
    codes: tuple[tuple[str, ...], ...]
    columns: tuple[str, ...]
    affinity: dict[str, dict[str, str]]
    legend: dict[str, str]
    nic_legend: dict[str, str]


def parse_table(text: str, error: type[Exception]) -> Table:
    """Parse one nvidia-smi topology grid; raise ``error`` with what was found when it is not."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if _HEADER.search(line)), None)
    if start is None:
        seen = next((line.strip() for line in lines if line.strip()), "")
        found = f"it starts with {seen[:200]!r}" if seen else "the output is empty"
        raise error(f"no nvidia-smi topology matrix (a header naming GPU0 …) found: {found}")
    header = lines[start]
    first = _COLUMN.search(header)
    labels = tuple(header[: first.start() if first else len(header)].split())
    columns = _COLUMN.findall(header)
    rows: dict[str, tuple[str, ...]] = {}
    affinity: dict[str, dict[str, str]] = {}
    end = len(lines)
    for number in range(start + 1, len(lines)):
        line = lines[number]
        parsed = _row(line, len(labels), columns)
        if parsed is None or parsed[0] not in labels:
            end = number
            break
        label, codes, cells = parsed
        bad = [c for c in codes if not _CODE.match(c)]
        if len(codes) != len(labels) or bad:
            raise error(
                f"row {label}: expected {len(labels)} link codes, found {list(codes)!r} "
                f"in {line.strip()[:200]!r}"
            )
        rows.setdefault(label, codes)
        affinity.setdefault(label, cells)
    missing = [label for label in labels if label not in rows]
    if missing:
        raise error(f"topology matrix has no row for {', '.join(missing)}")
    legend, nic_legend = _legends(lines[end:])
    return Table(
        labels=labels,
        codes=tuple(rows[label] for label in labels),
        columns=tuple(columns),
        affinity=affinity,
        legend=legend,
        nic_legend=nic_legend,
    )


def _row(
    line: str, width: int, columns: list[str]
) -> tuple[str, tuple[str, ...], dict[str, str]] | None:
    if "\t" in line:
        cells = [cell.strip() for cell in line.split("\t")]
        while cells and not cells[0]:
            cells.pop(0)
        if not cells:
            return None
        rest = cells[1 + width :]
        return cells[0], tuple(cells[1 : 1 + width]), _by_order(rest, columns)
    tokens = line.split()
    if not tokens:
        return None
    rest = tokens[1 + width :]
    # Tabs expanded to spaces lose empty cells; only the leading affinity cells are ever empty
    # (Windows), so the cells left are the last ones.
    names = columns[len(columns) - len(rest) :] if len(rest) < len(columns) else columns
    return tokens[0], tuple(tokens[1 : 1 + width]), dict(zip(names, rest, strict=False))


def _by_order(cells: list[str], columns: list[str]) -> dict[str, str]:
    """Tab-separated cells: the last column takes the last cell, the others go in order (the
    driver pads with an empty cell before ``GPU NUMA ID``)."""
    while len(cells) > len(columns) and not cells[-1]:
        cells = cells[:-1]
    if columns and len(cells) > len(columns):
        cells = [*cells[: len(columns) - 1], cells[-1]]
    return {name: cell for name, cell in zip(columns, cells, strict=False) if cell}


def _legends(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    legend: dict[str, str] = {}
    nic_legend: dict[str, str] = {}
    section = None
    for line in lines:
        stripped = line.strip()
        if stripped in ("Legend:", "NIC Legend:"):
            section = stripped
        elif section == "Legend:" and (match := _LEGEND.match(line)):
            legend[match[1]] = match[2]
        elif section == "NIC Legend:" and (match := _NIC_LEGEND.match(line)):
            nic_legend[match[1]] = match[2]
    return legend, nic_legend
