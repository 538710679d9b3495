"""The CUDA side of a port, parsed with tree-sitter-cuda (never compiled or run).

`build_cuda_model(source, path)` returns a `CudaModel`: each `__global__` kernel with its launch
bounds, parameters, thread/block index uses, `__shared__` buffers, barriers, warp shuffles,
atomics, loops with trip counts, global loads/stores, register accumulators, math intrinsics and
matrix products; plus `<<<...>>>` launch sites and `#define` constants. Line numbers are 1-based.
"""

from __future__ import annotations

import ast
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from nkitui.common import pyast

_INDEX_BUILTINS = {"threadIdx", "blockIdx", "blockDim", "gridDim"}
_SYNC_CALLS = {"__syncthreads", "__syncwarp", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
               "__threadfence", "__threadfence_block", "cooperative_groups::sync", "cg::sync", "grid.sync"}
_MATH_FUNCS = {
    "expf": "exp", "__expf": "exp", "exp": "exp", "exp2f": "exp", "__exp2f": "exp", "hexp": "exp",
    "logf": "log", "__logf": "log", "log": "log", "log2f": "log",
    "rsqrtf": "rsqrt", "rsqrt": "rsqrt", "__frsqrt_rn": "rsqrt", "hrsqrt": "rsqrt",
    "sqrtf": "sqrt", "sqrt": "sqrt", "__fsqrt_rn": "sqrt",
    "tanhf": "tanh", "tanh": "tanh", "erff": "erf", "erf": "erf",
    "sinf": "sin", "__sinf": "sin", "cosf": "cos", "__cosf": "cos",
    "__fdividef": "divide", "__frcp_rn": "reciprocal", "fdividef": "divide",
    "fmaxf": "max", "fminf": "min", "max": "max", "min": "min", "fabsf": "abs", "fabs": "abs",
    "fmaf": "fma", "__fmaf_rn": "fma", "powf": "pow", "__powf": "pow",
    "__float2bfloat16": "cast", "__bfloat162float": "cast", "__float2half": "cast", "__half2float": "cast",
}
_MATMUL_CALLS = {"mma_sync", "wmma::mma_sync", "nvcuda::wmma::mma_sync", "__hmma_m16n16k16_mma_f32f32",
                 "cublasGemmEx", "cublasSgemm", "cublasHgemm"}
_FLOAT_TYPES = {"float", "double", "half", "__half", "__nv_bfloat16", "nv_bfloat16", "bfloat16", "__half2",
                "float2", "float4", "__nv_bfloat162", "accscalar_t", "acc_t", "scalar_t", "T", "AccT", "acc_type"}


@dataclass
class CudaParam:
    name: str
    type: str
    pointer: bool
    const: bool
    line: int


@dataclass
class SharedBuffer:
    name: str
    type: str
    dims: list[int | None]
    dims_text: list[str]
    extern: bool
    line: int
    lines: list[int] = field(default_factory=list)  # lines that read or write the buffer
    filled_from: list[str] = field(default_factory=list)  # pointer parameters copied into it

    @property
    def elements(self) -> int | None:
        n = 1
        for d in self.dims:
            if d is None:
                return None
            n *= d
        return n


@dataclass
class IndexUse:
    line: int
    builtin: str  # "threadIdx.x", "blockIdx.y", ...
    var: str | None  # local variable defined from it, when on a declaration/assignment line


@dataclass
class Construct:
    """A call-like construct at a line: barrier, shuffle, atomic, math intrinsic, matrix product."""

    line: int
    name: str
    text: str


@dataclass
class CudaLoop:
    line: int
    end_line: int
    kind: str  # "for" | "while" | "do"
    var: str | None
    trip: int | None
    trip_text: str
    stride: str  # "unit" | "constant" | "grid-stride" | "block-stride" | "halving" | "doubling" | "unknown"
    depth: int
    unrolled: bool = False
    reduction: bool = False  # body updates a register accumulator


@dataclass
class GlobalAccess:
    line: int
    array: str  # the pointer parameter
    write: bool
    text: str
    loop_lines: list[int] = field(default_factory=list)  # enclosing loops (their first lines)


@dataclass
class Accumulator:
    name: str
    type: str
    line: int
    updates: list[int] = field(default_factory=list)
    array: bool = False


