"""``app.runbooks.service`` on Postgres and SQLite: a UI edit overrides the file, revert
restores it, ``render_runbook`` for the alert pages (file, UI, missing, an alert's context)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.alerts.models import AlertInstance, AlertRule
from app.config import PROJECT_ROOT
from app.db import make_engine, make_session_factory, session_scope
from app.errors import BadRequest, NotFound
from app.runbooks import service
from app.runbooks.context import RunbookContext
from tests.factories import wipe_alerts


@pytest.fixture
def session(db_url: str) -> Iterator[Session]:
    engine = make_engine(db_url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            yield s
    finally:
        engine.dispose()
        wipe_alerts(db_url)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "disk-slow.md").write_text("# Slow {{ device }}\n")
    return tmp_path


def node_alert(device: str) -> RunbookContext:
    inst = AlertInstance(
        id=5, labels={"hostname": "n1", "device": device}, value=0.25, state="firing"
    )
    rule = AlertRule(name="storage-latency-high", severity="warning", spec={})
    return RunbookContext.from_alert(inst, rule)


def test_render_runbook_reads_the_file_then_the_ui_edit_then_the_file_again(
    session: Session, folder: Path
) -> None:
    ctx = node_alert("nvme0n1")
    first = service.render_runbook(session, "disk-slow", ctx, runbooks_dir=folder)
    assert (first.html, first.source, first.missing, first.warnings, first.title) == (
        "<h1>Slow nvme0n1</h1>\n",
        "file",
        False,
        [],
        "Slow <device>",
    )

    service.save_runbook(session, runbooks_dir=folder, name="disk-slow", markdown="# Edited\n")
    edited = service.render_runbook(session, "disk-slow", ctx, runbooks_dir=folder)
    assert (edited.html, edited.source) == ("<h1>Edited</h1>\n", "ui")
    assert (folder / "disk-slow.md").read_text() == "# Slow {{ device }}\n"
    listed = service.list_runbooks(session, runbooks_dir=folder)
    assert [(d.name, d.source, d.has_file) for d in listed] == [("disk-slow", "ui", True)]

    doc = service.revert_runbook(session, runbooks_dir=folder, name="disk-slow")
    assert doc is not None and (doc.source, doc.markdown) == ("file", "# Slow {{ device }}\n")
    with pytest.raises(NotFound, match="runbook 'disk-slow' has no edit to revert"):
        service.revert_runbook(session, runbooks_dir=folder, name="disk-slow")


def test_a_missing_runbook_is_reported_not_raised(session: Session, folder: Path) -> None:
    out = service.render_runbook(session, "nope", None, runbooks_dir=folder)
    assert (out.html, out.source, out.missing, out.warnings) == (
        "<p>No runbook named <code>nope</code> yet.</p>\n",
        None,
        True,
        [],
    )


def test_a_ui_only_runbook_is_gone_after_revert(session: Session, folder: Path) -> None:
    service.save_runbook(session, runbooks_dir=folder, name="ui-only", markdown="x")
    assert service.revert_runbook(session, runbooks_dir=folder, name="ui-only") is None
    with pytest.raises(NotFound):
        service.get_runbook(session, runbooks_dir=folder, name="ui-only")


def test_the_default_folder_is_the_shipped_one(session: Session) -> None:
    out = service.render_runbook(session, "node-agent-stale", node_alert("sda"))
    assert out.source == "file"
    assert out.html.startswith("<h1>No telemetry from n1</h1>")
    assert (PROJECT_ROOT / "runbooks" / "node-agent-stale.md").is_file()


@pytest.mark.parametrize("name", ["../etc/passwd", "..", "a/b", "", ".x", "a\\b", "a\x00"])
def test_bad_names_are_refused_naming_name(session: Session, folder: Path, name: str) -> None:
    with pytest.raises(BadRequest, match=r"^name: "):
        service.render_runbook(session, name, None, runbooks_dir=folder)
    with pytest.raises(BadRequest, match=r"^name: "):
        service.save_runbook(session, runbooks_dir=folder, name=name, markdown="x")


def test_page_url() -> None:
    assert service.page_url("gpu-lost") == "/runbooks/gpu-lost"
    assert service.page_url("gpu-lost", alert_id=42) == "/runbooks/gpu-lost?alert=42"
