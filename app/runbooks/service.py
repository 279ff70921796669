"""Runbooks: the files of ``runbooks_dir`` overridden by rows of the ``runbook`` table (an edit
in the UI writes the row; "revert to file" deletes it), and :func:`render_runbook` for pages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alerts.models import Runbook
from app.alerts.spec import NAME_RE
from app.audit import service as audit
from app.db import utcnow
from app.errors import BadRequest, NotFound
from app.runbooks.context import RunbookContext
from app.runbooks.render import render_markdown

MAX_MARKDOWN_CHARS = 200_000
Source = Literal["file", "ui"]
_VALUE = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_TAG = re.compile(r"\{%.*?%\}")


@dataclass(frozen=True)
class RunbookDoc:
    """A runbook's current Markdown. ``source``: ``ui`` when a stored edit is in force, else
    ``file``; ``has_file``: ``runbooks_dir/<name>.md`` exists; ``updated_at``: of the edit (UI),
    or the file's modification time."""

    name: str
    markdown: str
    source: Source
    has_file: bool
    updated_at: datetime | None
    #: The owning team of the stored edit (``None``: shared, and always for a file).
    team: str | None = None

    @property
    def title(self) -> str:
        """The first Markdown heading's text with its values as ``<placeholders>`` and template
        tags dropped (``# GPU lost: {{ node.hostname }}`` → ``GPU lost: <node.hostname>``), else
        the name."""
        for line in self.markdown.splitlines():
            if line.startswith("#"):
                text = _TAG.sub("", _VALUE.sub(r"<\1>", line.lstrip("#"))).strip()
                return " ".join(text.split()) or self.name
        return self.name


@dataclass(frozen=True)
class RenderedRunbook:
    """A runbook ready for a page. ``html``: sanitised HTML (safe to insert); ``source``: as in
    :class:`RunbookDoc` (None when ``missing``); ``missing``: no file and no edit has this name
    (``html`` then says so); ``warnings``: sentences to show above it."""

    name: str
    html: str
    source: Source | None
    missing: bool
    warnings: list[str]
    title: str


def page_url(name: str, *, alert_id: int | None = None) -> str:
    """The runbook's page, filled in for ``alert_id`` when given
    (``/runbooks/gpu-lost?alert=42``); for links from alert pages and notifications."""
    url = f"/runbooks/{quote(name, safe='')}"
    return url if alert_id is None else f"{url}?alert={int(alert_id)}"


def check_name(name: str) -> str:
    """``name`` if it is a runbook name (as rules' ``runbook:``: 1-128 letters, digits, ``_``,
    ``.``, ``-``, starting with a letter or digit — so never a path).

    Raises:
        BadRequest: naming ``name``.
    """
    if not NAME_RE.match(name):
        raise BadRequest(
            f"name: {name[:140]!r} is not a runbook name "
            "(1-128 letters, digits, '_', '.', '-', starting with a letter or digit)"
        )
    return name


def file_path(runbooks_dir: Path, name: str) -> Path:
    """``runbooks_dir/<name>.md``, after :func:`check_name`; the resolved path is checked to
    lie directly in the folder (defence in depth against symlinks and odd names)."""
    folder = runbooks_dir.resolve()
    path = (folder / f"{check_name(name)}.md").resolve()
    if path.parent != folder:
        raise BadRequest(f"name: {name!r} is not a runbook name")
    return path


def _file_doc(runbooks_dir: Path, name: str) -> tuple[str, datetime] | None:
    path = file_path(runbooks_dir, name)
    if not path.is_file():
        return None
    mtime = datetime.fromtimestamp(path.stat().st_mtime).astimezone()
    return path.read_text(encoding="utf-8", errors="replace"), mtime


def file_names(runbooks_dir: Path) -> list[str]:
    """Names of the ``*.md`` files of ``runbooks_dir`` that are valid runbook names, sorted
    (none when the folder does not exist)."""
    if not runbooks_dir.is_dir():
        return []
    return sorted(p.stem for p in runbooks_dir.glob("*.md") if NAME_RE.match(p.stem))


def audit_state(doc: RunbookDoc | None) -> dict[str, object] | None:
    """What the audit trail keeps of a runbook: its Markdown and where it comes from."""
    if doc is None:
        return None
    return {"markdown": doc.markdown, "source": doc.source, "team": doc.team}


def edit_team(session: Session, *, name: str) -> str | None:
    """The owning team of runbook ``name``'s stored edit; ``None`` when it has none (shared)
    or there is no edit (a file alone is shared)."""
    if not NAME_RE.match(name):
        return None
    row = session.get(Runbook, name)
    return row.team if row is not None else None


def _current(session: Session, runbooks_dir: Path, name: str) -> RunbookDoc | None:
    try:
        return get_runbook(session, runbooks_dir=runbooks_dir, name=name)
    except NotFound:
        return None


