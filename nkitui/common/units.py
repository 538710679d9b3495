"""One formatter for every quantity nkitui shows: times, bytes, percentages, errors, ULPs, counts.

The command line and the app both write numbers through these functions, so one run reads the same
everywhere (`4.67 ms` in a toast, the status bar, the Engines area and `nkitui check`). The rules:

* three significant digits for measured or estimated quantities, with the unit scaled so the number
  stays short (`812 ns`, `20.9 µs`, `4.67 ms`, `1.20 s`; `512 B`, `2.0 KiB`; `537M FLOP`);
* errors (absolute, relative, L2) keep three significant digits and switch to a compact exponent
  outside 0.001..9999 (`2.38e-7`, `0.0123`, `1.5e+4`): no zero-padded `e-07`;
* counts are whole numbers with thousands separators (`1,048,576`);
* ULP distances are counts, but a distance of more than 2^mantissa ULPs is not "a few roundings off"
  any more: the two values are more than a factor of two apart or of opposite sign, so the text says so
  rather than printing a bare `2.10047e+09`;
* a number is short enough to sit in a narrow column whole: a report wraps between words, never
  inside `2.1e+9`;
* None (and NaN where nothing was measured) is `-`.

Pure Python: no numpy, no Textual (every layer imports it).
"""

from __future__ import annotations

import math
from numbers import Real

__all__ = [
    "DASH", "time_s", "time_us", "bytes_", "percent", "fraction_percent", "error", "number", "ulp",
    "ulp_note", "count", "si", "ratio", "quantity", "seconds",
]

DASH = "-"  # nothing to show

# Explicit mantissa bits of the float formats tasks use (the ULP of 1.0 is 2^-bits). Names as in task
# manifests and ml_dtypes; the aliases the app and the CLI accept (bf16, fp32 ...) too.
_MANTISSA_BITS = {
    "float64": 52, "float32": 23, "tfloat32": 10, "float16": 10, "bfloat16": 7,
    "float8_e4m3": 3, "float8_e4m3fn": 3, "float8_e5m2": 2,
    "fp64": 52, "fp32": 23, "tf32": 10, "fp16": 10, "bf16": 7, "fp8_e4m3": 3, "fp8_e4m3fn": 3, "fp8_e5m2": 2,
}


def _real(x: object) -> float | None:
    """`x` as a float, or None when there is no number to show (None, bool, text, NaN)."""
    if x is None or isinstance(x, bool) or not isinstance(x, Real):
        return None
    value = float(x)
    return None if math.isnan(value) else value


def _sig(x: float, digits: int = 3) -> str:
    """`x` with `digits` significant digits in plain notation, trailing zeros kept (for values already
    scaled to a unit, so the magnitude is below 1000): 21.0, 4.67, 812, 1.20."""
    if x == 0:
        return "0"
    text = f"{x:#.{digits}g}"
    if "e" in text:  # .3g turns 999.5 into 1e+03: write the digits out instead
        text = f"{x:.0f}"
    return text.rstrip(".")


def _join(number: str, unit: str) -> str:
    return f"{number} {unit}" if unit else number


# --- times ------------------------------------------------------------------------------------------

_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def time_s(seconds: object, digits: int = 3) -> str:
    """A duration in seconds as `1.20 s`, `4.67 ms`, `20.9 µs`, `812 ns` (three significant digits).

    Durations of a minute or more read as `2 min 05 s` (a batch, a timeout), never as `125 s`.
    """
    value = _real(seconds)
    if value is None:
        return DASH
    if math.isinf(value):
        return "∞"
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value >= 60:
        minutes, rest = divmod(round(value), 60)
        if minutes >= 60:
            hours, minutes = divmod(minutes, 60)
            return f"{sign}{hours} h {minutes:02d} min"
        return f"{sign}{minutes} min {rest:02d} s"
    if value == 0:
        return _join("0", "s")
    for scale, unit in _TIME_UNITS:
        if value >= scale * 0.9995:  # 999.6 µs rounds to 1.00 ms, not to "1000 µs"
            return sign + _join(_sig(value / scale, digits), unit)
    return sign + _join(_sig(value / 1e-9, digits), "ns")


def time_us(microseconds: object, digits: int = 3) -> str:
    """A duration given in microseconds (what run results store), formatted as `time_s`."""
    value = _real(microseconds)
    return DASH if value is None else time_s(value * 1e-6, digits)


def seconds(value: object, decimals: int = 2) -> str:
    """A phase or wall-clock duration with a fixed number of decimals (`0.14 s`, `3.0 s`): for columns
    of durations that line up, where `time_s` would switch units from row to row."""
    v = _real(value)
    return DASH if v is None else _join(f"{v:.{decimals}f}", "s")


# --- sizes, counts, ratios -------------------------------------------------------------------------

_IEC = ("B", "KiB", "MiB", "GiB", "TiB")


