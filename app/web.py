"""Template environment, display filters (units, ages, N/A) and htmx helpers for the pages."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, tzinfo
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import pass_context
from jinja2.runtime import Context

from app import __version__
from app.config import PROJECT_ROOT
from app.fleet.value_quality import value_reasons
from app.viewer_time import (
    TZ_COOKIE,
    TZ_PARAM,
    fmt_local,
    picker_zones,
    tz_query,
    viewer_tz,
    viewer_tz_or_utc,
    zone_label,
)

templates = Jinja2Templates(directory=PROJECT_ROOT / "templates")
# Block tags do not leave blank lines behind: the fleet table is re-sent every 5 s.
templates.env.trim_blocks = True
templates.env.lstrip_blocks = True


def _dumps(value: Any, **_: Any) -> str:
    """``tojson`` through orjson, keys sorted as Jinja's default does: a node page embeds 11,520
    chart points an hour (json.dumps took a fifth of the page's time)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


templates.env.policies["json.dumps_function"] = _dumps

NA = "N/A"


def fmt_number(value: float | int | None, digits: int = 0, unit: str = "") -> str:
    """``61.4`` → ``"61"`` (or with ``digits`` decimals) plus a unit; ``None`` → ``"N/A"``."""
    if value is None:
        return NA
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".rstrip()


def fmt_bytes(value: float | int | None) -> str:
    """Binary units (KiB, MiB, GiB, TiB) with one decimal; ``None`` → ``"N/A"``."""
    if value is None:
        return NA
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return NA  # pragma: no cover - loop always returns


def fmt_rate(value: float | int | None) -> str:
    """A byte rate in binary units (``"1.2 GiB/s"``); ``None`` → ``"N/A"``."""
    return NA if value is None else f"{fmt_bytes(value)}/s"


def fmt_count(value: float | int | None) -> str:
    """An exact count with thousands separators (``18,446,744,073,709,551,000``: integers are
    never passed through a float); ``None`` → ``"N/A"``."""
    if value is None:
        return NA
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def fmt_ms(seconds: float | None) -> str:
    """A short duration given in seconds, shown in milliseconds (``0.0004`` → ``"0.40 ms"``);
    ``None`` → ``"N/A"``."""
    if seconds is None:
        return NA
    ms = seconds * 1000
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:,.0f} ms"


def fmt_age(seconds: float | None) -> str:
    """A short age: ``"4 s"``, ``"3 min"``, ``"2 h"``, ``"5 d"``; ``None`` → ``"never"``."""
    if seconds is None:
        return "never"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def fmt_skew(seconds: float | None) -> str:
    """A signed clock offset: ``+3.2 s`` (agent ahead of the server), ``-0.4 s``; None → N/A."""
    if seconds is None:
        return NA
    return f"{seconds:+.1f} s"


# NVML ``nvmlClocksEventReason*`` bits (formerly "clocks throttle reasons"), in bit order.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
_KNOWN_REASON_BITS = sum(bit for bit, _ in CLOCK_EVENT_REASONS)


def clock_event_reason_names(mask: int | None) -> list[str] | None:
    """Names of the bits set in an NVML clock event reasons bitmask (``0x44`` →
    ``["SwPowerCap", "HwThermalSlowdown"]``); unknown bits are kept as one hex entry; ``0`` → ``[]``
    (clocks not held back); None → None (not reported)."""
    if mask is None:
        return None
    names = [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
    unknown = mask & ~_KNOWN_REASON_BITS
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def fmt_time(value: datetime | None, zone: tzinfo = UTC) -> str:
    """To the second, in ``zone``: UTC as ISO 8601 (``2026-11-29 16:00:05Z``), other zones with
    their abbreviation (``2026-03-29 03:30:00 CEST``); ``None`` → ``"N/A"``."""
    if value is None:
        return NA
    return fmt_local(value, zone)


@pass_context
def _viewer_time(context: Context, value: datetime | None) -> str:
    """The ``utc`` filter: :func:`fmt_time` in the request's zone (:func:`viewer_tz`; a bad
    ``?tz=`` raises ``BadRequest`` and so answers 400)."""
    request = context.get("request")
    return fmt_time(value, viewer_tz(request) if request is not None else UTC)


@pass_context
def _tz_query(context: Context) -> str:
    return tz_query(context.get("request"))


@pass_context
def _zone_label(context: Context) -> str:
    return zone_label(viewer_tz_or_utc(context.get("request")), datetime.now(UTC))


@pass_context
def _picker(context: Context) -> dict[str, Any]:
    zone = viewer_tz_or_utc(context.get("request"))
    return {
        "current": zone.key,
        "zones": picker_zones(zone),
        "param": TZ_PARAM,
        "cookie": TZ_COOKIE,
    }


templates.env.filters["num"] = fmt_number
templates.env.filters["bytes"] = fmt_bytes
templates.env.filters["age"] = fmt_age
templates.env.filters["rate"] = fmt_rate
templates.env.filters["counter"] = fmt_count
templates.env.filters["ms"] = fmt_ms
templates.env.filters["utc"] = _viewer_time
templates.env.filters["skew"] = fmt_skew
templates.env.filters["clock_reasons"] = clock_event_reason_names
# An action's argument list as a shell would need it typed (a Reason with spaces stays one
# word): what an operator copies to run it by hand.
templates.env.filters["shell_words"] = lambda words: shlex.join(str(w) for w in words)
templates.env.globals["version"] = __version__
templates.env.globals["NA"] = NA
templates.env.globals["value_reasons"] = value_reasons
templates.env.globals["tz_query"] = _tz_query
templates.env.globals["zone_label"] = _zone_label
templates.env.globals["tz_picker"] = _picker


def is_htmx(request: Request) -> bool:
    """True for a request made by htmx (``HX-Request: true``), which wants a partial."""
    return request.headers.get("hx-request", "").lower() == "true"


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    """Render template ``name`` with ``context`` (the request is added)."""
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def render_error_page(request: Request, *, status_code: int, detail: str) -> HTMLResponse:
    """An error as a page, or as a fragment for htmx requests."""
    name = "components/_error.html" if is_htmx(request) else "error.html"
    return render(request, name, {"status_code": status_code, "detail": detail}, status_code)