def get_runbook(session: Session, *, runbooks_dir: Path, name: str) -> RunbookDoc:
    """The runbook ``name``: its stored edit, else its file.

    Raises:
        BadRequest: a bad name. NotFound: neither exists.
    """
    from_file = _file_doc(runbooks_dir, name)
    row = session.get(Runbook, name)
    if row is not None:
        return RunbookDoc(name, row.markdown, "ui", from_file is not None, row.updated_at, row.team)
    if from_file is None:
        raise NotFound(f"no runbook named {name!r}")
    return RunbookDoc(name, from_file[0], "file", True, from_file[1])


def list_runbooks(session: Session, *, runbooks_dir: Path) -> list[RunbookDoc]:
    """Every runbook (files and stored edits), by name."""
    rows = {r.name: r for r in session.scalars(select(Runbook))}
    names = sorted(set(file_names(runbooks_dir)) | set(rows))
    out = []
    for name in names:
        row = rows.get(name)
        from_file = _file_doc(runbooks_dir, name) if NAME_RE.match(name) else None
        if row is not None:
            has_file = from_file is not None
            out.append(RunbookDoc(name, row.markdown, "ui", has_file, row.updated_at, row.team))
        elif from_file is not None:
            out.append(RunbookDoc(name, from_file[0], "file", True, from_file[1]))
    return out


def save_runbook(
    session: Session, *, runbooks_dir: Path, name: str, markdown: str, team: str | None = None
) -> RunbookDoc:
    """Store ``markdown`` as the runbook ``name`` (creating or replacing its edit; the file is
    never written), owned by ``team`` (``None``: shared).

    Raises:
        BadRequest: a bad name, or ``markdown`` empty, over 200,000 characters or holding a NUL
            character (Postgres text cannot store it; dropping it would change the text).
    """
    check_name(name)
    if not markdown.strip():
        raise BadRequest("markdown: a runbook cannot be empty (revert to the file instead)")
    if len(markdown) > MAX_MARKDOWN_CHARS:
        raise BadRequest(f"markdown: longer than {MAX_MARKDOWN_CHARS:,} characters")
    if "\x00" in markdown:
        raise BadRequest("markdown: may not contain NUL characters")
    markdown = markdown.replace("\r\n", "\n")
    before = audit_state(_current(session, runbooks_dir, name))
    row = session.get(Runbook, name)
    now = utcnow()
    if row is None:
        session.add(Runbook(name=name, markdown=markdown, updated_at=now, team=team))
    else:
        row.markdown = markdown
        row.updated_at = now
        row.team = team
    session.flush()
    doc = get_runbook(session, runbooks_dir=runbooks_dir, name=name)
    audit.note_change("runbook", name, before=before, after=audit_state(doc))
    return doc


def revert_runbook(session: Session, *, runbooks_dir: Path, name: str) -> RunbookDoc | None:
    """Drop the stored edit of ``name``; returns the file's runbook, or None when there is no
    file (the runbook is then gone).

    Raises:
        BadRequest: a bad name. NotFound: no stored edit.
    """
    check_name(name)
    row = session.get(Runbook, name)
    if row is None:
        raise NotFound(f"runbook {name!r} has no edit to revert")
    before = audit_state(_current(session, runbooks_dir, name))
    session.delete(row)
    session.flush()
    doc = _current(session, runbooks_dir, name)
    audit.note_change("runbook", name, before=before, after=audit_state(doc))
    return doc


def render_doc(doc: RunbookDoc, context: RunbookContext | None) -> RenderedRunbook:
    """``doc`` rendered with ``context`` (None: values shown as ``<name>`` placeholders)."""
    out = render_markdown(doc.markdown, None if context is None else context.template_vars())
    return RenderedRunbook(doc.name, out.html, doc.source, False, out.warnings, doc.title)


def render_runbook(
    session: Session,
    name: str,
    context: RunbookContext | None,
    *,
    runbooks_dir: Path | None = None,
) -> RenderedRunbook:
    """The runbook ``name`` as sanitised HTML, filled in with ``context`` (an alert's, from
    :meth:`RunbookContext.from_alert`). ``runbooks_dir`` defaults to the process settings'
    ``runbooks_dir``; pages pass ``request.app.state.settings.runbooks_dir``. A missing runbook
    is ``missing=True`` with a short HTML notice, never an error.

    Raises:
        BadRequest: ``name`` is not a runbook name.
    """
    if runbooks_dir is None:
        from app.config import get_settings

        runbooks_dir = get_settings().runbooks_dir
    try:
        doc = get_runbook(session, runbooks_dir=runbooks_dir, name=name)
    except NotFound:
        notice = render_markdown("No runbook named `{{ name }}` yet.", {"name": name})
        return RenderedRunbook(name, notice.html, None, True, [], name)
    return render_doc(doc, context)
