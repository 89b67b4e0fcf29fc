import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import PlannerError
from planner.traces.timestamps import describe_resolution, infer_time_kind


def test_datetime_with_seven_fractional_digits():
    kind = infer_time_kind(["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04.0781490"], "auto")
    assert kind.kind == "datetime" and kind.resolution_s == pytest.approx(1e-6)


def test_mixed_offsets_and_whole_seconds():
    kind = infer_time_kind(["2024-05-10 00:00:00.009930+00:00", "2024-05-10 00:00:00+00:00"], "auto")
    assert kind.kind == "datetime" and kind.resolution_s == pytest.approx(1e-5)  # finest step seen: 10 µs
    assert infer_time_kind(["2024-05-10T00:00:01", "2024-05-10T00:00:07"], "auto").resolution_s == 1.0
    assert infer_time_kind(["2024-05-10 00:01:00", "2024-05-10 00:07:00"], "auto").resolution_s == 60.0


@pytest.mark.parametrize("values, kind, res", [
    (["1700000000", "1700000003"], "epoch_s", 1.0),
    (["1700000000.25", "1700000001.5"], "epoch_s", 0.01),
    (["1700000000123", "1700000000456"], "epoch_ms", 1e-3),
    (["1700000000123456", "1700000000123457"], "epoch_us", 1e-6),
    (["1700000000123456789", "1700000000123456790"], "epoch_ns", 1e-9),
    (["0", "3.5", "7.25"], "relative_s", 0.01),
    (["5", "45", "118"], "relative_s", 1.0),
])
def test_numeric_units_by_magnitude(values, kind, res):
    got = infer_time_kind(values, "auto")
    assert got.kind == kind
    assert got.resolution_s == pytest.approx(res)


def test_declared_unit_wins():
    got = infer_time_kind(["0", "3000", "5999"], "ms")
    assert got.kind == "relative_ms" and got.seconds_per_unit == 1e-3 and got.resolution_s == pytest.approx(1e-3)
    assert infer_time_kind(["0", "3000", "6000", "9000"], "ms").resolution_s == pytest.approx(1.0)


def test_unreadable_arrivals_are_named():
    with pytest.raises(PlannerError, match="neither numbers nor datetimes"):
        infer_time_kind(["yesterday", "tomorrow"], "auto")


@settings(max_examples=200, deadline=None)
@given(unit=st.sampled_from([("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)]),
       start=st.integers(min_value=1_000_000_000, max_value=2_000_000_000),
       gaps=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30))
def test_epoch_unit_is_recovered(unit, start, gaps):
    name, scale = unit
    base = int(start / scale)
    values = [str(base + sum(gaps[:i])) for i in range(len(gaps))]
    assert infer_time_kind(values, "auto").kind == f"epoch_{name}"


@settings(max_examples=200, deadline=None)
@given(exp=st.integers(min_value=-6, max_value=3),
       ints=st.lists(st.integers(min_value=1, max_value=10**6), min_size=2, max_size=40))
def test_resolution_is_the_finest_step_present(exp, ints):
    # every value a multiple of 10**exp seconds, at least one not a multiple of 10**(exp+1)
    ints = ints + [10 * ints[0] + 1]
    values = [f"{i * 10.0 ** exp:.{max(-exp, 0)}f}" for i in ints]
    got = infer_time_kind(values, "s").resolution_s
    assert math.isclose(got, 10.0 ** exp, rel_tol=1e-9)


def test_describe_resolution():
    assert describe_resolution(1e-6) == "1 µs"
    assert describe_resolution(0.001) == "1 ms"
    assert describe_resolution(60.0) == "60 s"
    assert describe_resolution(None) == "unknown"


@pytest.mark.parametrize("stray", ["0", "1700000040000", "-5"])
@pytest.mark.parametrize("n, strays", [(40, 1), (9, 1), (100, 6), (10, 4)])
def test_a_stray_value_leaves_a_column_of_epoch_seconds_epoch_seconds(stray, n, strays):
    # the smallest value alone decided: one epoch 0 made the whole column relative, 54 years long
    values = [str(1_700_000_000 + 3 * i) for i in range(n)]
    for k in range(strays):
        values.insert(3 * k + 1, stray)
    assert infer_time_kind(values, "auto").kind == "epoch_s"
    assert infer_time_kind(values, "s").kind == "epoch_s"


@settings(max_examples=200, deadline=None)
@given(unit=st.sampled_from(["s", "ms", "us", "ns"]), start=st.floats(min_value=0, max_value=5),
       gaps=st.lists(st.floats(min_value=0.001, max_value=20), min_size=2, max_size=200))
def test_times_counted_from_near_zero_stay_relative(unit, start, gaps):
    # a relative column in microseconds runs past 1e8 (an epoch-second magnitude) within two minutes: it starts
    # near 0 and spreads over its whole range, as no column of epoch times does
    per_second = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[unit]
    values = [f"{(start + sum(gaps[:i])) * per_second:.0f}" for i in range(len(gaps))]
    assert infer_time_kind(values, unit).kind == f"relative_{unit}"
    if unit == "s":
        assert infer_time_kind(values, "auto").kind == "relative_s"
