"""Roofline point, a task's speed of light, and the minimal work of common operations.

The speed of light is the time no kernel can beat on the target: the largest of
* compute:  TensorE FLOPs / peak FLOP/s for the matmul dtype (2 x PE x clock, [NX-SCHEMA]);
* vector:   element operations / aggregate Vector+Scalar+GpSimd rate (128 lanes each, one element
            per lane per cycle, best documented performance mode for 16-bit data, spec §6.1/§7.1);
* memory:   minimal HBM bytes / min(16 DMA engines x per-engine bandwidth, per-core HBM bandwidth).
Each engine class can overlap the others, so the maximum (not the sum) is the lower bound. It is
known before any run from the task's shapes and dtypes (`minimal_work`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from nkitui.perf.hardware import TargetSpec, dtype_class, get_target, itemsize

Shape = tuple[int, ...]
TensorSpec = tuple[Shape, str]  # (shape, dtype name)


@dataclass
class Work:
    """The least work a task's operation needs, from its shapes and dtypes."""

    flops: float  # TensorE FLOPs (2 per multiply-add)
    hbm_bytes: float  # read every input once, write every output once
    vector_ops: float = 0.0  # element operations on Vector/Scalar/GpSimd
    dtype: str = "bfloat16"  # matmul input dtype (sets the compute peak)
    kind: str = "custom"
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Work":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass
class SpeedOfLight:
    target: str
    compute_s: float
    vector_s: float
    memory_s: float
    bound_s: float  # max of the three
    bound: str  # "compute" | "vector" | "memory"
    work: Work
    achieved_percent: float | None = None  # bound_s / actual time x 100, once a time is known
    time_s: float | None = None  # the (estimated or measured) time it was compared with
    assumptions: list[str] = field(default_factory=list)

    def against(self, time_s: float) -> "SpeedOfLight":
        """A copy that reports how close `time_s` comes to the bound."""
        pct = 100.0 * self.bound_s / time_s if time_s > 0 else None
        return SpeedOfLight(self.target, self.compute_s, self.vector_s, self.memory_s, self.bound_s,
                            self.bound, self.work, pct, time_s, list(self.assumptions))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["work"] = self.work.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SpeedOfLight":
        d = dict(d)
        d["work"] = Work.from_json(d["work"])
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _vector_rate(spec: TargetSpec, dtype: str) -> float:
    """Best-case elements/s over Vector+Scalar+GpSimd for data of `dtype`."""
    lanes = spec.partitions
    narrow = dtype_class(dtype) in ("bf16", "fp8")
    v = spec.clock_hz["vector"] * (4.0 if (narrow and spec.vector_perf_mode) else 1.0)
    s = spec.clock_hz["scalar"] * (2.0 if (narrow and spec.scalar_16bit_2x) else 1.0)
    g = spec.clock_hz["gpsimd"] * (2.0 if narrow else 1.0)
    return lanes * (v + s + g)


def speed_of_light(flops: float, hbm_bytes: float, dtype: str = "bfloat16", target: str | TargetSpec = "trn2",
                   vector_ops: float = 0.0, *, kind: str = "custom", description: str = "") -> SpeedOfLight:
    """Compute-, vector- and bandwidth-bound lower bounds (seconds) for the given work on `target`."""
    if flops < 0 or hbm_bytes < 0 or vector_ops < 0:
        raise ValueError("speed_of_light: flops, hbm_bytes and vector_ops must be >= 0")
    spec = get_target(target)
    work = Work(float(flops), float(hbm_bytes), float(vector_ops), dtype, kind, description)
    return _sol(work, spec)


def speed_of_light_for(work: Work, target: str | TargetSpec) -> SpeedOfLight:
    return _sol(work, get_target(target))


def _sol(work: Work, spec: TargetSpec) -> SpeedOfLight:
    compute = work.flops / spec.peak_flops(work.dtype) if work.flops else 0.0
    vector = work.vector_ops / _vector_rate(spec, work.dtype) if work.vector_ops else 0.0
    memory = work.hbm_bytes / spec.memory_bytes_per_s if work.hbm_bytes else 0.0
    bound, name = max((compute, "compute"), (vector, "vector"), (memory, "memory"))
    assumptions = [
        f"TensorE peak {spec.peak_flops(work.dtype) / 1e12:.2f} TFLOP/s for {work.dtype} (2 x 128 x 128 x "
        f"{spec.clock_hz['tensor'] / 1e9:.2f} GHz)",
        f"HBM<->SBUF {spec.memory_bytes_per_s / 1e9:.0f} GB/s = min(16 DMA engines x "
        f"{spec.dma_engine_bytes_per_s / 1e9:.0f} GB/s, HBM {spec.hbm_core_bytes_per_s / 1e9:.0f} GB/s per core)",
        f"Vector+Scalar+GpSimd {_vector_rate(spec, work.dtype) / 1e9:.0f} G elements/s (best documented modes)",
    ]
    return SpeedOfLight(spec.name, compute, vector, memory, bound, name, work, assumptions=assumptions)


