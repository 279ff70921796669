"""Runbook rendering without a server: exact templated values, escaping of hostile context
values, neutralised HTML/JS in the Markdown, missing values and template errors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app.alerts.models import AlertInstance, AlertRule
from app.runbooks.context import RunbookContext
from app.runbooks.render import render_markdown

FIRED = datetime(2026, 11, 29, 3, 0, 5, tzinfo=UTC)


def gpu_alert(**labels: str) -> RunbookContext:
    """The context of a firing ``gpu-temperature-high`` instance on gpu-a-01 GPU 3."""
    inst = AlertInstance(
        id=42,
        labels={
            "hostname": "gpu-a-01",
            "cluster": "a",
            "gpu_index": "3",
            "gpu_uuid": "GPU-8f2c",
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "alertname": "gpu-temperature-high",
            "severity": "warning",
            "owner_team": "gpu-ops",
            **labels,
        },
        value=91.25,
        state="firing",
        summary="gpu-a-01 GPU 3 at 91.25 °C for 5 minutes",
        description="",
        fired_at=FIRED,
        active_since=FIRED,
    )
    rule = AlertRule(
        name="gpu-temperature-high",
        severity="warning",
        owner_team="gpu-ops",
        spec={"condition": {"kind": "threshold", "threshold": 85}},
    )
    return RunbookContext.from_alert(inst, rule)


def html_of(markdown: str, context: RunbookContext | None = None) -> str:
    out = render_markdown(markdown, None if context is None else context.template_vars())
    return out.html


def test_it_fills_in_the_alerts_values_exactly() -> None:
    md = (
        "GPU {{ gpu.index }} ({{ gpu.uuid }}, {{ gpu.model }}) of {{ node.hostname }} "
        "in cluster {{ node.labels.cluster }}: {{ value }} °C > {{ threshold }}, "
        "alert {{ alert.id }} {{ alert.state }} since {{ alert.fired_at }}"
    )
    assert html_of(md, gpu_alert()) == (
        "<p>GPU 3 (GPU-8f2c, NVIDIA H100 80GB HBM3) of gpu-a-01 in cluster a: 91.25 °C &gt; 85, "
        "alert 42 firing since 2026-11-29T03:00:05Z</p>\n"
    )


def test_commands_in_code_blocks_and_links_to_pages_are_filled_in() -> None:
    md = (
        "```sh\nnvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i {{ gpu.index }}\n```\n\n"
        "[GPU]({{ links.gpu }}) [node]({{ links.node }}) [alert]({{ links.alert }}) "
        "[storage]({{ links.storage }})"
    )
    assert html_of(md, gpu_alert()) == (
        '<pre><code class="language-sh">'
        "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT -i 3\n</code></pre>\n"
        '<p><a href="/nodes/gpu-a-01/gpus/GPU-8f2c" rel="noopener noreferrer">GPU</a> '
        '<a href="/nodes/gpu-a-01" rel="noopener noreferrer">node</a> '
        '<a href="/alerts/42" rel="noopener noreferrer">alert</a> '
        '<a href="/storage?q=gpu-a-01" rel="noopener noreferrer">storage</a></p>\n'
    )


@pytest.mark.parametrize(
    ("markdown", "absent", "present"),
    [
        ("<script>alert(1)</script>", "<script", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ('<iframe src="https://evil.example"></iframe>', "<iframe", "&lt;iframe"),
        ("<img src=x onerror=alert(1)>", "<img", "&lt;img src=x onerror=alert(1)&gt;"),
        ("[click](javascript:alert(1))", "href", "[click](javascript:alert(1))"),
        ("[c](JaVaScRiPt&#58;alert(1))", "href", "[c]("),
        ('<a href="javascript:alert(1)">x</a>', "<a ", "&lt;a href="),
        ("<style>body{display:none}</style>", "<style", "&lt;style&gt;"),
        ("![x](javascript:alert(1))", "<img", "![x]"),
        ('<div onclick="alert(1)">x</div>', "<div", "&lt;div onclick="),
    ],
)
def test_markup_and_scripts_in_the_markdown_are_shown_as_text(
    markdown: str, absent: str, present: str
) -> None:
    out = html_of(markdown)
    assert absent not in out
    assert present in out


def test_links_get_noopener_and_only_safe_schemes() -> None:
    out = html_of("[a](https://docs.nvidia.com/deploy/xid-errors/) <https://x.example/a>")
    assert out == (
        '<p><a href="https://docs.nvidia.com/deploy/xid-errors/" rel="noopener noreferrer">a</a> '
        '<a href="https://x.example/a" rel="noopener noreferrer">https://x.example/a</a></p>\n'
    )


HOSTILE = '<img src=x onerror="alert(1)"> **bold** [x](javascript:alert(1)) `tick` | a |'


def test_a_hostile_label_is_shown_as_typed_in_text_tables_and_code() -> None:
    ctx = gpu_alert(cluster=HOSTILE)
    md = (
        "Cluster {{ labels.cluster }}\n\n| k | v |\n|---|---|\n| c | {{ labels.cluster }} |\n\n"
        "```\n{{ labels.cluster }}\n```\n\n`{{ labels.cluster }}`"
    )
    escaped = '&lt;img src=x onerror="alert(1)"&gt; **bold** [x](javascript:alert(1)) `tick` | a |'
    out = html_of(md, ctx)
    assert out == (
        f"<p>Cluster {escaped}</p>\n<table>\n<thead>\n<tr>\n<th>k</th>\n<th>v</th>\n</tr>\n"
        f"</thead>\n<tbody>\n<tr>\n<td>c</td>\n<td>{escaped}</td>\n</tr>\n</tbody>\n</table>\n"
        f"<pre><code>{escaped}\n</code></pre>\n<p><code>{escaped}</code></p>\n"
    )


def test_a_hostile_value_in_a_link_target_stays_inside_the_attribute() -> None:
    ctx = gpu_alert(hostname='x" onmouseover="alert(1)')
    out = html_of("[node]({{ links.node }}) [raw]({{ node.hostname }})", ctx)
    assert out == (
        '<p><a href="/nodes/x%22%20onmouseover%3D%22alert%281%29" rel="noopener noreferrer">'
        'node</a> <a href="x&quot; onmouseover=&quot;alert(1)" rel="noopener noreferrer">'
        "raw</a></p>\n"
    )


def test_a_javascript_url_from_a_label_is_dropped_by_the_sanitiser() -> None:
    ctx = gpu_alert(cluster="javascript:alert(1)")
    assert html_of("[go]({{ labels.cluster }})", ctx) == (
        '<p><a rel="noopener noreferrer">go</a></p>\n'
    )


def test_a_missing_value_shows_unknown_and_warns() -> None:
    out = render_markdown(
        "rack {{ node.labels.rack }}, disk {{ device }}, GPU {{ gpu.index }}",
        gpu_alert().template_vars(),
    )
    assert out.html == (
        '<p>rack <span class="rb-unknown">(unknown)</span>, '
        'disk <span class="rb-unknown">(unknown)</span>, GPU 3</p>\n'
    )
    assert out.missing == ["rack", "device"]
    assert out.warnings == ["no value for rack, device in this alert's context"]


def test_without_a_context_values_show_as_named_placeholders_without_warnings() -> None:
    out = render_markdown("nvidia-smi -i {{ gpu.index }} on {{ node.hostname }}", None)
    assert out.html == (
        '<p>nvidia-smi -i <span class="rb-unknown">&lt;gpu.index&gt;</span> on '
        '<span class="rb-unknown">&lt;node.hostname&gt;</span></p>\n'
    )
    assert out.warnings == []


def test_a_node_alert_has_no_gpu_and_says_so() -> None:
    inst = AlertInstance(id=7, labels={"hostname": "n1"}, value=300.0, state="firing")
    ctx = RunbookContext.from_alert(inst, AlertRule(name="node-agent-stale", spec={}))
    out = render_markdown("{{ node.hostname }} {{ value }} {{ gpu.index }}", ctx.template_vars())
    assert out.html == '<p>n1 300 <span class="rb-unknown">(unknown)</span></p>\n'
    assert out.warnings == ["no value for gpu.index in this alert's context"]


@pytest.mark.parametrize(
    "markdown",
    [
        "{% if %}broken",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ range(10 ** 9) | list | length }}",
        "{{ 1 / 0 }}",
    ],
)
def test_a_template_error_shows_the_raw_markdown_with_a_warning(markdown: str) -> None:
    out = render_markdown(markdown + " <b>x</b>", {"value": 1.0})
    escaped = (markdown + " <b>x</b>").replace("&", "&amp;").replace("<", "&lt;")
    escaped = escaped.replace(">", "&gt;")
    assert out.html == f"<pre><code>{escaped}</code></pre>"
    assert len(out.warnings) == 1
    assert out.warnings[0].startswith("the runbook's template could not be filled in")
    assert out.warnings[0].endswith("; shown as written")


def test_the_sandbox_hides_python_internals() -> None:
    out = render_markdown("{{ value.__class__.__init__.__globals__ }}", {"value": 1.0})
    assert out.html == '<p><span class="rb-unknown">(unknown)</span></p>\n'
