"""The task model: what a `task.toml` manifest (or discovery) describes.

A task is a folder (usually its own git repository) holding a CUDA kernel, its NKI port, a numpy
reference and a test policy. See docs/task-format.md for the manifest format.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nkitui.common.names import TARGET_NAMES

Namespace = Literal["legacy", "new"]
Target = Literal["trn1", "trn2", "trn3"]
ToleranceKind = Literal["allclose", "range_relative", "rel_l2", "ulp", "exact"]

TARGETS: tuple[str, ...] = TARGET_NAMES  # the vocabulary's (common/names.py)
TOLERANCE_KINDS: tuple[str, ...] = ("allclose", "range_relative", "rel_l2", "ulp", "exact")
INIT_DISTRIBUTIONS: tuple[str, ...] = ("normal", "uniform", "randint", "ones", "zeros", "arange", "constant")
OP_KINDS: tuple[str, ...] = (
    "elementwise", "reduction", "softmax", "norm", "matmul", "attention", "transpose", "scan", "other",
)
DEFAULT_RUBRIC = "nki-port-audit"
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)


@dataclass(frozen=True)
class Tolerance:
    """How one output is compared with the reference.

    allclose:        |a-b| <= atol + rtol*|ref|        element-wise (numpy.allclose)
    range_relative:  |a-b| <= atol + rtol*max|ref|     (nki-library's maxAllClose)
    rel_l2:          ||a-b||_2 <= tol*||ref||_2
    ulp:             ULP distance in the output dtype <= max_ulp
    exact:           bitwise equal values (NaN equal to NaN)
    """

    kind: ToleranceKind = "allclose"
    atol: float = 1e-5
    rtol: float = 1e-5
    tol: float = 0.0
    max_ulp: int = 0

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind in ("allclose", "range_relative"):
            d.update(atol=self.atol, rtol=self.rtol)
        elif self.kind == "rel_l2":
            d["tol"] = self.tol
        elif self.kind == "ulp":
            d["max_ulp"] = self.max_ulp
        return d

    def describe(self) -> str:
        if self.kind in ("allclose", "range_relative"):
            return f"{self.kind} atol={self.atol:g} rtol={self.rtol:g}"
        if self.kind == "rel_l2":
            return f"rel_l2 tol={self.tol:g}"
        if self.kind == "ulp":
            return f"ulp max_ulp={self.max_ulp}"
        return "exact"


@dataclass(frozen=True)
class InitSpec:
    """How an input is filled: a distribution and its parameters."""

    dist: str = "normal"
    params: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"dist": self.dist, **self.params}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    init: InitSpec = field(default_factory=InitSpec)
    # Layout the kernel sees: None (as the reference), "transpose" (last two axes swapped), or an
    # axis permutation. The reference always works in the natural layout.
    layout: tuple[int, ...] | None = None
    tolerance: Tolerance | None = None  # outputs only
    reduction_length: int | None = None  # outputs only: K of the accumulation behind each element

    @property
    def kernel_shape(self) -> tuple[int, ...]:
        if self.layout is None:
            return self.shape
        return tuple(self.shape[axis] for axis in self.layout)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class KernelEntry:
    path: Path  # absolute path to the NKI source file
    name: str  # kernel function name
    namespace: Namespace | None  # detected from imports (or declared)
    grid: tuple[int, ...] | None = None  # legacy SPMD launch grid
    lnc: int | None = None  # new-namespace logical-core count
    outputs_mode: Literal["return", "arguments"] = "return"
    kwargs: dict[str, Any] = field(default_factory=dict)
    # The port is what the auditor judges, so a port that does not parse still opens (its source shown,
    # the error a finding at its line); runs of it fail. (message, line, column) of Python's error.
    syntax_error: tuple[str, int | None, int | None] | None = None

    @property
    def spec(self) -> str:
        return f"{self.path.name}::{self.name}"


@dataclass(frozen=True)
class FunctionRef:
    path: Path
    name: str

    @property
    def spec(self) -> str:
        return f"{self.path.name}::{self.name}"


@dataclass(frozen=True)
class Sources:
    nki: Path | None
    cuda: Path | None = None
    reference: FunctionRef | None = None
    baseline: Path | None = None


@dataclass(frozen=True)
class Task:
    root: Path
    id: str
    title: str
    target: Target
    sources: Sources
    kernel: KernelEntry | None
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    goldens: Path | None = None
    rubric: str = DEFAULT_RUBRIC
    prompt: Path | None = None
    op: str | None = None
    timeout_s: float | None = None
    manifest: Path | None = None  # None when the task was discovered
    guesses: tuple[str, ...] = ()  # what discovery guessed, in words
    warnings: tuple[Any, ...] = ()  # non-fatal Problems

    @property
    def discovered(self) -> bool:
        return self.manifest is None

    @property
    def runnable(self) -> bool:
        """True when the task declares enough to run and compare (kernel, reference, tensors)."""
        return (
            self.kernel is not None
            and self.sources.reference is not None
            and bool(self.inputs)
            and bool(self.outputs)
        )

    def rel(self, path: Path | None) -> str | None:
        """`path` relative to the task root, as shown to auditors."""
        if path is None:
            return None
        try:
            return path.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def judged_files(self) -> list[Path]:
        """Files an auditor's verdict depends on (their hashes go into review records)."""
        files: list[Path] = []
        for p in (
            self.manifest, self.prompt, self.sources.cuda, self.sources.nki,
            self.sources.reference.path if self.sources.reference else None, self.sources.baseline,
            self.goldens,
        ):
            if p is not None and p.is_file() and p not in files:
                files.append(p)
        return files

    def file_hashes(self) -> dict[str, str]:
        """sha256 of every judged file, keyed by task-relative path."""
        out: dict[str, str] = {}
        for p in self.judged_files():
            out[self.rel(p) or str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        return out
