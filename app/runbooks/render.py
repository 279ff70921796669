"""Runbook Markdown → safe HTML: Jinja2 (sandboxed) with the alert's context, markdown-it-py,
then nh3 with an allow-list.

Values from the context never pass through the Markdown parser: each ``{{ … }}`` output becomes
an opaque alphanumeric token, the Markdown is rendered, and only then is each token replaced by
its HTML-escaped value. A label such as ``<img onerror=…>`` or ``**bold**`` therefore shows as
typed, in text, code blocks and link targets alike.

A runbook is edited in the UI, so its template runs bounded (:mod:`app.runbooks.limits`), and
its output (values included) is capped at ``MAX_OUTPUT_CHARS``. A template over a limit shows as
written, with a warning.
"""

from __future__ import annotations

import html
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import nh3
from jinja2 import Undefined
from markdown_it import MarkdownIt

from app.runbooks.limits import MAX_OUTPUT_CHARS, RunbookSandbox, TooBig

UNKNOWN = "(unknown)"

ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
    "span",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title"},
    "code": {"class"},
    "span": {"class"},
    "td": {"style"},
    "th": {"style"},
    "ol": {"start"},
}
URL_SCHEMES = {"http", "https", "mailto"}

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
    "table"
)


class _Missing(Undefined):
    """A value the context lacks: renders as a marker, never raises, and keeps its dotted name
    (``gpu.index``) so the page can say which value was missing."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Missing(name=f"{self._undefined_name}.{name}")

    def __getitem__(self, key: Any) -> Any:
        return _Missing(name=f"{self._undefined_name}.{key}")

    def __str__(self) -> str:
        return UNKNOWN


@dataclass
class _Values:
    """The outputs of one render, by token; ``missing``: dotted names of absent values."""

    nonce: str
    texts: list[str | None] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    placeholders: bool = False
    chars: int = 0

    def token(self, value: Any) -> str:
        """Jinja's ``finalize``: remember ``value`` (None for a missing one), return its token.

        Raises:
            SecurityError: the values so far hold over :data:`MAX_OUTPUT_CHARS` characters.
        """
        if isinstance(value, Undefined) or value is None:
            name = getattr(value, "_undefined_name", None) or "value"
            if name not in self.missing:
                self.missing.append(name)
            self.texts.append(None)
            self.names.append(name)
        else:
            text = f"{value:g}" if isinstance(value, float) else str(value)
            self.chars += len(text)
            if self.chars > MAX_OUTPUT_CHARS:
                raise TooBig(f"the filled-in runbook is over {MAX_OUTPUT_CHARS:,} characters")
            self.texts.append(text)
            self.names.append("")
        return f"fwv{self.nonce}n{len(self.texts) - 1}x"

    def substitute(self, body: str) -> str:
        """Tokens in ``body`` (rendered HTML) replaced by escaped values: plain text inside an
        attribute (a missing one as ``#``), text or a marked ``(unknown)`` elsewhere."""
        token = re.compile(rf"fwv{self.nonce}n(\d+)x")

        def in_attribute(m: re.Match[str]) -> str:
            def one(t: re.Match[str]) -> str:
                text = self.texts[int(t.group(1))]
                return "#" if text is None else html.escape(text, quote=True)

            return m.group(1) + token.sub(one, m.group(2)) + m.group(3)

        def in_text(t: re.Match[str]) -> str:
            i = int(t.group(1))
            text = self.texts[i]
            if text is not None:
                return html.escape(text, quote=True)
            marker = f"<{self.names[i]}>" if self.placeholders else UNKNOWN
            return f'<span class="rb-unknown">{html.escape(marker)}</span>'

        body = re.sub(r'(\s[a-z-]+=")([^"]*)(")', in_attribute, body)
        return token.sub(in_text, body)


@dataclass(frozen=True)
class Rendered:
    """``html``: sanitised HTML; ``warnings``: plain sentences for the page; ``missing``: dotted
    names of the context values the runbook used but the context lacked."""

    html: str
    warnings: list[str]
    missing: list[str]


def sanitise(fragment: str) -> str:
    """``fragment`` through nh3 with the allow-list above: no script/style/iframe, no ``on*``
    attributes, only http(s)/mailto or relative links, ``rel="noopener noreferrer"`` on links."""
    return nh3.clean(
        fragment,
        tags=ALLOWED_TAGS,
        clean_content_tags={"script", "style"},
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer",
        filter_style_properties={"text-align"},
    )


def markdown_to_html(markdown: str) -> str:
    """CommonMark plus tables, raw HTML shown as text, sanitised."""
    return sanitise(_md.render(markdown))


def _fill(env: RunbookSandbox, markdown: str, context: dict[str, Any], values: _Values) -> str:
    """The template's output, streamed so that one over :data:`MAX_OUTPUT_CHARS` (tokens and
    values together) stops early."""
    chunks: list[str] = []
    size = 0
    for chunk in env.from_string(markdown).generate(context):
        size += len(chunk)
        if size + values.chars > MAX_OUTPUT_CHARS:
            raise TooBig(f"the filled-in runbook is over {MAX_OUTPUT_CHARS:,} characters")
        chunks.append(chunk)
    return "".join(chunks)


def render_markdown(markdown: str, context: dict[str, Any] | None) -> Rendered:
    """Fill ``markdown``'s Jinja2 expressions from ``context`` and render it.

    With ``context`` None (a runbook viewed on its own) every value shows as its name in angle
    brackets (``<gpu.index>``) and nothing is reported missing. With a context, an absent value
    shows as ``(unknown)`` and gives a warning. A template that does not parse or that the
    sandbox refuses (the limits above included) shows its raw Markdown as text, with the error
    as a warning.
    """
    values = _Values(nonce=secrets.token_hex(4), placeholders=context is None)
    env = RunbookSandbox(
        undefined=_Missing, autoescape=False, finalize=values.token, keep_trailing_newline=True
    )
    try:
        filled = _fill(env, markdown, context or {}, values)
    except Exception as exc:  # any template failure (syntax, sandbox, type) shows the text
        raw = f"<pre><code>{html.escape(markdown)}</code></pre>"
        lineno = getattr(exc, "lineno", None)
        where = f" (line {lineno})" if lineno else ""
        return Rendered(
            sanitise(raw),
            [f"the runbook's template could not be filled in{where}: {exc}; shown as written"],
            [],
        )
    body = values.substitute(_md.render(filled))
    missing = [] if context is None else values.missing
    warnings = [f"no value for {', '.join(missing)} in this alert's context"] if missing else []
    return Rendered(sanitise(body), warnings, missing)
