"""The viewer's time zone and wall-clock chart buckets, without a server: exact values across the
2026 DST changes of Europe/Berlin, America/New_York and Australia/Adelaide, and Asia/Kolkata's
half-hour offset."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from starlette.requests import Request

from app.errors import BadRequest
from app.timebounds import (
    aligns_to_wall_clock,
    offset_segments,
    utc_offset_s,
    wall_bucket,
    wall_bucket_start,
)
from app.viewer_time import (
    fmt_local,
    parse_zone,
    picker_zones,
    tz_query,
    viewer_tz,
    viewer_tz_or_utc,
    zone_abbr,
    zone_label,
)
from app.web import fmt_time

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
ADELAIDE = ZoneInfo("Australia/Adelaide")
KOLKATA = ZoneInfo("Asia/Kolkata")
DAY = 86400


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[arg-type,misc]


def bucket_starts(zone: ZoneInfo, first: datetime, hours: int, step_s: int) -> list[datetime]:
    """The starts of the buckets met by a sample every 10 minutes for ``hours`` from ``first``."""
    segments = offset_segments(
        first - timedelta(seconds=2 * step_s), first + timedelta(hours=hours), zone
    )
    keys = sorted(
        {wall_bucket(first + timedelta(minutes=10 * i), step_s, zone) for i in range(hours * 6)}
    )
    return [wall_bucket_start(k, step_s, segments) for k in keys]


def lengths_h(starts: list[datetime]) -> list[float]:
    return [(b - a).total_seconds() / 3600 for a, b in itertools.pairwise(starts)]


@pytest.mark.parametrize(
    ("zone", "start", "change", "before_s", "after_s"),
    [
        (BERLIN, utc(2026, 3, 28), utc(2026, 3, 29, 1), 3600, 7200),
        (BERLIN, utc(2026, 10, 24), utc(2026, 10, 25, 1), 7200, 3600),
        (NEW_YORK, utc(2026, 3, 7), utc(2026, 3, 8, 7), -18000, -14400),
        (NEW_YORK, utc(2026, 10, 31), utc(2026, 11, 1, 6), -14400, -18000),
        (ADELAIDE, utc(2026, 4, 4), utc(2026, 4, 4, 16, 30), 37800, 34200),
        (ADELAIDE, utc(2026, 10, 3), utc(2026, 10, 3, 16, 30), 34200, 37800),
    ],
)
def test_offset_segments_find_each_dst_change_to_the_second(
    zone: ZoneInfo, start: datetime, change: datetime, before_s: int, after_s: int
) -> None:
    assert offset_segments(start, start + timedelta(days=2), zone) == [
        (start, before_s),
        (change, after_s),
    ]


def test_a_zone_without_dst_has_one_segment() -> None:
    start = utc(2026, 3, 1)
    assert offset_segments(start, start + timedelta(days=31), KOLKATA) == [(start, 19800)]


def at(text: str) -> datetime:
    """``"03-27 23:00"`` → that UTC time in 2026."""
    return datetime.strptime(f"2026-{text}", "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "first", "starts", "hours"),
    [
        # Spring forward: 29 March 2026 in Berlin has 23 hours; 25 October has 25.
        (BERLIN, "03-28 00:00", "03-27T23:00 03-28T23:00 03-29T22:00 03-30T22:00", [24, 23, 24]),
        (BERLIN, "10-24 00:00", "10-23T22:00 10-24T22:00 10-25T23:00 10-26T23:00", [24, 25, 24]),
        (NEW_YORK, "03-07 06:00", "03-07T05:00 03-08T05:00 03-09T04:00 03-10T04:00", [24, 23, 24]),
        (NEW_YORK, "10-31 06:00", "10-31T04:00 11-01T04:00 11-02T05:00 11-03T05:00", [24, 25, 24]),
        # Adelaide (UTC+10:30 / +09:30) ends DST on 5 April and starts it on 4 October.
        (ADELAIDE, "04-03 16:00", "04-03T13:30 04-04T13:30 04-05T14:30 04-06T14:30", [24, 25, 24]),
        (ADELAIDE, "10-02 15:00", "10-02T14:30 10-03T14:30 10-04T13:30 10-05T13:30", [24, 23, 24]),
        (KOLKATA, "03-28 19:00", "03-28T18:30 03-29T18:30 03-30T18:30 03-31T18:30", [24, 24, 24]),
    ],
)  # fmt: skip
def test_day_buckets_start_at_local_midnight_so_a_dst_day_has_23_or_25_hours(
    zone: ZoneInfo, first: str, starts: str, hours: list[int]
) -> None:
    got = bucket_starts(zone, at(first), 72, DAY)
    assert got == [at(s.replace("T", " ")) for s in starts.split()]
    assert lengths_h(got) == hours
    assert all(s.astimezone(zone).strftime("%H:%M") == "00:00" for s in got)


def test_three_hour_buckets_on_the_fall_back_day_make_the_first_four_hours_long() -> None:
    got = bucket_starts(BERLIN, utc(2026, 10, 24, 22), 9, 3 * 3600)
    # 00:00 CEST, 03:00 CET (the repeated 02:xx hour stays in the first bucket), 06:00 CET
    assert got == [utc(2026, 10, 24, 22), utc(2026, 10, 25, 2), utc(2026, 10, 25, 5)]
    assert [s.astimezone(BERLIN).strftime("%H:%M %Z") for s in got] == [
        "00:00 CEST",
        "03:00 CET",
        "06:00 CET",
    ]


def test_a_two_hour_bucket_whose_wall_start_was_skipped_starts_at_the_change() -> None:
    got = bucket_starts(BERLIN, utc(2026, 3, 28, 23), 5, 7200)
    # 00:00 CET; 02:00 never happened, so that bucket starts at 03:00 CEST and lasts 1 h.
    assert got == [utc(2026, 3, 28, 23), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)]
    assert lengths_h(got) == [2, 1]


def test_new_york_fall_back_keeps_both_one_oclock_hours_in_one_two_hour_bucket() -> None:
    t_edt = utc(2026, 11, 1, 5, 30)  # 01:30 EDT
    t_est = utc(2026, 11, 1, 6, 30)  # 01:30 EST, an hour later
    assert wall_bucket(t_edt, 7200, NEW_YORK) == wall_bucket(t_est, 7200, NEW_YORK)
    assert bucket_starts(NEW_YORK, utc(2026, 11, 1, 4), 4, 7200) == [
        utc(2026, 11, 1, 4),  # 00:00 EDT, 3 hours long
        utc(2026, 11, 1, 7),  # 02:00 EST
    ]


def test_kolkata_two_hour_buckets_fall_on_local_even_hours() -> None:
    got = bucket_starts(KOLKATA, utc(2026, 3, 28, 18, 30), 6, 7200)
    assert got == [utc(2026, 3, 28, 18, 30), utc(2026, 3, 28, 20, 30), utc(2026, 3, 28, 22, 30)]


def test_only_steps_of_two_hours_and_more_outside_utc_follow_the_wall_clock() -> None:
    assert aligns_to_wall_clock(7200, BERLIN) is True
    assert aligns_to_wall_clock(86400, KOLKATA) is True
    assert aligns_to_wall_clock(3600, BERLIN) is False
    assert aligns_to_wall_clock(1800, KOLKATA) is False
    assert aligns_to_wall_clock(86400, UTC) is False
    assert aligns_to_wall_clock(86400, ZoneInfo("UTC")) is False


def test_wall_bucket_start_refuses_a_bucket_outside_the_segments() -> None:
    segments = [(utc(2026, 1, 1), 0)]
    with pytest.raises(ValueError, match="outside"):
        wall_bucket_start(0, DAY, segments)


def test_times_show_with_the_zone_abbreviation_either_side_of_the_change() -> None:
    assert fmt_local(utc(2026, 3, 29, 0, 30), BERLIN) == "2026-03-29 01:30:00 CET"
    assert fmt_local(utc(2026, 3, 29, 1, 30), BERLIN) == "2026-03-29 03:30:00 CEST"
    assert fmt_local(utc(2026, 11, 1, 5, 30), NEW_YORK) == "2026-11-01 01:30:00 EDT"
    assert fmt_local(utc(2026, 11, 1, 6, 30), NEW_YORK) == "2026-11-01 01:30:00 EST"
    assert fmt_local(utc(2026, 3, 29, 1, 30), KOLKATA) == "2026-03-29 07:00:00 IST"
    assert fmt_local(utc(2026, 3, 29, 1, 30), KOLKATA, seconds=False) == "2026-03-29 07:00 IST"
    assert fmt_local(utc(2026, 3, 29, 1, 30), UTC) == "2026-03-29 01:30:00Z"
    assert fmt_time(utc(2026, 3, 29, 1, 30)) == "2026-03-29 01:30:00Z"
    assert fmt_time(None, BERLIN) == "N/A"


def test_a_zone_with_only_a_numeric_abbreviation_shows_its_offset() -> None:
    assert zone_abbr(utc(2026, 3, 29), ZoneInfo("Asia/Dubai")) == "UTC+04:00"
    assert zone_abbr(utc(2026, 3, 29), ZoneInfo("America/Sao_Paulo")) == "UTC-03:00"
    assert utc_offset_s(utc(2026, 3, 29), ZoneInfo("Asia/Kathmandu")) == 20700


def test_the_footer_label_names_zone_abbreviation_and_offset() -> None:
    assert zone_label(ZoneInfo("UTC"), utc(2026, 1, 1)) == "UTC"
    assert zone_label(BERLIN, utc(2026, 1, 1)) == "Europe/Berlin (CET, UTC+01:00)"
    assert zone_label(BERLIN, utc(2026, 7, 1)) == "Europe/Berlin (CEST, UTC+02:00)"
    assert zone_label(ZoneInfo("Asia/Dubai"), utc(2026, 7, 1)) == "Asia/Dubai (UTC+04:00)"


@pytest.mark.parametrize("raw", ["", "  ", "Mars/Olympus", "../../etc/passwd", "+01:00", "x" * 65])
def test_a_name_outside_the_tz_database_is_refused(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_zone(raw)


def request(query: str = "", cookie: str | None = None) -> Request:
    headers = [(b"cookie", cookie.encode())] if cookie else []
    return Request({"type": "http", "query_string": query.encode(), "headers": headers})


def test_the_url_wins_over_the_cookie_which_wins_over_utc() -> None:
    assert viewer_tz(request()).key == "UTC"
    assert viewer_tz(request(cookie="fw_tz=Asia/Tokyo")).key == "Asia/Tokyo"
    assert viewer_tz(request(cookie="fw_tz=Asia%2FTokyo")).key == "Asia/Tokyo"
    assert viewer_tz(request("tz=Europe%2FBerlin", "fw_tz=Asia/Tokyo")).key == "Europe/Berlin"
    assert viewer_tz(request(cookie="fw_tz=Nowhere/Land")).key == "UTC"  # stale cookie ignored
    assert viewer_tz(request("tz=", "fw_tz=Asia/Tokyo")).key == "Asia/Tokyo"


def test_a_bad_tz_in_the_url_is_a_bad_request_naming_the_parameter() -> None:
    with pytest.raises(BadRequest, match=r"^tz: unknown time zone 'Mars/Olympus'"):
        viewer_tz(request("tz=Mars/Olympus"))
    assert viewer_tz_or_utc(request("tz=Mars/Olympus")).key == "UTC"
    assert viewer_tz_or_utc(None).key == "UTC"


def test_links_carry_the_zone_unless_it_is_utc() -> None:
    assert tz_query(request()) == ""
    assert tz_query(request("tz=UTC")) == ""
    assert tz_query(request("tz=Europe/Berlin")) == "tz=Europe%2FBerlin"
    assert tz_query(request(cookie="fw_tz=Asia/Kolkata")) == "tz=Asia%2FKolkata"


def test_the_picker_offers_utc_common_zones_and_the_current_one() -> None:
    zones = picker_zones(BERLIN)
    assert zones[0] == "UTC" and "Europe/Berlin" in zones and "Asia/Kolkata" in zones
    assert picker_zones(ZoneInfo("Pacific/Chatham"))[-1] == "Pacific/Chatham"
    assert len(set(zones)) == len(zones)
