"""Schedule windows: parsing, when a window asks for capacity (zones, DST, lead, overnight), the policy's floor."""
from dataclasses import replace
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fleet.autoscaling.policy import Rules, Sample, Situation, decide
from fleet.autoscaling.schedule import floor_at, parse
from tests.fleet.test_autoscaling_policy import cases

BERLIN_STANDUP = {"days": "mon-fri", "start": "09:00", "end": "09:30", "time_zone": "Europe/Berlin", "min_serving": 4}


def at(text: str) -> float:
    """Epoch seconds of a UTC time written "2026-03-30 07:10"."""
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def asks(windows, now: str, lead: float = 0) -> int:
    found = floor_at(parse(windows), at(now), lead)
    return found.min_serving if found else 0


@pytest.mark.parametrize("window, message", [
    ({**BERLIN_STANDUP, "start": "9:00"}, 'start must be a time "HH:MM"'),
    ({**BERLIN_STANDUP, "end": "24:00"}, "between 00:00 and 23:59"),
    ({**BERLIN_STANDUP, "end": "09:00"}, "start and end are the same time"),
    ({**BERLIN_STANDUP, "time_zone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
    ({**BERLIN_STANDUP, "days": "mon-fry"}, "unknown day 'mon-fry'"),
    ({**BERLIN_STANDUP, "days": []}, "days must be day names"),
    ({**BERLIN_STANDUP, "min_serving": 0}, "min_serving must be a whole number of at least 1"),
    ({**BERLIN_STANDUP, "min_serving": True}, "min_serving must be a whole number"),
    ({**BERLIN_STANDUP, "every": "day"}, "unknown field(s) every"),
    ("mon 09:00", "must be an object"),
])
def test_a_bad_window_is_refused_naming_it_and_the_problem(window, message):
    with pytest.raises(ValueError) as refused:
        parse([BERLIN_STANDUP, window])
    assert str(refused.value).startswith("Window 2: ") and message in str(refused.value)


def test_at_most_twenty_windows_and_none_is_an_empty_schedule():
    assert parse(None) == () and parse([]) == ()
    assert len(parse([BERLIN_STANDUP] * 20)) == 20
    with pytest.raises(ValueError, match="At most 20 windows"):
        parse([BERLIN_STANDUP] * 21)
    assert parse([{**BERLIN_STANDUP, "time_zone": "UTC"}])[0].time_zone == "UTC"
    assert parse([{k: v for k, v in BERLIN_STANDUP.items() if k != "time_zone"}])[0].time_zone == "UTC"


def test_days_are_named_as_ranges_lists_or_daily_and_stored_back_as_ranges():
    assert parse([{**BERLIN_STANDUP, "days": ["mon", "wed-fri"]}])[0].as_dict()["days"] == "mon,wed-fri"
    assert parse([{**BERLIN_STANDUP, "days": "sat,sun"}])[0].label().startswith("Sat-Sun 09:00-09:30")
    assert parse([{**BERLIN_STANDUP, "days": "fri-mon"}])[0].as_dict()["days"] == "mon,fri-sun"
    assert parse([{**BERLIN_STANDUP, "days": "daily"}])[0].as_dict()["days"] == "mon-sun"


def test_a_berlin_window_opens_at_nine_local_on_both_sides_of_the_dst_change():
    # 2026-03-29 (Sunday) Berlin moves from UTC+1 to UTC+2: 09:00 local is 08:00 UTC before, 07:00 UTC after.
    assert asks([BERLIN_STANDUP], "2026-03-27 08:10") == 4 and asks([BERLIN_STANDUP], "2026-03-27 07:10") == 0
    assert asks([BERLIN_STANDUP], "2026-03-30 07:10") == 4 and asks([BERLIN_STANDUP], "2026-03-30 08:10") == 0
    assert asks([BERLIN_STANDUP], "2026-03-30 07:30") == 0  # closed at its end
    assert asks([BERLIN_STANDUP], "2026-03-28 08:10") == 0  # a Saturday


def test_the_lead_opens_a_window_early_by_exactly_that_long():
    assert asks([BERLIN_STANDUP], "2026-03-30 06:55:00", lead=300) == 4
    assert asks([BERLIN_STANDUP], "2026-03-30 06:54:59", lead=300) == 0
    found = floor_at(parse([BERLIN_STANDUP]), at("2026-03-30 06:56"), 300)
    assert found.reason(300, at("2026-03-30 06:56")) == \
        "schedule: window Mon-Fri 09:00-09:30 Europe/Berlin asks 4, 240 s before it opens (lead 300 s)"


def test_an_overnight_window_runs_into_the_next_day_from_the_days_it_starts_on():
    night = [{"days": "fri", "start": "22:00", "end": "02:00", "min_serving": 2}]
    assert asks(night, "2026-03-27 23:00") == 2 and asks(night, "2026-03-28 01:59") == 2  # Fri night, Sat morning
    assert asks(night, "2026-03-28 02:00") == 0 and asks(night, "2026-03-27 21:59") == 0
    assert asks(night, "2026-03-26 23:00") == 0 and asks(night, "2026-03-27 01:00") == 0  # Thu night, Fri morning


def test_overlapping_windows_ask_for_the_larger_floor():
    wide = {"days": "daily", "start": "06:00", "end": "18:00", "time_zone": "UTC", "min_serving": 2}
    assert asks([wide, BERLIN_STANDUP], "2026-03-30 07:10") == 4
    assert asks([wide, BERLIN_STANDUP], "2026-03-30 10:00") == 2


NOW = at("2026-03-30 07:10")  # inside the Berlin stand-up window
OPEN = parse([BERLIN_STANDUP])


@given(cases(), st.integers(1, 12))
@hsettings(max_examples=300, deadline=None)
def test_inside_a_window_never_below_its_floor_nor_above_max(case, floor):
    policy, samples, situation = case
    windows = parse([{**BERLIN_STANDUP, "min_serving": floor}])
    rules = replace(policy, schedule=windows)
    shift = NOW - situation.now  # the same trace, moved into the window
    moved = [replace(s, at=s.at + shift) for s in samples]
    situation = replace(situation, now=NOW,
                        last_scale_up_at=situation.last_scale_up_at and situation.last_scale_up_at + shift,
                        last_scale_down_at=situation.last_scale_down_at and situation.last_scale_down_at + shift)
    decision = decide(rules, moved, situation)
    if rules.min_replicas <= situation.serving <= rules.max_replicas:
        assert decision.to_serving <= rules.max_replicas
        assert decision.to_serving >= min(floor, rules.max_replicas, max(situation.serving, rules.min_replicas))
        if situation.serving < min(floor, rules.max_replicas):
            assert (decision.rule, decision.to_serving) == ("schedule", min(floor, rules.max_replicas))
        assert decision.to_serving > 0  # no scale-to-zero inside a window


@given(cases())
@hsettings(max_examples=200, deadline=None)
def test_outside_every_window_the_schedule_changes_nothing(case):
    policy, samples, situation = case  # at 10_000 s after the epoch: 1970-01-01 (a Thursday) 02:46 UTC
    assert decide(replace(policy, schedule=OPEN), samples, situation) == \
        decide(policy, samples, situation)


def test_a_quiet_deployment_inside_a_window_holds_its_floor_and_says_why():
    rules = Rules(min_replicas=0, max_replicas=6, idle_window_seconds=10, zero_after_idle_seconds=10,
                  cooldown_down_seconds=0, schedule=OPEN)
    quiet = [Sample(at=NOW - age, serving=4) for age in range(60, -1, -5)]
    decision = decide(rules, quiet, Situation(now=NOW, serving=4))
    assert decision.action == "hold" and "window Mon-Fri 09:00-09:30 Europe/Berlin asks 4" in decision.reason
    after = at("2026-03-30 07:30")
    quiet_after = [Sample(at=after - age, serving=4) for age in range(60, -1, -5)]
    assert decide(rules, quiet_after, Situation(now=after, serving=4)).to_serving == 3  # the idle rule again
