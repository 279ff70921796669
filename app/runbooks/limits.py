"""Limits on a runbook's Jinja2 template (runbooks are edited in the UI, so a template is
untrusted input): ``range`` to :data:`MAX_RANGE` items, all ``{% for %}`` loops of one render to
:data:`MAX_LOOP_ITERATIONS` iterations, ``*``/``+``/``~``/``%`` and the ``join``/``center``/
``format``/``replace`` … filters to :data:`MAX_VALUE_CHARS` items, ``**`` to
:data:`MAX_POWER_BITS`-bit integers; :data:`MAX_OUTPUT_CHARS` bounds the output (checked by
:mod:`app.runbooks.render`). Going over raises :class:`TooBig`, a Jinja ``SecurityError``.
"""

from __future__ import annotations

import re
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment

MAX_RANGE = 1_000
MAX_LOOP_ITERATIONS = 20_000
MAX_VALUE_CHARS = 100_000
MAX_POWER_BITS = 4_096
MAX_OUTPUT_CHARS = 1_048_576
_WIDE_FORMAT = re.compile(r"\d{6,}")  # a width/precision that would allocate megabytes


class TooBig(SecurityError):
    """The template went over one of the module's limits (the message says which)."""


def _sized(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Raise :class:`TooBig` before computing a ``*``, ``**``, ``+`` or ``%`` result over
    the limits."""
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            n = _sized(seq)
            if n is not None and isinstance(times, int) and n * times > MAX_VALUE_CHARS:
                raise TooBig(f"a repeated value longer than {MAX_VALUE_CHARS:,} items")
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
            raise TooBig(f"a product over {MAX_POWER_BITS:,} bits")
    elif operator == "**":
        both_int = isinstance(left, int) and isinstance(right, int)
        if both_int and right > 0 and abs(left) > 1 and left.bit_length() * right > MAX_POWER_BITS:
            raise TooBig(f"a power over {MAX_POWER_BITS:,} bits")
    elif operator == "+":
        a, b = _sized(left), _sized(right)
        if a is not None and b is not None and a + b > MAX_VALUE_CHARS:
            raise TooBig(f"a joined value longer than {MAX_VALUE_CHARS:,} items")
    elif operator == "%" and isinstance(left, str) and _WIDE_FORMAT.search(left):
        raise TooBig("a format width over 99,999")


def _range(*args: int) -> range:
    """``range`` of at most :data:`MAX_RANGE` items (Jinja's sandbox allows 100,000)."""
    found = range(*args)
    if len(found) > MAX_RANGE:
        raise TooBig(f"a range longer than {MAX_RANGE:,} items")
    return found


class RunbookSandbox(SandboxedEnvironment):
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
        """The binary operator, refused (:class:`TooBig`) when its result would be too big."""
        _check_binop(operator, left, right)
        return super().call_binop(context, operator, left, right)

    def wrap_str_format(self, value: Any) -> Any:
        """Jinja's sandboxed ``str.format``/``format_map``, a huge width refused."""
        wrapped = super().wrap_str_format(value)
        if wrapped is not None and _WIDE_FORMAT.search(value.__self__):
            raise TooBig("a format width over 99,999")
        return wrapped

    def fw_concat(self, *parts: Any) -> str:
        """The ``~`` operator, refused when the joined text would be too long."""
        texts = [str(part) for part in parts]
        if sum(len(text) for text in texts) > MAX_VALUE_CHARS:
            raise TooBig(f"a joined value longer than {MAX_VALUE_CHARS:,} characters")
        return "".join(texts)

    def fw_loop(self, iterable: Any) -> Any:
        """``iterable``, counted against the render's :data:`MAX_LOOP_ITERATIONS`."""
        for item in iterable:
            self.iterations += 1
            if self.iterations > MAX_LOOP_ITERATIONS:
                raise TooBig(f"loops ran over {MAX_LOOP_ITERATIONS:,} iterations in all")
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
            raise TooBig(f"a filter argument over {MAX_VALUE_CHARS:,}")
        wide = any(isinstance(v, str) and _WIDE_FORMAT.search(v) for v in values[:1])
        if wide and func.__name__ == "do_format":
            raise TooBig("a format width over 99,999")
        result = func(*args, **kwargs)
        if isinstance(result, str) and len(result) > MAX_VALUE_CHARS:
            raise TooBig(f"a filter result longer than {MAX_VALUE_CHARS:,} characters")
        return result

    for attr in ("jinja_pass_arg",):
        if hasattr(func, attr):
            setattr(bounded, attr, getattr(func, attr))
    bounded.__name__ = func.__name__
    return bounded
