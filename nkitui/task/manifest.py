"""Read and validate a task.toml manifest.

Validation never stops at the first problem: every problem is collected with the file, the
field and a fix, and a TaskError carrying all of them is raised at the end.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from nkitui.common.fields import FieldReader, Table
from nkitui.common.names import DEFAULT_TARGET, one_of
from nkitui.task.dtypes import DTYPE_NAMES, canonical_dtype_name, is_float
from nkitui.task.model import (
    Namespace,
    DEFAULT_RUBRIC,
    DEFAULT_SEEDS,
    INIT_DISTRIBUTIONS,
    OP_KINDS,
    TARGETS,
    TOLERANCE_KINDS,
    FunctionRef,
    InitSpec,
    KernelEntry,
    Sources,
    Task,
    TensorSpec,
    Tolerance,
)
from nkitui.task.problems import Problem, TaskError
from nkitui.task.pysource import inspect_source

MANIFEST_NAME = "task.toml"
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOP_KEYS = {"schema", "id", "title", "prompt", "target", "rubric", "op", "sources", "kernel", "inputs",
             "outputs", "evaluation"}
_INIT_PARAMS = {
    "normal": {"mean", "std"},
    "uniform": {"low", "high"},
    "randint": {"low", "high"},
    "ones": set(),
    "zeros": set(),
    "arange": {"start", "step"},
    "constant": {"value"},
}
_MAX_ELEMENTS = 1 << 31  # refuse absurd shapes before anything allocates them
# Caps on what a manifest may ask of a run: each seed is a whole run of the kernel and the reference,
# each grid program a sequential launch on the emulator, and the timeout bounds a worker's life.
MAX_SEEDS = 1000
MAX_SEED_VALUE = 2**63 - 1
MAX_TIMEOUT_S = 86_400.0
MAX_GRID_DIMS = 3
MAX_GRID_DIM = 4096
MAX_GRID_PROGRAMS = 65_536
MAX_TENSORS = 256
MAX_MANIFEST_BYTES = 1 << 20
# Value ranges of the element types, for randint bounds (high is exclusive, as in numpy).
_INT_RANGE = {"int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
              "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1), "bool": (0, 1)}
_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38,
              "float8_e4m3": 240.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def load_manifest(path: Path) -> Task:
    """Parse and validate `path` (a task.toml). Raises TaskError listing every problem."""
    reader = _ManifestReader(path)
    task = reader.read()
    errors = [p for p in reader.problems if p.severity == "error"]
    if errors or task is None:
        raise TaskError(reader.problems)
    return task


class _ManifestReader(FieldReader):
    def __init__(self, path: Path):
        self.path = path.resolve()
        self.root = self.path.parent
        super().__init__(path.name if path.parent == Path(".") else str(path), "docs/task-format.md")

    def float_(self, table: Table, key: str, field: str, **checks: Any) -> float | None:
        """A number as the task model holds it: a float (`atol = 0` is 0.0 in every result)."""
        value = self.number(table, key, field, **checks)
        return None if value is None else float(value)

    def resolve_file(self, rel: str, field: str, *, must_exist: bool = True) -> Path | None:
        candidate = (self.root / rel).resolve()
        try:
            candidate.relative_to(self.root)
        except ValueError:
            self.error(field, f"path {rel!r} points outside the task folder", "keep every task file inside the task folder")
            return None
        if must_exist and not candidate.is_file():
            self.error(field, f"file {rel!r} does not exist in {self.root}", f"create {rel} or correct the path")
            return None
        return candidate

    # -- the manifest ----------------------------------------------------------------------------
    def read(self) -> Task | None:
        try:
            size = self.path.stat().st_size
            if size > MAX_MANIFEST_BYTES:
                self.error("", f"the manifest is {size:,} bytes; a task.toml is a few kilobytes",
                           f"keep data out of task.toml (at most {MAX_MANIFEST_BYTES >> 10} KB); put arrays in an .npz "
                           "(evaluation.goldens) and describe inputs with [[inputs]] init tables")
                return None
            raw = self.path.read_bytes()
        except OSError as exc:
            self.error("", f"cannot read the manifest: {exc.strerror or exc}", "check the path and permissions")
            return None
        doc = self.parse_bytes(raw)
        if doc is None:
            return None

        self.unknown_keys(doc, _TOP_KEYS, "")
        schema = self.int_(doc, "schema", "schema", minimum=1)
        if schema is not None and schema > 1:
            self.error("schema", f"schema {schema} is newer than this nkitui understands (1)", "upgrade nkitui or write schema = 1")
        task_id = self.str_(doc, "id", "id", required=True, example='"rmsnorm"', strip=True)
        if task_id is not None and not _ID_RE.match(task_id):
            self.error("id", f"id {task_id!r} has characters other than letters, digits, '_', '.', '-'", 'use e.g. id = "rmsnorm-bf16"')
        title = self.str_(doc, "title", "title", required=True, example='"RMSNorm over rows"', strip=True)
        target = self.choice(doc, "target", "target", TARGETS) or DEFAULT_TARGET
        rubric = self.str_(doc, "rubric", "rubric", example=f'"{DEFAULT_RUBRIC}"', strip=True) or DEFAULT_RUBRIC
        if rubric.endswith(".toml"):
            self.resolve_file(rubric, "rubric")
        op = self.str_(doc, "op", "op", example='"softmax"', strip=True)
        if op is not None and op not in OP_KINDS:
            self.error("op", f"unknown op kind {op!r}", f"use one of {', '.join(OP_KINDS)}")
        prompt_rel = self.str_(doc, "prompt", "prompt", example='"PROMPT.md"', strip=True)
        prompt = self.resolve_file(prompt_rel, "prompt") if prompt_rel else None

        sources = self.read_sources(doc)
        kernel = self.read_kernel(doc, sources)
        inputs = self.read_tensors(doc, "inputs", is_output=False)
        outputs = self.read_tensors(doc, "outputs", is_output=True)
        seeds, goldens, timeout = self.read_evaluation(doc)
        if kernel is not None and inputs is not None:
            self.check_kernel_signature(kernel, inputs, outputs or [])
        if inputs is not None and outputs is not None:
            self.check_reduction_lengths(inputs, outputs)

        self.check_contents()
        if sources is None or inputs is None or outputs is None or kernel is None:
            return None
        return Task(
            root=self.root, id=task_id or "", title=title or "", target=target,  # type: ignore[arg-type]  # a name of TARGETS (choice() above), the Target literal
            sources=sources, kernel=kernel, inputs=tuple(inputs), outputs=tuple(outputs),
            seeds=tuple(seeds), goldens=goldens, rubric=rubric, prompt=prompt, op=op, timeout_s=timeout,
            manifest=self.path, warnings=tuple(p for p in self.problems if p.severity == "warning"),
        )

    def check_reduction_lengths(self, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        """A declared K larger than the largest input's element count: no output element can sum that many
        terms, and the numerics would allow sqrt(K) times the accumulation error (evaluate/numerics/kbound.py
        holds K to this bound, and to the kernel's instruction trace, when it checks the kernel)."""
        if not inputs:
            return
        largest = max(inputs, key=lambda t: t.size)
        for i, spec in enumerate(outputs):
            k = spec.reduction_length
            if k is not None and k > largest.size:
                self.warn(f"outputs[{i}].reduction_length",
                          f"output {spec.name!r} declares reduction_length = {k}, more terms than the largest input, "
                          f"{largest.name!r} {list(largest.shape)}, holds ({largest.size}): no element can sum that many, "
                          "and the numerics checks would allow about sqrt(K) times the accumulation error it really makes "
                          f"(nkitui judges with K <= {largest.size})",
                          "set reduction_length to the length of the sum behind one output element, or remove it "
                          "to let nkitui infer it from the shapes")

    def check_contents(self) -> None:
        """Links out of the task, to folders or to devices, and non-regular files (task/contents.py)."""
        from nkitui.task.contents import scan

        self.problems.extend(scan(self.root, display=os.path.dirname(self.display) or ".")[1])

    def read_sources(self, doc: Table) -> Sources | None:
        table = self.table(doc, "sources", "sources", required=True)
        if table is None:
            return None
        self.unknown_keys(table, {"cuda", "nki", "reference", "baseline"}, "sources.")
        nki_rel = self.str_(table, "nki", "sources.nki", required=True, example='"kernel_nki.py"', strip=True)
        nki = self.resolve_file(nki_rel, "sources.nki") if nki_rel else None
        cuda_rel = self.str_(table, "cuda", "sources.cuda", example='"kernel.cu"', strip=True)
        cuda = self.resolve_file(cuda_rel, "sources.cuda") if cuda_rel else None
        baseline_rel = self.str_(table, "baseline", "sources.baseline", example='"baseline_nki.py"', strip=True)
        baseline = self.resolve_file(baseline_rel, "sources.baseline") if baseline_rel else None
        ref_spec = self.str_(table, "reference", "sources.reference", required=True, example='"reference.py::rmsnorm"', strip=True)
        reference = self.resolve_function(ref_spec, "sources.reference") if ref_spec else None
        if nki_rel and nki is None or ref_spec and reference is None:
            return None
        return Sources(nki=nki, cuda=cuda, reference=reference, baseline=baseline)

    def resolve_function(self, spec: str, field: str, *, port: bool = False) -> FunctionRef | None:
        """The function `spec` names. With `port` (the NKI kernel), a file that does not parse is
        accepted: the port is what gets reviewed; its syntax error is a finding and a failed run."""
        if "::" not in spec:
            self.error(field, f"{spec!r} does not name a function", 'write "file.py::function_name"')
            return None
        rel, _, name = spec.rpartition("::")
        if not _IDENT_RE.match(name):
            self.error(field, f"{name!r} is not a Python function name", 'write "file.py::function_name"')
            return None
        path = self.resolve_file(rel, field)
        if path is None:
            return None
        info = inspect_source(path)
        if info.syntax_error and port and info.syntax_error_line is not None:
            return FunctionRef(path=path, name=name)
        if info.syntax_error:
            # the line is in the source file, so the problem names that file (beside the manifest), not task.toml
            source = str(Path(self.display).parent / rel) if Path(self.display).parent != Path(".") else rel
            self.problems.append(Problem(source, field, f"does not parse: {info.syntax_error}",
                                         f"fix the syntax error in {rel} (named by {self.display} [{field}])",
                                         "error", info.syntax_error_line))
            return None
        if name not in info.functions:
            have = ", ".join(sorted(info.functions)) or "none"
            self.error(field, f"{rel} defines no top-level function {name!r} (it defines: {have})", "correct the function name")
            return None
        return FunctionRef(path=path, name=name)

    def read_kernel(self, doc: Table, sources: Sources | None) -> KernelEntry | None:
        table = self.table(doc, "kernel", "kernel", required=True)
        if table is None:
            return None
        self.unknown_keys(table, {"entry", "namespace", "grid", "lnc", "outputs", "kwargs"}, "kernel.")
        entry = self.str_(table, "entry", "kernel.entry", required=True, example='"kernel_nki.py::my_kernel"', strip=True)
        ref = self.resolve_function(entry, "kernel.entry", port=True) if entry else None
        if ref is None:
            return None
        info = inspect_source(ref.path)
        syntax_error = None
        if info.syntax_error:
            syntax_error = (info.syntax_error, info.syntax_error_line, info.syntax_error_column)
            where = f"line {info.syntax_error_line}" + (f", column {info.syntax_error_column}"
                                                         if info.syntax_error_column else "")
            self.warn("kernel.entry", f"{ref.path.name} does not parse: {info.syntax_error} ({where}); the port "
                      "can be read and reviewed, but every run of it fails",
                      f"fix the syntax error at {ref.path.name}:{info.syntax_error_line}")
        detected = info.namespace
        declared = self.str_(table, "namespace", "kernel.namespace", example='"legacy"', strip=True)
        if declared is not None and declared not in ("legacy", "new"):
            self.error("kernel.namespace", f"unknown namespace {declared!r}", 'use "legacy" (neuronxcc.nki) or "new" (nki)')
            declared = None
        if detected == "mixed":
            self.error(
                "kernel.entry",
                f"{ref.path.name} imports both neuronxcc.nki (line {info.legacy_import_lines[0]}) and nki (line {info.new_import_lines[0]})",
                "one kernel file must use a single NKI namespace",
            )
            return None
        if detected is None:
            self.warn("kernel.entry", f"{ref.path.name} imports neither neuronxcc.nki nor nki", "import the NKI namespace the kernel is written for")
        if declared and detected and declared != detected:
            self.error("kernel.namespace", f"declared {declared!r} but {ref.path.name} imports the {detected} namespace", f'write namespace = "{detected}" or drop the field')
        chosen = declared or detected
        namespace: Namespace | None = "legacy" if chosen == "legacy" else "new" if chosen == "new" else None
        if sources is not None and sources.nki is not None and ref.path != sources.nki:
            self.warn("kernel.entry", f"the kernel lives in {ref.path.name}, not in sources.nki ({sources.nki.name})", "point sources.nki at the file holding the kernel")

        grid = None
        if "grid" in table:
            raw = table["grid"]
            if isinstance(raw, int) and not isinstance(raw, bool):
                raw = [raw]
            if not isinstance(raw, list) or not raw or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in raw):
                self.error("kernel.grid", f"expected a list of positive integers, got {raw!r:.60}", "write e.g. grid = [2, 4]")
            elif len(raw) > MAX_GRID_DIMS or max(raw) > MAX_GRID_DIM or math.prod(raw) > MAX_GRID_PROGRAMS:
                self.error("kernel.grid", f"grid {raw!r:.60} launches {math.prod(raw):,} programs; at most "
                           f"{MAX_GRID_DIMS} dimensions of at most {MAX_GRID_DIM} and {MAX_GRID_PROGRAMS:,} programs in all "
                           "are accepted (each program runs in turn on the emulator)", "use a smaller grid, e.g. grid = [2, 4]")
            else:
                grid = tuple(raw)
        lnc = self.int_(table, "lnc", "kernel.lnc", minimum=1)
        if lnc is not None and lnc not in (1, 2):
            self.error("kernel.lnc", f"logical-core count must be 1 or 2, got {lnc}", "write lnc = 1 or lnc = 2")
            lnc = None
        if grid is not None and lnc is not None:
            self.error("kernel", "both grid and lnc are given", "use grid for legacy SPMD launches or lnc for new-namespace logical cores, not both")
        if lnc is not None and namespace == "legacy":
            self.warn("kernel.lnc", "lnc is a new-namespace launch; legacy kernels use grid", "use grid = [...] for a legacy kernel")
        outputs_mode = self.str_(table, "outputs", "kernel.outputs", example='"return"', strip=True) or "return"
        if outputs_mode not in ("return", "arguments"):
            self.error("kernel.outputs", f"unknown outputs mode {outputs_mode!r}", 'use "return" (the kernel returns its outputs) or "arguments" (outputs are passed in after the inputs)')
            outputs_mode = "return"
        kwargs = self.table(table, "kwargs", "kernel.kwargs") or {}
        if ref.name not in info.kernels and syntax_error is None:
            self.warn("kernel.entry", f"{ref.name} in {ref.path.name} has no @nki.jit-style decorator", "decorate the kernel with @nki.jit")
        return KernelEntry(path=ref.path, name=ref.name, namespace=namespace, grid=grid, lnc=lnc,
                           outputs_mode="arguments" if outputs_mode == "arguments" else "return", kwargs=dict(kwargs),
                           syntax_error=syntax_error)

    def read_tensors(self, doc: Table, key: str, *, is_output: bool) -> list[TensorSpec] | None:
        if key not in doc:
            self.error(key, f"no [[{key}]] declared", f"add at least one [[{key}]] table with name, shape and dtype")
            return None
        raw = doc[key]
        if not isinstance(raw, list) or not raw:
            self.error(key, f"expected an array of tables [[{key}]], got {type(raw).__name__}", f"write [[{key}]] tables")
            return None
        if len(raw) > MAX_TENSORS:
            self.error(key, f"{len(raw):,} [[{key}]] tables; at most {MAX_TENSORS} are accepted",
                       f"declare only the kernel's own {key}")
            return None
        specs: list[TensorSpec] = []
        names: set[str] = set()
        ok = True
        for i, item in enumerate(raw):
            field = f"{key}[{i}]"
            if not isinstance(item, dict):
                self._type_error(field, "a table", item, f"[[{key}]] name = \"x\" ...")
                ok = False
                continue
            spec = self.read_tensor(item, field, is_output=is_output)
            if spec is None:
                ok = False
                continue
            if spec.name in names:
                self.error(f"{field}.name", f"name {spec.name!r} is used twice", "give every tensor a unique name")
                ok = False
            names.add(spec.name)
            specs.append(spec)
        return specs if ok else None

    def read_tensor(self, item: Table, field: str, *, is_output: bool) -> TensorSpec | None:
        known = {"name", "shape", "dtype", "layout"} | ({"tolerance", "reduction_length"} if is_output else {"init"})
        self.unknown_keys(item, known, f"{field}.")
        ok = True
        name = self.str_(item, "name", f"{field}.name", required=True, example='"x"', strip=True)
        if name is not None and not _IDENT_RE.match(name):
            self.error(f"{field}.name", f"{name!r} is not a valid Python identifier", "use letters, digits and '_'")
            ok = False
        shape = self.read_shape(item, f"{field}.shape")
        dtype_raw = self.str_(item, "dtype", f"{field}.dtype", required=True, example='"float32"', strip=True)
        dtype = canonical_dtype_name(dtype_raw) if dtype_raw else None
        if dtype_raw and dtype is None:
            near = _closest(dtype_raw, set(DTYPE_NAMES))
            self.error(f"{field}.dtype", f"unknown dtype {dtype_raw!r}", f"use {near!r}" if near else one_of(DTYPE_NAMES))
        layout = self.read_layout(item, f"{field}.layout", shape)
        init = InitSpec()
        tolerance = None
        reduction_length = None
        if is_output:
            tolerance = self.read_tolerance(item, f"{field}.tolerance", dtype)
            reduction_length = self.int_(item, "reduction_length", f"{field}.reduction_length", minimum=1, example="128")
            if tolerance is None:
                ok = False
        else:
            init = self.read_init(item, f"{field}.init", dtype) or init
        if not ok or name is None or shape is None or dtype is None or layout is False:
            return None
        return TensorSpec(name=name, shape=shape, dtype=dtype, init=init, layout=layout or None,  # type: ignore[arg-type]  # layout is a tuple or None here (False returned above)
                          tolerance=tolerance, reduction_length=reduction_length)

    def read_shape(self, item: Table, field: str) -> tuple[int, ...] | None:
        if "shape" not in item:
            self.error(field, "required field is missing", "add shape = [128, 512]")
            return None
        raw = item["shape"]
        if not isinstance(raw, list) or not raw or not all(isinstance(d, int) and not isinstance(d, bool) for d in raw):
            self.error(field, f"expected a non-empty list of integers, got {raw!r:.60}", "write e.g. shape = [128, 512]")
            return None
        if any(d < 1 for d in raw):
            self.error(field, f"every dimension must be >= 1, got {raw}", "use positive sizes")
            return None
        if len(raw) > 8:
            self.error(field, f"{len(raw)} dimensions is more than NKI tensors use", "use at most 8 dimensions")
            return None
        if math.prod(raw) > _MAX_ELEMENTS:
            self.error(field, f"{math.prod(raw)} elements is too large to evaluate on a CPU", "use a smaller shape (at most 2**31 elements)")
            return None
        return tuple(raw)

    def read_layout(self, item: Table, field: str, shape: tuple[int, ...] | None) -> tuple[int, ...] | None | bool:
        if "layout" not in item:
            return None
        raw = item["layout"]
        rank = len(shape) if shape else None
        if raw in ("identity", "natural"):
            return None
        if raw == "transpose":
            if rank is not None and rank < 2:
                self.error(field, "transpose needs at least 2 dimensions", "drop the layout or give a 2-D shape")
                return False
            if rank is None:
                return False
            return tuple(range(rank - 2)) + (rank - 1, rank - 2)
        if isinstance(raw, list) and all(isinstance(a, int) and not isinstance(a, bool) for a in raw):
            if rank is not None and sorted(raw) != list(range(rank)):
                self.error(field, f"{raw} is not a permutation of the {rank} axes", f"list each axis 0..{rank - 1} once, e.g. {list(reversed(range(rank)))}")
                return False
            return tuple(raw)
        self.error(field, f"unknown layout {raw!r:.60}", 'use "transpose" or an axis permutation like [1, 0]')
        return False

    def read_init(self, item: Table, field: str, dtype: str | None) -> InitSpec | None:
        if "init" not in item:
            return None
        raw = item["init"]
        if isinstance(raw, str):
            raw = {"dist": raw}
        if not isinstance(raw, dict):
            self._type_error(field, "a table or a distribution name", raw, 'init = { dist = "normal", std = 1.0 }')
            return None
        dist = raw.get("dist", "normal")
        if dist not in INIT_DISTRIBUTIONS:
            self.error(f"{field}.dist", f"unknown distribution {dist!r}", f"use one of {', '.join(INIT_DISTRIBUTIONS)}")
            return None
        params: dict[str, float] = {}
        for key in raw:
            if key == "dist":
                continue
            if key not in _INIT_PARAMS[dist]:
                allowed = ", ".join(sorted(_INIT_PARAMS[dist])) or "none"
                self.error(f"{field}.{key}", f"{dist} takes no parameter {key!r}", f"parameters of {dist}: {allowed}")
                continue
            number = self.float_(raw, key, f"{field}.{key}")
            if number is not None:
                params[key] = number
        if dist == "uniform" and params.get("low", -1.0) >= params.get("high", 1.0):
            self.error(field, "uniform needs low < high", "e.g. init = { dist = \"uniform\", low = -1.0, high = 1.0 }")
        if dist == "randint" and params.get("low", 0.0) >= params.get("high", 10.0):
            self.error(field, "randint needs low < high", "e.g. init = { dist = \"randint\", low = 0, high = 10 }")
        elif dist == "randint":
            self.check_randint(field, params.get("low", 0.0), params.get("high", 10.0), dtype)
        if dist == "normal" and params.get("std", 1.0) < 0:
            self.error(f"{field}.std", "std must be >= 0", "use a non-negative std")
        return InitSpec(dist=dist, params=params)

    def check_randint(self, field: str, low: float, high: float, dtype: str | None) -> None:
        """randint bounds: whole numbers (high exclusive) that the input's element type can hold."""
        if not (low.is_integer() and high.is_integer()):
            self.error(field, f"randint bounds must be whole numbers, got low = {low:g}, high = {high:g}",
                       "e.g. init = { dist = \"randint\", low = 0, high = 10 }")
            return
        if low < -(2**63) or high > 2**63:
            self.error(field, f"randint bounds {low:g}..{high:g} are beyond 64-bit integers", "use bounds within +-2**63")
            return
        name = canonical_dtype_name(dtype) if dtype else None
        if name in _INT_RANGE:
            lo, hi = _INT_RANGE[name]
            if low < lo or high - 1 > hi:
                self.error(field, f"randint draws from {int(low)} to {int(high) - 1} (high is exclusive), but {name} "
                           f"holds only {lo}..{hi}", f"use low >= {lo} and high <= {hi + 1}, or a wider dtype")
        elif name in _FLOAT_MAX:
            top = _FLOAT_MAX[name]
            if max(abs(low), abs(high)) > top:
                self.error(field, f"randint bounds {int(low)}..{int(high)} exceed the largest finite {name} "
                           f"({top:g}): those values would become inf", f"keep the bounds within +-{top:g}")

    def read_tolerance(self, item: Table, field: str, dtype: str | None) -> Tolerance | None:
        if "tolerance" not in item:
            self.error(field, "every output needs a tolerance policy", 'add tolerance = { kind = "allclose", atol = 1e-5, rtol = 1e-5 }')
            return None
        raw = item["tolerance"]
        if not isinstance(raw, dict):
            self._type_error(field, "a table", raw, 'tolerance = { kind = "allclose", atol = 1e-5, rtol = 1e-5 }')
            return None
        kind = raw.get("kind")
        if kind not in TOLERANCE_KINDS:
            self.error(f"{field}.kind", f"unknown or missing tolerance kind {kind!r}", f"use one of {', '.join(TOLERANCE_KINDS)}")
            return None
        allowed = {"kind"} | {"allclose": {"atol", "rtol"}, "range_relative": {"atol", "rtol"}, "rel_l2": {"tol"},
                              "ulp": {"max_ulp"}, "exact": set()}[kind]
        for key in raw:
            if key not in allowed:
                self.error(f"{field}.{key}", f"{kind} tolerance takes no {key!r}", f"fields of {kind}: {', '.join(sorted(allowed - {'kind'})) or 'none'}")
        if kind in ("allclose", "range_relative"):
            atol = self.float_(raw, "atol", f"{field}.atol", minimum=0.0, example="1e-5")
            rtol = self.float_(raw, "rtol", f"{field}.rtol", minimum=0.0, example="1e-5")
            if "atol" not in raw and "rtol" not in raw:
                self.error(field, f"{kind} needs atol and/or rtol", f'write tolerance = {{ kind = "{kind}", atol = 1e-5, rtol = 1e-5 }}')
                return None
            return Tolerance(kind=kind, atol=atol if atol is not None else 0.0, rtol=rtol if rtol is not None else 0.0)
        if kind == "rel_l2":
            tol = self.float_(raw, "tol", f"{field}.tol", minimum=0.0, example="1e-5")
            if tol is None:
                self.error(f"{field}.tol", "rel_l2 needs tol", 'write tolerance = { kind = "rel_l2", tol = 2e-5 }')
                return None
            return Tolerance(kind="rel_l2", tol=tol)
        if kind == "ulp":
            if dtype is not None and not is_float(dtype):
                self.error(f"{field}.kind", f"ULP tolerance needs a floating-point output, not {dtype}", 'use kind = "exact" for integer outputs')
            max_ulp = self.int_(raw, "max_ulp", f"{field}.max_ulp", minimum=0)
            if max_ulp is None:
                self.error(f"{field}.max_ulp", "ulp needs max_ulp", 'write tolerance = { kind = "ulp", max_ulp = 2 }')
                return None
            return Tolerance(kind="ulp", max_ulp=max_ulp)
        return Tolerance(kind="exact")

    def read_evaluation(self, doc: Table) -> tuple[list[int], Path | None, float | None]:
        table = self.table(doc, "evaluation", "evaluation") or {}
        self.unknown_keys(table, {"seeds", "goldens", "timeout_s"}, "evaluation.")
        seeds = list(DEFAULT_SEEDS)
        if "seeds" in table:
            raw = table["seeds"]
            count = raw if isinstance(raw, int) and not isinstance(raw, bool) else len(raw) if isinstance(raw, list) else 0
            if count > MAX_SEEDS:
                self.error("evaluation.seeds", f"{count:,} seeds; each seed is a whole run of the kernel and the "
                           f"reference, and at most {MAX_SEEDS} are accepted", "use a few seeds (3-10 is usual)")
            elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
                seeds = list(range(raw))
            elif isinstance(raw, list) and raw and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED_VALUE
                                                       for s in raw):
                seeds = list(raw)
            else:
                self.error("evaluation.seeds", f"expected a list of non-negative integers (below 2**63) or a count, "
                           f"got {raw!r:.60}", "write e.g. seeds = [0, 1, 2]")
        goldens = None
        rel = self.str_(table, "goldens", "evaluation.goldens", example='"goldens.npz"', strip=True)
        if rel:
            goldens = self.resolve_file(rel, "evaluation.goldens")
            if goldens is not None and goldens.suffix != ".npz":
                self.error("evaluation.goldens", f"{rel} is not an .npz file", "record goldens with numpy.savez (see docs/task-format.md)")
        timeout = self.float_(table, "timeout_s", "evaluation.timeout_s", minimum=1.0)
        if timeout is not None and timeout > MAX_TIMEOUT_S:
            self.error("evaluation.timeout_s", f"{timeout:g} s is more than a day ({MAX_TIMEOUT_S:g} s), the longest a "
                       "run may take", f"use a timeout of at most {MAX_TIMEOUT_S:g} s (300 is usual)")
            timeout = None
        return seeds, goldens, timeout

    def check_kernel_signature(self, kernel: KernelEntry, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> None:
        info = inspect_source(kernel.path)
        params = info.parameters.get(kernel.name)
        if params is None:
            return
        expected = len(inputs) + (len(outputs) if kernel.outputs_mode == "arguments" else 0)
        positional = [p for p in params if p not in kernel.kwargs]
        if len(positional) != expected:
            what = "inputs" + (" and outputs" if kernel.outputs_mode == "arguments" else "")
            self.warn(
                "kernel.entry",
                f"{kernel.name} takes {len(positional)} positional parameter(s) ({', '.join(positional) or 'none'}) "
                f"but the manifest declares {expected} {what}",
                "make [[inputs]] (and [kernel.kwargs]) match the kernel's parameters, in order",
            )


def _closest(word: str, options: set[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(word, sorted(options), n=1, cutoff=0.6)
    return matches[0] if matches else None
