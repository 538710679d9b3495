"""GPU goldens: outputs recorded from the CUDA kernel, compared with the port and the reference.

A goldens file (`.npz`) holds `in.<input>` (the exact inputs the CUDA kernel ran on, natural
layout) and `out.<output>` (what it produced). The port and the reference run on those inputs, and
the three results are compared pairwise under the task's own tolerance:

  verdict             port~ref  port~gpu  gpu~ref   meaning
  agree                 yes        -        yes     all three tell the same story
  gpu-diverges          yes        -        no      the GPU result is off the reference (TF32, fp16
                                                    accumulation, fast-math, a different input)
  reference-diverges    no        yes       no      port and GPU agree, the reference does not model
                                                    what the CUDA kernel computes
  port-diverges         no         -        yes     the port is wrong where the GPU is right
  all-differ            no        no        no      nothing agrees

When the GPU is off the reference, the size of the gap is matched against what a narrower
dtype would give (TF32 operands, fp16/bf16 accumulation or output) and the closest cause named.
"""

from __future__ import annotations

import math
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from nkitui.common.codec import Record

from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.advisor import reduction_length_for
from nkitui.evaluate.numerics.fpformat import format_name, is_float_format, round_to, unit_roundoff
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.precision import closest_hypothesis
from nkitui.evaluate.numerics.callables import KernelRunner, ReferenceFn, RunOptions, describe_exception
from nkitui.evaluate.numerics.tolerance import check_policy, rel_l2_error

GoldenVerdict = Literal["agree", "gpu-diverges", "reference-diverges", "port-diverges", "all-differ"]
GPU_DTYPES = ("tfloat32", "float16", "bfloat16")


class GoldenFormatError(ValueError):
    """The goldens file does not match the task; the message names the file, the array and the fix."""


@dataclass(frozen=True)
class Goldens:
    path: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]


