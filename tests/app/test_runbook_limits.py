"""Runbook templates are bounded (loops, ranges, repeated and joined values, powers, format
widths, output size): a template over a limit shows as written with a warning, never a 500;
a runbook holding NUL is refused naming ``markdown`` (both backends, live server)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.runbooks.render import render_markdown
from tests.conftest import make_settings
from tests.factories import wipe_alerts
from tests.live_server import LiveServer

PREFIX = "the runbook's template could not be filled in: "
SUFFIX = "; shown as written"


@pytest.mark.parametrize(
    ("template", "why"),
    [
        (
            "{% for i in range(1000) %}{% for j in range(1000) %}.{% endfor %}{% endfor %}",
            "loops ran over 20,000 iterations in all",
        ),
        (
            "{% for c in 'x' * 100000 %}{% for d in 'y' * 100000 %}{% endfor %}{% endfor %}",
            "loops ran over 20,000 iterations in all",
        ),
        ('{{ "x" * 50000000 }}', "a repeated value longer than 100,000 items"),
        ("{{ [1] * 200000 }}", "a repeated value longer than 100,000 items"),
        ("{{ 10 ** 10000000 }}", "a power over 4,096 bits"),
        ("{{ range(5000)|list }}", "a range longer than 1,000 items"),
        ('{{ "x"|center(1000000000) }}', "a filter argument over 100,000"),
        ('{{ "%999999999d" % 1 }}', "a format width over 99,999"),
        ('{{ "{:>999999999}".format(1) }}', "a format width over 99,999"),
        ('{{ "%999999999d"|format(1) }}', "a format width over 99,999"),
        (
            '{% set ns = namespace(s="x") %}{% for i in range(100) %}'
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
            "a joined value longer than 100,000 characters",
        ),
        (
            '{% set ns = namespace(s="x") %}{% for i in range(100) %}'
            "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
            "a joined value longer than 100,000 items",
        ),
        (
            '{% set ns = namespace(s="x") %}{% for i in range(100) %}'
            "{% set ns.s = [ns.s, ns.s]|join %}{% endfor %}{{ ns.s }}",
            "a filter result longer than 100,000 characters",
        ),
        (
            '{% for i in range(500) %}{{ "y" * 50000 }}{% endfor %}',
            "the filled-in runbook is over 1,048,576 characters",
        ),
        (
            '{% for i in range(30) %}{{ "z" * 50000 }}{% endfor %}',
            "the filled-in runbook is over 1,048,576 characters",
        ),
    ],
)
def test_a_template_over_a_limit_shows_as_written(template: str, why: str) -> None:
    out = render_markdown(template, {})
    assert out.warnings == [PREFIX + why + SUFFIX]
    assert out.html == f"<pre><code>{html.escape(template, quote=False)}</code></pre>"


def test_templates_within_the_limits_render() -> None:
    template = (
        "ok {{ gpu.index }} {% for i in range(3) %}{{ i }}{{ loop.index }}{% endfor %} "
        '{{ 2 * 3 }} {{ 2 ** 10 }} {{ "a" + "b" }} {{ "%05d"|format(3) }} '
        '{{ "a" ~ gpu.index ~ "b" }} {{ "{:>4}".format(7) }} {{ "ab" * 2 }} '
        "{{ range(1000)|length }}"
    )
    out = render_markdown(template, {"gpu": {"index": 3}})
    assert (out.html, out.warnings) == (
        "<p>ok 3 011223 6 1024 ab 00003 a3b    7 abab 1000</p>\n",
        [],
    )


@pytest.fixture
def site(db_url: str, tmp_path: Path) -> Iterator[str]:
    folder = tmp_path / "runbooks"
    folder.mkdir()
    (folder / "plain.md").write_text("# Plain\n")
    live = LiveServer(make_settings(db_url, tmp_path, runbooks_dir=folder))
    live.start()
    yield live.url
    live.stop()
    wipe_alerts(db_url)


def test_nul_in_a_runbook_is_refused_naming_markdown(site: str) -> None:
    api = httpx.put(f"{site}/api/v1/runbooks/plain", json={"markdown": "# A\x00B\n"})
    assert (api.status_code, api.json()) == (
        400,
        {"detail": "markdown: may not contain NUL characters"},
    )
    page = httpx.post(f"{site}/runbooks/plain/edit", data={"markdown": "# A\x00B\n"})
    assert page.status_code == 400
    assert "markdown: may not contain NUL characters" in page.text
    assert httpx.get(f"{site}/api/v1/runbooks/plain").json()["markdown"] == "# Plain\n"


def test_a_runbook_over_a_limit_is_a_page_with_a_warning_not_a_500(site: str) -> None:
    bomb = '# Bomb\n\n{{ "x" * 50000000 }}\n'
    saved = httpx.put(f"{site}/api/v1/runbooks/plain", json={"markdown": bomb})
    assert saved.status_code == 200, saved.text
    page = httpx.get(f"{site}/runbooks/plain")
    assert page.status_code == 200
    assert "a repeated value longer than 100,000 items" in page.text
