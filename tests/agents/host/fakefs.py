"""Fake ``/proc`` and ``/sys`` trees under a test's ``tmp_path``, assembled from the shared
fixtures (read in place; only the temporary tree holds copies)."""

from __future__ import annotations

from pathlib import Path

from tests.shared_fixtures import fixture_path


def proc_fixture(name: str) -> str:
    """The text of ``../shared/fixtures/proc/<name>``."""
    return fixture_path(f"proc/{name}").read_text(encoding="utf-8")


def write_file(root: Path, relative: str, text: str) -> Path:
    """Write ``text`` at ``root/relative``, creating folders; return the file's path."""
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def materialise_grep_listing(listing: str, root: Path) -> Path:
    """Turn a ``grep . /sys/class/…/*`` listing (``/absolute/path:value`` per line) into files
    under ``root`` and return the fake sysfs (``root/sys``).

    The path ends at the first ``:`` (sysfs paths have none); the value is the rest of the line
    (``4: ACTIVE`` keeps its colon) and is written with the newline sysfs ends values with.
    """
    folders: set[Path] = set()
    for line in listing.splitlines():
        path, colon, value = line.partition(":")
        if not (colon and path.startswith("/")):
            continue
        target = root / path.lstrip("/")
        if target.parent not in folders:
            target.parent.mkdir(parents=True, exist_ok=True)
            folders.add(target.parent)
        with open(target, "w", encoding="utf-8") as file:
            file.write(value + "\n")
    return root / "sys"
