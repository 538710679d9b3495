"""How far an adversarial trial's output may be from the reference: a bound for every element.

A trial whose outputs fail the task's tolerance is excused ("tolerance-only") only when every
element's error is what a correct kernel makes at *that element*. One bound for the whole tensor
(the advisor's allclose, whose absolute term follows the largest input) excused thousands of ULPs
on elements of moderate size beside a few huge ones (red team 10A: `c += 0.004 * (a > 6.5)` on a
1-ULP vector add). So the bound here is the advisor's error model evaluated element by element:

  bound_i = safety * max(z*sigma(s_i) + rounding_rel*|s_i| + chain_i, floor)

where s_i is the element's reference value and chain_i the element-wise chain term (a few fp32
ULPs of the inputs *that element* was computed from: the inputs broadcast to the output's shape,
element by element; inputs of another shape count with their largest value).

Normalising ops (a norm) are judged by their conditioning as well, measured on the reference
itself: the reference is asked once more on the trial's inputs perturbed by the rounding error of
the row statistics a correct kernel accumulates (`probe_inputs`), and each element may move by the
response it shows (x safety). This is what makes a row of equal values, or a row whose variance is
below eps, judgeable numerically without knowing eps: the reference's own slope says how much the
rounding noise of the mean is amplified by 1/sqrt(var + eps).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from nkitui.evaluate.numerics.advisor import ELEMENTWISE_CHAIN_OPS, FUNCTION_ULPS, ToleranceAdvice
from nkitui.evaluate.numerics.fpformat import is_float_format, unit_roundoff

# Row statistics (mean, sum of squares) of K terms carry a relative error of about u*sqrt(K)/3
# (random walk); the probe perturbs every element by PROBE_ULPS of that, in random directions.
PROBE_SIGMAS = 3.0
PROBE_SEED = 0x5E75


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def chain_magnitudes(inputs: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray | float:
    """For each output element, the largest |input| it is computed from, for an element-wise op:
    inputs that broadcast to the output's `shape` count element by element, the others with their
    largest finite value. A float when no input broadcasts."""
    scalar = 0.0
    per: np.ndarray | None = None
    for arr in inputs.values():
        a = np.asarray(arr)
        if a.size == 0 or not (a.dtype.kind == "f" or a.dtype.kind == "V"):
            continue
        try:
            f = np.abs(_f64(a))
        except (TypeError, ValueError):
            continue
        f = np.where(np.isfinite(f), f, 0.0)
        try:
            b = np.broadcast_to(f, shape) if a.ndim <= len(shape) else None
        except ValueError:
            b = None
        if b is None:
            scalar = max(scalar, float(f.max()))
        else:
            per = np.array(b) if per is None else np.maximum(per, b)
    if per is None:
        return scalar
    return np.maximum(per, scalar) if scalar else per


def element_bound(advice: ToleranceAdvice, reference: np.ndarray, inputs: Mapping[str, np.ndarray],
                  op: str | None, safety: float) -> np.ndarray:
    """The largest error a correct kernel is expected to make at each element (x `safety`)."""
    s = _f64(reference)
    s = np.where(np.isfinite(s), s, 0.0)
    model = advice.model
    chain: np.ndarray | float = model.rounding_abs
    if op in ELEMENTWISE_CHAIN_OPS and advice.reduction_length <= 1 and model.rounding_abs > 0:
        chain = FUNCTION_ULPS * unit_roundoff("float32") * chain_magnitudes(inputs, s.shape)
    envelope = model.tail * model.sigma(s) + model.rounding_rel * np.abs(s) + chain
    out = advice.output_dtype
    floor = unit_roundoff(out) * advice.ref_rms / 16.0 if is_float_format(out) else 0.0
    bound: np.ndarray = safety * np.maximum(envelope, floor)
    return bound


def probe_inputs(inputs: Mapping[str, np.ndarray], names: tuple[str, ...], accumulation_dtype: str = "float32",
                 ) -> dict[str, np.ndarray]:
    """`inputs` with every element of the inputs `names` moved by the error a correct kernel's row
    statistics carry (PROBE_SIGMAS * u_acc * sqrt(K)/3 * rms of the row, K the row's length), in random
    directions; cast back to each input's dtype."""
    rng = np.random.default_rng(PROBE_SEED)
    u = unit_roundoff(accumulation_dtype)
    out = dict(inputs)
    for name in names:
        a = np.asarray(inputs[name])
        x = _f64(a)
        if x.ndim == 0 or x.size == 0:
            continue
        k = x.shape[-1]
        rows = x.reshape(-1, k)
        finite = np.where(np.isfinite(rows), rows, 0.0)
        rms = np.sqrt(np.mean(finite * finite, axis=1, keepdims=True))
        step = PROBE_SIGMAS * u * math.sqrt(k) / 3.0 * rms
        signs = rng.integers(0, 2, size=rows.shape, dtype=np.int8) * 2.0 - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            moved = (rows + signs * step).reshape(a.shape).astype(a.dtype)
        out[name] = moved
    return out


def conditioning_bound(reference: np.ndarray, probed: np.ndarray, safety: float) -> np.ndarray:
    """Per element: how far the reference moved when its inputs moved by a correct kernel's rounding
    of the row statistics (`probe_inputs`), the largest move in the element's row, x `safety`."""
    r = _f64(reference)
    p = _f64(probed)
    if r.shape != p.shape:
        return np.zeros(r.shape)
    with np.errstate(invalid="ignore"):
        moved = np.abs(p - r)
    moved = np.where(np.isfinite(moved), moved, 0.0)
    if r.ndim == 0:
        return np.asarray(safety * moved)
    rows = moved.reshape(-1, r.shape[-1]) if r.shape[-1] else moved.reshape(-1, 1)
    row_max = rows.max(axis=1, keepdims=True)
    bound: np.ndarray = safety * np.broadcast_to(row_max, rows.shape).reshape(r.shape)
    return bound


def within(actual: np.ndarray, reference: np.ndarray, bound: np.ndarray) -> tuple[bool, float]:
    """Is every finite error within its element's bound? And the largest error/bound ratio."""
    a, r = _f64(actual), _f64(reference)
    both = np.isfinite(a) & np.isfinite(r)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(a - r), 0.0)
    b = np.broadcast_to(bound, err.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err > 0, err / b, 0.0)
    worst = float(np.max(ratio)) if ratio.size else 0.0
    return bool(np.all(err <= b)), worst

