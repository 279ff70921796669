"""The default alert rule pack with a few timings shortened, for end-to-end tests that would
otherwise wait out the production `for:` and `keep_firing_for:` durations."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.alerts.rule_reach import Kept
from app.alerts.rulefiles import DEFAULT_RULES_DIR, apply_path
from app.config import Settings
from app.db import make_engine, make_session_factory, session_scope


def apply_edited_default_rules(
    settings: Settings, folder: Path, edits: list[tuple[str, str, str]]
) -> None:
    """Apply the default rule pack as ``app.demo.apply_default_rules`` does, from a copy under
    ``folder`` in which each ``(file name, old text, new text)`` edit is made.

    Raises:
        AssertionError: an ``old text`` is not in its file exactly once (the pack changed:
            the test's edit needs revisiting).
    """
    pack = folder / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, pack)
    for name, old, new in edits:
        text = (pack / name).read_text()
        assert text.count(old) == 1, (name, old)
        (pack / name).write_text(text.replace(old, new))
    engine = make_engine(settings.effective_database_url)
    try:
        with session_scope(make_session_factory(engine)) as session:
            apply_path(session, path=pack, defaults=True, kept=Kept.of(settings))
    finally:
        engine.dispose()
