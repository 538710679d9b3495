"""The one formatter of quantities: the same run reads the same in every place that shows it."""

from __future__ import annotations

import math

import pytest

from nkitui.common import units


@pytest.mark.parametrize(("seconds", "text"), [
    (4669e-6, "4.67 ms"),  # the run of issue #18: once `4.67e+03 µs`, `4669.00 µs` and `4.67 ms`
    (20.96e-6, "21.0 µs"),
    (812e-9, "812 ns"),
    (1.2, "1.20 s"),
    (0.9996e-3, "1.00 ms"),  # rounds up into the next unit, never "1000 µs"
    (125, "2 min 05 s"),
    (0, "0 s"),
    (None, "-"),
    (math.nan, "-"),
])
def test_times_scale_their_unit_and_keep_three_digits(seconds, text):
    assert units.time_s(seconds) == text


def test_microseconds_read_like_seconds():
    assert units.time_us(4669.0) == units.time_s(4669e-6) == "4.67 ms"
    assert units.time_us(None) == "-"


def test_no_exponent_in_a_time():
    for exponent in range(-10, 3):
        for mantissa in (1.0, 4.669, 9.9996):
            assert "e" not in units.time_s(mantissa * 10.0 ** exponent)


@pytest.mark.parametrize(("n", "text"), [(500, "500 B"), (2048, "2.0 KiB"), (212992, "208 KiB"),
                                         (1.5 * 2 ** 20, "1.5 MiB"), (None, "-")])
def test_bytes_in_iec_units(n, text):
    assert units.bytes_(n) == text


@pytest.mark.parametrize(("x", "text"), [(2.38e-7, "2.38e-7"), (0.0123, "0.0123"), (5.65, "5.65"),
                                         (15000, "1.50e+4"), (2.10047e9, "2.10e+9"), (0, "0"),
                                         (math.inf, "inf"), (math.nan, "nan"), (None, "-")])
def test_errors_have_compact_exponents(x, text):
    assert units.error(x) == text


def test_counts_percentages_and_prefixes():
    assert units.count(1048576) == "1,048,576"
    assert units.percent(42.66) == "42.7%"
    assert units.fraction_percent(0.4266) == "42.7%"
    assert units.si(537e6, "FLOP") == "537M FLOP"
    assert units.si(12, "FLOP") == "12 FLOP"
    assert units.ratio(2.3) == "2.30x"


def test_small_ulp_distances_are_counts():
    assert units.ulp(0) == "0"
    assert units.ulp(3) == "3"
    assert units.ulp(1234, "float32") == "1,234"


def test_a_huge_ulp_distance_says_what_it_means():
    # 2.1e9 float32 ULPs is no count of roundings: the values have opposite signs
    text = units.ulp(2.10047e9, "float32")
    assert text.startswith("2.1e+9 (") and "opposite sign" in text
    assert "NaN or Inf" in units.ulp(math.inf)
    # the threshold follows the format: 200 ULPs of bf16 (7 mantissa bits) is already more than 2x apart
    assert units.ulp(200, "bfloat16") != "200" and units.ulp(200, "float32") == "200"
    assert units.ulp(2.10047e9, note=False) == "2.1e+9"


def test_quantity_by_key():
    assert units.quantity("total_time", 4669e-6) == "4.67 ms"
    assert units.quantity("median_us", 4669.0) == "4.67 ms"
    assert units.quantity("hbm_read_bytes", 2048) == "2.0 KiB"
    assert units.quantity("mfu_estimated_percent", 42.66) == "42.7%"
    assert units.quantity("instruction_count", 76800) == "76,800"