@dataclass
class RooflinePoint:
    target: str
    dtype: str
    arithmetic_intensity: float  # FLOP per HBM byte
    ridge: float  # peak / per-core HBM bandwidth (the L-MM "222 FLOP/B" convention)
    ridge_dma: float  # peak / min(DMA engines, HBM): where the DMA ceiling meets compute
    peak_flops_per_s: float
    memory_bytes_per_s: float
    attainable_flops_per_s: float  # min(peak, AI x memory bandwidth)
    achieved_flops_per_s: float
    achieved_percent_of_attainable: float
    bound: str  # "memory" | "compute"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RooflinePoint":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def roofline_point(flops: float, hbm_bytes: float, time_s: float, dtype: str = "bfloat16",
                   target: str | TargetSpec = "trn2") -> RooflinePoint | None:
    """Where a run sits on the target's roofline; None when it moved no HBM bytes or took no time."""
    spec = get_target(target)
    if hbm_bytes <= 0 or time_s <= 0:
        return None
    peak = spec.peak_flops(dtype)
    bw = spec.memory_bytes_per_s
    ai = flops / hbm_bytes
    attainable = min(peak, ai * bw)
    achieved = flops / time_s
    pct = 100.0 * achieved / attainable if attainable > 0 else 0.0
    return RooflinePoint(spec.name, dtype, ai, spec.ridge(dtype), spec.ridge_dma(dtype), peak, bw, attainable,
                         achieved, pct, "memory" if ai < spec.ridge_dma(dtype) else "compute")


# ---------------------------------------------------------------- minimal work of a task

def _nbytes(t: TensorSpec) -> int:
    shape, dtype = t
    return math.prod(shape) * itemsize(dtype)


def _elements(t: TensorSpec) -> int:
    return math.prod(t[0])


# Minimal Vector/Scalar/GpSimd passes over every element with the fused ISA forms (inferred from
# §10: activation does f(x*s+b) plus a free-axis sum in one pass, tensor_scalar two ALU ops in one).
VECTOR_PASSES = {
    "elementwise": 1,
    "reduction": 1,
    "softmax": 3,  # max reduce, exp with fused sum, scale
    "layernorm": 3,  # bn_stats, normalise (tensor_scalar), affine
    "rmsnorm": 3,  # square + sum (activation_reduce), scale, gamma
}


def minimal_work(kind: str, inputs: list[TensorSpec], outputs: list[TensorSpec], **params: Any) -> Work:
    """Least FLOPs, element operations and HBM bytes for an operation of `kind`.

    kinds: "matmul" (inputs A[M,K], B[K,N]; `lhs_transposed=True` if A is given as [K,M]),
    "batched_matmul" (A[...,M,K], B[...,K,N]), "attention" (Q[...,S,D], K[...,Sk,D], V[...,Sk,Dv];
    `causal=True` halves the score work), "elementwise" (`ops_per_element`, default 1), "reduction",
    "softmax", "layernorm", "rmsnorm", "copy"/"transpose" (bytes only), "custom" (`flops=`,
    `vector_ops=` given). Bytes always count every input read once and every output written once.
    """
    if not inputs and not outputs:
        raise ValueError("minimal_work: give at least one input or output (shape, dtype)")
    hbm = float(sum(_nbytes(t) for t in inputs) + sum(_nbytes(t) for t in outputs))
    dtype = str(params.get("dtype") or (inputs[0][1] if inputs else outputs[0][1]))
    k = kind.lower()
    if k in ("matmul", "batched_matmul"):
        if len(inputs) < 2:
            raise ValueError(f"minimal_work({kind!r}): needs two inputs A and B")
        (a_shape, _), (b_shape, _) = inputs[0], inputs[1]
        if len(a_shape) < 2 or len(b_shape) < 2:
            raise ValueError(f"minimal_work({kind!r}): inputs must be at least 2-D, got {a_shape} and {b_shape}")
        if params.get("lhs_transposed"):
            kk, m = a_shape[-2], a_shape[-1]
        else:
            m, kk = a_shape[-2], a_shape[-1]
        kb, nn = b_shape[-2], b_shape[-1]
        if kk != kb:
            raise ValueError(f"minimal_work({kind!r}): contraction sizes differ: A gives K={kk}, B gives K={kb}")
        batch = math.prod(a_shape[:-2]) if len(a_shape) > 2 else 1
        flops = 2.0 * batch * m * kk * nn
        desc = f"{'batched ' if batch > 1 else ''}matmul M={m} K={kk} N={nn}" + (f" x{batch}" if batch > 1 else "")
        return Work(flops, hbm, 0.0, dtype, k, desc)
    if k == "attention":
        if len(inputs) < 3:
            raise ValueError("minimal_work('attention'): needs inputs Q, K, V")
        q, kt, v = (inputs[0][0], inputs[1][0], inputs[2][0])
        s, d = q[-2], q[-1]
        sk, dv = kt[-2], v[-1]
        heads = math.prod(q[:-2]) if len(q) > 2 else 1
        frac = 0.5 if params.get("causal") else 1.0
        flops = frac * 2.0 * heads * s * sk * (d + dv)
        vector_ops = frac * heads * s * sk * VECTOR_PASSES["softmax"]
        return Work(flops, hbm, vector_ops, dtype, k,
                    f"attention S={s} Sk={sk} D={d} Dv={dv} x{heads}{' causal' if params.get('causal') else ''}")
    if k in VECTOR_PASSES:
        elems = max(_elements(t) for t in (*inputs, *outputs))  # the largest tensor sets the passes
        passes = float(params.get("ops_per_element", VECTOR_PASSES[k]))
        return Work(0.0, hbm, passes * elems, dtype, k, f"{k} over {elems} elements")
    if k in ("copy", "transpose"):
        return Work(0.0, hbm, 0.0, dtype, k, f"{k} of {hbm:.0f} bytes")
    if k == "custom":
        return Work(float(params.get("flops", 0.0)), hbm, float(params.get("vector_ops", 0.0)), dtype, k,
                    str(params.get("description", "")))
    known = ", ".join(["matmul", "batched_matmul", "attention", *VECTOR_PASSES, "copy", "transpose", "custom"])
    raise ValueError(f"minimal_work: unknown kind {kind!r}; use one of {known}")