@dataclass
class Guard:
    line: int
    text: str
    early_exit: bool


@dataclass
class CudaKernel:
    name: str
    line: int
    end_line: int
    launch_bounds: list[int | None] = field(default_factory=list)
    params: list[CudaParam] = field(default_factory=list)
    shared: list[SharedBuffer] = field(default_factory=list)
    index_uses: list[IndexUse] = field(default_factory=list)
    index_vars: dict[str, int] = field(default_factory=dict)  # local var -> line defined from thread/block ids
    syncs: list[Construct] = field(default_factory=list)
    shuffles: list[Construct] = field(default_factory=list)
    atomics: list[Construct] = field(default_factory=list)
    math: list[Construct] = field(default_factory=list)
    matmuls: list[Construct] = field(default_factory=list)
    loops: list[CudaLoop] = field(default_factory=list)
    accesses: list[GlobalAccess] = field(default_factory=list)
    accumulators: list[Accumulator] = field(default_factory=list)
    guards: list[Guard] = field(default_factory=list)
    device_calls: list[Construct] = field(default_factory=list)
    is_global: bool = True

    @property
    def pointer_params(self) -> list[CudaParam]:
        return [p for p in self.params if p.pointer]

    def merged(self, functions: list["CudaKernel"]) -> "CudaKernel":
        """This kernel plus the constructs of the __device__ functions it calls (transitively)."""
        by_name = {f.name: f for f in functions}
        seen: set[str] = set()
        todo = [c.name for c in self.device_calls]
        copies: dict[str, Any] = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                                  for k, v in self.__dict__.items()}
        out = CudaKernel(**copies)
        while todo:
            name = todo.pop()
            if name in seen or name not in by_name:
                continue
            seen.add(name)
            f = by_name[name]
            for attr in ("syncs", "shuffles", "atomics", "math", "matmuls", "loops", "accumulators", "index_uses"):
                getattr(out, attr).extend(getattr(f, attr))
            todo.extend(c.name for c in f.device_calls)
        for attr in ("syncs", "shuffles", "atomics", "math", "matmuls", "loops", "accumulators", "index_uses"):
            getattr(out, attr).sort(key=lambda c: c.line)
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name, "line": self.line, "end_line": self.end_line,
            "launch_bounds": self.launch_bounds,
            "params": [asdict(p) for p in self.params],
            "shared": [asdict(s) for s in self.shared],
            "index_lines": sorted({u.line for u in self.index_uses}),
            "syncs": [s.line for s in self.syncs],
            "shuffles": [s.line for s in self.shuffles],
            "atomics": [a.line for a in self.atomics],
            "loops": [asdict(lp) for lp in self.loops],
            "global_loads": sorted({a.line for a in self.accesses if not a.write}),
            "global_stores": sorted({a.line for a in self.accesses if a.write}),
            "accumulators": [asdict(a) for a in self.accumulators],
        }


@dataclass
class Launch:
    line: int
    kernel: str
    config: list[str]


@dataclass
class CudaModel:
    path: str
    kernels: list[CudaKernel] = field(default_factory=list)
    device_functions: list[CudaKernel] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    defines: dict[str, int] = field(default_factory=dict)
    error_lines: list[int] = field(default_factory=list)  # lines the parser could not read
    line_count: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kernels": [k.summary() for k in self.kernels],
            "device_functions": [{"name": f.name, "line": f.line, "end_line": f.end_line}
                                 for f in self.device_functions],
            "launches": [asdict(lc) for lc in self.launches],
            "error_lines": self.error_lines,
        }


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter as ts
    import tree_sitter_cuda as tsc

    return ts.Parser(ts.Language(tsc.language()))


def _line(node: Any) -> int:
    return int(node.start_point[0]) + 1


def _end_line(node: Any) -> int:
    return int(node.end_point[0]) + 1


def _text(node: Any) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else ""


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_C_SUFFIX = re.compile(r"(?<=\d)([uUlLfF]+)\b")