def bytes_(n: object) -> str:
    """A size in bytes, IEC units: `512 B`, `2.0 KiB`, `1.5 MiB`, `12 GiB`."""
    value = _real(n)
    if value is None:
        return DASH
    sign = "-" if value < 0 else ""
    value = abs(value)
    unit = 0
    while value >= 1024 and unit < len(_IEC) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return sign + _join(f"{value:.0f}", "B")
    text = f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return sign + _join(text, _IEC[unit])


def count(n: object) -> str:
    """A whole number with thousands separators: `1,048,576`."""
    value = _real(n)
    if value is None:
        return DASH
    if math.isinf(value):
        return "∞"
    return f"{round(value):,}"


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(n: object, unit: str = "") -> str:
    """A large count with an SI prefix and a unit: `537M FLOP`, `76.8k instr`, `12 FLOP`."""
    value = _real(n)
    if value is None:
        return DASH
    for factor, prefix in _SI:
        if abs(value) >= factor * 0.9995:
            return _join(f"{_sig(value / factor)}{prefix}", unit)
    return _join(f"{value:.0f}" if float(value).is_integer() or abs(value) >= 10 else _sig(value), unit)


def ratio(x: object) -> str:
    """A speed-up or a factor: `2.31x`, `0.87x`."""
    value = _real(x)
    return DASH if value is None else f"{_sig(value)}x"


def percent(p: object, decimals: int = 1) -> str:
    """A value already in percent: `42.7%`."""
    value = _real(p)
    return DASH if value is None else f"{value:.{decimals}f}%"


def fraction_percent(f: object, decimals: int = 1) -> str:
    """A fraction 0..1 shown in percent: 0.427 -> `42.7%`."""
    value = _real(f)
    return DASH if value is None else percent(value * 100, decimals)


# --- numerics ---------------------------------------------------------------------------------------

def error(x: object, digits: int = 3) -> str:
    """An error or a magnitude as auditors read it: `digits` significant digits, plain inside
    0.001..9999 (`0.0123`, `5.65`), else a compact exponent (`2.38e-7`, `1.5e+4`)."""
    if isinstance(x, float) and math.isnan(x):
        return "nan"  # a NaN error is a finding, not a missing value
    value = _real(x)
    if value is None:
        return DASH
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    if 1e-3 <= abs(value) < 1e4:
        return f"{value:.{digits}g}"
    mantissa, _, exponent = f"{value:.{digits - 1}e}".partition("e")
    return f"{mantissa}e{int(exponent):+d}"


def number(x: object, digits: int = 3) -> str:
    """Any other number (an intensity, a scale factor): like `error`, whole numbers written out."""
    value = _real(x)
    if value is not None and value.is_integer() and abs(value) < 1e6:
        return f"{int(value)}"
    return error(x, digits)


def ulp_note(distance: object, dtype: str | None = None) -> str:
    """Why a ULP distance is that large, when it is no longer a count of roundings ("" otherwise).

    More than 2^mantissa ULPs apart means the two values differ by more than a factor of two or
    have opposite signs (a ULP distance is measured on the ordered bit patterns, so crossing zero
    counts every value in between); an infinite distance means NaN or Inf on one side only.
    """
    value = _real(distance)
    if value is None:
        return ""
    if math.isinf(value):
        return "NaN or Inf on one side"
    bits = _MANTISSA_BITS.get(dtype or "", 23)
    if value > 2.0 ** bits:
        return "values of opposite sign or more than 2x apart"
    return ""


def ulp(distance: object, dtype: str | None = None, *, note: bool = True) -> str:
    """A ULP distance: `0`, `3`, `1,234`; beyond a million `2.1e+9`; with `note`, a distance that is
    no longer a count of roundings says what it means (`2.1e+9 (values of opposite sign ...)`)."""
    value = _real(distance)
    if value is None:
        return DASH
    if math.isinf(value):
        text = "∞"
    elif value < 1e6:
        text = count(value) if float(value).is_integer() else _sig(value)
    else:
        text = error(value, 2)
    why = ulp_note(value, dtype) if note else ""
    return f"{text} ({why})" if why else text


# --- by name ----------------------------------------------------------------------------------------

def quantity(key: str, value: object) -> str:
    """A summary value in the unit its key names: `*_time`/`*_s` seconds, `*_us` microseconds,
    `*_bytes`, `*_percent`, `*_count`/`*_cycles`, `*ulp*`; anything else as a number."""
    if key == "total_time" or key.endswith("_time") or key.endswith("_s"):
        return time_s(value)
    if key.endswith("_us"):
        return time_us(value)
    if key.endswith("_bytes"):
        return bytes_(value)
    if key.endswith("_percent"):
        return percent(value)
    if key.endswith("_count") or key.endswith("_cycles") or key.endswith("_instructions"):
        return count(value)
    if "ulp" in key:
        return ulp(value)
    return number(value)
