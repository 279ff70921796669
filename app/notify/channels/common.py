"""Text helpers shared by the channel kinds: truncation, severity words and icons, the entity a
notice is about, timestamps, compact JSON and secret-free answer snippets.

All pure functions of their arguments (no clock, no network); the one piece of state is the
optional cut counter of :func:`counting_cuts`, which the sender reads to log truncation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TypeVar

from app.notify.channels.base import AlertNotice, Outcome, default_interpret

ELLIPSIS = "…"
ALERTMANAGER_ZERO_TIME = "0001-01-01T00:00:00Z"

_SEVERITY_WORDS = {"critical": "Critical", "warning": "Warning", "info": "Info"}
_SEVERITY_ICONS = {"critical": "🔴", "warning": "🟠", "info": "🔵"}
RESOLVED_ICON = "✅"
_URL_RE = re.compile(r"https?://\S+", re.IGNORECASE)

T = TypeVar("T")
_cuts: ContextVar[list[str] | None] = ContextVar("notify_cuts", default=None)


@contextmanager
def counting_cuts() -> Iterator[list[str]]:
    """Collect, while the block runs in this thread, a note for each text cut by
    :func:`truncate`/:func:`truncate_escaped` or shortened by :func:`note_cut` (kinds are
    pure; this is how the sender learns that a message was truncated, to log it)."""
    notes: list[str] = []
    token = _cuts.set(notes)
    try:
        yield notes
    finally:
        _cuts.reset(token)


def note_cut(note: str) -> None:
    """Record a truncation (``"text of 5,200 characters cut to 3,000"``) when counting."""
    notes = _cuts.get()
    if notes is not None:
        notes.append(note)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters (Python ``str`` length, code points), the
    last one replaced by "…" when anything was cut."""
    if len(text) <= limit:
        return text
    note_cut(f"text of {len(text):,} characters cut to {limit:,}")
    return text[: max(0, limit - 1)] + ELLIPSIS if limit > 0 else ""


def truncate_escaped(escaped: str, limit: int) -> str:
    """:func:`truncate` for backslash-escaped markdown: never leaves a lone ``\\`` before the
    "…" (which would escape the ellipsis and show a stray backslash)."""
    if len(escaped) <= limit:
        return escaped
    note_cut(f"text of {len(escaped):,} characters cut to {limit:,}")
    head = escaped[: max(0, limit - 1)]
    trailing = len(head) - len(head.rstrip("\\"))
    if trailing % 2:
        head = head[:-1]
    return head + ELLIPSIS


_LINE_START_MARK = re.compile(r"(?m)^([ \t]*)(?:([-+#>])|(\d+)\.(?=\s|$))")


def escape_markdown(text: str, specials: str) -> str:
    """Backslash-escape each character of ``specials`` anywhere in ``text``, and the list,
    heading and quote marks at the start of a line (``-``, ``+``, ``#``, ``>`` → ``\\-`` …;
    ``1.`` → ``1\\.`` as CommonMark escapes an ordered-list marker)."""
    escaped = "".join("\\" + c if c in specials else c for c in text)

    def mark(match: re.Match[str]) -> str:
        if match.group(2):
            return match.group(1) + "\\" + match.group(2)
        return match.group(1) + match.group(3) + "\\."

    return _LINE_START_MARK.sub(mark, escaped)


def severity_word(notice: AlertNotice) -> str:
    """ "Resolved" for resolved notices, else the capitalised severity ("Critical", "Warning",
    "Info"; an unknown severity is shown as given, capitalised)."""
    if notice.status == "resolved":
        return "Resolved"
    return _SEVERITY_WORDS.get(notice.severity, notice.severity.capitalize() or "Alert")


def severity_icon(notice: AlertNotice) -> str:
    """An emoji that says the state without colour: ✅ resolved, 🔴 critical, 🟠 warning,
    🔵 info, ⚪ anything else."""
    if notice.status == "resolved":
        return RESOLVED_ICON
    return _SEVERITY_ICONS.get(notice.severity, "⚪")


def entity_text(notice: AlertNotice) -> str:
    """What the alert is about, from its labels: ``"node-a GPU 3"``, ``"node-a"``, the
    ``cluster`` label, or "fleet" when the rule is fleet-wide. ``hostname`` (Fleetwatch's
    node label) is preferred over Prometheus' ``instance``."""
    labels = notice.labels
    node = labels.get("hostname") or labels.get("node") or labels.get("instance")
    gpu = labels.get("gpu")
    if node and gpu:
        return f"{node} GPU {gpu}"
    if node:
        return node
    if gpu:
        return f"GPU {gpu}"
    return labels.get("cluster") or "fleet"


