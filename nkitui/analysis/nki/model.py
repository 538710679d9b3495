"""The NKI side of a port, as read from its source with Python's `ast` (never executed).

`nkitui.analysis.build_nki_model(source, path, context)` (implemented by `nki.walker.build`) returns
an `NkiModel`: the file's namespace and import aliases, and for each kernel its parameters, tensors
(HBM, SBUF, PSUM tiles with shape, dtype and buffer), loops (kind and trip count), and operations
(DMA, matmul, element-wise, ...) with the engine that runs them and the loops they sit in. Rules and
the CUDA alignment read this model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DimAccess:
    """How one dimension of a tensor is indexed."""

    kind: str  # "int" | "slice" | "full" | "grid" | "indirect" | "unknown"
    extent: int | None  # elements taken along this dim (1 for an integer index), None if unknown
    deps: frozenset[str] = frozenset()  # symbols (loop variables ...) the index depends on
    grid_axis: str | None = None  # for legacy grids: "p" or "f"
    bounded: bool = False  # the extent is computed with min(): a partial-tile guard
    text: str = ""
    start: Any = field(default=None, compare=False)  # int | Lin | Unk: first index taken
    grid: str | None = None  # legacy grid id, to match `mask=` bounds
    extent_parts: tuple[Any, ...] = field(default=(), compare=False)  # min(...) candidates of a bounded extent
    guard_line: int | None = None  # line of the min(...) that bounds the extent


@dataclass(frozen=True)
class Access:
    """A region of a tensor used by an operation: `t[...]` or the whole tensor."""

    tensor: int
    dims: tuple[DimAccess, ...]
    text: str
    whole: bool
    partitions: int | None  # rows that land on partitions (None: unknown)
    free: int | None  # elements per partition (None: unknown)
    part_dim: int | None  # tensor dimension that supplies the partitions
    transposed: bool = False  # legacy grid access whose partition grid indexes a later dim

    @property
    def deps(self) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for d in self.dims:
            out |= d.deps
        return out

    @property
    def elements(self) -> int | None:
        if self.partitions is None or self.free is None:
            return None
        return self.partitions * self.free

    @property
    def bounded(self) -> bool:
        return any(d.bounded for d in self.dims)


@dataclass
class Tensor:
    id: int
    name: str | None
    buffer: str  # "hbm" | "shared_hbm" | "sbuf" | "psum" | "unknown"
    shape: tuple[Any, ...] | None  # ints where known; Lin/Unk otherwise; None when the rank is unknown
    dtype: str | None
    line: int
    origin: str  # "param" | "alloc" | "load" | "op" | "view"
    api: str | None = None
    loop: int | None = None  # innermost loop the tensor was created in
    param: str | None = None  # kernel parameter this tensor is (or views)
    typed: bool = False  # shape/dtype come from the task manifest (a parameter known to be a tensor)
    alias_of: int | None = None  # reshape/view of another tensor
    matmul: bool = False  # holds a matmul result or a copy of one
    init: str | None = None  # "zeros" | "ones" | "full" | None
    origin_dims: tuple[frozenset[str], ...] | None = None  # index symbols per dim of the HBM region loaded
    source_dtype: str | None = None  # dtype of the data it was loaded/copied from
    pdim: int = 0  # which dimension is the partition dimension (legacy nl.par_dim)

    @property
    def on_chip(self) -> bool:
        return self.buffer in ("sbuf", "psum")

    @property
    def is_hbm(self) -> bool:
        return self.buffer in ("hbm", "shared_hbm")

    def known_shape(self) -> tuple[int | None, ...] | None:
        if self.shape is None:
            return None
        return tuple(s if isinstance(s, int) and not isinstance(s, bool) else None for s in self.shape)

    @property
    def partitions(self) -> int | None:
        shape = self.known_shape()
        if not shape or self.pdim >= len(shape):
            return None
        return shape[self.pdim]

    @property
    def free(self) -> int | None:
        shape = self.known_shape()
        if not shape:
            return None
        n = 1
        for i, s in enumerate(shape):
            if i == self.pdim:
                continue
            if s is None:
                return None
            n *= s
        return n

    def label(self) -> str:
        if self.name:
            return self.name
        what = self.api.rsplit(".", 1)[-1] if self.api else "tensor"
        return f"<{what} result, line {self.line}>"


@dataclass
class Loop:
    id: int
    api: str  # "nl.affine_range", "range", ...
    kind: str  # "affine" | "sequential" | "static" | "range" | "dynamic" | "iter" | "while"
    var: str | None
    sym: str | None  # symbol of the loop variable inside index expressions
    line: int
    end_line: int
    trip: int | None
    stop_text: str
    parent: int | None
    depth: int
    division: str | None = None  # "ceil" | "floor" | "ceil-suspect" when the trip count divides a size
    div_numerator: Any = None  # int | Lin | Unk: what is divided
    div_numerator_text: str = ""
    div_denominator: int | None = None
    start: Any = 0
    step: Any = 1
    rebinds: list[str] = field(default_factory=list)  # names carried across iterations by rebinding
    # `for src in (a, b)`: tensors (root ids) the loop's items put in the body's place, one per iteration
    picks: set[int] = field(default_factory=set)

    @property
    def parallel(self) -> bool:
        return self.kind == "affine"


@dataclass
class Op:
    id: int
    api: str  # canonical: "nl.load", "nisa.nc_matmul", "operator.add", "assign", "augassign", ...
    kind: str  # see nki.api.ApiInfo.kind, plus "assign" and "accumulate"
    engine: str | None
    line: int
    end_line: int
    loops: tuple[int, ...]  # enclosing loops, outermost first
    reads: list[Access] = field(default_factory=list)
    writes: list[Access] = field(default_factory=list)
    result: int | None = None  # tensor created by a return-style call
    inputs: list[int] = field(default_factory=list)  # tensor ids of data operands, in call order
    scalars: list[Any] = field(default_factory=list)  # non-tensor operands (numbers, symbols)
    kwargs: dict[str, str] = field(default_factory=dict)  # keyword argument source text
    mask: Any = None  # legacy mask= (a Mask value) or None
    dtype: str | None = None  # requested output dtype (dtype=)
    accumulate: bool = False  # this op adds into its destination (+=, accumulate=True, PSUM matmul)
    alu: str | None = None  # ALU op for element-wise/tensor_scalar/accumulate ("add", "multiply", ...)
    fn: str | None = None  # activation function name ("exp", ...)
    text: str = ""
    func: str = ""  # function whose body holds the call (kernel or inlined helper)

    def all_writes(self) -> list[int]:
        out = [a.tensor for a in self.writes]
        if self.result is not None:
            out.append(self.result)
        return out


@dataclass(frozen=True)
class Param:
    name: str
    line: int
    tid: int | None  # tensor id when the parameter is (or is used as) a tensor
    has_default: bool
    role: str | None = None  # "input" | "output" | "kwarg" from the task manifest; None when unknown


@dataclass(frozen=True)
class HostCall:
    """A call into numpy / torch / jax / scipy (host libraries) inside a kernel."""

    api: str
    line: int
    tensor_args: list[int]
    text: str


@dataclass(frozen=True)
class StateUse:
    """Module-level state a kernel writes (a cache) or files it reads."""

    kind: str  # "global" | "container-write" | "container-read" | "file-read" | "attribute" | "attribute-read"
    # | "module-state" (attributes set on module-level objects, setattr/globals()/vars())
    name: str
    line: int
    text: str


@dataclass
class KernelModel:
    name: str
    line: int
    end_line: int
    decorators: list[str]
    decorated: bool
    params: list[Param] = field(default_factory=list)
    tensors: dict[int, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    loops: dict[int, Loop] = field(default_factory=dict)
    returns: list[tuple[int, list[int]]] = field(default_factory=list)
    host_calls: list[HostCall] = field(default_factory=list)
    state: list[StateUse] = field(default_factory=list)
    asserts: list[tuple[int, str, frozenset[str]]] = field(default_factory=list)
    data_branches: list[tuple[int, str]] = field(default_factory=list)  # (line, test) of if/while on tile data
    escaped: set[int] = field(default_factory=set)  # tensors handed to calls the analysis cannot follow
    helpers: list[str] = field(default_factory=list)
    spmd_lines: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    symbols: dict[str, int] = field(default_factory=dict)  # loop-variable symbol -> loop id
    scalar_params: set[str] = field(default_factory=set)  # parameters used as numbers, not tensors
    tensor_params: set[str] = field(default_factory=set)  # parameters used as tensors (indexed, .shape, ...)
    shape_symbols: dict[str, tuple[int, int]] = field(default_factory=dict)  # "x.shape[0]" -> (tid, dim)

    # -- navigation ------------------------------------------------------------------------------
    def tensor(self, tid: int) -> Tensor:
        return self.tensors[tid]

    def root(self, tid: int) -> Tensor:
        """Follow reshape/view aliases to the tensor that owns the storage."""
        t = self.tensors[tid]
        seen = {tid}
        while t.alias_of is not None and t.alias_of not in seen:
            seen.add(t.alias_of)
            t = self.tensors[t.alias_of]
        return t

    def loops_of(self, deps: frozenset[str]) -> set[int]:
        return {self.symbols[s] for s in deps if s in self.symbols}

    def ops_in_loop(self, loop_id: int) -> list[Op]:
        return [op for op in self.ops if loop_id in op.loops]

    def readers(self, tid: int) -> list[Op]:
        return [op for op in self.ops if tid in op.inputs or any(a.tensor == tid for a in op.reads)]

    def producer(self, tid: int) -> Op | None:
        for op in self.ops:
            if op.result == tid:
                return op
        return None

    @property
    def device_ops(self) -> list[Op]:
        return [op for op in self.ops if op.engine is not None]

    def summary(self) -> dict[str, Any]:
        engines: dict[str, int] = {}
        for op in self.device_ops:
            engines[op.engine or "?"] = engines.get(op.engine or "?", 0) + 1
        return {
            "name": self.name,
            "line": self.line,
            "end_line": self.end_line,
            "params": [{"name": p.name, "line": p.line, "role": p.role} for p in self.params],
            "tiles": [
                {
                    "name": t.label(), "line": t.line, "buffer": t.buffer, "dtype": t.dtype,
                    "shape": list(t.known_shape() or []), "partitions": t.partitions,
                }
                for t in self.tensors.values()
                if t.on_chip and t.origin != "view"
            ],
            "loops": [
                {"line": lp.line, "end_line": lp.end_line, "kind": lp.kind, "api": lp.api, "var": lp.var,
                 "trip": lp.trip, "depth": lp.depth}
                for lp in self.loops.values()
            ],
            "operations": len(self.device_ops),
            "engines": engines,
            "ops": [{"line": op.line, "api": op.api, "kind": op.kind, "engine": op.engine}
                    for op in self.device_ops],
            "matmuls": sum(1 for op in self.ops if op.kind == "matmul"),
            "dma": sum(1 for op in self.ops if op.engine == "dma"),
        }


@dataclass
class NkiModel:
    path: str  # relative to the task root, as shown to auditors
    namespace: str | None  # "legacy" | "new" | "mixed" | None
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted module path
    import_lines: list[tuple[int, str]] = field(default_factory=list)
    kernels: list[KernelModel] = field(default_factory=list)
    functions: dict[str, tuple[int, int]] = field(default_factory=dict)
    module_containers: dict[str, int] = field(default_factory=dict)  # module-level mutable containers
    cache_decorators: list[tuple[str, int, str]] = field(default_factory=list)  # (function, line, decorator)
    container_writes: list[tuple[str, str, int]] = field(default_factory=list)  # (function, container, line)
    syntax_error: tuple[str, int | None] | None = None
    syntax_error_column: int | None = None  # 1-based, where Python reports one
    line_count: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "namespace": self.namespace,
            "kernels": [k.summary() for k in self.kernels],
            "syntax_error": list(self.syntax_error) if self.syntax_error else None,
        }
