import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nkitui.evaluate.numerics.fpformat import format_name, keyed, ordered_keys, round_to, spacing, ulp_distance, unit_roundoff


@pytest.mark.parametrize(
    "name,u",
    [("float32", 2.0**-24), ("float16", 2.0**-11), ("bfloat16", 2.0**-8), ("tfloat32", 2.0**-11),
     ("float8_e4m3", 2.0**-4), ("float8_e5m2", 2.0**-3), ("float64", 2.0**-53), ("bf16", 2.0**-8), ("int32", 0.0)],
)
def test_unit_roundoff(name, u):
    assert unit_roundoff(name) == u


def test_format_names_accept_numpy_dtypes_and_reject_unknown():
    assert format_name(np.dtype(ml_dtypes.bfloat16)) == "bfloat16"
    assert format_name(np.float32) == "float32"
    assert format_name("fp16") == "float16"
    with pytest.raises(ValueError, match="unknown dtype 'float7'"):
        format_name("float7")


def test_round_to_bf16_is_correctly_rounded_from_float64():
    # 1 + 2^-8 is the midpoint between 1 and 1 + 2^-7; anything above it must round up. A chain
    # float64 -> float32 -> bf16 loses the 2^-30 and rounds the tie to even (1.0).
    x = np.array([1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-30)])
    assert list(round_to(x, "bfloat16")) == [1 + 2**-7, 1.0, 1 + 2**-6, -(1 + 2**-7)]


def test_round_to_tf32_keeps_ten_mantissa_bits():
    x = np.array([1 + 2**-11, 1 + 2**-11 + 2**-20, 1 + 2**-10])
    assert list(round_to(x, "tfloat32")) == [1.0, 1 + 2**-10, 1 + 2**-10]


def test_ulp_distance_counts_values_across_zero_and_handles_specials():
    a = np.array([1.0, 0.0, 2.0**-130, np.nan, np.inf, 1.0, np.inf])
    b = np.array([1 + 2**-7, -0.0, -(2.0**-130), np.nan, np.inf, np.nan, -np.inf])
    d = ulp_distance(a, b, "bfloat16")
    # bf16 subnormal spacing is 2^-133, so +-2^-130 are 8 steps from zero on each side
    assert list(d) == [1.0, 0.0, 16.0, 0.0, 0.0, math.inf, math.inf]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=-6e4, max_value=6e4, allow_nan=False),
       st.sampled_from(["float32", "float16", "bfloat16", "float8_e5m2", "float8_e4m3", "tfloat32"]))
def test_the_next_value_away_from_zero_is_one_ulp_away(x, dtype):
    r = round_to(np.array([x]), dtype)
    if not np.isfinite(r[0]):
        return
    step = spacing(r, dtype)
    away = r + np.copysign(step, r if r[0] != 0 else 1.0)
    if not np.isfinite(round_to(away, dtype)[0]):
        return
    assert round_to(away, dtype)[0] == away[0]  # the gap above is exactly one representable step
    assert ulp_distance(r, away, dtype)[0] == 1
    assert ulp_distance(away, r, dtype)[0] == 1


def test_spacing_matches_numpy_for_float32_and_float16():
    x = np.array([1.0, 3.0, 1e-3, 1e4])
    assert np.array_equal(spacing(x, "float32"), np.spacing(x.astype(np.float32)).astype(np.float64))
    assert np.array_equal(spacing(x, "float16"), np.spacing(x.astype(np.float16)).astype(np.float64))
    assert spacing(np.array([0.0]), "bfloat16")[0] == 2.0**-133


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_keys_and_spacing_agree_with_walking_every_representable_value(dtype):
    # every non-negative finite value of the format, in bit order (= value order)
    storage = np.dtype({"bfloat16": ml_dtypes.bfloat16, "float8_e4m3": ml_dtypes.float8_e4m3,
                        "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
                        "float16": np.float16}[dtype])
    width = {1: np.uint8, 2: np.uint16}[storage.itemsize]
    bits = np.arange(0, 1 << (8 * storage.itemsize - 1), dtype=np.uint64).astype(width)
    stored = bits.view(storage)
    with np.errstate(invalid="ignore"):  # the NaN bit patterns among them
        values = stored[np.isfinite(stored)].astype(np.float64)
    assert np.all(np.diff(values) > 0)
    keys = ordered_keys(values, dtype)
    assert np.array_equal(keys, np.arange(values.size))  # adjacent values are one key apart
    assert np.array_equal(ordered_keys(-values, dtype), -np.arange(values.size))  # -0 and +0 share key 0
    # the gap above each value (its ULP) is the distance to the next one
    assert np.array_equal(spacing(values[:-1], dtype)[values[:-1] > 0], np.diff(values)[values[:-1] > 0])
    d = ulp_distance(values[:-1], -values[1:], dtype)
    assert np.array_equal(d, 2 * np.arange(values.size - 1) + 1)  # across zero: both sides counted


def test_keyed_values_judge_identity_like_the_rounded_floats():
    kinds = keyed(np.array([1.0, 0.0, -0.0, np.nan, np.inf, 1e6]), "float8_e4m3fn")
    others = keyed(np.array([1.0, -0.0, -0.0, np.nan, np.inf, 1e6]), "float8_e4m3fn")
    # +0 is not -0; NaN is never identical, and e4m3fn has no infinity: inf and 1e6 round to NaN
    assert list(kinds.same_as(others)) == [True, False, True, False, False, False]
    f32 = keyed(np.array([np.inf, -np.inf, 2.0]), "float32")
    assert list(f32.same_as(keyed(np.array([np.inf, np.inf, 2.0]), "float32"))) == [True, False, True]
