"""Summary and description templates: plain field substitution, never ``str.format``."""

from __future__ import annotations

from app.alerts.evaluator import render


def test_fields_are_replaced_and_floats_shown_short() -> None:
    assert (
        render(
            "{hostname} GPU {gpu_index} at {value} C",
            {"hostname": "node-a", "gpu_index": "3", "value": 91.25},
        )
        == "node-a GPU 3 at 91.25 C"
    )


def test_unknown_fields_stay_as_written_and_known_none_is_n_a() -> None:
    assert render("{nope} {value}", {"value": None}) == "{nope} n/a"


def test_format_syntax_is_not_interpreted() -> None:
    values = {"value": 1.0, "x": "y"}
    assert render("{{x}} {value!r} {value:>9} {0} {x.__class__} {", values) == (
        "{y} {value!r} {value:>9} {0} {x.__class__} {"
    )


def test_a_field_repeated_and_a_template_without_fields() -> None:
    assert render("{x}{x}-{x}", {"x": "ab"}) == "abab-ab"
    assert render("no fields here", {"x": "ab"}) == "no fields here"
