"""What the server's refusals mean for the node, in words an operator can act on.

Two kinds matter beyond "retry later":

- **A setting is wrong** (401 token unknown or revoked, 403 token of another hostname, 404/405
  no ingest endpoint at ``--server``, 407 proxy credentials): no batch can pass until someone
  fixes it. The agent keeps every batch in its spool (bounded by ``--spool-max-bytes``), tries
  again about once a minute and says on stderr, at most once a minute, what to fix; once it is
  fixed (on the server, or by restarting the agent with the right flag) the backlog is sent.
- **The clock is wrong**: the server accepts the batch (200) but refuses its samples, events and
  readings dated more than its tolerance ahead (``sampled_at_in_future``). Such a batch is not
  counted as sent, and is not retried: re-sending its id is a replay that stores nothing, and
  sending its values again under a new id once the clock is fixed would store them at times
  they were not read, beside the real readings of those times. The fix is the node's clock
  (NTP/chrony); the agent says so at most once a minute.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from agents.push import TOKEN_ENV

#: How often one cause is logged again while it lasts (seconds).
REPEAT_S = 60.0
#: A clock this far off the server's (seconds) is worth a warning even before anything is
#: refused: the server refuses past its FLEETWATCH_FUTURE_TOLERANCE_S (300 s by default), and a
#: clock behind stores readings at the wrong times.
SKEW_WARN_S = 60.0
_FUTURE = ("sampled_at_in_future", "occurred_at_in_future")


def server_detail(body: str) -> str:
    """The ``detail`` of a FastAPI error body, else the body's start, on one line."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = detail if isinstance(detail, str) else body
    return " ".join(text.split())[:300]


def held_message(status: int | None, body: str, *, hostname: str, server_url: str) -> str:
    """The log line for a refusal no batch can pass until a setting is fixed: what the server
    said, and what to fix."""
    said = f"HTTP {status}: {server_detail(body) or 'no detail'}"
    token_flags = f"{TOKEN_ENV} / --token / --token-file"
    if status == 401:
        fix = (
            f"fix {token_flags} (create one on the server with "
            f"`fleetwatch token create {hostname}`)"
        )
        cause = f"the server refused the token for host {hostname}"
    elif status == 403:
        fix = f"fix --hostname (the name the token was created for) or {token_flags}"
        cause = f"the server refused host {hostname} with this token"
    elif status == 407:
        fix = "fix the proxy settings (HTTPS_PROXY / HTTP_PROXY / NO_PROXY)"
        cause = "the HTTP proxy asks for credentials"
    else:
        fix = "fix --server (the Fleetwatch server's base URL, without /api/v1/ingest)"
        cause = f"no Fleetwatch ingest endpoint at {server_url}"
    return f"{cause} ({said}); {fix}. Batches stay spooled and are sent once it is fixed"


def refused_for_skew(answer: Mapping[str, Any] | None) -> dict[str, int]:
    """What an accepted batch's answer says the server refused as dated in the future:
    ``{"samples": n, "events": n, "<section>": n}`` (empty when nothing was)."""
    if not answer:
        return {}
    refused: dict[str, int] = {}
    samples = _count(answer.get("rejected_by_reason"), "sampled_at_in_future")
    events = _count(answer.get("events_rejected"), "occurred_at_in_future")
    for name, count in (("samples", samples), ("events", events)):
        if count:
            refused[name] = count
    sections = answer.get("sections_rejected")
    if isinstance(sections, Mapping):
        for key, count in sections.items():
            section, _, reason = str(key).partition(".")
            if reason in _FUTURE and isinstance(count, int) and count > 0:
                refused[section] = refused.get(section, 0) + count
    return refused


def skew_message(answer: Mapping[str, Any], refused: Mapping[str, int], *, hostname: str) -> str:
    """The log line for a batch whose readings the server refused as dated in the future."""
    what = ", ".join(f"{count} {name}" for name, count in refused.items())
    return (
        f"the server refused {what} of host {hostname} as sampled_at_in_future: this node's "
        f"clock is {_skew_text(answer)}; fix the clock (NTP/chrony). The batch is not retried: "
        "its readings carry the wrong times"
    )


def clock_warning(answer: Mapping[str, Any] | None, *, hostname: str) -> str | None:
    """A warning when an accepted batch shows the node's clock :data:`SKEW_WARN_S` or more off
    the server's, else ``None``."""
    skew = (answer or {}).get("clock_skew_s")
    if not isinstance(skew, int | float) or abs(skew) < SKEW_WARN_S:
        return None
    return (
        f"host {hostname}: this node's clock is {_skew_text(answer or {})}; fix the clock "
        "(NTP/chrony) before the server refuses its readings or stores them at the wrong times"
    )


def left_out_message(answer: Mapping[str, Any] | None, *, hostname: str) -> str | None:
    """What the server left out of an accepted batch for values it cannot hold (its
    ``left_out_by_reason`` and first ``left_out`` entry, docs/ingest.md), or ``None``."""
    counts = (answer or {}).get("left_out_by_reason")
    if not isinstance(counts, Mapping) or not counts:
        return None
    total = sum(v for v in counts.values() if isinstance(v, int))
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())[:8])
    first = ""
    listed = (answer or {}).get("left_out")
    if isinstance(listed, list) and listed and isinstance(listed[0], Mapping):
        loc = listed[0].get("loc")
        if isinstance(loc, list):
            first = f" (first: {'.'.join(str(step) for step in loc)})"
    return (
        f"the server left out {total} value(s) of host {hostname} it cannot hold: {reasons}"
        f"{first}; the rest of each batch was stored (docs/ingest.md)"
    )


def _skew_text(answer: Mapping[str, Any]) -> str:
    skew = answer.get("clock_skew_s")
    if not isinstance(skew, int | float):
        return "ahead of the server's"
    return f"{abs(skew):.0f} s {'ahead of' if skew > 0 else 'behind'} the server's"


def _count(counts: Any, key: str) -> int:
    value = counts.get(key) if isinstance(counts, Mapping) else None
    return value if isinstance(value, int) and value > 0 else 0


class LoudLog:
    """Logs each cause at most once per ``repeat_s`` seconds while it lasts (``clock``:
    ``time.monotonic`` unless a test gives another)."""

    def __init__(
        self,
        logger: logging.Logger,
        repeat_s: float = REPEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.repeat_s, self.clock = logger, repeat_s, clock
        self._last: dict[str, float] = {}

    def log(self, level: int, cause: str, message: str) -> bool:
        """Log ``message`` unless ``cause`` was logged less than ``repeat_s`` ago; whether it
        was logged."""
        now = self.clock()
        last = self._last.get(cause)
        if last is not None and now - last < self.repeat_s:
            return False
        self._last[cause] = now
        self.logger.log(level, "%s", message)
        return True

    def clear(self, cause: str) -> None:
        """``cause`` is over: the next occurrence is logged at once."""
        self._last.pop(cause, None)
