"""Helpers for the ``/metrics`` tests: scraping, and reading a sample's value from the text."""

from __future__ import annotations

import os
import shutil
import subprocess

import httpx
import pytest


def scrape(base_url: str) -> str:
    """``GET /metrics`` of the server at ``base_url``; fails unless it answers 200 as text."""
    response = httpx.get(f"{base_url}/metrics", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return response.text


def value(text: str, series: str) -> float | None:
    """The value of the sample line starting with ``series`` (``name{labels}`` exactly as
    written, or a bare name), None when there is none."""
    for line in text.splitlines():
        if line.startswith(f"{series} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def lines_with(text: str, needle: str) -> set[str]:
    """The sample lines (not comments) containing ``needle``."""
    return {line for line in text.splitlines() if needle in line and not line.startswith("#")}


def promtool() -> str:
    """The path of ``promtool`` (Debian's ``prometheus`` package); skips when it is absent, or
    fails under ``CI=true`` (``.ci/run`` installs it)."""
    path = shutil.which("promtool")
    if path is None:
        message = "promtool not found: apt-get install prometheus (the check of /metrics' text)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def promtool_problems(text: str) -> list[str]:
    """``promtool check metrics`` of ``text``: the lint problems it prints (none: []); fails
    the test when promtool cannot parse the text at all."""
    done = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    output = (done.stdout + done.stderr).strip()
    assert done.returncode in (0, 3), f"promtool exit {done.returncode}: {output}"
    return output.splitlines() if done.returncode == 3 else []
