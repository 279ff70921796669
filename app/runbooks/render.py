"""Runbook Markdown → safe HTML: Jinja2 (sandboxed) with the alert's context, markdown-it-py,
then nh3 with an allow-list.

Values from the context never pass through the Markdown parser: each ``{{ … }}`` output becomes
an opaque alphanumeric token, the Markdown is rendered, and only then is each token replaced by
its HTML-escaped value. A label such as ``<img onerror=…>`` or ``**bold**`` therefore shows as
typed, in text, code blocks and link targets alike.

A runbook is edited in the UI, so its template is bounded (:class:`_RunbookSandbox`):
``range`` to :data:`MAX_RANGE` items, all ``{% for %}`` loops together to
:data:`MAX_LOOP_ITERATIONS` iterations, ``*``/``+``/``%`` results to :data:`MAX_VALUE_CHARS`
items, ``**`` to :data:`MAX_POWER_BITS`-bit integers, and the output (values included) to
:data:`MAX_OUTPUT_CHARS`. A template over a limit shows as written, with a warning.
"""

from __future__ import annotations

import html
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import nh3
from jinja2 import Undefined, nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment
from markdown_it import MarkdownIt

UNKNOWN = "(unknown)"

MAX_RANGE = 1_000
MAX_LOOP_ITERATIONS = 20_000
MAX_VALUE_CHARS = 100_000
MAX_POWER_BITS = 4_096
MAX_OUTPUT_CHARS = 1_048_576
_WIDE_FORMAT = re.compile(r"\d{6,}")  # a width/precision that would allocate megabytes


class _TooBig(SecurityError):
    """The template went over one of the module's limits."""


def _sized(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Raise :class:`_TooBig` before computing a ``*``, ``**``, ``+`` or ``%`` result over
    the limits."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            n = _sized(seq)
            if n is not None and isinstance(times, int) and n * times > MAX_VALUE_CHARS:
                raise _TooBig(f"a repeated value longer than {MAX_VALUE_CHARS:,} items")
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
            raise _TooBig(f"a product over {MAX_POWER_BITS:,} bits")
    elif operator == "**":
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and right > 0 and abs(left) > 1 and left.bit_length() * right > MAX_POWER_BITS:
            raise _TooBig(f"a power over {MAX_POWER_BITS:,} bits")
    elif operator == "+":
        a, b = _sized(left), _sized(right)
        if a is not None and b is not None and a + b > MAX_VALUE_CHARS:
            raise _TooBig(f"a joined value longer than {MAX_VALUE_CHARS:,} items")
    elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
        raise _TooBig("a format width over 99,999")


def _range(*args: int) -> range:
    """``range`` of at most :data:`MAX_RANGE` items (Jinja's sandbox allows 100,000)."""
    found = range(*args)
    if len(found) > MAX_RANGE:
        raise _TooBig(f"a range longer than {MAX_RANGE:,} items")
    return found


class _RunbookSandbox(SandboxedEnvironment):
    """Jinja's sandbox with the module's limits; one instance per render (it counts the
    render's loop iterations)."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.iterations = 0
        self.globals["range"] = _range
        for name in ("center", "indent", "format", "replace", "wordwrap", "truncate", "join"):
            self.filters[name] = _bounded_filter(self.filters[name])

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """The binary operator, refused (:class:`_TooBig`) when its result would be too big."""
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        """Jinja's sandboxed ``str.format``/``format_map``, a huge width refused."""
        wrapped = super().wrap_str_format(value)
        if wrapped is not None and _WIDE_FORMAT.search(value.__self__):
            raise _TooBig("a format width over 99,999")
        return wrapped

    def fw_concat(self, *parts: Any) -> str:
        """The ``~`` operator, refused when the joined text would be too long."""
        texts = [str(part) for part in parts]
        if sum(len(text) for text in texts) > MAX_VALUE_CHARS:
            raise _TooBig(f"a joined value longer than {MAX_VALUE_CHARS:,} characters")
        return "".join(texts)

    def fw_loop(self, iterable: Any) -> Any:
        """``iterable``, counted against the render's :data:`MAX_LOOP_ITERATIONS`."""
        for item in iterable:
            self.iterations += 1
            if self.iterations > MAX_LOOP_ITERATIONS:
                raise _TooBig(f"loops ran over {MAX_LOOP_ITERATIONS:,} iterations in all")
            yield item

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            counted = nodes.Call(nodes.EnvironmentAttribute("fw_loop"), [loop.iter], [], None, None)
            loop.iter = counted.set_lineno(loop.lineno).set_environment(self)
        for concat in list(tree.find_all(nodes.Concat)):
            # a Concat node becomes a call of fw_concat with the same operands, in place
            call = nodes.Call(nodes.EnvironmentAttribute("fw_concat"), concat.nodes, [], None, None)
            call.set_lineno(concat.lineno).set_environment(self)
            _replace(tree, concat, call)
        return tree


def _replace(tree: nodes.Node, old: nodes.Node, new: nodes.Node) -> None:
    """Put ``new`` where ``old`` is in ``tree`` (a field or an item of a list field)."""
    for node in [tree, *tree.find_all(nodes.Node)]:
        for field_name, value in node.iter_fields():
            if value is old:
                setattr(node, field_name, new)
                return
            if isinstance(value, list) and any(item is old for item in value):
                value[:] = [new if item is old else item for item in value]
                return


def _bounded_filter(func: Any) -> Any:
    """``func`` refusing int arguments over :data:`MAX_VALUE_CHARS` (``center(10**9)``), wide
    format strings, and ``replace`` results over :data:`MAX_VALUE_CHARS`."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        values = [*args, *kwargs.values()]
        if any(isinstance(v, int) and v > MAX_VALUE_CHARS for v in values):
            raise _TooBig(f"a filter argument over {MAX_VALUE_CHARS:,}")
        wide = any(isinstance(v, str) and _WIDE_FORMAT.search(v) for v in values[:1])
        if wide and func.__name__ == "do_format":
            raise _TooBig("a format width over 99,999")
        result = func(*args, **kwargs)
        if isinstance(result, str) and len(result) > MAX_VALUE_CHARS:
            raise _TooBig(f"a filter result longer than {MAX_VALUE_CHARS:,} characters")
        return result

    for attr in ("jinja_pass_arg",):
        if hasattr(func, attr):
            setattr(bounded, attr, getattr(func, attr))
    bounded.__name__ = func.__name__
    return bounded


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
                raise _TooBig(f"the filled-in runbook is over {MAX_OUTPUT_CHARS:,} characters")
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


def _fill(env: _RunbookSandbox, markdown: str, context: dict[str, Any], values: _Values) -> str:
    """The template's output, streamed so that one over :data:`MAX_OUTPUT_CHARS` (tokens and
    values together) stops early."""
    chunks: list[str] = []
    size = 0
    for chunk in env.from_string(markdown).generate(context):
        size += len(chunk)
        if size + values.chars > MAX_OUTPUT_CHARS:
            raise _TooBig(f"the filled-in runbook is over {MAX_OUTPUT_CHARS:,} characters")
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
    env = _RunbookSandbox(
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
