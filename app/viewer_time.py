"""The viewer's time zone: which one a request asks for, and times written in it.

Pages show times in UTC unless the viewer picks a zone (``templates/components/_tz_picker.html``).
The choice travels in the URL as ``?tz=<IANA name>`` (``Europe/Berlin``) so a link pasted into
chat opens the same view; the picker also stores it in the ``fw_tz`` cookie so it sticks, but a
``tz`` in the URL always wins over the cookie.

For a page or partial that shows times::

    from app.viewer_time import viewer_tz
    zone = viewer_tz(request)              # ZoneInfo; raises BadRequest for a bad ?tz=
    local = some_utc_datetime.astimezone(zone)

In templates the ``utc`` filter already writes times in the request's zone
(``2026-03-29 03:30:00 CEST``), ``tz_query`` gives ``"tz=Europe%2FBerlin"`` (or ``""``) to put
in links and htmx URLs, and ``tz_hidden`` is the ``(name, value)`` pair for GET forms.
Zone names and rules come from the IANA tz database through ``zoneinfo`` (``tzdata`` installed).
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import Request

from app.errors import BadRequest
from app.timebounds import is_utc

TZ_PARAM = "tz"
TZ_COOKIE = "fw_tz"
DEFAULT_ZONE = ZoneInfo("UTC")
#: Offered by the picker besides UTC and the browser's own zone, west to east.
COMMON_ZONES: tuple[str, ...] = (
    "America/Los_Angeles",
    "America/Denver",
    "America/Chicago",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Paris",
    "Europe/Berlin",
    "Europe/Helsinki",
    "Asia/Dubai",
    "Asia/Kolkata",
    "Asia/Singapore",
    "Asia/Shanghai",
    "Asia/Tokyo",
    "Australia/Adelaide",
    "Australia/Sydney",
)
_STATE_KEY = "viewer_tz"


def parse_zone(raw: str) -> ZoneInfo:
    """An IANA zone name (``Europe/Berlin``, ``UTC``) → ``ZoneInfo``.

    Raises:
        ValueError: empty, not a valid key (``../etc``, ``+01:00``) or not in the tz database.
    """
    name = raw.strip()
    if not name or len(name) > 64:
        raise ValueError("not a time zone name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown time zone {name!r} (use an IANA name such as Europe/Berlin)"
        ) from None


def viewer_tz(request: Request) -> ZoneInfo:
    """The zone to show times in: ``?tz=`` if given, else the ``fw_tz`` cookie (ignored when
    stale or invalid), else UTC. Cached on ``request.state``.

    Raises:
        BadRequest: ``?tz=`` names no zone (message starts ``tz:``), so pages answer 400.
    """
    cached = getattr(request.state, _STATE_KEY, None)
    if isinstance(cached, ZoneInfo):
        return cached
    raw = request.query_params.get(TZ_PARAM)
    if raw is not None and raw.strip():
        try:
            zone = parse_zone(raw)
        except ValueError as exc:
            raise BadRequest(f"{TZ_PARAM}: {exc}") from None
    else:
        try:
            # The picker writes the cookie percent-encoded (encodeURIComponent).
            zone = parse_zone(unquote(request.cookies.get(TZ_COOKIE, "")))
        except ValueError:
            zone = DEFAULT_ZONE
    setattr(request.state, _STATE_KEY, zone)
    return zone


def viewer_tz_or_utc(request: Request | None) -> ZoneInfo:
    """:func:`viewer_tz` that never raises (UTC for a bad ``?tz=`` or no request), for the
    error page and the footer."""
    if request is None:
        return DEFAULT_ZONE
    try:
        return viewer_tz(request)
    except BadRequest:
        return DEFAULT_ZONE


def tz_query(request: Request | None) -> str:
    """``"tz=Europe%2FBerlin"`` for links and htmx URLs, or ``""`` in UTC (the default)."""
    zone = viewer_tz_or_utc(request)
    return "" if zone.key == "UTC" else f"{TZ_PARAM}={quote(zone.key, safe='')}"


def zone_abbr(value: datetime, zone: tzinfo) -> str:
    """The zone's abbreviation at ``value`` (``CET``, ``CEST``, ``IST``), or its offset
    (``+0530``) where the tz database has no letters for it (``+04``); ``UTC`` in UTC."""
    name = value.astimezone(zone).tzname() or ""
    return offset_text(value, zone) if not name or name[0] in "+-" else name


def offset_text(value: datetime, zone: tzinfo) -> str:
    """The UTC offset of ``zone`` at ``value``: ``UTC+05:30``, ``UTC-04:00``."""
    offset = value.astimezone(zone).utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "-" if minutes < 0 else "+"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def fmt_local(value: datetime, zone: tzinfo = UTC, *, seconds: bool = True) -> str:
    """``value`` on the wall clock of ``zone`` with its abbreviation: ``2026-03-29 03:30:00
    CEST``; in UTC the ISO form ``2026-03-29 01:30:00Z``. ``value`` must be aware."""
    pattern = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    if is_utc(zone):
        return value.astimezone(UTC).strftime(pattern) + "Z"
    return f"{value.astimezone(zone).strftime(pattern)} {zone_abbr(value, zone)}"


def zone_label(zone: ZoneInfo, at: datetime) -> str:
    """How the footer names the zone: ``UTC`` or ``Europe/Berlin (CEST, UTC+02:00)``."""
    if zone.key == "UTC":
        return "UTC"
    hhmm = offset_text(at, zone)
    abbr = zone_abbr(at, zone)
    return f"{zone.key} ({hhmm})" if abbr == hhmm else f"{zone.key} ({abbr}, {hhmm})"


def picker_zones(current: ZoneInfo) -> list[str]:
    """The picker's options: UTC, the common zones, and the current one if it is not among
    them (the browser's own zone is added by script)."""
    names = ["UTC", *COMMON_ZONES]
    return names if current.key in names else [*names, current.key]
