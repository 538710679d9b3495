"""Adversarial inputs chosen for the operation: the values random normal data never produces.

Each case starts from the task's own inputs (natural layout, declared dtypes) and changes the
"main" inputs (the largest floating-point ones: both operands of a matmul, the logits of a
softmax, x of a norm), except `large` and `nonfinite`, which change every float input. Scale
changes are adapted until the reference's outputs are finite and representable in the output
dtype, so a correct kernel can meet them. Integer inputs (indices, masks) are never touched.

  large         every float input at once, each element's magnitude drawn log-uniformly over the
                decades from the seed's scale up to the op's safe top (fp32 elementwise: ~1e36;
                matmul, norm: sqrt(max / 16K), so honest K-term sums cannot overflow), 1 in 8
                elements down in the small normals; signs are the seed's
  large: <x>    the same for input x alone, the others kept at the seed's values (only when the task
                has two or more float inputs), so a kernel wrong on one operand cannot hide behind
                the others
  tiny          magnitudes near the bottom of the normal range, with 1 in 8 entries subnormal
  equal         rows of equal values (softmax: uniform rows; attention: q = 0)
  low-variance  norm: rows shrunk through 7 decades, so some rows' spread is near and below sqrt(eps),
                one in four a repeated value (the norm's equal rows); judged by the reference's own
                response to rounding of the row statistics (trial_bounds.py)
  mask          -inf entries in every row, as a causal/padding mask writes them (softmax)
  nonfinite     NaN, +inf and -inf sprinkled into every float input, at independent places
                (ops that must propagate them)
  cancellation  terms that cancel: near-zero results from large partial sums
  offset        a large common offset (norm: E[x^2]-E[x]^2 loses digits)
  structured    every op: exact zeros and -0, small integers, half-integer ties, a repeated value,
                b = -a where two float inputs share a shape (values random data never holds)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from nkitui.evaluate.numerics.fpformat import float_format, format_name, is_float_format

ReferenceFn = Callable[[dict[str, np.ndarray]], Mapping[str, np.ndarray]]
Inputs = dict[str, np.ndarray]
Candidate = tuple[float, Inputs]  # (the scale or value tried, the inputs it gave)

CASES_BY_OP: dict[str, tuple[str, ...]] = {
    "matmul": ("large", "tiny", "cancellation", "nonfinite", "structured"),
    "attention": ("large", "tiny", "equal", "structured"),
    "softmax": ("large", "tiny", "equal", "mask", "structured"),
    "norm": ("large", "tiny", "low-variance", "offset", "structured"),  # low-variance holds the equal rows
    "reduction": ("large", "tiny", "equal", "cancellation", "nonfinite", "structured"),
    "scan": ("large", "tiny", "cancellation", "nonfinite", "structured"),
    "elementwise": ("large", "tiny", "nonfinite", "structured"),
    "transpose": ("large", "tiny", "nonfinite", "structured"),
    "other": ("large", "tiny", "nonfinite", "structured"),
}

DESCRIPTIONS = {
    "large": "large magnitudes",
    "tiny": "tiny and subnormal values",
    "equal": "rows of equal values",
    "mask": "-inf mask entries in every row",
    "nonfinite": "NaN, +inf and -inf entries",
    "cancellation": "heavy cancellation (near-zero results from large partial sums)",
    "offset": "a large common offset (variance by cancellation)",
    "structured": "exact zeros, -0, small integers, ties, repeated values, b = -a",
    "low-variance": "rows whose spread falls below sqrt(eps)",
}


@dataclass(frozen=True)
class AdversarialCase:
    name: str  # e.g. "large"
    description: str  # what was done, with the numbers
    inputs: dict[str, np.ndarray]
    rescaled: bool  # True when the outputs' scale follows the inputs' (judge errors at the new scale)
    changed: tuple[str, ...]  # names of the inputs that were changed
    spread: bool = False  # magnitudes spread over decades: judge each element at its own scale


def _is_float(arr: np.ndarray) -> bool:
    try:
        return is_float_format(arr.dtype)
    except ValueError:
        return False


def main_inputs(inputs: Mapping[str, np.ndarray], op: str | None) -> list[str]:
    """The inputs adversarial values go into: the largest float inputs (two for matmul, three for attention)."""
    n = {"matmul": 2, "attention": 2}.get(op or "", 1)
    return float_inputs(inputs)[:n]


def float_inputs(inputs: Mapping[str, np.ndarray]) -> list[str]:
    """Every float input, the largest first (ties in the task's order)."""
    floats = [k for k, v in inputs.items() if _is_float(np.asarray(v))]
    floats.sort(key=lambda k: -np.asarray(inputs[k]).size)
    return floats


def _cast(values: np.ndarray, like: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=np.float64).astype(np.asarray(like).dtype)


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _ref_ok(reference: ReferenceFn, inputs: dict[str, np.ndarray], out_max: Mapping[str, float],
            base_nonfinite: Mapping[str, np.ndarray] | None = None, low: Mapping[str, float] | None = None,
            allow_inf: bool = False) -> bool:
    try:
        with np.errstate(all="ignore"):
            outs = reference(inputs)
    except Exception:  # noqa: BLE001 - a reference that cannot take these values: skip the case
        return False
    for name, arr in outs.items():
        b = _f64(arr)
        allowed = base_nonfinite.get(name) if base_nonfinite else None
        bad = np.isnan(b) if allow_inf else ~np.isfinite(b)
        if allowed is not None and allowed.shape == b.shape:
            bad &= ~allowed
        if bad.any():
            return False
        finite = b[np.isfinite(b)]
        if finite.size and float(np.abs(finite).max()) > out_max.get(name, np.inf):
            return False
        if low is not None and finite.size:
            rms = float(np.sqrt(np.mean(finite**2)))
            if rms < low.get(name, 0.0):
                return False
    return True


def _scaled(inputs: Mapping[str, np.ndarray], names: list[str], factor: float) -> dict[str, np.ndarray]:
    out = dict(inputs)
    for n in names:
        out[n] = _cast(_f64(inputs[n]) * factor, inputs[n])
    return out


def _output_limits(reference_outputs: Mapping[str, np.ndarray], output_dtypes: Mapping[str, str],
                   frac: float) -> tuple[dict[str, float], dict[str, float]]:
    limits: dict[str, float] = {}
    lows: dict[str, float] = {}
    for name in reference_outputs:
        dt = output_dtypes.get(name)
        if dt and is_float_format(dt):
            fmt = float_format(dt)
            limits[name] = fmt.max * frac
            lows[name] = fmt.smallest_normal * 2.0**10
    return limits, lows


def make_adversarial_cases(
    inputs: Mapping[str, np.ndarray],
    reference: ReferenceFn,
    op: str | None,
    output_dtypes: Mapping[str, str],
    reduction_length: int | None = None,
    seed: int = 0,
) -> list[AdversarialCase]:
    """The adversarial cases that make sense for `op`, built from the task's own `inputs`.

    Cases that cannot be built for these inputs (no float input, a reference that overflows at
    every scale tried, no axis to cancel along) are left out.
    """
    names = main_inputs(inputs, op)
    if not names:
        return []
    rng = np.random.default_rng([seed, 0xAD7])
    base = {k: np.asarray(v) for k, v in inputs.items()}
    try:
        with np.errstate(all="ignore"):
            base_out = {k: np.asarray(v) for k, v in reference(dict(base)).items()}
    except Exception:  # noqa: BLE001
        return []
    base_nonfinite = {k: ~np.isfinite(_f64(v)) for k, v in base_out.items()}
    limits, lows = _output_limits(base_out, output_dtypes, 1.0 / 16.0)
    cases: list[AdversarialCase] = []
    for case in CASES_BY_OP.get(op or "other", CASES_BY_OP["other"]):
        if case == "large":
            cases += _spread_cases(base, reference, op, limits, base_nonfinite, reduction_length, rng)
            continue
        builder = _BUILDERS[case]
        built = builder(base, names, reference, op, limits, lows, base_nonfinite, reduction_length, rng)
        if built is not None:
            cases.append(built)
    return cases


def _max_abs(a: np.ndarray) -> float:
    f = _f64(a)
    f = f[np.isfinite(f)]
    return float(np.abs(f).max()) if f.size else 0.0


def _prefetch(reference: ReferenceFn, sets: list[dict[str, np.ndarray]]) -> None:
    """Let a reference that can answer several input sets at once (a process: one round trip) have
    the next candidates together; the search still checks them one by one, in order."""
    fetch = getattr(reference, "prefetch", None)
    if fetch is not None and sets:
        fetch(sets)


def _first_accepted(reference: ReferenceFn, factors: list[float], build: Callable[[float], Inputs],
                    accepts: Callable[[Inputs], bool]) -> Candidate | None:
    """The first (factor, trial) that `accepts`, for an acceptance that is monotone along `factors` (refused
    up to some factor, taken from there on: the tiny search's output grows with its factor). The first
    factor is tried alone (where element-wise ops are taken at once), then the rest is searched by
    bisection: about log2(n) reference calls instead of up to n (17 one-set round trips on the bf16
    matmul tasks). A reference that answers several sets in one round trip cheaply (`batch_size`: its
    own work costs less than a round trip) gets several evenly spaced candidates per trip, a k-ary
    search; a slow one gets one set per trip, so no answer is computed that the search does not use.
    Each trial is built only when its turn comes. On a non-monotone reference the answer is a factor it
    takes whose predecessor it refused (a valid case, not necessarily the first taken)."""
    n = len(factors)
    built: dict[int, Inputs] = {}
    judged: dict[int, bool] = {}

    def trial(i: int) -> Inputs:
        if i not in built:
            built[i] = build(factors[i])
        return built[i]

    def taken(i: int) -> bool:
        if i not in judged:
            judged[i] = accepts(trial(i))
        return judged[i]

    if n == 0:
        return None
    if taken(0):
        return factors[0], trial(0)
    hint = getattr(reference, "batch_size", None)
    lo, hi = 0, n  # refused at lo; taken at hi (hi == n: nothing known to be taken yet)
    while hi - lo > 1:
        between = hi - lo - 1
        k = min(between, max(1, hint(7) if hint is not None else 1))
        probes = sorted({lo + (j * (hi - lo)) // (k + 1) for j in range(1, k + 1)} - {lo, hi})
        if len(probes) > 1:
            _prefetch(reference, [trial(i) for i in probes])
        for i in probes:
            if taken(i):
                hi = i
                break
            lo = i
    return (factors[hi], trial(hi)) if hi < n else None


SAFE_HEADROOM = 16.0  # the spread's top stays this far below what the op's honest arithmetic can hold
LOW_SHARE = 0.125  # the share of a spread input's elements drawn in the small normals
LOW_FLOOR = 2.0**10  # ... down to this many times the dtype's smallest normal
FLOOR_DECADES = 10.0  # a spread's top is at least this many times its seed's scale (an exp: x up to ~40)
SEARCH_DECADES = 8.0  # how close the search gets to the highest top the reference takes (each step: a round trip;
# the elements spread over every decade below the top, so a top found 8 decades low loses only its top band)


def safe_top(dtype: Any, op: str | None, k: int | None, n_float: int) -> float:
    """The largest magnitude an input of `dtype` may carry for `op` so that a correct kernel's own
    arithmetic cannot overflow: the reference (float64) only tells what the result is, not what the
    kernel's fp32 intermediates must hold. matmul/attention sum K products and a norm sums K squares
    (sqrt(max / 16K)); a reduction or scan sums K terms (max / 16K); softmax subtracts the row's
    largest value (max / 32); element-wise ops may add their n float inputs (max / (16 max(n, 2)))."""
    fmt = float_format(dtype)
    m = min(fmt.max, float(np.finfo(np.float32).max))  # kernels compute in fp32 or narrower
    kk = float(max(1, k or 1))
    if op in ("matmul", "attention", "norm"):
        top = math.sqrt(m / (SAFE_HEADROOM * kk))
    elif op in ("reduction", "scan"):
        top = m / (SAFE_HEADROOM * kk)
    elif op == "softmax":
        top = m / (SAFE_HEADROOM * 2.0)
    else:
        top = m / (SAFE_HEADROOM * max(2, n_float))
    return min(top, fmt.max / SAFE_HEADROOM)


@dataclass(frozen=True)
class _Spread:
    """One input's draw for the spread cases: which decade each element goes to, fixed once, so that
    trying a lower top keeps the same pattern."""

    name: str
    values: np.ndarray  # the seed's values, float64
    scale: float  # their largest finite magnitude
    share: np.ndarray  # float32 in [0, 1): below LOW_SHARE the element goes down, else up (the rest: how far)
    low: float  # the smallest magnitude a small element gets
    made: dict[float, np.ndarray] = field(default_factory=dict, compare=False)  # top -> values (a search asks again)

    @classmethod
    def draw(cls, name: str, arr: np.ndarray, rng: np.random.Generator) -> "_Spread":
        f = _f64(arr)
        fmt = float_format(arr.dtype)
        return cls(name, f, _max_abs(f) or 1.0, rng.random(f.shape, dtype=np.float32), fmt.smallest_normal * LOW_FLOOR)

    def at(self, top: float, like: np.ndarray) -> np.ndarray:
        made = self.made.get(top)
        if made is None:
            up = math.log10(max(top, self.scale) / self.scale)
            down = math.log10(self.scale / self.low) if self.scale > self.low else 0.0
            small = self.share < LOW_SHARE
            # decades: up * uniform[0, 1) for most elements, -down * uniform[0, 1) for the small ones
            exponent = np.where(small, self.share * np.float32(-down / LOW_SHARE),
                                (self.share - np.float32(LOW_SHARE)) * np.float32(up / (1.0 - LOW_SHARE)))
            with np.errstate(all="ignore"):
                factor = np.power(10.0, exponent.astype(np.float64))
                made = self.made[top] = _cast(self.values * factor, like)  # NaN/Inf of the seed stay
        return made


def _spread_trial(base: Inputs, draws: Mapping[str, _Spread], tops: Mapping[str, float]) -> Inputs:
    trial = dict(base)
    for name, top in tops.items():
        trial[name] = draws[name].at(top, base[name])
    return trial


def _lowered(draws: Mapping[str, _Spread], tops: Mapping[str, float], shrink: float) -> dict[str, float]:
    """`tops` times `shrink`, but none below a decade above its input's seed scale (or its own top)."""
    return {n: max(t * shrink, min(t, FLOOR_DECADES * draws[n].scale)) for n, t in tops.items()}


def _highest_tops(base: Inputs, draws: Mapping[str, _Spread], tops: Mapping[str, float], reference: ReferenceFn,
                  limits: dict[str, float], base_nf: dict[str, np.ndarray]) -> dict[str, float] | None:
    """The highest tops, `tops` shrunk together on a log scale (each no lower than a decade above its
    seed's scale), whose spread the reference takes, to SEARCH_DECADES' resolution; None when it takes
    none. The full tops are asked first (what the reference almost always takes: one call), then the
    lowest, then a bisection."""
    if all(t <= FLOOR_DECADES * draws[n].scale for n, t in tops.items()):
        return None  # no input can go a decade above its seeds (fp8, or tops already lowered that far)
    floor = min(min(t, FLOOR_DECADES * draws[n].scale) / t for n, t in tops.items())

    def ok(shrink: float) -> bool:
        return _ref_ok(reference, _spread_trial(base, draws, _lowered(draws, tops, shrink)), limits, base_nf)

    if ok(1.0):
        return dict(tops)
    if not ok(floor):
        return None
    lo, hi = math.log10(floor), 0.0  # ok at lo, not at hi
    hint = getattr(reference, "batch_size", None)
    while hi - lo > SEARCH_DECADES:
        # k evenly spaced candidates a round trip where the reference answers several at once as cheaply (a pool
        # of processes, or one whose work costs less than a round trip), else bisection
        k = max(1, min(3, hint(3) if hint is not None else 1))
        probes = [lo + (hi - lo) * j / (k + 1) for j in range(1, k + 1)]
        if k > 1:
            _prefetch(reference, [_spread_trial(base, draws, _lowered(draws, tops, float(10.0**p))) for p in probes])
        for p in probes:
            if not ok(10.0**p):
                hi = p
                break
            lo = p
    return _lowered(draws, tops, float(10.0**lo))


def _describe_spread(trial: Inputs, names: Sequence[str], draws: Mapping[str, _Spread]) -> str:
    parts = []
    for n in names:
        f = _f64(trial[n])
        nz = np.abs(f[np.isfinite(f) & (f != 0)])
        lo, hi = (float(nz.min()), float(nz.max())) if nz.size else (0.0, 0.0)
        parts.append(f"{n} {lo:.1g}..{hi:.2g}")
    return ", ".join(parts)


def _spread_cases(base: Inputs, reference: ReferenceFn, op: str | None, limits: dict[str, float],
                  base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator) -> list[AdversarialCase]:
    """`large` (every float input spread at once) and, with two or more float inputs, `large: <x>`
    (x alone spread, the others the seed's)."""
    names = float_inputs(base)
    if not names:
        return []
    draws = {n: _Spread.draw(n, base[n], rng) for n in names}
    tops = {n: safe_top(base[n].dtype, op, k, len(names)) for n in names}
    alone: dict[str, float] = {}
    cases: list[AdversarialCase] = []
    # Every input alone at its top and all of them together: what the search asks first and the reference
    # almost always takes, in one round trip (a process).
    _prefetch(reference, [_spread_trial(base, draws, {n: tops[n]}) for n in names]
              + ([_spread_trial(base, draws, tops)] if len(names) > 1 else []))
    for n in names:
        found = _highest_tops(base, draws, {n: tops[n]}, reference, limits, base_nf)
        if found is not None:
            alone[n] = found[n]
    if len(names) > 1:
        for n in names:
            if n in alone:
                trial = _spread_trial(base, draws, {n: alone[n]})
                cases.append(AdversarialCase(f"large: {n}", "only this input spread over the decades: "
                                             + _describe_spread(trial, [n], draws),
                                             trial, rescaled=True, changed=(n,), spread=True))
    if not alone:
        return cases
    together = dict(alone) if len(alone) == 1 else _highest_tops(base, draws, alone, reference, limits, base_nf)
    if together is None:
        return cases
    trial = _spread_trial(base, draws, together)
    changed = tuple(together)
    return [AdversarialCase("large", "magnitudes spread over the decades: " + _describe_spread(trial, changed, draws),
                            trial, rescaled=True, changed=changed, spread=True)] + cases


def _tiny(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
          lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
          ) -> AdversarialCase | None:
    current = max(_max_abs(base[n]) for n in names) or 1.0
    smallest = max(float_format(base[n].dtype).smallest_normal for n in names)
    factor = smallest * 2.0**6 / current
    factors = []
    for _ in range(40):
        if factor >= 1.0:
            break
        factors.append(factor)
        factor *= 2.0**4
    low = lows if op not in ("softmax", "norm") else None
    found = _first_accepted(reference, factors, lambda f: _scaled(base, names, f),
                            lambda trial: _ref_ok(reference, trial, limits, base_nf, low))
    if found is None:
        return None
    factor, trial = found
    first = names[0]
    fmt = float_format(trial[first].dtype)
    vals = _f64(trial[first]).copy()
    pick = rng.random(vals.shape) < 0.125
    n_sub = int(pick.sum())
    if n_sub and fmt.smallest_subnormal < fmt.smallest_normal:
        steps = rng.integers(1, max(2, int(fmt.smallest_normal / fmt.smallest_subnormal)), size=n_sub)
        signs = rng.choice([-1.0, 1.0], size=n_sub)
        vals[pick] = signs * steps * fmt.smallest_subnormal
        trial[first] = _cast(vals, trial[first])
    if not _ref_ok(reference, trial, limits, base_nf):
        return None
    return AdversarialCase(
        "tiny",
        f"{', '.join(names)} scaled by {factor:.3g}; {n_sub} entries of {first} set to subnormal values",
        trial,
        rescaled=True,
        changed=tuple(names),
    )


def _rows(a: np.ndarray) -> np.ndarray:
    f = _f64(a)
    return f.reshape(-1, f.shape[-1]) if f.ndim >= 1 else f.reshape(1, 1)


def _equal(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
           lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
           ) -> AdversarialCase | None:
    first = names[0]
    rows = _rows(base[first])
    row_values = rows[np.arange(rows.shape[0]), rng.integers(0, rows.shape[1], size=rows.shape[0])]
    if op == "attention":
        values = np.zeros_like(rows)  # q = 0: every score equal, attention is the mean of v
        desc = f"{first} set to zero: every score equal"
    else:
        values = np.repeat(row_values[:, None], rows.shape[1], axis=1)
        desc = f"every row of {first} holds one repeated value"
    trial = dict(base)
    trial[first] = _cast(values.reshape(base[first].shape), base[first])
    if not _ref_ok(reference, trial, limits, base_nf):
        return None
    return AdversarialCase("equal", desc, trial, rescaled=False, changed=(first,))


def _mask(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
          lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
          ) -> AdversarialCase | None:
    first = names[0]
    if not float_format(base[first].dtype).has_inf:
        return None
    rows = _rows(base[first]).copy()
    n_rows, n_cols = rows.shape
    if n_cols < 2:
        return None
    # A causal-style mask: row r keeps its first 1 + (r mod n_cols) entries.
    keep = 1 + (np.arange(n_rows) % n_cols)
    masked = np.arange(n_cols)[None, :] >= keep[:, None]
    rows[masked] = -np.inf
    trial = dict(base)
    trial[first] = _cast(rows.reshape(base[first].shape), base[first])
    if not _ref_ok(reference, trial, limits, base_nf, allow_inf=True):
        return None
    return AdversarialCase(
        "mask", f"{int(masked.sum())} entries of {first} set to -inf (causal pattern, every row keeps one)",
        trial, rescaled=False, changed=(first,),
    )


def _nonfinite(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
               lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
               ) -> AdversarialCase | None:
    """NaN, +inf and -inf in every float input, each at places of its own (1 in 512 entries, at least
    one of each): an element where only the second operand is NaN is tested as well as the first."""
    trial = dict(base)
    parts = []
    for name in float_inputs(base):
        fmt = float_format(base[name].dtype)
        vals = _f64(base[name]).copy().ravel()
        if vals.size < 3:
            continue
        specials = [np.nan, np.inf, -np.inf] if fmt.has_inf else [np.nan]
        count = max(len(specials), vals.size // 512)
        where = rng.choice(vals.size, size=count, replace=False)
        vals[where] = np.array(specials * (count // len(specials) + 1))[:count]
        trial[name] = _cast(vals.reshape(base[name].shape), base[name])
        parts.append(f"{count} entries of {name}")
    if not parts:
        return None
    try:
        with np.errstate(all="ignore"):
            reference(dict(trial))
    except Exception:  # noqa: BLE001
        return None
    specials_text = "nan, inf, -inf" if all(float_format(base[n].dtype).has_inf for n in float_inputs(base)) else "nan (and inf where the dtype has it)"
    return AdversarialCase(
        "nonfinite", f"{', '.join(parts)} set to {specials_text}, each input at places of its own",
        trial, rescaled=False, changed=tuple(n for n in float_inputs(base) if n in trial and trial[n] is not base[n]),
    )


def _half_slices(shape: tuple[int, ...], axis: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    n = shape[axis] // 2
    lo = [slice(None)] * len(shape)
    hi = [slice(None)] * len(shape)
    lo[axis] = slice(0, n)
    hi[axis] = slice(n, 2 * n)
    return tuple(lo), tuple(hi)


def _cancellation(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
                  lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
                  ) -> AdversarialCase | None:
    """Second half of the reduction axis cancels the first: x2 = -x1, y2 = y1*(1+1e-3*noise)."""
    try:
        with np.errstate(all="ignore"):
            base_out = {n: _f64(v) for n, v in reference(dict(base)).items()}
    except Exception:  # noqa: BLE001
        return None
    base_rms = {n: float(np.sqrt(np.nanmean(v[np.isfinite(v)] ** 2))) if np.isfinite(v).any() else 0.0
                for n, v in base_out.items()}
    first = names[0]
    others = names[1:]
    shape = base[first].shape
    candidates = [ax for ax in range(len(shape)) if shape[ax] >= 2 and (k is None or shape[ax] == k)]
    if not candidates:
        candidates = [len(shape) - 1] if shape else []
    for ax in reversed(candidates):
        trial = dict(base)
        lo, hi = _half_slices(shape, ax)
        x = _f64(base[first]).copy()
        if others:
            x[hi] = -x[lo]
        else:
            x[hi] = -x[lo] * (1.0 + 1e-3 * rng.standard_normal(x[lo].shape))
        trial[first] = _cast(x, base[first])
        ok = True
        for other in others:
            oshape = base[other].shape
            oaxes = [a for a in range(len(oshape)) if oshape[a] == shape[ax]]
            if not oaxes:
                ok = False
                break
            oax = oaxes[0]
            olo, ohi = _half_slices(oshape, oax)
            y = _f64(base[other]).copy()
            y[ohi] = y[olo] * (1.0 + 1e-3 * rng.standard_normal(y[olo].shape))
            trial[other] = _cast(y, base[other])
        if not ok or not _ref_ok(reference, trial, limits, base_nf):
            continue
        with np.errstate(all="ignore"):
            outs = {n: _f64(v) for n, v in reference(dict(trial)).items()}
        shrink = [
            float(np.sqrt(np.mean(v[np.isfinite(v)] ** 2))) / base_rms[n]
            for n, v in outs.items() if base_rms.get(n) and np.isfinite(v).any()
        ]
        if shrink and max(shrink) < 0.1:
            return AdversarialCase(
                "cancellation",
                f"second half of axis {ax} of {first} negates the first"
                + (f"; {', '.join(others)} repeats its first half to 1e-3" if others else " (to 1e-3)")
                + f": outputs shrink to {max(shrink):.2g} of their usual size",
                trial,
                rescaled=False,
                changed=tuple(names),
            )
    return None


def _offset(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
            lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
            ) -> AdversarialCase | None:
    first = names[0]
    x = _f64(base[first])
    std = float(np.std(x[np.isfinite(x)])) or 1.0
    offset = 256.0 * std
    trial = dict(base)
    trial[first] = _cast(x + offset, base[first])
    if not _ref_ok(reference, trial, limits, base_nf):
        return None
    return AdversarialCase(
        "offset", f"{offset:.3g} (256 standard deviations) added to every entry of {first}",
        trial, rescaled=False, changed=(first,),
    )


def _float_inputs(base: Inputs) -> list[str]:
    return [n for n, v in base.items() if _is_float(v) and v.size >= 2]


# (m, domain): small integers in [-m, m]; the next variants keep products and powers bounded (m = 1), or
# stay in a function's domain: "non-negative" (sqrt, a variance), "positive" (log, a divisor: no zeros)
STRUCTURED_VARIANTS: tuple[tuple[int, str], ...] = ((4, "signed"), (1, "signed"), (4, "non-negative"), (4, "positive"))


def _structured_values(base: Inputs, floats: list[str], m: int, domain: str, rng: np.random.Generator,
                       ) -> tuple[Inputs, str]:
    """Exact values where random data has none: in every float input, about 30% exact zeros (half of
    them -0.0), 25% small integers in [-m, m], 10% half-integers (ties when rounded to an integer;
    exact in every float format down to fp8 for |v| <= m + 0.5), 10% one repeated value, 5% odd
    multiples of half an ULP at 1 (1 + u and 1 + 3u are ties in the input's format), the rest kept; and where two float inputs share a shape, the second is the negated first on a quarter of
    the elements (a + b == 0, a == -b). `domain` "non-negative" takes |v| (zeros stay +0 and -0, no
    negation), "positive" also puts 1.0 where the zeros were."""
    signed = domain == "signed"
    trial = dict(base)
    for name in floats:
        x = _f64(base[name]).copy()
        u = rng.random(x.shape)
        zero = u < 0.30
        x[zero] = np.where(rng.random(int(zero.sum())) < 0.5, 0.0, -0.0)
        ints = (u >= 0.30) & (u < 0.55)
        x[ints] = rng.integers(-m, m + 1, size=int(ints.sum()))
        halves = (u >= 0.55) & (u < 0.65)
        x[halves] = rng.integers(-m, m, size=int(halves.sum())) + 0.5
        repeat = (u >= 0.65) & (u < 0.75)
        finite = x[np.isfinite(x) & ~zero & ~ints & ~halves & ~repeat]
        x[repeat] = float(finite[0]) if finite.size else 1.0
        # odd multiples of half an ULP at 1 in the input's own format: 1 + that is a tie, which the
        # format's round-to-nearest-even must send to the even neighbour (with the integers beside it)
        ties = (u >= 0.75) & (u < 0.80)
        half_ulp = float_format(base[name].dtype).unit_roundoff
        x[ties] = rng.choice(np.array([-3.0, -1.0, 1.0, 3.0]), size=int(ties.sum())) * half_ulp
        if not signed:
            x = np.where(zero, x, np.abs(x))
            if domain == "positive":
                x[x == 0] = 1.0
        trial[name] = _cast(x, base[name])
    negated = []
    for i, first in enumerate(floats if signed else []):
        for second in floats[i + 1:]:
            if base[second].shape == base[first].shape and second not in negated and first not in negated:
                pick = rng.random(base[first].shape) < 0.25
                y = _f64(trial[second]).copy()
                y[pick] = -_f64(trial[first])[pick]
                trial[second] = _cast(y, base[second])
                negated.append(second)
                negated.append(first)
                break
    pairs = ", ".join(f"{negated[j + 1]} = -{negated[j]}" for j in range(0, len(negated), 2))
    zeros = "1.0 in place of zeros" if domain == "positive" else "30% exact zeros (half -0.0)"
    ints_desc = f"small integers in [-{m}, {m}]" if signed else f"small integers in [0, {m}]"
    desc = (f"{', '.join(floats)}: {zeros}, {ints_desc}, half-integers, a repeated value, half-ULP ties"
            + (f"; {pairs} on 25% of the elements" if pairs else ""))
    return trial, desc


def _structured(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
                lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
                ) -> AdversarialCase | None:
    """Exact structured values (red team 10A): random normal data never holds an exact 0, -0, an integer,
    a tie, a repeated value or b == -a, and a kernel wrong only there (`c += (a == 0)`) passed every
    seed and trial. Real data is full of them (ReLU outputs, padding, masks, quantised values). The
    first variant whose reference outputs are finite (and representable) is the case."""
    floats = _float_inputs(base)
    if not floats:
        return None
    draw = np.random.default_rng(rng.integers(2**32))
    for m, domain in STRUCTURED_VARIANTS:
        trial, desc = _structured_values(base, floats, m, domain, np.random.default_rng(draw.integers(2**32)))
        if _ref_ok(reference, trial, limits, base_nf):
            return AdversarialCase("structured", desc, trial, rescaled=True, changed=tuple(floats))
    return None


LOW_VARIANCE_DECADES = 7.0  # row spreads from the seed's down to 1e-7 of it: below sqrt(eps) for any usual eps


def _low_variance(base: Inputs, names: list[str], reference: ReferenceFn, op: str | None, limits: dict[str, float],
                  lows: dict[str, float], base_nf: dict[str, np.ndarray], k: int | None, rng: np.random.Generator,
                  ) -> AdversarialCase | None:
    """Rows whose spread falls through sqrt(eps), where eps decides a norm's output (red team 10A: a
    layernorm with eps*eps passed; the seeds' rows never come near eps). Row r is shrunk by
    10^(-7 r / rows), in one of four ways by r mod 4: 0, one repeated value (an element of the row,
    shrunk: zero variance, the norm's "equal" rows); 2, the row as a whole (x*s: small rms, for
    RMSNorm); 1 and 3, about its own mean (mean + (x - mean)*s: small variance on an offset, for
    LayerNorm). One case for both, so a norm pays for one launch, not two."""
    first = names[0]
    rows = _rows(base[first])
    n_rows = rows.shape[0]
    if n_rows < 2 or rows.shape[1] < 2:
        return None
    finite = np.where(np.isfinite(rows), rows, 0.0)
    scale = (10.0 ** (-LOW_VARIANCE_DECADES * np.arange(n_rows) / max(1, n_rows - 1)))[:, None]
    mean = finite.mean(axis=1, keepdims=True)
    kind = (np.arange(n_rows) % 4)[:, None]
    picked = finite[np.arange(n_rows), rng.integers(0, rows.shape[1], size=n_rows)][:, None]
    shrunk = np.where(kind == 0, np.broadcast_to(picked * scale, finite.shape),
                      np.where(kind == 2, finite * scale, mean + (finite - mean) * scale))
    trial = dict(base)
    trial[first] = _cast(shrunk.reshape(base[first].shape), base[first])
    if not _ref_ok(reference, trial, limits, base_nf):
        return None
    return AdversarialCase(
        "low-variance",
        f"rows of {first} shrunk by 1 down to 1e-{LOW_VARIANCE_DECADES:g}: one in four a repeated value, one in four "
        "as a whole, the others about their mean",
        trial, rescaled=False, changed=(first,),
    )


Builder = Callable[[Inputs, list[str], ReferenceFn, "str | None", dict[str, float], dict[str, float],
                    dict[str, np.ndarray], "int | None", np.random.Generator], "AdversarialCase | None"]
_BUILDERS: dict[str, Builder] = {
    "tiny": _tiny,
    "equal": _equal,
    "mask": _mask,
    "nonfinite": _nonfinite,
    "cancellation": _cancellation,
    "offset": _offset,
    "structured": _structured,
    "low-variance": _low_variance,
}


def output_dtype_names(outputs: Iterable[Any]) -> dict[str, str]:
    """{name: dtype} from output specs (anything with .name and .dtype)."""
    return {o.name: format_name(o.dtype) for o in outputs}
