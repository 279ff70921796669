"""JSON shapes of ``/api/v1/runbooks``."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from app.runbooks.service import MAX_MARKDOWN_CHARS, RunbookDoc


class RunbookOut(BaseModel):
    """A runbook: ``source`` ``ui`` (an edit stored in the database is in force) or ``file``
    (``runbooks_dir/<name>.md``); ``has_file`` says whether reverting the edit leaves a runbook."""

    name: str
    title: str
    source: Literal["file", "ui"]
    has_file: bool
    updated_at: datetime | None
    markdown: str
    #: The owning team of the edit (``None``: shared; a file is always shared).
    team: str | None = None

    @classmethod
    def of(cls, doc: RunbookDoc) -> RunbookOut:
        """From the service's document."""
        return cls(
            name=doc.name,
            title=doc.title,
            source=doc.source,
            has_file=doc.has_file,
            updated_at=doc.updated_at,
            markdown=doc.markdown,
            team=doc.team,
        )


class RunbookIn(BaseModel):
    """A new text for a runbook (Markdown with ``{{ … }}`` alert values)."""

    markdown: str = Field(min_length=1, max_length=MAX_MARKDOWN_CHARS)
    team: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="owning team; left out: the edit's team, else the caller's only team",
    )
