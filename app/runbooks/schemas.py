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
        )


class RunbookIn(BaseModel):
    """A new text for a runbook (Markdown with ``{{ … }}`` alert values)."""

    markdown: str = Field(min_length=1, max_length=MAX_MARKDOWN_CHARS)