def load_goldens(path: str | Path, input_specs: Sequence[Any], output_specs: Sequence[Any], *,
                 shown_as: str | None = None) -> Goldens:
    """Read `in.<name>` / `out.<name>` arrays, checked against the task's tensors and cast to their dtypes.

    Raises GoldenFormatError for a missing array, a wrong shape, or input values that are not
    representable in the declared dtype (the goldens were recorded from other inputs). Messages
    name the file as `shown_as` (e.g. its task-relative path; the worker reads a scratch copy).
    """
    p = Path(path)
    shown = shown_as or str(p)
    try:
        with open(p, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise GoldenFormatError(f"{shown}: cannot read the goldens file ({exc.strerror or exc})") from exc
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):  # numpy would try it as a pickle and say so
        raise GoldenFormatError(f"{shown}: not a numpy .npz archive (not a zip file); "
                                "save the recorded arrays with numpy.savez(path, **{'in.x': ..., 'out.y': ...})")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise GoldenFormatError(f"{shown}: holds object (pickled) arrays, which nkitui does not load; "
                                    "save plain numeric arrays") from exc
        raise GoldenFormatError(f"{shown}: cannot read the goldens file ({exc}); it must be a numpy .npz archive") from exc
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise GoldenFormatError(f"{shown}: cannot read the goldens file ({exc}); it must be a numpy .npz archive") from exc
    problems: list[str] = []
    inputs: dict[str, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    for spec in input_specs:
        arr = _declared_array(shown, arrays, "in", spec, f"record the exact input `{spec.name}` the CUDA kernel ran on",
                              problems)
        if arr is None:
            continue
        key, name = f"in.{spec.name}", format_name(spec.dtype)
        cast = _cast(arr, name)
        if is_float_format(name) and not np.array_equal(
            cast.astype(np.float64), arr.astype(np.float64), equal_nan=True
        ):
            problems.append(
                f"{shown}: {key} holds values that are not {name} values; store the inputs exactly as the kernel saw them"
            )
            continue
        inputs[spec.name] = cast
    for spec in output_specs:
        arr = _declared_array(shown, arrays, "out", spec, f"record output `{spec.name}` of the CUDA kernel", problems)
        if arr is not None:
            outputs[spec.name] = arr
    if problems:
        raise GoldenFormatError("; ".join(problems))
    return Goldens(str(p), inputs, outputs)


def _declared_array(p: str, arrays: dict[str, np.ndarray], side: str, spec: Any, missing_hint: str,
                    problems: list[str]) -> np.ndarray | None:
    """The array `<side>.<name>` with the shape `spec` declares (raw void bytes restored to its dtype),
    or None after appending the problem to `problems`."""
    key = f"{side}.{spec.name}"
    if key not in arrays:
        problems.append(f"{p}: array {key!r} missing; {missing_hint}")
        return None
    arr = _restore_void(arrays[key], format_name(spec.dtype))
    if tuple(arr.shape) != tuple(spec.shape):
        problems.append(f"{p}: {key} has shape {list(arr.shape)}, the task declares {list(spec.shape)}")
        return None
    if arr.dtype.type is np.void:
        problems.append(f"{p}: {key} has raw dtype {arr.dtype}; save it as float32 or as {spec.dtype}")
        return None
    return arr


def _restore_void(arr: np.ndarray, dtype_name: str) -> np.ndarray:
    """np.savez stores bf16/fp8 arrays as raw bytes (|V2, |V1): view them as the declared dtype again."""
    from nkitui.evaluate.numerics.fpformat import storage_dtype

    if arr.dtype.type is np.void:
        target = storage_dtype(dtype_name)
        if target.itemsize == arr.dtype.itemsize:
            return arr.view(target)
    return arr


def _cast(arr: np.ndarray, dtype_name: str) -> np.ndarray:
    from nkitui.evaluate.numerics.fpformat import storage_dtype

    target = storage_dtype(dtype_name)
    if arr.dtype == target:
        return arr
    if is_float_format(dtype_name):
        return round_to(arr.astype(np.float64), dtype_name).astype(target)
    return arr.astype(target)


@dataclass(frozen=True)
class Pair(Record):
    rel_l2: float
    max_abs: float
    passed: bool  # the task's tolerance, second one as the reference


@dataclass(frozen=True)
class GoldenOutput(Record):
    name: str
    port_vs_reference: Pair
    port_vs_gpu: Pair
    gpu_vs_reference: Pair
    verdict: GoldenVerdict
    explanation: str


@dataclass(frozen=True)
class GoldenReport(Record):
    path: str
    outputs: tuple[GoldenOutput, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    error: str | None = None


def _pair(a: np.ndarray, b: np.ndarray, spec: Any) -> Pair:
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    both = np.isfinite(a64) & np.isfinite(b64)
    max_abs = float(np.abs(a64[both] - b64[both]).max()) if both.any() else 0.0
    return Pair(rel_l2_error(a64, b64), max_abs, check_policy(a64, b64, spec.tolerance, spec.dtype).passed)


def classify(pr: Pair, pg: Pair, gr: Pair) -> GoldenVerdict:
    if pr.passed and gr.passed:
        return "agree"
    if pr.passed:
        return "gpu-diverges"
    if gr.passed:
        return "port-diverges"
    if pg.passed:
        return "reference-diverges"
    return "all-differ"


def _gpu_cause(rel: float, k: int, op: str | None, input_dtype: str | None = None) -> str:
    if rel >= 0.1:
        return (" A gap this large is not rounding: the goldens were probably recorded from other inputs, another "
                "version of the kernel, or with a different layout.")
    h = closest_hypothesis(rel, k, op, GPU_DTYPES, input_dtype=input_dtype)
    if h is None:
        return ""
    cause = h.cause.replace("the operands", "the operands (on the GPU)")
    hint = ""
    if "tfloat32" in h.cause:
        hint = " TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32, cuBLAS TF32 math) are the usual cause."
    elif "float16" in h.cause or "bfloat16" in h.cause:
        hint = " Half-precision accumulation or storage in the CUDA kernel is the usual cause."
    return f" The gap is about what {cause} gives (predicted {g(h.predicted_rel_l2)}).{hint}"


def explain(name: str, verdict: GoldenVerdict, pr: Pair, pg: Pair, gr: Pair, k: int, op: str | None,
            input_dtype: str | None = None) -> str:
    nums = (f"relative L2: port vs reference {g(pr.rel_l2)}, port vs GPU {g(pg.rel_l2)}, "
            f"GPU vs reference {g(gr.rel_l2)}")
    if verdict == "agree":
        return f"Output `{name}`: the port, the reference and the recorded GPU output agree ({nums})."
    if verdict == "gpu-diverges":
        return (f"Output `{name}`: the port matches the reference, but the recorded GPU output does not ({nums})."
                + _gpu_cause(gr.rel_l2, k, op, input_dtype)
                + " The port is not at fault; the task's tolerance would reject the CUDA kernel's own result.")
    if verdict == "reference-diverges":
        return (f"Output `{name}`: the port agrees with the recorded GPU output, but neither matches the reference "
                f"({nums}). The reference does not compute what the CUDA kernel computes (an approximation, "
                "a different epsilon or precision); the port follows the CUDA kernel, so fix the reference or the "
                "tolerance.")
    if verdict == "port-diverges":
        ratio = pr.rel_l2 / gr.rel_l2 if gr.rel_l2 > 0 else math.inf
        return (f"Output `{name}`: the recorded GPU output matches the reference but the port does not ({nums}); "
                f"the port's error is {g(ratio)}x the GPU's. The port is wrong where the CUDA kernel is right.")
    return (f"Output `{name}`: the port, the reference and the recorded GPU output all disagree ({nums}). "
            "Check that the goldens come from these inputs, then compare the port with the CUDA kernel directly.")


def compare_goldens(
    runner: KernelRunner,
    reference: ReferenceFn,
    goldens: Goldens,
    outputs: Sequence[Any],
    op: str | None = None,
) -> GoldenReport:
    """Run the port and the reference on the golden inputs and compare all three."""
    try:
        with np.errstate(all="ignore"):
            ref = reference(dict(goldens.inputs))
            port = runner(dict(goldens.inputs), RunOptions(precise=True, label="GPU goldens"))
    except Exception as exc:  # noqa: BLE001
        return GoldenReport(goldens.path, error=describe_exception(exc))
    results: list[GoldenOutput] = []
    findings: list[Finding] = []
    for spec in outputs:
        if spec.name not in goldens.outputs:
            continue
        gpu = goldens.outputs[spec.name]
        if spec.name not in port or spec.name not in ref:
            return GoldenReport(goldens.path, tuple(results), tuple(findings),
                                error=f"output {spec.name!r} missing from the port's or the reference's results")
        p, r = np.asarray(port[spec.name]), np.asarray(ref[spec.name])
        if p.shape != gpu.shape or r.shape != gpu.shape:
            return GoldenReport(goldens.path, tuple(results), tuple(findings),
                                error=f"output {spec.name!r}: shapes port {p.shape}, reference {r.shape}, GPU {gpu.shape}")
        pr, pg, gr = _pair(p, r, spec), _pair(p, gpu, spec), _pair(gpu, r, spec)
        verdict = classify(pr, pg, gr)
        k, _ = reduction_length_for(spec, goldens.inputs, op)
        in_dtypes = [format_name(v.dtype) for v in goldens.inputs.values() if is_float_format(v.dtype)]
        input_dtype = max(in_dtypes, key=unit_roundoff) if in_dtypes else None
        text = explain(spec.name, verdict, pr, pg, gr, k, op, input_dtype)
        results.append(GoldenOutput(spec.name, pr, pg, gr, verdict, text))
        if verdict != "agree":
            findings.append(
                numerics_finding(
                    rules.GOLDEN_DIVERGES,
                    "high" if verdict in ("port-diverges", "all-differ") else "medium",
                    f"`{spec.name}`: port, reference and GPU goldens disagree ({verdict})",
                    text,
                    {"output": spec.name, "verdict": verdict, "port_vs_reference": pr.to_dict(),
                     "port_vs_gpu": pg.to_dict(), "gpu_vs_reference": gr.to_dict()},
                )
            )
    return GoldenReport(goldens.path, tuple(results), tuple(findings))


def golden_error_finding(error: str, file: str | None = None) -> Finding:
    return numerics_finding(
        rules.GOLDEN_INVALID,
        "medium",
        "The GPU goldens file does not match the task",
        f"The GPU goldens could not be used: {error}",
        {"error": error},
        file=file,
    )