def eval_c_int(text: str, env: dict[str, int]) -> int | None:
    """Evaluate a C integer constant expression (literals, names in `env`, + - * / % << >> parens)."""
    cleaned = _C_SUFFIX.sub("", text.strip())
    if not cleaned or len(cleaned) > 200:
        return None
    try:
        tree = pyast.parse(cleaned, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int | None:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and node.value.is_integer():
            return int(node.value)
        if isinstance(node, ast.Name):
            return env.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if a is None or b is None:
                return None
            try:
                if isinstance(node.op, ast.Add):
                    return a + b
                if isinstance(node.op, ast.Sub):
                    return a - b
                if isinstance(node.op, ast.Mult):
                    return a * b
                if isinstance(node.op, (ast.Div, ast.FloorDiv)):
                    return int(a / b) if b else None
                if isinstance(node.op, ast.Mod):
                    return a % b if b else None
                if isinstance(node.op, ast.LShift):
                    return a << b if 0 <= b < 64 else None
                if isinstance(node.op, ast.RShift):
                    return a >> b if b >= 0 else None
            except (OverflowError, ValueError):
                return None
        return None

    return ev(tree)


class _KernelReader:
    def __init__(self, fn: Any, kernel: CudaKernel, env: dict[str, int]):
        self.fn = fn
        self.k = kernel
        self.env = dict(env)
        self.pointers: dict[str, str] = {}  # local pointer alias -> parameter name
        self.locals: dict[str, tuple[str, int, bool]] = {}  # float local -> (type, line, is_array)
        self.loop_stack: list[CudaLoop] = []
        self.acc_by_name: dict[str, Accumulator] = {}

    def read(self) -> None:
        declarator = self.fn.child_by_field_name("declarator")
        params = _find_child(declarator, "parameter_list")
        if params is not None:
            for p in params.named_children:
                if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                    self.param(p)
        for child in self.fn.children:
            if child.type == "launch_bounds":
                self.k.launch_bounds = [eval_c_int(_text(c), self.env) for c in child.named_children]
        body = self.fn.child_by_field_name("body")
        if body is not None:
            self.visit(body)
        self.k.accumulators = [a for a in self.acc_by_name.values() if a.updates]

    def param(self, node: Any) -> None:
        text = _text(node)
        decl = node.child_by_field_name("declarator")
        name = _declared_name(decl) if decl is not None else None
        if name is None:
            return
        pointer = "*" in text or "[" in text
        typ = _text(node.child_by_field_name("type"))
        self.k.params.append(CudaParam(name=name, type=typ, pointer=pointer, const="const" in text.split(name)[0],
                                       line=_line(node)))
        if pointer:
            self.pointers[name] = name

    # -- traversal --------------------------------------------------------------------------------

    def visit(self, node: Any) -> None:
        t = node.type
        if t == "declaration":
            self.declaration(node)
        elif t in ("for_statement", "while_statement", "do_statement", "for_range_loop"):
            self.loop(node)
            return
        elif t == "field_expression":
            self.field(node)
        elif t == "call_expression":
            self.call(node)
        elif t in ("assignment_expression", "update_expression"):
            self.assignment(node)
        elif t == "subscript_expression":
            self.subscript(node, write=self.is_write_target(node))
        elif t == "pointer_expression":
            self.deref(node)
        elif t == "if_statement":
            self.guard(node)
        for child in node.named_children:
            self.visit(child)

    def declaration(self, node: Any) -> None:
        children = node.children
        is_shared = any(c.type == "type_qualifier" and _text(c) == "__shared__" for c in children)
        is_extern = any(c.type == "storage_class_specifier" and _text(c) == "extern" for c in children)
        is_const = any(c.type == "type_qualifier" and _text(c) in ("const", "constexpr") for c in children) \
            or any(_text(c) == "constexpr" for c in children)
        typ = _text(node.child_by_field_name("type"))
        for decl in node.children_by_field_name("declarator"):
            name = _declared_name(decl)
            if name is None:
                continue
            if is_shared:
                dims_nodes = _array_dims(decl)
                dims_text = [_text(d) if d is not None else "" for d in dims_nodes]
                dims = [eval_c_int(tx, self.env) if tx else None for tx in dims_text]
                self.k.shared.append(SharedBuffer(name=name, type=typ, dims=dims, dims_text=dims_text,
                                                  extern=is_extern, line=_line(node)))
                continue
            value = decl.child_by_field_name("value") if decl.type == "init_declarator" else None
            value_text = _text(value) if value is not None else ""
            inner = decl.child_by_field_name("declarator") if decl.type == "init_declarator" else decl
            if value is not None and is_const:
                v = eval_c_int(value_text, self.env)
                if v is not None:
                    self.env[name] = v
            if inner is not None and inner.type == "pointer_declarator" and value is not None:
                for ident in _identifiers(value):
                    if ident in self.pointers:
                        self.pointers[name] = self.pointers[ident]
                        break
            if value is not None and any(b in value_text for b in _INDEX_BUILTINS):
                self.k.index_vars[name] = _line(node)
            elif value is not None and any(ident in self.k.index_vars for ident in _identifiers(value)):
                self.k.index_vars.setdefault(name, _line(node))
            base_type = typ.split("::")[-1].strip()
            if base_type in _FLOAT_TYPES or base_type.startswith(("float", "double")):
                is_array = inner is not None and inner.type == "array_declarator"
                if inner is None or inner.type in ("identifier", "array_declarator"):
                    self.locals[name] = (typ, _line(node), is_array)

    def field(self, node: Any) -> None:
        arg = node.child_by_field_name("argument")
        fld = node.child_by_field_name("field")
        if arg is not None and arg.type == "identifier" and _text(arg) in _INDEX_BUILTINS:
            var = _enclosing_definition(node)
            self.k.index_uses.append(IndexUse(line=_line(node), builtin=f"{_text(arg)}.{_text(fld)}", var=var))

    def call(self, node: Any) -> None:
        fn = node.child_by_field_name("function")
        name = _text(fn)
        short = name.split("::")[-1]
        line = _line(node)
        text = _short(_text(node))
        if fn is not None and fn.type == "field_expression":
            fld = fn.child_by_field_name("field")
            if fld is not None and _text(fld) == "sync":
                self.k.syncs.append(Construct(line, "group.sync", text))
                return
        if name in _SYNC_CALLS or short in _SYNC_CALLS:
            self.k.syncs.append(Construct(line, short, text))
        elif short.startswith("__shfl") or short.startswith("__reduce_") or "WarpReduce" in name:
            self.k.shuffles.append(Construct(line, short, text))
        elif short.startswith("atomic"):
            self.k.atomics.append(Construct(line, short, text))
        elif name in _MATMUL_CALLS or short in _MATMUL_CALLS:
            self.k.matmuls.append(Construct(line, short, text))
        elif short in _MATH_FUNCS:
            self.k.math.append(Construct(line, _MATH_FUNCS[short], text))
        elif fn is not None and fn.type == "identifier":
            self.k.device_calls.append(Construct(line, short, text))

    def is_write_target(self, node: Any) -> bool:
        parent = node.parent
        if parent is None:
            return False
        if parent.type == "assignment_expression" and parent.child_by_field_name("left") == node:
            return True
        if parent.type == "update_expression":
            return True
        return False

    def array_param(self, node: Any) -> str | None:
        """Parameter behind `x[...]`, `(x + off)[...]`, `reinterpret_cast<float4*>(x)[...]`."""
        if node is None:
            return None
        if node.type == "identifier":
            return self.pointers.get(_text(node))
        for ident in _identifiers(node):
            if ident in self.pointers:
                return self.pointers[ident]
        return None

    def subscript(self, node: Any, write: bool) -> None:
        arg = node.child_by_field_name("argument")
        base = arg
        while base is not None and base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        if base is not None and base.type == "identifier" and node.parent is not None \
                and node.parent.type != "subscript_expression":
            shared = next((b for b in self.k.shared if b.name == _text(base)), None)
            if shared is not None:
                shared.lines.append(_line(node))
                if write and node.parent.type == "assignment_expression":
                    right = node.parent.child_by_field_name("right")
                    for ident in _identifiers(right):
                        param = self.pointers.get(ident)
                        if param and param not in shared.filled_from:
                            shared.filled_from.append(param)
                return
        if arg is not None and arg.type == "subscript_expression":
            return  # the inner subscript reports the access
        name = self.array_param(arg)
        if name is None:
            return
        self.k.accesses.append(GlobalAccess(line=_line(node), array=name, write=write, text=_short(_text(node), 80),
                                            loop_lines=[lp.line for lp in self.loop_stack]))
        if write and node.parent is not None and node.parent.type == "assignment_expression":
            op = _text(node.parent.child_by_field_name("operator"))
            if op and op != "=":
                self.k.accesses.append(GlobalAccess(line=_line(node), array=name, write=False,
                                                    text=_short(_text(node), 80),
                                                    loop_lines=[lp.line for lp in self.loop_stack]))

    def deref(self, node: Any) -> None:
        op = node.child_by_field_name("operator")
        if op is None or _text(op) != "*":
            return
        arg = node.child_by_field_name("argument")
        name = self.array_param(arg)
        if name is None:
            return
        write = self.is_write_target(node)
        self.k.accesses.append(GlobalAccess(line=_line(node), array=name, write=write, text=_short(_text(node), 80),
                                            loop_lines=[lp.line for lp in self.loop_stack]))

    def assignment(self, node: Any) -> None:
        left = node.child_by_field_name("left") or node.child_by_field_name("argument")
        if left is None:
            return
        base = left
        while base.type == "subscript_expression":
            base = base.child_by_field_name("argument")
        name = _text(base) if base is not None and base.type == "identifier" else None
        if (node.type == "assignment_expression" and left.type == "identifier"
                and _text(node.child_by_field_name("operator")) == "="):
            right = node.child_by_field_name("right")
            if any(b in _text(right) for b in _INDEX_BUILTINS):
                self.k.index_vars.setdefault(_text(left), _line(node))
        if name is None or name not in self.locals or not self.loop_stack:
            return
        op = _text(node.child_by_field_name("operator"))
        right = node.child_by_field_name("right")
        accumulates = op in ("+=", "-=", "*=", "|=") or (
            op == "=" and right is not None and name in _identifiers(right)
            and any(tok in _text(right) for tok in ("+", "fma", "max", "min")))
        if not accumulates:
            return
        typ, line, is_array = self.locals[name]
        acc = self.acc_by_name.setdefault(name, Accumulator(name=name, type=typ, line=line, array=is_array))
        acc.updates.append(_line(node))
        for lp in self.loop_stack:
            lp.reduction = True
        if right is not None and _is_product_of_loads(right, name):
            self.k.matmuls.append(Construct(_line(node), "dot-loop", _short(_text(node))))

    def guard(self, node: Any) -> None:
        cond = node.child_by_field_name("condition")
        text = _text(cond)
        idents = _identifiers(cond) if cond is not None else set()
        uses_index = bool(idents & set(self.k.index_vars)) or any(b in text for b in _INDEX_BUILTINS)
        if not uses_index or not any(op in text for op in ("<", ">")):
            return
        consequence = node.child_by_field_name("consequence")
        early = consequence is not None and ("return" in _text(consequence)[:40])
        self.k.guards.append(Guard(line=_line(node), text=_short(text, 80), early_exit=early))

    def loop(self, node: Any) -> None:
        kind = {"for_statement": "for", "while_statement": "while", "do_statement": "do",
                "for_range_loop": "for"}[node.type]
        var: str | None = None
        trip: int | None = None
        trip_text = ""
        stride = "unknown"
        if node.type == "for_statement":
            init = node.child_by_field_name("initializer")
            cond = node.child_by_field_name("condition")
            update = node.child_by_field_name("update")
            var, start_text = _loop_init(init)
            bound_text, cmp = _loop_bound(cond, var)
            step_text, stride = _loop_step(update, var)
            start = eval_c_int(start_text, self.env) if start_text else None
            bound = eval_c_int(bound_text, self.env) if bound_text else None
            step = eval_c_int(step_text, self.env) if step_text else None
            if stride in ("unit", "constant") and start is not None and bound is not None and step:
                span = bound - start + (1 if cmp == "<=" else 0)
                trip = max(0, -(-span // step))
            if stride == "halving" and start is not None and bound is not None and start > 0:
                n, v = 0, start
                while v > bound and n < 64:
                    v //= 2
                    n += 1
                trip = n
            trip_text = (f"{var or '?'} from {start_text or '?'} while {_short(_text(cond), 40)} "
                         f"step {_short(_text(update), 30)}")
            if trip is not None:
                trip_text = str(trip)
            elif stride in ("unit", "constant") and bound_text:
                span_text = bound_text if start == 0 else f"{bound_text} - ({start_text or '0'})"
                step_shown: int | str = step if step is not None else step_text or "1"
                trip_text = span_text if step_shown == 1 else f"ceil({span_text} / {step_shown})" if start == 0 \
                    else f"ceil(({span_text}) / {step_shown})"
            elif stride == "grid-stride" and bound_text:
                trip_text = f"{bound_text} / (blockDim * gridDim) per thread"
            elif stride == "block-stride" and bound_text:
                trip_text = f"{bound_text} / blockDim per thread"
        else:
            cond = node.child_by_field_name("condition")
            trip_text = f"while {_short(_text(cond), 60)}"
        prev = node.prev_sibling
        unrolled = prev is not None and prev.type in ("preproc_call", "pragma") and "unroll" in _text(prev)
        lp = CudaLoop(line=_line(node), end_line=_end_line(node), kind=kind, var=var, trip=trip, trip_text=trip_text,
                      stride=stride, depth=len(self.loop_stack), unrolled=unrolled)
        self.k.loops.append(lp)
        self.loop_stack.append(lp)
        for child in node.named_children:
            self.visit(child)
        self.loop_stack.pop()


def _find_child(node: Any, typ: str) -> Any:
    if node is None:
        return None
    if node.type == typ:
        return node
    for c in node.named_children:
        found = _find_child(c, typ)
        if found is not None:
            return found
    return None


def _declared_name(node: Any) -> str | None:
    while node is not None:
        if node.type in ("identifier", "field_identifier"):
            return _text(node)
        inner = node.child_by_field_name("declarator")
        if inner is None:
            for c in node.named_children:
                if c.type == "identifier":
                    return _text(c)
            return None
        node = inner
    return None


def _array_dims(node: Any) -> list[Any]:
    dims: list[Any] = []
    while node is not None and node.type in ("array_declarator", "init_declarator"):
        if node.type == "array_declarator":
            dims.insert(0, node.child_by_field_name("size"))
        node = node.child_by_field_name("declarator")
    return dims


def _identifiers(node: Any) -> set[str]:
    out: set[str] = set()
    if node is None:
        return out
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            out.add(_text(n))
        stack.extend(n.named_children)
    return out


def _enclosing_definition(node: Any) -> str | None:
    """The variable a thread-index expression initialises or assigns, if any."""
    n = node.parent
    while n is not None and n.type not in ("declaration", "expression_statement", "compound_statement"):
        if n.type == "init_declarator":
            return _declared_name(n)
        n = n.parent
    if n is not None and n.type == "expression_statement":
        for c in n.named_children:
            if c.type == "assignment_expression":
                left = c.child_by_field_name("left")
                if left is not None and left.type == "identifier":
                    return _text(left)
    return None


def _loop_init(init: Any) -> tuple[str | None, str]:
    if init is None:
        return None, ""
    if init.type == "declaration":
        for decl in init.children_by_field_name("declarator"):
            if decl.type == "init_declarator":
                return _declared_name(decl), _text(decl.child_by_field_name("value"))
    if init.type == "assignment_expression":
        return _text(init.child_by_field_name("left")), _text(init.child_by_field_name("right"))
    return None, ""


def _loop_bound(cond: Any, var: str | None) -> tuple[str, str]:
    if cond is None or cond.type != "binary_expression" or var is None:
        return "", ""
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    op = _text(cond.child_by_field_name("operator"))
    if _text(left) == var and op in ("<", "<=", ">", ">=", "!="):
        return _text(right), op
    return "", op


def _loop_step(update: Any, var: str | None) -> tuple[str, str]:
    if update is None or var is None:
        return "", "unknown"
    text = _text(update).replace(" ", "")
    if text in (f"++{var}", f"{var}++"):
        return "1", "unit"
    if text in (f"--{var}", f"{var}--"):
        return "", "unknown"
    if update.type == "assignment_expression":
        op = _text(update.child_by_field_name("operator"))
        right = _text(update.child_by_field_name("right"))
        compact = right.replace(" ", "")
        if op == "+=":
            if "gridDim" in compact and "blockDim" in compact:
                return right, "grid-stride"
            if "blockDim" in compact:
                return right, "block-stride"
            return right, "constant"
        if (op == ">>=" and compact == "1") or (op == "/=" and compact == "2"):
            return "", "halving"
        if (op == "<<=" and compact == "1") or (op == "*=" and compact == "2"):
            return "", "doubling"
        if op == "=" and f"{var}/2" in compact or f"{var}>>1" in compact:
            return "", "halving"
    return "", "unknown"


def _is_product_of_loads(node: Any, acc: str) -> bool:
    """`a[i] * b[j]` or `fmaf(a[i][k], b, acc)`: an inner-product update. Two different factors, at least
    one read from an array, neither of them the accumulator (a sum of squares `v * v` is a reduction and
    `state = fmaf(a[t], state, b[t])` a linear recurrence, not matrix products)."""
    stack = [node]
    while stack:
        n = stack.pop()
        factors: list[Any] = []
        if n.type == "binary_expression" and _text(n.child_by_field_name("operator")) == "*":
            factors = [n.child_by_field_name("left"), n.child_by_field_name("right")]
        elif n.type == "call_expression" and _text(n.child_by_field_name("function")).split("::")[-1] in (
                "fmaf", "fma", "__fmaf_rn", "__fmul_rn"):
            args = n.child_by_field_name("arguments")
            factors = list(args.named_children[:2]) if args is not None else []
        if len(factors) == 2 and all(f is not None for f in factors):
            a, b = (" ".join(_text(f).split()) for f in factors)
            names = _identifiers(factors[0]) | _identifiers(factors[1])
            if a != b and ("[" in a or "[" in b) and acc not in names:
                return True
        stack.extend(n.named_children)
    return False


def _collect_env(root: Any) -> dict[str, int]:
    env: dict[str, int] = {}
    stack = [root]
    order: list[Any] = []
    while stack:
        n = stack.pop()
        order.append(n)
        stack.extend(reversed(n.named_children))
    for n in order:
        if n.type == "preproc_def":
            name = _text(n.child_by_field_name("name"))
            value = n.child_by_field_name("value")
            if value is not None:
                v = eval_c_int(_text(value), env)
                if v is not None:
                    env[name] = v
        elif n.type == "declaration" and n.parent is not None and n.parent.type in ("translation_unit",
                                                                                      "declaration_list"):
            qualifiers = " ".join(_text(c) for c in n.children if c.type in ("type_qualifier",
                                                                             "storage_class_specifier"))
            if "const" in qualifiers or "constexpr" in _text(n):
                for decl in n.children_by_field_name("declarator"):
                    if decl.type == "init_declarator":
                        v = eval_c_int(_text(decl.child_by_field_name("value")), env)
                        declared = _declared_name(decl)
                        if v is not None and declared:
                            env[declared] = v
        elif n.type == "template_parameter_list":
            for p in n.named_children:
                if p.type == "optional_parameter_declaration":
                    declared = _declared_name(p.child_by_field_name("declarator"))
                    v = eval_c_int(_text(p.child_by_field_name("default_value")), env)
                    if declared and v is not None:
                        env.setdefault(declared, v)
    return env


def build_cuda_model(source: str, path: str) -> CudaModel:
    """Parse CUDA `source` (task-relative `path`) into a CudaModel."""
    data = source.encode("utf-8")
    tree = _parser().parse(data)
    root = tree.root_node
    model = CudaModel(path=path, line_count=source.count("\n") + 1)
    model.defines = _collect_env(root)
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            model.error_lines.append(_line(node))
        if node.type == "function_definition":
            qualifiers = {c.type for c in node.children}
            is_global = "__global__" in qualifiers
            is_device = "__device__" in qualifiers
            if is_global or is_device:
                name = _declared_name(node.child_by_field_name("declarator")) or "?"
                kernel = CudaKernel(name=name, line=_line(node), end_line=_end_line(node), is_global=is_global)
                _KernelReader(node, kernel, model.defines).read()
                (model.kernels if is_global else model.device_functions).append(kernel)
                continue
        if node.type == "call_expression":
            config = [c for c in node.children if c.type == "kernel_call_syntax"]
            if config:
                fn = node.child_by_field_name("function")
                model.launches.append(Launch(line=_line(node), kernel=_text(fn),
                                             config=[_text(c) for c in config[0].named_children]))
        stack.extend(reversed(node.children))
    model.kernels.sort(key=lambda k: k.line)
    model.device_functions.sort(key=lambda k: k.line)
    model.error_lines = sorted(set(model.error_lines))
    return model
