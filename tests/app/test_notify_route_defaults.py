"""A route of critical alerts only sends at once (group wait 0 s) unless it names a wait; every
other route waits 5 s for the rest of its group."""

from __future__ import annotations

import pytest

from app.notify.schemas import RouteIn


@pytest.mark.parametrize(
    ("severities", "given", "expected"),
    [
        (["critical"], None, 0.0),
        ([], None, 5.0),
        (["critical", "warning"], None, 5.0),
        (["critical"], 2.0, 2.0),
    ],
)
def test_a_route_of_critical_alerts_only_waits_0_s_by_default(
    severities: list[str], given: float | None, expected: float
) -> None:
    fields = {} if given is None else {"group_wait_s": given}
    route = RouteIn(channel_id=1, severities=severities, **fields)  # type: ignore[arg-type]

    assert route.group_wait_s == expected