def value_text(value: float | None) -> str | None:
    """The firing value for people (``92.5``, ``1e+12``): Python's ``g`` format with up to 6
    significant digits; ``None`` when the rule has no value."""
    return None if value is None else f"{value:g}"


def labels_text(labels: Mapping[str, str]) -> list[str]:
    """``name=value`` pairs sorted by name (Prometheus prints labels sorted)."""
    return [f"{name}={labels[name]}" for name in sorted(labels)]


def rfc3339(when: datetime) -> str:
    """UTC time as RFC 3339 with a ``Z`` (``2026-11-29T10:00:00Z``; microseconds kept when set,
    like Go's ``time.RFC3339Nano`` that Alertmanager writes). Naive times are taken as UTC."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}".rstrip("0")
    return text + "Z"


def json_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON, key order kept (the exact bytes sent and signed)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def pack(
    items: Sequence[T], *, fits: Callable[[list[T]], bool], max_items: int | None = None
) -> list[list[T]]:
    """Split ``items`` greedily, in order, into chunks for which ``fits(chunk)`` holds and that
    hold at most ``max_items``. A single item that does not fit on its own still gets a chunk
    of its own (callers shrink items beforehand so this does not happen); nothing is dropped."""
    chunks: list[list[T]] = []
    current: list[T] = []
    for item in items:
        candidate = [*current, item]
        too_many = max_items is not None and len(candidate) > max_items
        if current and (too_many or not fits(candidate)):
            chunks.append(current)
            current = [item]
        else:
            current = candidate
    if current:
        chunks.append(current)
    return chunks


def safe_snippet(body: bytes, limit: int = 200) -> str:
    """A short printable excerpt of a service's answer for the delivery log, with any URL
    replaced by ``[url]`` (services sometimes echo the webhook URL, which is a secret)."""
    text = body[: limit * 4].decode("utf-8", "replace")
    text = _URL_RE.sub("[url]", " ".join(text.split()))
    return truncate(text, limit)


def safe_interpret(
    service: str, status_code: int, headers: Mapping[str, str], body: bytes
) -> Outcome:
    """:func:`base.default_interpret` with ``detail`` as ``"<service>: HTTP <code>: <snippet>"``
    where the snippet comes from :func:`safe_snippet`. A 429's JSON ``retry_after`` (seconds,
    may be a float: Slack and Discord) counts when longer than ``Retry-After``."""
    outcome = default_interpret(status_code, headers, b"")
    wait = outcome.retry_after_s
    if status_code == 429:
        waits = [w for w in (wait, body_retry_after_s(body)) if w is not None]
        wait = max(waits, default=None)
    snippet = safe_snippet(body)
    detail = f"{service}: HTTP {status_code}" + (
        f": {snippet}" if snippet and not outcome.ok else ""
    )
    return Outcome(
        ok=outcome.ok,
        detail=detail,
        retryable=outcome.retryable,
        retry_after_s=wait,
        broken=outcome.broken,
    )


def body_retry_after_s(body: bytes) -> float | None:
    """``retry_after`` (seconds, ≥ 0) of a JSON object body, else ``None``."""
    try:
        parsed = json.loads(body.decode("utf-8"))
        value = float(parsed["retry_after"]) if isinstance(parsed, dict) else None
    except (ValueError, KeyError, TypeError):
        return None
    return value if value is not None and 0 <= value < float("inf") else None


def links(notice: AlertNotice) -> list[tuple[str, str]]:
    """The notice's action links in display order: ("Runbook", url), ("Acknowledge", url) for
    firing notices with an ack link, ("Open in Fleetwatch", url)."""
    result: list[tuple[str, str]] = []
    if notice.runbook_url:
        result.append(("Runbook", notice.runbook_url))
    if notice.ack_url and notice.status == "firing":
        result.append(("Acknowledge", notice.ack_url))
    result.append(("Open in Fleetwatch", notice.dashboard_url))
    return result


def first_line(parts: Iterable[str]) -> str:
    """The non-empty parts joined by ``" · "``."""
    return " · ".join(p for p in parts if p)
