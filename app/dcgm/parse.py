"""dcgm-exporter's ``/metrics`` text as a flat list of series, read by prometheus-client's parser.

The parser reads a whole document or gives up at its first bad line; one bad line must not take
the node with it. So a document it refuses is read again a line at a time (each sample line
with its family's ``# TYPE`` line, so a counter is still a counter), and each line it refuses is
reported with its number and the parser's error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_TYPE_LINE = re.compile(r"#\s+TYPE\s+(\S+)")
_NAME = re.compile(r"[^{\s]+")
_MAX_ERROR_CHARS = 160


@dataclass(frozen=True)
class Series:
    """One sample: ``name`` as the exporter spells it (a counter's without the ``_total`` the
    parser adds), its labels, its value (an ``int`` where the text was an integer),
    its timestamp (Unix seconds) if the line had one, and its family's type."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None = None
    type: str = "unknown"


@dataclass
class Parsed:
    """The series of a document and the lines that were not read: ``(line number, why)``."""

    series: list[Series] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)


def parse(text: str) -> Parsed:
    """Every sample of ``text`` (Prometheus text format 0.0.4) that the parser reads.

    Never raises for the content: lines it cannot read are in :attr:`Parsed.bad_lines`.
    """
    try:
        return Parsed(series=_series(text))
    except Exception:  # the parser raises ValueError, and others on odd input
        return _line_by_line(text)


def _series(text: str) -> list[Series]:
    found = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if family.type == "counter" and name == family.name + "_total":
                name = family.name
            found.append(
                Series(
                    name=name,
                    labels=dict(sample.labels),
                    value=sample.value,
                    timestamp=None if sample.timestamp is None else float(sample.timestamp),
                    type=family.type if name == family.name else "unknown",
                )
            )
    return found


def _line_by_line(text: str) -> Parsed:
    parsed = Parsed()
    types: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if match := _TYPE_LINE.match(stripped):
                types[match.group(1)] = stripped
            continue
        name = _NAME.match(stripped)
        head = types.get(name.group(), "") if name else ""
        try:
            parsed.series.extend(_series(f"{head}\n{stripped}\n" if head else stripped + "\n"))
        except Exception as exc:
            parsed.bad_lines.append((number, f"not Prometheus text: {exc}"[:_MAX_ERROR_CHARS]))
    return parsed
