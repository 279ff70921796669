"""Summary and description templates: plain field substitution, never ``str.format``."""

from __future__ import annotations

from app.alerts.evaluator import render


def test_fields_are_replaced_and_floats_shown_short() -> None:
    assert (
        render(
            "{hostname} GPU {gpu_index} at {value} C",
            {"hostname": "node-a", "gpu_index": "3", "value": 91.27},
        )
        == "node-a GPU 3 at 91.3 C"
    )


def test_values_are_rounded_to_what_a_person_reads() -> None:
    from app.alerts.template_values import duration, rounded

    assert [rounded(v) for v in (116.648, 92.0, 12.34, 1.005, 0.05234, -3.5, 1e20)] == [
        "117",
        "92",
        "12.3",
        "1",
        "0.0523",
        "-3.5",
        "100000000000000000000",
    ]
    assert rounded(float("nan")) == "nan" and rounded(float("inf")) == "inf"
    assert [duration(s) for s in (0, 0.4, 45.2, 116.648, 125, 3900, 90061, -5)] == [
        "0 s",
        "0.4 s",
        "45 s",
        "1 min 57 s",
        "2 min 5 s",
        "1 h 5 min",
        "1 d 1 h",
        "-5 s",
    ]
    assert render("for {value_duration}", {"value_duration": "2 min"}) == "for 2 min"


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
