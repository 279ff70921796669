"""Metric families in the Prometheus text format 0.0.4, names kept as given.

prometheus-client's ``generate_latest`` names a counter's samples ``<name>_total`` (the
OpenMetrics rule); dcgm-exporter's counters have no such suffix
(``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``), and dashboards query them by those names. So the
DCGM families are written here, a family's ``# HELP`` and ``# TYPE`` lines then its samples,
with prometheus-client's number formatting; Fleetwatch's own metrics go through
``generate_latest`` (:mod:`app.exporter.counters`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

#: The exposition's content type (the text format both writers produce).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Family:
    """One metric: its name, type (``gauge``, ``counter``), HELP text, and samples as (their
    labels written by :func:`label_text`, value)."""

    name: str
    type: str
    help: str
    samples: list[tuple[str, int | float]] = field(default_factory=list)


def _label_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _number(value: int | float) -> str:
    return str(value) if isinstance(value, int) else floatToGoString(value)


def label_text(labels: Mapping[str, str]) -> str:
    """``{label="value",…}`` in the mapping's order, values escaped; ``""`` for no labels.
    Written once per GPU: its ~40 series share it."""
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_label_value(text)}"' for key, text in labels.items()) + "}"


def render(families: Iterable[Family]) -> str:
    """The text of ``families``; one with no samples is left out."""
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        name = family.name
        help_text = family.help.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        lines.extend(f"{name}{labels} {_number(value)}\n" for labels, value in family.samples)
    return "".join(lines)
