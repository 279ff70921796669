"""Template environment, display filters (units, ages, N/A) and htmx helpers for the pages."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app import __version__
from app.config import PROJECT_ROOT

templates = Jinja2Templates(directory=PROJECT_ROOT / "templates")

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


def fmt_time(value: datetime | None) -> str:
    """ISO-8601 UTC to the second (``2026-11-29 16:00:05Z``); ``None`` → ``"N/A"``."""
    if value is None:
        return NA
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


templates.env.filters["num"] = fmt_number
templates.env.filters["bytes"] = fmt_bytes
templates.env.filters["age"] = fmt_age
templates.env.filters["utc"] = fmt_time
templates.env.globals["version"] = __version__
templates.env.globals["NA"] = NA


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
