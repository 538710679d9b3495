"""Build an `NkiModel` by walking a kernel's AST once, in program order, with abstract values.

Both namespaces are read: legacy `neuronxcc.nki` (return-value ISA calls, `nl.load`/`nl.store`,
`arange`/`mgrid` grids with `mask=`, `psum += nc_matmul(...)`, `nl.par_dim`) and the new `nki`
(destination-first ISA calls, `nisa.dma_copy`, slicing with `nl.ds`, `accumulate=`). Helper
functions defined in the same file are followed into (inlined) so their operations count for the
kernel that calls them. Nothing is executed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Any

from nkitui.analysis import nki_api
from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.dtypes import canonical as canonical_dtype
from nkitui.analysis.nki_imports import (
    FILE_READERS,
    HOST_LIBRARIES,
    canonical,
    collect_imports,
    namespace_of,
)
from nkitui.analysis.nki_model import (
    Access,
    DimAccess,
    HostCall,
    KernelModel,
    Loop,
    NkiModel,
    Op,
    Param,
    StateUse,
    Tensor,
)
from nkitui.analysis.nki_values import (
    Api,
    Buffer,
    DsV,
    Dtype,
    FuncRef,
    Grid,
    Lin,
    Mask,
    Method,
    MGrid,
    ShapeV,
    SliceV,
    TRef,
    Unk,
    as_lin,
    deps_of,
    known_int,
    lin_add,
    lin_floordiv,
    lin_scale,
    symbol,
    tags_of,
)

_KERNEL_DECORATORS = {"nki.jit", "nki.trace", "nki.baremetal", "nki.benchmark", "nki.profile",
                      "nki.simulate_kernel", "nki.simulate", "torch_neuronx.nki_jit", "nki_jit", "jit"}
_CACHE_DECORATORS = {"functools.lru_cache", "functools.cache", "lru_cache", "cache", "functools.cached_property"}
_LOOP_KINDS = {
    "nl.affine_range": "affine", "nl.sequential_range": "sequential", "nl.static_range": "static",
    "nl.dynamic_range": "dynamic", "builtins.range": "range",
}
_BUILTINS = {"range", "min", "max", "len", "int", "float", "abs", "tuple", "list", "zip", "enumerate", "print",
             "isinstance", "open", "sum", "round", "divmod", "reversed", "sorted", "map", "bool", "str",
             "setattr", "getattr", "hasattr", "dict", "set", "type", "id", "hash", "any", "all", "iter", "next"}
_CEIL_HELPERS = {"cdiv", "ceil_div", "div_ceil", "ceildiv", "div_round_up", "ceil_divide", "round_up_div"}
_CONTAINER_CALLS = {"dict", "list", "set", "collections.OrderedDict", "collections.defaultdict", "OrderedDict",
                    "defaultdict", "weakref.WeakValueDictionary"}
_CONTAINER_WRITE_METHODS = {"append", "update", "setdefault", "add", "extend", "insert", "__setitem__",
                            "appendleft", "put"}
_CONTAINER_READ_METHODS = {"get", "__getitem__", "__contains__", "keys", "values", "items", "pop"}
_HOST_TENSOR_METHODS = {"numpy", "cpu", "tolist", "item", "detach", "astype", "copy", "sum", "mean", "max", "min",
                        "dot", "matmul", "cumsum", "clone", "to", "float", "half", "double", "exp", "softmax"}
_VIEW_METHODS = {"reshape", "view", "ap", "broadcast", "broadcast_to", "permute", "select", "vector_select",
                 "flatten_dims", "reshape_dim", "expand_dim", "squeeze_dim", "rearrange", "indirect", "T"}
_OPERATOR_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
                   ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and_", ast.BitOr: "or_",
                   ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}
_ALU_OF_AUG = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.BitOr: "bitwise_or",
               ast.BitAnd: "bitwise_and"}
_MAX_INLINE_DEPTH = 8


class _Segments:
    """Source text of AST nodes (col offsets are UTF-8 byte offsets)."""

    def __init__(self, source: str):
        self.lines = [line.encode("utf-8") for line in source.splitlines(keepends=True)]

    def text(self, node: ast.AST, limit: int = 160) -> str:
        lineno = getattr(node, "lineno", None)
        end = getattr(node, "end_lineno", None)
        if lineno is None or end is None or lineno > len(self.lines):
            return ""
        col, end_col = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        if lineno == end:
            raw = self.lines[lineno - 1][col:end_col]
        else:
            parts = [self.lines[lineno - 1][col:]]
            parts.extend(self.lines[lineno:end - 1])
            parts.append(self.lines[end - 1][:end_col])
            raw = b"".join(parts)
        out = " ".join(raw.decode("utf-8", "replace").split())
        return out if len(out) <= limit else out[: limit - 1] + "…"


@dataclass
class _Frame:
    func: str
    env: dict[str, Any] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    returns: list[Any] = field(default_factory=list)
    divisions: dict[str, tuple[str, Any, str, int | None]] = field(default_factory=dict)


class _Module:
    """Module-level facts shared by every kernel walk."""

    def __init__(self, tree: ast.Module, source: str):
        self.tree = tree
        self.seg = _Segments(source)
        self.aliases, self.import_lines = collect_imports(tree.body)
        self.namespace = namespace_of(self.import_lines)
        self.functions: dict[str, ast.FunctionDef] = {}
        self.containers: dict[str, int] = {}
        self.constants: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node  # type: ignore[assignment]


class _KernelWalker:
    def __init__(self, module: _Module, fdef: ast.FunctionDef, context: AnalysisContext | None,
                 *, recording: bool = True):
        self.m = module
        self.fdef = fdef
        self.ctx = context
        self.recording = recording
        decos = [self.decorator_name(d) for d in fdef.decorator_list]
        self.km = KernelModel(
            name=fdef.name, line=fdef.lineno, end_line=fdef.end_lineno or fdef.lineno,
            decorators=[d for d in decos if d], decorated=any(_is_kernel_decorator(d) for d in decos),
        )
        self.frames: list[_Frame] = []
        self.loop_stack: list[int] = []
        self.next_tid = 0
        self.next_loop = 0
        self.next_op = 0
        self.call_stack: list[str] = []
        self.grid_counter = 0
        self.compare_text = ""
        self.compare_line: int | None = None

    # ------------------------------------------------------------------------------------------
    # Entry points

    def walk_kernel(self) -> KernelModel:
        frame = _Frame(func=self.fdef.name)
        self.frames.append(frame)
        self.bind_kernel_params(self.fdef, frame)
        self.call_stack.append(self.fdef.name)
        self.walk_body(self.fdef.body)
        self.call_stack.pop()
        self.frames.pop()
        for op in self.km.ops:
            self.finish_op(op)
        return self.km

    # ------------------------------------------------------------------------------------------
    # Helpers: names, tensors, ops

    @property
    def frame(self) -> _Frame:
        return self.frames[-1]

    @property
    def namespace(self) -> str | None:
        return self.m.namespace

    def decorator_name(self, node: ast.expr) -> str | None:
        target = node.func if isinstance(node, ast.Call) else node
        dotted = _dotted(target)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.m.aliases:
            dotted = self.m.aliases[head] + ("." + rest if rest else "")
        return canonical(dotted)

    def new_tensor(self, *, name: str | None, buffer: str, shape: tuple[Any, ...] | None, dtype: str | None,
                   line: int, origin: str, api: str | None = None, **extra: Any) -> Tensor:
        t = Tensor(id=self.next_tid, name=name, buffer=buffer, shape=shape, dtype=dtype, line=line, origin=origin,
                   api=api, loop=self.loop_stack[-1] if self.loop_stack else None, **extra)
        self.next_tid += 1
        self.km.tensors[t.id] = t
        return t

    def new_op(self, api: str, kind: str, engine: str | None, node: ast.AST) -> Op:
        op = Op(id=self.next_op, api=api, kind=kind, engine=engine, line=node.lineno,  # type: ignore[attr-defined]
                end_line=getattr(node, "end_lineno", None) or node.lineno,  # type: ignore[attr-defined]
                loops=tuple(self.loop_stack), text=self.m.seg.text(node), func=self.frame.func)
        self.next_op += 1
        if self.recording:
            self.km.ops.append(op)
        return op

    def whole_access(self, t: Tensor, text: str) -> Access:
        dims: tuple[DimAccess, ...] = ()
        if t.shape is not None:
            dims = tuple(DimAccess(kind="full", extent=known_int(s), deps=deps_of(s), text=":", start=0)
                         for s in t.shape)
        return _finish_access(t, dims, text or (t.name or ""), whole=True)

    def access_of(self, ref: TRef, text: str = "") -> Access:
        if ref.view is not None:
            return ref.view
        return self.whole_access(self.km.tensors[ref.tid], text)

    def tensor_refs(self, values: Any) -> list[TRef]:
        out: list[TRef] = []
        if isinstance(values, TRef):
            out.append(values)
        elif isinstance(values, (list, tuple)):
            for v in values:
                out.extend(self.tensor_refs(v))
        elif isinstance(values, dict):
            for v in values.values():
                out.extend(self.tensor_refs(v))
        return out

    def escape(self, values: Any) -> None:
        for ref in self.tensor_refs(values):
            self.km.escaped.add(self.km.root(ref.tid).id)

    def scalarize(self, value: Any) -> Any:
        """A kernel parameter of unknown type used as a number becomes a symbol (not a tensor)."""
        if isinstance(value, TRef) and value.view is None:
            t = self.km.tensors[value.tid]
            if t.origin == "param" and not t.typed and t.param is not None and t.param not in self.km.tensor_params:
                self.km.scalar_params.add(t.param)
                return symbol(t.param)
        if isinstance(value, tuple):
            return tuple(self.scalarize(v) for v in value)
        return value

    # ------------------------------------------------------------------------------------------
    # Parameters

    def bind_kernel_params(self, fdef: ast.FunctionDef, frame: _Frame) -> None:
        ctx = self.ctx
        args = fdef.args
        positional = args.posonlyargs + args.args
        defaults: dict[str, ast.expr] = {}
        for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            defaults[a.arg] = d
        for a, d in zip(args.kwonlyargs, args.kw_defaults):
            if d is not None:
                defaults[a.arg] = d
        inputs = list(ctx.inputs) if ctx else []
        outputs = list(ctx.outputs) if ctx and ctx.outputs_mode == "arguments" else []
        by_name = {t.name: ("input", t) for t in inputs}
        by_name.update({t.name: ("output", t) for t in outputs})
        tensor_slots = [("input", t) for t in inputs] + [("output", t) for t in outputs]
        for index, a in enumerate(positional + args.kwonlyargs):
            name = a.arg
            role: str | None = None
            spec = None
            if ctx and name in ctx.kwargs:
                value = ctx.kwargs[name]
                frame.env[name] = value if isinstance(value, (int, float, str, bool)) else Unk(text=name)
                self.km.params.append(Param(name, a.lineno, None, name in defaults, "kwarg"))
                continue
            if ctx and index < len(positional) and index < len(tensor_slots):
                role, spec = tensor_slots[index]
            elif ctx and name in by_name:
                role, spec = by_name[name]
            if spec is None and name in defaults and not (ctx and tensor_slots):
                value = self.eval(defaults[name])
                frame.env[name] = value
                self.km.params.append(Param(name, a.lineno, None, True, None))
                continue
            if spec is None and name in defaults:
                frame.env[name] = self.eval(defaults[name])
                self.km.params.append(Param(name, a.lineno, None, True, "kwarg" if ctx else None))
                continue
            t = self.new_tensor(
                name=name, buffer="hbm", shape=tuple(spec.shape) if spec and spec.shape else None,
                dtype=spec.dtype if spec else None, line=a.lineno, origin="param", param=name,
                typed=spec is not None,
            )
            frame.env[name] = TRef(t.id)
            self.km.params.append(Param(name, a.lineno, t.id, name in defaults, role))
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                frame.env[extra.arg] = Unk(text=extra.arg)

    # ------------------------------------------------------------------------------------------
    # Statements

    def walk_body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.walk_stmt(stmt)

    def walk_stmt(self, node: ast.stmt) -> None:
        method = getattr(self, f"stmt_{type(node).__name__}", None)
        if method is not None:
            method(node)
        else:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child)

    def stmt_Expr(self, node: ast.Expr) -> None:
        self.eval(node.value)

    def stmt_Pass(self, node: ast.Pass) -> None:
        return

    def stmt_Import(self, node: ast.Import) -> None:
        aliases, _ = collect_imports([node])
        self.frame.aliases.update(aliases)

    stmt_ImportFrom = stmt_Import

    def stmt_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self.km.state.append(StateUse("global", name, node.lineno, self.m.seg.text(node)))

    stmt_Nonlocal = stmt_Global

    def stmt_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.frame.env[node.name] = FuncRef(node.name, node)

    stmt_AsyncFunctionDef = stmt_FunctionDef  # type: ignore[assignment]

    def stmt_ClassDef(self, node: ast.ClassDef) -> None:
        self.frame.env[node.name] = Unk(text=node.name)

    def stmt_Return(self, node: ast.Return) -> None:
        value = self.eval(node.value) if node.value is not None else None
        self.frame.returns.append(value)
        if len(self.frames) == 1:
            tids = [self.km.root(r.tid).id for r in self.tensor_refs(value)]
            self.km.returns.append((node.lineno, tids))
            for tag_value in _flatten(value):
                if isinstance(tag_value, Unk) and "host" in tag_value.tags:
                    self.km.host_calls.append(HostCall("return of a host-computed value", node.lineno, [],
                                                       self.m.seg.text(node)))

    def stmt_Assert(self, node: ast.Assert) -> None:
        value = self.eval(node.test)
        self.km.asserts.append((node.lineno, self.m.seg.text(node.test), deps_of(value) | _names_in(node.test)))

    def stmt_If(self, node: ast.If) -> None:
        test = self.eval(node.test)
        if isinstance(test, bool):
            self.walk_body(node.body if test else node.orelse)
            return
        self.walk_body(node.body)
        self.walk_body(node.orelse)

    def stmt_While(self, node: ast.While) -> None:
        self.eval(node.test)
        loop = self.push_loop("while", "while", None, node, trip=None, stop_text=self.m.seg.text(node.test))
        self.walk_body(node.body)
        self.pop_loop(loop)
        self.walk_body(node.orelse)

    def stmt_With(self, node: ast.With) -> None:
        for item in node.items:
            value = self.eval(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, value, node)
        self.walk_body(node.body)

    stmt_AsyncWith = stmt_With  # type: ignore[assignment]

    def stmt_Try(self, node: ast.Try) -> None:
        self.walk_body(node.body)
        for handler in node.handlers:
            self.walk_body(handler.body)
        self.walk_body(node.orelse)
        self.walk_body(node.finalbody)

    stmt_TryStar = stmt_Try  # type: ignore[assignment]

    def stmt_Delete(self, node: ast.Delete) -> None:
        return

    def stmt_Raise(self, node: ast.Raise) -> None:
        return

    def stmt_Assign(self, node: ast.Assign) -> None:
        before = len(self.km.ops)
        value = self.eval(node.value)
        division = self.division_info(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and division is not None:
                self.frame.divisions[target.id] = division
            self.assign(target, value, node, ops_before=before)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        before = len(self.km.ops)
        value = self.eval(node.value)
        self.assign(node.target, value, node, ops_before=before)

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        before = len(self.km.ops)
        value = self.eval(node.value)
        current = self.eval(node.target)
        if isinstance(current, TRef):
            self.accumulate_into(current, value, node, _ALU_OF_AUG.get(type(node.op), "other"), before)
            if isinstance(node.target, ast.Name):
                self.frame.env[node.target.id] = current
            return
        result = self.binop(type(node.op), current, value, node)
        if isinstance(node.target, ast.Name):
            self.frame.env[node.target.id] = result
        elif isinstance(node.target, ast.Subscript):
            self.store_subscript(node.target, result, node, before)

    def stmt_For(self, node: ast.For) -> None:
        kind, api, start, stop, step, stop_node = self.loop_header(node.iter)
        trip = _trip_count(start, stop, step) if kind not in ("iter", "dynamic") else None
        if kind == "iter":
            seq = self.eval(node.iter)
            trip = len(seq) if isinstance(seq, (list, tuple)) else None
        loop = self.push_loop(kind, api, node.target, node, trip=trip,
                              stop_text=self.m.seg.text(stop_node) if stop_node is not None else self.m.seg.text(node.iter))
        loop.start, loop.step = start, step
        if stop_node is not None:
            division = self.division_info(stop_node)
            if division is None and isinstance(stop_node, ast.Name):
                division = self.lookup_division(stop_node.id)
            if division is not None:
                loop.division, loop.div_numerator, loop.div_numerator_text, loop.div_denominator = division
            else:
                step_i = known_int(step)
                if step_i is not None and step_i > 1 and known_int(start) == 0:
                    loop.division, loop.div_numerator = "step", stop
                    loop.div_numerator_text, loop.div_denominator = self.m.seg.text(stop_node), step_i
        var_value: Any = symbol(loop.sym) if loop.sym else Unk()
        if isinstance(node.target, ast.Name):
            self.frame.env[node.target.id] = var_value
        else:
            for name in _names_in(node.target):
                self.frame.env[name] = Unk(deps=frozenset({loop.sym}) if loop.sym else frozenset(), text=name)
        self.walk_body(node.body)
        self.pop_loop(loop)
        self.walk_body(node.orelse)

    stmt_AsyncFor = stmt_For  # type: ignore[assignment]

    # -- loops ------------------------------------------------------------------------------------

    def loop_header(self, it: ast.expr) -> tuple[str, str, Any, Any, Any, ast.expr | None]:
        if isinstance(it, ast.Call):
            callee = self.eval(it.func)
            if isinstance(callee, Api) and callee.name in _LOOP_KINDS:
                args = [self.scalarize(self.eval(a)) for a in it.args]
                for kw in it.keywords:
                    self.eval(kw.value)
                start: Any = 0
                step: Any = 1
                stop_node: ast.expr | None = None
                if len(args) == 1:
                    stop = args[0]
                    stop_node = it.args[0]
                elif len(args) >= 2:
                    start, stop = args[0], args[1]
                    stop_node = it.args[1]
                    if len(args) >= 3:
                        step = args[2]
                else:
                    stop = Unk()
                return _LOOP_KINDS[callee.name], callee.name, start, stop, step, stop_node
        return "iter", "iter", 0, None, 1, None

    def push_loop(self, kind: str, api: str, target: ast.expr | None, node: ast.AST, *, trip: int | None,
                  stop_text: str) -> Loop:
        var = target.id if isinstance(target, ast.Name) else (self.m.seg.text(target) if target is not None else None)
        loop_id = self.next_loop
        self.next_loop += 1
        sym = f"{var or 'loop'}@L{loop_id}"
        parent = self.loop_stack[-1] if self.loop_stack else None
        loop = Loop(id=loop_id, api=api, kind=kind, var=var, sym=sym, line=node.lineno,  # type: ignore[attr-defined]
                    end_line=getattr(node, "end_lineno", None) or node.lineno,  # type: ignore[attr-defined]
                    trip=trip, stop_text=stop_text, parent=parent, depth=len(self.loop_stack))
        if self.recording:
            self.km.loops[loop_id] = loop
            self.km.symbols[sym] = loop_id
        self.loop_stack.append(loop_id)
        return loop

    def pop_loop(self, loop: Loop) -> None:
        self.loop_stack.pop()

    def lookup_division(self, name: str) -> tuple[str, Any, str, int | None] | None:
        for frame in reversed(self.frames):
            if name in frame.divisions:
                return frame.divisions[name]
            if name in frame.env:
                return None
        return None

    def division_info(self, node: ast.expr) -> tuple[str, Any, str, int | None] | None:
        """Recognise trip counts that divide a size by a tile: ceil (X+P-1)//P, floor X//P, ..."""
        seg = self.m.seg.text
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            den = known_int(self.quiet_eval(node.right))
            left = node.left
            if isinstance(left, ast.UnaryOp) and isinstance(left.op, ast.USub):
                return None
            # (X + P - 1) // P, (X + 127) // 128, (P - 1 + X) // P ...: split the additive terms of the
            # numerator into the size X and a rounding constant (literals and the divisor itself).
            den_dump = ast.dump(node.right)
            const = 0
            size_terms: list[tuple[int, ast.expr]] = []
            for sign, term in _additive_terms(left):
                if isinstance(term, ast.Constant) and isinstance(term.value, int):
                    const += sign * term.value
                elif ast.dump(term) == den_dump and den is not None:
                    const += sign * den
                else:
                    size_terms.append((sign, term))
            if const > 0 and den is not None and size_terms:
                numerator: Any = 0
                for sign, term in size_terms:
                    numerator = self.binop(ast.Add if sign > 0 else ast.Sub, numerator, self.quiet_eval(term), term)
                text = " + ".join(("-" if sign < 0 else "") + seg(term) for sign, term in size_terms)
                kind = "ceil" if const == den - 1 else "ceil-suspect"
                return kind, numerator, text, den
            return "floor", self.quiet_eval(left), seg(left), den
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = node.operand
            if (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.FloorDiv)
                    and isinstance(inner.left, ast.UnaryOp) and isinstance(inner.left.op, ast.USub)):
                return "ceil", self.quiet_eval(inner.left.operand), seg(inner.left.operand), \
                    known_int(self.quiet_eval(inner.right))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            # (X - 1) // P + 1
            left = node.left
            if (known_int(self.quiet_eval(node.right)) == 1 and isinstance(left, ast.BinOp)
                    and isinstance(left.op, ast.FloorDiv) and isinstance(left.left, ast.BinOp)
                    and isinstance(left.left.op, ast.Sub) and known_int(self.quiet_eval(left.left.right)) == 1):
                return "ceil", self.quiet_eval(left.left.left), seg(left.left.left), \
                    known_int(self.quiet_eval(left.right))
        if isinstance(node, ast.Call):
            callee = self.quiet_eval(node.func)
            name = callee.name if isinstance(callee, (Api, FuncRef)) else None
            short = name.rsplit(".", 1)[-1] if name else None
            if name == "math.ceil" and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Div):
                    return "ceil", self.quiet_eval(arg.left), seg(arg.left), known_int(self.quiet_eval(arg.right))
            if short in _CEIL_HELPERS and len(node.args) == 2:
                return "ceil", self.quiet_eval(node.args[0]), seg(node.args[0]), \
                    known_int(self.quiet_eval(node.args[1]))
            if name == "builtins.int" and node.args:
                return self.division_info(node.args[0])
        return None

    def quiet_eval(self, node: ast.expr) -> Any:
        """Evaluate without recording operations (for re-reading sub-expressions)."""
        saved = self.recording
        self.recording = False
        try:
            return self.eval(node)
        finally:
            self.recording = saved

    # -- assignment -------------------------------------------------------------------------------

    def assign(self, target: ast.expr, value: Any, stmt: ast.AST, ops_before: int | None = None) -> None:
        if isinstance(target, ast.Name):
            previous = self.lookup(target.id, default=None)
            if isinstance(value, TRef):
                t = self.km.tensors[value.tid]
                if t.name is None:
                    t.name = target.id
                self.mark_rebind_accumulate(previous, value, ops_before)
            self.frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts))
            for elt, item in zip(target.elts, items):
                self.assign(elt, item, stmt)
        elif isinstance(target, ast.Subscript):
            self.store_subscript(target, value, stmt, ops_before)
        elif isinstance(target, ast.Attribute):
            base = self.eval(target.value)
            if isinstance(base, FuncRef) or (isinstance(target.value, ast.Name) and target.value.id in self.m.functions):
                self.km.state.append(StateUse("attribute", self.m.seg.text(target), stmt.lineno,  # type: ignore[attr-defined]
                                              self.m.seg.text(stmt)))
        elif isinstance(target, ast.Starred):
            self.assign(target.value, Unk(), stmt)

    def unpack(self, value: Any, n: int) -> list[Any]:
        if isinstance(value, (tuple, list)) and len(value) == n:
            return list(value)
        if isinstance(value, ShapeV):
            return [self.shape_symbol(value.tid, value.name, i) for i in range(n)]
        if isinstance(value, MGrid) and len(value.grids) == n:
            return list(value.grids)
        deps = deps_of(value)
        return [Unk(deps=deps) for _ in range(n)]

    def mark_rebind_accumulate(self, previous: Any, value: TRef, ops_before: int | None) -> None:
        """`acc = acc + x` / `acc = nl.add(acc, x)`: the new value accumulates into the old one."""
        if not isinstance(previous, TRef) or ops_before is None:
            return
        new_ops = self.km.ops[ops_before:]
        if not new_ops or new_ops[-1].result != value.tid:
            return
        op = new_ops[-1]
        old_root = self.km.root(previous.tid).id
        if old_root in {self.km.root(t).id for t in op.inputs} and op.alu in ("add", "subtract"):
            op.accumulate = True
            op.kwargs.setdefault("_acc_target", str(old_root))

    def store_subscript(self, target: ast.Subscript, value: Any, stmt: ast.AST, ops_before: int | None) -> None:
        base = self.eval(target.value)
        if isinstance(base, Api) or (isinstance(target.value, ast.Name) and self.is_module_container(target.value.id)):
            if isinstance(target.value, ast.Name) and self.is_module_container(target.value.id):
                self.km.state.append(StateUse("container-write", target.value.id, stmt.lineno,  # type: ignore[attr-defined]
                                              self.m.seg.text(stmt)))
            return
        if not isinstance(base, TRef):
            return
        dst_ref = self.subscript_tensor(base, target)
        dst = self.access_of(dst_ref, self.m.seg.text(target))
        new_ops = self.km.ops[ops_before:] if ops_before is not None else []
        if isinstance(value, TRef) and new_ops and new_ops[-1].result == value.tid:
            # `x[...] = nisa.op(...)`: the op writes straight into x.
            op = new_ops[-1]
            produced = self.km.tensors.pop(value.tid)
            op.result = None
            op.writes.append(dst)
            self.inherit(dst.tensor, produced)
            if dst.tensor in {self.km.root(t).id for t in op.inputs} and op.alu in ("add", "subtract"):
                op.accumulate = True
            return
        if isinstance(value, TRef):
            src = self.access_of(value)
            src_t = self.km.root(value.tid)
            dst_t = self.km.root(dst.tensor)
            if src_t.is_hbm and dst_t.on_chip:
                kind, engine = "dma", "dma"
            elif dst_t.is_hbm:
                kind, engine = "dma", "dma"
            else:
                kind, engine = "copy", "vector"
            op = self.new_op("assign", kind, engine, stmt)
            op.reads.append(src)
            op.inputs.append(value.tid)
            op.writes.append(dst)
            self.inherit(dst.tensor, src_t, access=src)
            return
        if isinstance(value, Unk) and "host" in value.tags:
            self.km.host_calls.append(HostCall("store of a host-computed value", stmt.lineno, [],  # type: ignore[attr-defined]
                                               self.m.seg.text(stmt)))
        op = self.new_op("assign", "memset", "vector", stmt)
        op.writes.append(dst)
        op.scalars.append(value)

    def inherit(self, dst_tid: int, src: Tensor, access: Access | None = None) -> None:
        dst = self.km.root(dst_tid)
        if src.matmul:
            dst.matmul = True
        if dst.origin_dims is None and src.origin_dims is not None:
            dst.origin_dims = src.origin_dims
        if access is not None and src.is_hbm:
            dst.origin_dims = tuple(d.deps for d in access.dims)
            dst.source_dtype = src.dtype
        elif dst.source_dtype is None:
            dst.source_dtype = src.source_dtype

    def accumulate_into(self, acc: TRef, value: Any, node: ast.AugAssign, alu: str, ops_before: int) -> None:
        acc_access = self.access_of(acc, self.m.seg.text(node.target))
        acc_root = self.km.root(acc.tid)
        new_ops = self.km.ops[ops_before:]
        producer = new_ops[-1] if new_ops and isinstance(value, TRef) and new_ops[-1].result == value.tid else None
        if producer is not None and producer.kind == "matmul" and acc_root.buffer == "psum" and alu == "add":
            # Legacy `psum += nisa.nc_matmul(...)`: TensorE accumulates into the PSUM tile.
            produced = self.km.tensors.pop(value.tid)
            producer.result = None
            producer.writes.append(acc_access)
            producer.accumulate = True
            acc_root.matmul = True
            del produced
            return
        op = self.new_op("augassign", "accumulate", "vector", node)
        op.alu = alu
        op.accumulate = True
        op.reads.append(acc_access)
        op.inputs.append(acc.tid)
        if isinstance(value, TRef):
            op.reads.append(self.access_of(value))
            op.inputs.append(value.tid)
            src = self.km.root(value.tid)
            if src.matmul and alu == "add":
                acc_root.matmul = True
        else:
            op.scalars.append(value)
        op.writes.append(acc_access)
        op.kwargs["_acc_target"] = str(acc_root.id)

    # ------------------------------------------------------------------------------------------
    # Expressions

    def lookup(self, name: str, default: Any = ...) -> Any:
        for frame in reversed(self.frames):
            if name in frame.env:
                return frame.env[name]
            if name in frame.aliases:
                return Api(canonical(frame.aliases[name]))
        if name in self.m.constants:
            return self.m.constants[name]
        if name in self.m.functions:
            return FuncRef(name, self.m.functions[name])
        if name in self.m.aliases:
            return Api(canonical(self.m.aliases[name]))
        if name in _BUILTINS:
            return Api(f"builtins.{name}")
        if default is not ...:
            return default
        return Unk(text=name)

    def is_module_container(self, name: str) -> bool:
        if name not in self.m.containers:
            return False
        return all(name not in f.env for f in self.frames)

    def eval(self, node: ast.expr | None) -> Any:
        if node is None:
            return None
        method = getattr(self, f"ev_{type(node).__name__}", None)
        if method is None:
            deps: frozenset[str] = frozenset()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    deps |= deps_of(self.eval(child))
            return Unk(deps=deps, text=self.m.seg.text(node, 60))
        return method(node)

    def ev_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def ev_Name(self, node: ast.Name) -> Any:
        if self.is_module_container(node.id) and len(self.frames) > 0:
            self.km.state.append(StateUse("container-read", node.id, node.lineno, self.m.seg.text(node)))
        return self.lookup(node.id)

    def ev_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.eval(e) for e in node.elts)

    def ev_List(self, node: ast.List) -> Any:
        return [self.eval(e) for e in node.elts]

    def ev_Set(self, node: ast.Set) -> Any:
        for e in node.elts:
            self.eval(e)
        return Unk()

    def ev_Dict(self, node: ast.Dict) -> Any:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            key = self.eval(k) if k is not None else None
            val = self.eval(v)
            if isinstance(key, (str, int)):
                out[key] = val
        return out

    def ev_Slice(self, node: ast.Slice) -> Any:
        return SliceV(self.eval(node.lower), self.eval(node.upper), self.eval(node.step))

    def ev_Starred(self, node: ast.Starred) -> Any:
        value = self.eval(node.value)
        return Unk(deps=deps_of(value))

    def ev_JoinedStr(self, node: ast.JoinedStr) -> Any:
        for v in node.values:
            self.eval(v)
        return Unk(text="str")

    def ev_FormattedValue(self, node: ast.FormattedValue) -> Any:
        self.eval(node.value)
        return Unk()

    def ev_Lambda(self, node: ast.Lambda) -> Any:
        return Unk(text="lambda")

    def ev_NamedExpr(self, node: ast.NamedExpr) -> Any:
        value = self.eval(node.value)
        self.frame.env[node.target.id] = value
        return value

    def ev_IfExp(self, node: ast.IfExp) -> Any:
        test = self.eval(node.test)
        if isinstance(test, bool):
            return self.eval(node.body if test else node.orelse)
        a, b = self.eval(node.body), self.eval(node.orelse)
        if a == b:
            return a
        if isinstance(a, TRef):
            return a
        if isinstance(b, TRef):
            return b
        return Unk(deps=deps_of(test) | deps_of(a) | deps_of(b), tags=tags_of(a) | tags_of(b))

    def ev_comprehension(self, node: ast.expr, elts: list[ast.expr]) -> Any:
        frame = _Frame(func=self.frame.func)
        frame.env = {}
        self.frames.append(frame)
        deps: frozenset[str] = frozenset()
        for gen in node.generators:  # type: ignore[attr-defined]
            it = self.eval(gen.iter)
            deps |= deps_of(it)
            for name in _names_in(gen.target):
                frame.env[name] = Unk(deps=deps_of(it), text=name)
        refs = []
        for e in elts:
            value = self.eval(e)
            refs.extend(self.tensor_refs(value))
        self.frames.pop()
        if refs:
            return [refs[0]]
        return Unk(deps=deps)

    def ev_ListComp(self, node: ast.ListComp) -> Any:
        return self.ev_comprehension(node, [node.elt])

    ev_SetComp = ev_ListComp  # type: ignore[assignment]
    ev_GeneratorExp = ev_ListComp  # type: ignore[assignment]

    def ev_DictComp(self, node: ast.DictComp) -> Any:
        return self.ev_comprehension(node, [node.key, node.value])

    def ev_Await(self, node: ast.Await) -> Any:
        return self.eval(node.value)

    def ev_BoolOp(self, node: ast.BoolOp) -> Any:
        values = [self.eval(v) for v in node.values]
        if all(isinstance(v, bool) for v in values):
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if any(isinstance(v, Mask) for v in values):
            return _combine_masks(values)
        deps: frozenset[str] = frozenset()
        for v in values:
            deps |= deps_of(v)
        return Unk(deps=deps)

    def ev_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            lin = as_lin(v)
            if lin is not None:
                return lin_scale(lin, -1)
            if isinstance(v, TRef):
                return self.tensor_operator("operator.neg", [v], node, alu="multiply", scalars=[-1])
            if isinstance(v, Grid):
                return replace(v, shifted=True)
        if isinstance(node.op, ast.Not):
            if isinstance(v, bool):
                return not v
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert) and isinstance(v, int) and not isinstance(v, bool):
            return ~v
        if isinstance(v, Mask):
            return v
        return Unk(deps=deps_of(v), tags=tags_of(v))

    def ev_Compare(self, node: ast.Compare) -> Any:
        self.compare_text = self.m.seg.text(node, 100)
        self.compare_line = node.lineno
        left = self.scalarize(self.eval(node.left))
        results: list[Any] = []
        for op, comp in zip(node.ops, node.comparators):
            right = self.scalarize(self.eval(comp))
            results.append(self.compare(op, left, right))
            left = right
        if len(results) == 1:
            return results[0]
        if all(isinstance(r, bool) for r in results):
            return all(results)
        return _combine_masks(results)

    def compare(self, op: ast.cmpop, left: Any, right: Any) -> Any:
        sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
               ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}[type(op)]
        plain = (int, float, str, bool, type(None))
        if isinstance(left, plain) and isinstance(right, plain) and sym not in ("in", "not in"):
            try:
                return {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
                        ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
                        "is": lambda a, b: a is b, "is not": lambda a, b: a is not b}[sym](left, right)
            except TypeError:
                return Unk()
        if isinstance(left, Dtype) and isinstance(right, Dtype) and left.name and right.name and sym in ("==", "!="):
            return (left.name == right.name) == (sym == "==")
        grids = frozenset(g.gid for g in (left, right) if isinstance(g, Grid))
        deps = deps_of(left) | deps_of(right)
        if grids or any(s in self.km.symbols or s.startswith("program_id") for s in deps):
            if sym in ("<", "<=", ">", ">="):
                bounds: tuple[tuple[frozenset[str], str, Any], ...] = ()
                if isinstance(left, Grid) and not isinstance(right, Grid):
                    bounds = ((frozenset({left.gid}), sym, right),)
                elif isinstance(right, Grid) and not isinstance(left, Grid):
                    flipped = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[sym]
                    bounds = ((frozenset({right.gid}), flipped, left),)
                return Mask(deps=deps, cmps=(sym,), grids=grids, bounds=bounds, text=self.compare_text,
                            line=self.compare_line)
        if isinstance(right, str) and sym in ("in", "not in") and isinstance(left, str):
            return Unk()
        return Unk(deps=deps)

    def ev_BinOp(self, node: ast.BinOp) -> Any:
        left = self.scalarize(self.eval(node.left))
        right = self.scalarize(self.eval(node.right))
        return self.binop(type(node.op), left, right, node)

    def as_tensor(self, ref: TRef) -> None:
        """Evidence that a parameter of unknown type is a tensor (indexed, loaded, .shape read)."""
        t = self.km.tensors[ref.tid]
        if t.origin == "param" and t.param is not None:
            self.km.tensor_params.add(t.param)

    def binop(self, op: type, left: Any, right: Any, node: ast.AST) -> Any:
        if isinstance(left, TRef) or isinstance(right, TRef):
            name = f"operator.{_OPERATOR_NAMES.get(op, 'op')}"
            tensors = [v for v in (left, right) if isinstance(v, TRef)]
            scalars = [v for v in (left, right) if not isinstance(v, TRef)]
            alu = nki_api.ALU_OP.get(name)
            if op is ast.MatMult:
                return self.tensor_operator(name, tensors, node, kind="matmul", engine="tensor")
            return self.tensor_operator(name, tensors, node, alu=alu, scalars=scalars)
        if isinstance(left, Mask) or isinstance(right, Mask):
            return _combine_masks([left, right])
        if isinstance(left, Grid) or isinstance(right, Grid):
            grid = left if isinstance(left, Grid) else right
            other = right if grid is left else left
            if isinstance(other, Grid):
                return Unk(deps=grid.deps | other.deps, tags=frozenset({"grid2"}))
            deps = grid.deps | deps_of(other)
            if op in (ast.Add, ast.Sub):
                a, b = as_lin(grid.offset), as_lin(other)
                sign = -1 if op is ast.Sub else 1
                if op is ast.Sub and grid is right:
                    return Unk(deps=deps)
                offset = lin_add(a, b, sign) if a is not None and b is not None else Unk(deps=deps)
                return replace(grid, deps=deps, shifted=True, offset=offset)
            if op is ast.Mult and known_int(other) == 1:
                return grid
            return replace(grid, deps=deps, shifted=True, scaled=True, offset=Unk(deps=deps))
        if _is_number(left) and _is_number(right):
            try:
                return _PY_OPS[op](left, right)
            except (ZeroDivisionError, OverflowError, ValueError, TypeError, KeyError):
                return Unk()
        if isinstance(left, (tuple, list)) and isinstance(right, (tuple, list)) and op is ast.Add:
            return tuple(left) + tuple(right)
        if isinstance(left, (tuple, list)) and isinstance(right, int) and op is ast.Mult:
            return tuple(left) * right if 0 <= right <= 64 else Unk()
        a, b = as_lin(left), as_lin(right)
        if op in (ast.Add, ast.Sub) and (isinstance(left, Unk) and left.parts and b is not None
                                         or isinstance(right, Unk) and right.parts and a is not None
                                         and op is ast.Add):
            # Shift the candidates of a min(...): i*128 + min(128, n - i*128).
            unk, other = (left, b) if isinstance(left, Unk) and left.parts else (right, a)
            sign = -1 if op is ast.Sub else 1
            parts = tuple(lin_add(as_lin(p), other, sign) for p in unk.parts)  # type: ignore[arg-type]
            return Unk(deps=unk.deps | deps_of(other), tags=unk.tags, parts=parts, line=unk.line)
        if a is not None and b is not None:
            if op is ast.Add:
                return lin_add(a, b)
            if op is ast.Sub:
                return lin_add(a, b, -1)
            if op is ast.Mult:
                if not b.terms:
                    return lin_scale(a, b.const)
                if not a.terms:
                    return lin_scale(b, a.const)
            if op is ast.FloorDiv and not b.terms:
                exact = lin_floordiv(a, b.const)
                if exact is not None:
                    return exact
        return Unk(deps=deps_of(left) | deps_of(right), tags=tags_of(left) | tags_of(right))

    def ev_Attribute(self, node: ast.Attribute) -> Any:
        base = self.eval(node.value)
        attr = node.attr
        if isinstance(base, Api):
            return self.api_attribute(base, attr)
        if isinstance(base, TRef):
            t = self.km.tensors[base.tid]
            self.as_tensor(base)
            if attr == "shape":
                if base.view is not None:
                    return tuple(_region_shape(base.view))
                if t.shape is not None:
                    return tuple(t.shape)
                return ShapeV(base.tid, t.name or "tensor")
            if attr == "dtype":
                return Dtype(t.dtype)
            if attr == "ndim":
                return len(t.shape) if t.shape is not None else Unk()
            if attr == "buffer":
                return Buffer(t.buffer)
            if attr == "T":
                return self.view_method(base, "T", [], {}, node)
            return Method(base, attr)
        if isinstance(base, MGrid):
            index = {"p": 0, "x": 1, "y": 2, "z": 3}.get(attr)
            if index is not None and index < len(base.grids):
                return base.grids[index]
        if isinstance(base, FuncRef):
            return Unk(text=f"{base.name}.{attr}")
        if isinstance(base, Dtype):
            return Unk()
        if isinstance(node.value, ast.Name) and self.is_module_container(node.value.id):
            return Method(base, attr)
        if isinstance(base, Unk):
            return Unk(deps=base.deps, tags=base.tags - {"min", "max"}, text=f"{base.text}.{attr}")
        if isinstance(base, Lin):
            return Unk(deps=base.deps)
        return Method(base, attr)

    def api_attribute(self, base: Api, attr: str) -> Any:
        name = canonical(f"{base.name}.{attr}")
        if base.name in ("nl", "np", "torch", "jnp", "ml_dtypes", "nki.language") and attr in nki_api.DTYPE_ATTRS:
            return Dtype(canonical_dtype(attr) or attr)
        if base.name == "nl.tile_size" and attr in nki_api.TILE_SIZE:
            return nki_api.TILE_SIZE[attr]
        if base.name == "nl" and attr in nki_api.BUFFER_ATTRS:
            return Buffer(nki_api.BUFFER_ATTRS[attr])
        return Api(name)

    def ev_Subscript(self, node: ast.Subscript) -> Any:
        base = self.eval(node.value)
        if isinstance(base, TRef):
            return self.subscript_tensor(base, node)
        index = self.eval(node.slice)
        if isinstance(base, Api) and base.name == "nl.mgrid":
            items = index if isinstance(index, tuple) else (index,)
            grids = []
            for i, item in enumerate(items):
                extent = _slice_extent(item) if isinstance(item, SliceV) else known_int(item)
                grids.append(self.make_grid(extent, "p" if i == 0 else "f"))
            return MGrid(tuple(grids))
        if isinstance(base, Grid):
            items = index if isinstance(index, tuple) else (index,)
            if len(items) == 2:
                if items[1] is None:
                    return replace(base, axis="p")
                if items[0] is None:
                    return replace(base, axis="f")
            return base
        if isinstance(base, (tuple, list)):
            i = known_int(index)
            if i is not None and -len(base) <= i < len(base):
                return base[i]
            if isinstance(index, SliceV):
                lo, hi, st = known_int(index.lower), known_int(index.upper), known_int(index.step)
                if (index.lower is None or lo is not None) and (index.upper is None or hi is not None):
                    return tuple(base[slice(lo, hi, st)])
            if base and i is None and all(isinstance(item, (TRef, list, tuple)) for item in base):
                return base[0]  # a symbolic index into a list of tiles: they all play the same role
            return Unk(deps=deps_of(index))
        if isinstance(base, ShapeV):
            i = known_int(index)
            if i is not None:
                return self.shape_symbol(base.tid, base.name, i)
            return Unk()
        if isinstance(base, dict):
            if isinstance(index, (str, int)) and index in base:
                return base[index]
            return Unk()
        if isinstance(node.value, ast.Name) and self.is_module_container(node.value.id):
            return Unk(tags=frozenset({"cached"}))
        return Unk(deps=deps_of(base) | deps_of(index), tags=tags_of(base))

    def shape_symbol(self, tid: int, name: str, dim: int) -> Any:
        t = self.km.tensors.get(tid)
        if t is not None and t.shape is not None and dim < len(t.shape):
            return t.shape[dim]
        sym = f"{name}.shape[{dim}]"
        self.km.shape_symbols[sym] = (tid, dim)
        return symbol(sym)

    def make_grid(self, extent: int | None, axis: str | None) -> Grid:
        self.grid_counter += 1
        return Grid(gid=f"g{self.grid_counter}", extent=extent, axis=axis)

    # -- tensor indexing ---------------------------------------------------------------------------

    def subscript_tensor(self, base: TRef, node: ast.Subscript) -> TRef:
        self.as_tensor(base)
        index = self.eval(node.slice)
        items = list(index) if isinstance(index, tuple) else [index]
        items = [self.scalarize(i) if isinstance(i, TRef) else _scalarize_slice(self, i) for i in items]
        t = self.km.tensors[base.tid]
        text = self.m.seg.text(node)
        if base.view is not None and not base.view.whole:
            dims = _compose(base.view.dims, items)
            if dims is None:
                return TRef(base.tid, _finish_access(t, (DimAccess(kind="unknown", extent=None,
                                                                   deps=deps_of(index)),), text, whole=False))
            return TRef(base.tid, _finish_access(t, tuple(dims), text, whole=False))
        rank = len(t.shape) if t.shape is not None else None
        if any(item is Ellipsis for item in items):
            pos = next(i for i, item in enumerate(items) if item is Ellipsis)
            explicit = [item for item in items if item is not Ellipsis and item is not None]
            if rank is not None:
                fill = [SliceV(None, None, None)] * max(rank - len(explicit), 0)
                items = items[:pos] + fill + items[pos + 1:]
            else:
                items = items[:pos] + items[pos + 1:]
            if not explicit and (rank is not None or not items):
                return TRef(base.tid, self.whole_access(t, text))
        dims: list[DimAccess] = []
        items = [item for item in items if item is not None]
        for d, item in enumerate(items):
            size = t.shape[d] if t.shape is not None and d < len(t.shape) else None
            dims.append(_dim_access(item, size, self))
        if rank is not None:
            for d in range(len(items), rank):
                size = t.shape[d]  # type: ignore[index]
                dims.append(DimAccess(kind="full", extent=known_int(size), deps=deps_of(size), text=":", start=0))
        return TRef(base.tid, _finish_access(t, tuple(dims), text, whole=False))

    # -- calls -------------------------------------------------------------------------------------

    def ev_Call(self, node: ast.Call) -> Any:
        callee = self.eval(node.func)
        args = [self.eval(a) for a in node.args]
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            value = self.eval(kw.value)
            if kw.arg is not None:
                kwargs[kw.arg] = value
            else:
                self.escape(value)
        if isinstance(callee, Api):
            return self.api_call(callee.name, node, args, kwargs)
        if isinstance(callee, FuncRef):
            return self.inline(callee, node, args, kwargs)
        if isinstance(callee, Method):
            return self.method_call(callee, node, args, kwargs)
        self.escape(args)
        self.escape(kwargs)
        return Unk(deps=deps_of(callee) | deps_of(args) | deps_of(list(kwargs.values())))

    def method_call(self, m: Method, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(m.obj, TRef):
            t = self.km.root(m.obj.tid)
            if m.name in _VIEW_METHODS:
                return self.view_method(m.obj, m.name, args, kwargs, node)
            if m.name in _HOST_TENSOR_METHODS and (t.is_hbm or t.origin == "param"):
                self.km.host_calls.append(HostCall(f"tensor.{m.name}", node.lineno, [t.id], self.m.seg.text(node)))
                return Unk(tags=frozenset({"host"}), deps=deps_of(args))
            if m.name == "depends_on":
                return m.obj
            self.escape([m.obj])
            return Unk()
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and self.is_module_container(func.value.id):
            kind = "container-write" if m.name in _CONTAINER_WRITE_METHODS else "container-read"
            self.km.state.append(StateUse(kind, func.value.id, node.lineno, self.m.seg.text(node)))
            return Unk(tags=frozenset({"cached"}))
        if isinstance(m.obj, list) and m.name in ("append", "extend", "insert"):
            # Lists of tiles (`tiles.append(t)` ... `tiles[k]`): keep the items so that indexing finds them.
            if m.name == "append" and args:
                m.obj.append(args[0])
            elif m.name == "extend" and args and isinstance(args[0], (list, tuple)):
                m.obj.extend(args[0])
            elif m.name == "insert" and len(args) == 2:
                m.obj.append(args[1])
            return None
        if isinstance(m.obj, (list, tuple)) and m.name == "index":
            return Unk()
        self.escape(args)
        self.escape(kwargs)
        return Unk(deps=deps_of(args))

    def view_method(self, ref: TRef, name: str, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        t = self.km.tensors[ref.tid]
        root = self.km.root(ref.tid)
        shape: tuple[Any, ...] | None = None
        dtype = t.dtype
        if name in ("reshape", "broadcast_to", "broadcast"):
            raw = args[0] if len(args) == 1 else tuple(args) if args else kwargs.get("shape")
            if isinstance(raw, (tuple, list)):
                shape = tuple(raw)
            elif known_int(raw) is not None:
                shape = (raw,)
        elif name == "view" and args and isinstance(args[0], Dtype):
            dtype = args[0].name
            shape = t.shape
        elif name in ("T",):
            shape = tuple(reversed(t.shape)) if t.shape is not None else None
        elif name == "permute" and t.shape is not None and args:
            order = args[0] if isinstance(args[0], (tuple, list)) else args
            if all(isinstance(o, int) for o in order) and len(order) == len(t.shape):
                shape = tuple(t.shape[o] for o in order)
        view_t = self.new_tensor(name=t.name, buffer=root.buffer, shape=shape, dtype=dtype,
                                 line=getattr(node, "lineno", t.line), origin="view", alias_of=ref.tid,
                                 param=root.param, api=f"view.{name}")
        view_t.matmul = root.matmul
        view_t.pdim = 0
        if ref.view is not None and name not in ("reshape",):
            return TRef(view_t.id)
        return TRef(view_t.id)

    def api_call(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name.startswith("builtins."):
            return self.builtin_call(name[9:], node, args, kwargs)
        if name.startswith("math."):
            return _math_call(name[5:], args)
        head = name.split(".")[0]
        if name in FILE_READERS:
            self.km.state.append(StateUse("file-read", name, node.lineno, self.m.seg.text(node)))
            self.km.host_calls.append(HostCall(name, node.lineno, [], self.m.seg.text(node)))
            return Unk(tags=frozenset({"host", "cached"}))
        if head in HOST_LIBRARIES:
            return self.host_call(name, node, args, kwargs)
        if head in ("nl", "nisa", "ncc", "nt", "nki", "ncoll"):
            return self.nki_call(name, node, args, kwargs)
        if name in ("operator.add", "operator.mul", "operator.sub"):
            return Unk()
        self.escape(args)
        self.escape(kwargs)
        return Unk(deps=deps_of(args))

    def builtin_call(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name in ("min", "max", "int", "float", "round", "abs", "divmod", "range"):
            args = [self.scalarize(a) for a in args]
        ints = [known_int(a) for a in args]
        if name in ("min", "max"):
            values = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
            known = [known_int(v) if not isinstance(v, float) else v for v in values]
            if values and all(k is not None for k in known):
                return min(known) if name == "min" else max(known)  # type: ignore[type-var]
            deps: frozenset[str] = frozenset()
            for v in values:
                deps |= deps_of(v)
            tags = frozenset({"min"}) if name == "min" else frozenset({"max"})
            parts = tuple(v for v in values if as_lin(v) is not None) if name == "min" else ()
            return Unk(deps=deps, tags=tags | tags_of(values), parts=parts, line=node.lineno)
        if name == "len":
            if args and isinstance(args[0], (tuple, list, dict)):
                return len(args[0])
            if args and isinstance(args[0], MGrid):
                return len(args[0].grids)
            return Unk()
        if name in ("int", "round") and args:
            v = args[0]
            if isinstance(v, float):
                return int(v) if name == "int" else round(v)
            return v if as_lin(v) is not None else Unk(deps=deps_of(v), tags=tags_of(v))
        if name == "float" and args:
            return float(args[0]) if _is_number(args[0]) else Unk(deps=deps_of(args[0]))
        if name == "abs" and args and _is_number(args[0]):
            return abs(args[0])
        if name in ("tuple", "list") and args and isinstance(args[0], (tuple, list)):
            return tuple(args[0]) if name == "tuple" else list(args[0])
        if name in ("tuple", "list") and args and isinstance(args[0], ShapeV):
            return Unk()
        if name == "sum" and args and isinstance(args[0], (tuple, list)) and all(isinstance(i, int) for i in args[0]):
            return sum(args[0])
        if name == "divmod" and len(ints) == 2 and None not in ints and ints[1]:
            return divmod(ints[0], ints[1])  # type: ignore[operator]
        if name == "print":
            return None
        if name == "range":
            return Unk(deps=deps_of(args))
        if name == "isinstance":
            return Unk()
        if name == "open":
            self.km.state.append(StateUse("file-read", "open", node.lineno, self.m.seg.text(node)))
            return Unk(tags=frozenset({"host", "cached"}))
        if name in ("setattr",) and args and isinstance(args[0], FuncRef):
            self.km.state.append(StateUse("attribute", args[0].name, node.lineno, self.m.seg.text(node)))
            return None
        if name in ("getattr", "hasattr") and args and isinstance(args[0], FuncRef):
            self.km.state.append(StateUse("attribute-read", args[0].name, node.lineno, self.m.seg.text(node)))
            return Unk()
        if name in ("zip", "enumerate", "reversed", "sorted", "map", "iter"):
            return Unk(deps=deps_of(args))
        self.escape(args)
        return Unk(deps=deps_of(args))

    def host_call(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        attr = name.rsplit(".", 1)[-1]
        if attr in nki_api.DTYPE_ATTRS:
            if args and _is_number(args[0]):
                return args[0]
            return Dtype(canonical_dtype(attr) or attr)
        if name in ("np.dtype", "torch.dtype") and args and isinstance(args[0], (str, Dtype)):
            return Dtype(canonical_dtype(args[0] if isinstance(args[0], str) else args[0].name))
        refs = self.tensor_refs(args) + self.tensor_refs(list(kwargs.values()))
        if not refs and all(_is_plain(a) for a in list(args) + list(kwargs.values())):
            # numpy arithmetic on shapes and constants (np.prod(x.shape), np.ceil(n / 128)) is fine.
            if attr in ("prod", "product") and args and isinstance(args[0], (tuple, list)):
                ints = [known_int(v) for v in args[0]]
                if all(i is not None for i in ints):
                    out = 1
                    for i in ints:
                        out *= i  # type: ignore[operator]
                    return out
            if attr == "ceil" and args and _is_number(args[0]):
                import math
                return math.ceil(args[0])
            return Unk(deps=deps_of(args), tags=frozenset({"hostconst"}))
        tids = [self.km.root(r.tid).id for r in refs]
        self.km.host_calls.append(HostCall(name, node.lineno, tids, self.m.seg.text(node)))
        return Unk(deps=deps_of(args), tags=frozenset({"host"}))

    def inline(self, fref: FuncRef, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        fdef = fref.node
        if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fref.name in self.call_stack \
                or len(self.call_stack) > _MAX_INLINE_DEPTH:
            self.escape(args)
            self.escape(kwargs)
            return Unk(deps=deps_of(args))
        frame = _Frame(func=fref.name)
        params = fdef.args.posonlyargs + fdef.args.args
        defaults = dict(zip([a.arg for a in params[len(params) - len(fdef.args.defaults):]], fdef.args.defaults))
        for a, d in zip(fdef.args.kwonlyargs, fdef.args.kw_defaults):
            if d is not None:
                defaults[a.arg] = d
        for i, a in enumerate(params):
            if i < len(args):
                frame.env[a.arg] = args[i]
            elif a.arg in kwargs:
                frame.env[a.arg] = kwargs[a.arg]
            elif a.arg in defaults:
                frame.env[a.arg] = self.eval(defaults[a.arg])
            else:
                frame.env[a.arg] = Unk(text=a.arg)
        for a in fdef.args.kwonlyargs:
            if a.arg in kwargs:
                frame.env[a.arg] = kwargs[a.arg]
            elif a.arg in defaults:
                frame.env[a.arg] = self.eval(defaults[a.arg])
        if fdef.args.vararg is not None:
            frame.env[fdef.args.vararg.arg] = tuple(args[len(params):])
        if fdef.args.kwarg is not None:
            frame.env[fdef.args.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in {a.arg for a in params}}
        if fref.name not in self.km.helpers:
            self.km.helpers.append(fref.name)
        self.frames.append(frame)
        self.call_stack.append(fref.name)
        try:
            self.walk_body(fdef.body)
        finally:
            self.call_stack.pop()
            self.frames.pop()
        values = [v for v in frame.returns if v is not None]
        if not values:
            return None
        for v in reversed(values):
            if self.tensor_refs(v):
                return v
        return values[-1]

    # -- NKI calls ---------------------------------------------------------------------------------

    def nki_call(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        info = nki_api.info(name)
        if info is None:
            if name.startswith(("nl.", "nisa.")):
                self.km.notes.append(f"line {node.lineno}: {name} is not an NKI API the analysis knows")
            self.escape(args)
            self.escape(kwargs)
            return Unk(deps=deps_of(args))
        if info.kind == "alloc":
            return self.alloc(name, node, args, kwargs)
        if info.kind == "index":
            return self.index_api(name, node, args, kwargs)
        if info.kind == "spmd":
            self.km.spmd_lines.append(node.lineno)
            if name == "nl.program_id":
                axis = known_int(args[0]) if args else known_int(kwargs.get("axis", 0))
                return symbol(f"program_id({axis if axis is not None else 0})")
            if name == "nl.num_programs":
                grid = self.ctx.grid if self.ctx else None
                axis = known_int(args[0]) if args else known_int(kwargs.get("axes", 0))
                if grid and axis is not None and axis < len(grid):
                    return grid[axis]
                return symbol(f"num_programs({axis if axis is not None else 0})")
            return Unk()
        if info.kind in ("loop", "query", "schedule", "debug"):
            return Unk(deps=deps_of(args))
        return self.device_op(name, info, node, args, kwargs)

    def index_api(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if name == "nl.arange":
            if len(args) >= 2:
                lo, hi = as_lin(args[0]), as_lin(args[1])
                extent = known_int(lin_add(hi, lo, -1)) if lo is not None and hi is not None else None
            else:
                extent = known_int(args[0]) if args else None
            return self.make_grid(extent, None)
        if name == "nl.ds":
            start = self.scalarize(args[0] if args else kwargs.get("start"))
            size = self.scalarize(args[1] if len(args) > 1 else kwargs.get("size"))
            return DsV(start, size)
        if name == "nl.par_dim":
            return args[0] if args else Unk()
        return Unk()

    def alloc(self, name: str, node: ast.Call, args: list[Any], kwargs: dict[str, Any]) -> Any:
        short = name.split(".", 1)[1]
        shape_value: Any = None
        dtype_value: Any = kwargs.get("dtype")
        buffer_value: Any = kwargs.get("buffer")
        init = None
        shape_node: ast.expr | None = node.args[0] if node.args else None
        if short in ("zeros_like", "ones_like", "empty_like", "full_like"):
            like = args[0] if args else kwargs.get("a") or kwargs.get("x")
            if isinstance(like, TRef):
                lt = self.km.tensors[like.tid]
                shape_value = _region_shape(like.view) if like.view is not None else lt.shape
                if dtype_value is None:
                    dtype_value = Dtype(lt.dtype)
            init = {"zeros_like": "zeros", "ones_like": "ones", "full_like": "full"}.get(short)
            shape_node = None
        elif short == "shared_constant":
            t = self.new_tensor(name=None, buffer="shared_hbm", shape=None, dtype=_dtype_name(dtype_value),
                                line=node.lineno, origin="alloc", api=name)
            if args and isinstance(args[0], Unk) and "host" in args[0].tags:
                self.km.host_calls.append(HostCall("nl.shared_constant of a host-computed value", node.lineno, [],
                                                   self.m.seg.text(node)))
            return TRef(t.id)
        elif short == "shared_identity_matrix":
            n = args[0] if args else kwargs.get("n")
            t = self.new_tensor(name=None, buffer="shared_hbm", shape=(n, n), dtype=_dtype_name(dtype_value) or "uint8",
                                line=node.lineno, origin="alloc", api=name)
            return TRef(t.id)
        else:
            shape_value = args[0] if args else kwargs.get("shape")
            rest = list(args[1:])
            if short == "full":
                if rest:
                    rest.pop(0)
                init = "full"
            elif short in ("zeros", "ones"):
                init = short
            if rest and dtype_value is None:
                dtype_value = rest.pop(0)
            if rest and buffer_value is None:
                buffer_value = rest.pop(0)
        shape: tuple[Any, ...] | None
        if isinstance(shape_value, (tuple, list)):
            shape = tuple(shape_value)
        elif shape_value is not None and not isinstance(shape_value, (ShapeV, Unk)):
            shape = (shape_value,)
        else:
            shape = None
        pdim = _par_dim_index(shape_node, self)
        buffer = _buffer_name(buffer_value)
        t = self.new_tensor(name=kwargs.get("name") if isinstance(kwargs.get("name"), str) else None,
                            buffer=buffer, shape=shape, dtype=_dtype_name(dtype_value), line=node.lineno,
                            origin="alloc", api=name, init=init, pdim=pdim)
        if init is not None and t.on_chip:
            op = self.new_op(name, "memset", "vector" if buffer != "psum" else "vector", node)
            op.writes.append(self.whole_access(t, t.name or ""))
        return TRef(t.id)

    def dst_and_args(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, list[Any], dict[str, Any]]:
        kwargs = dict(kwargs)
        for key in nki_api.DST_KEYWORDS:
            if key in kwargs and isinstance(kwargs[key], TRef):
                return kwargs.pop(key), list(args), kwargs
        if name == "nl.store":
            dst = args[0] if args else kwargs.pop("dst", None)
            return dst, list(args[1:]), kwargs
        if name == "nisa.nc_stream_shuffle" and self.namespace != "new" and len(args) >= 2:
            return args[1], [args[0]] + list(args[2:]), kwargs
        if (self.namespace == "new" and name.startswith("nisa.") and name not in nki_api.NEW_RETURNING
                and args and isinstance(args[0], TRef)):
            return args[0], list(args[1:]), kwargs
        return None, list(args), kwargs

    def device_op(self, name: str, info: nki_api.ApiInfo, node: ast.Call, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
        dst, rest, kw = self.dst_and_args(name, args, kwargs)
        engine = info.engine
        if "engine" in kw:
            engine = _engine_name(kw.pop("engine")) or engine
        elif name == "nisa.nc_transpose" and "engine" in kwargs:
            engine = _engine_name(kwargs["engine"]) or engine
        mask = kw.pop("mask", None)
        dtype = _dtype_name(kw.pop("dtype", None))
        op = self.new_op(name, info.kind, engine, node)
        op.mask = mask
        op.dtype = dtype
        op.kwargs = {kwn.arg: self.m.seg.text(kwn.value, 80) for kwn in node.keywords if kwn.arg}
        op.fn = _activation_fn(name, rest, kw)
        op.alu = _alu_of(name, kw)
        skip = {"name", "engine", "buffer", "op", "op0", "op1", "reduce_op", "reduce_cmd", "axis", "keepdims",
                "negate", "reverse0", "reverse1", "perf_mode", "dge_mode", "oob_mode", "shuffle_mask",
                "transpose_x", "is_stationary_onezero", "is_moving_onezero", "is_transpose", "accumulate",
                "tile_position", "tile_size", "priority", "pattern", "cmp_op", "comp_op0", "comp_op1",
                "channel_multiplier", "num_elem_per_idx", "num_valid_indices", "mode", "dst_rmw_op"}
        operands: list[Any] = list(rest) + [v for k, v in kw.items() if k not in skip
                                            and k not in nki_api.EXTRA_OUTPUT_KEYWORDS]
        for key in nki_api.EXTRA_OUTPUT_KEYWORDS:
            extra = kw.get(key)
            if isinstance(extra, TRef):
                op.writes.append(self.access_of(extra))
        for value in operands:
            if isinstance(value, TRef):
                self.as_tensor(value)
                op.inputs.append(value.tid)
                op.reads.append(self.access_of(value))
            elif isinstance(value, (list, tuple)) and self.tensor_refs(value):
                for ref in self.tensor_refs(value):
                    op.inputs.append(ref.tid)
                    op.reads.append(self.access_of(ref))
            elif value is None or isinstance(value, (Api, Dtype, Buffer, str, bool)):
                continue
            else:
                op.scalars.append(value)
                if isinstance(value, Unk) and "host" in value.tags:
                    self.km.host_calls.append(HostCall(f"{name} of a host-computed value", node.lineno, [],
                                                       self.m.seg.text(node)))
        # Activation: scale/bias given?
        for key in ("scale", "bias"):
            if key in kw and kw[key] is not None and not (key == "scale" and kw[key] == 1.0):
                op.kwargs.setdefault(f"_has_{key}", "1")
        if dst is not None and isinstance(dst, TRef):
            self.as_tensor(dst)
            dst_access = self.access_of(dst)
            op.writes.append(dst_access)
            self.after_write(op, dst_access, node, kw)
            return None if self.namespace == "new" or name == "nl.store" else dst
        if name == "nl.store" or info.kind in ("dma_store", "collective", "register", "rng") and dst is None:
            return None
        result = self.result_tensor(name, info, op, node, kw)
        if result is not None:
            op.result = result.id
            self.after_write(op, self.whole_access(result, ""), node, kw)
            return TRef(result.id)
        return Unk()

    def after_write(self, op: Op, dst: Access, node: ast.Call, kw: dict[str, Any]) -> None:
        target = self.km.root(dst.tensor)
        sources = [self.km.root(t) for t in op.inputs]
        if op.kind == "matmul":
            target.matmul = True
            acc = kw.get("accumulate", ...)
            if acc is True:
                op.accumulate = True
            elif acc is not False and self.namespace == "new" and dst.tensor is not None:
                inner = [lid for lid in op.loops if not self.created_inside(target, lid)]
                if any(self.km.loops[lid].sym not in dst.deps for lid in inner if lid in self.km.loops):
                    op.accumulate = True
            if acc is False:
                op.kwargs["_accumulate_false"] = "1"
        elif op.kind in ("copy", "activation", "tensor_scalar", "transpose") and any(s.matmul for s in sources):
            target.matmul = True
        if op.kind in ("dma", "dma_load", "dma_transpose", "dma_load_transpose") and op.reads:
            src_access = op.reads[0]
            src = self.km.root(src_access.tensor)
            if src.is_hbm and target.on_chip:
                target.origin_dims = tuple(d.deps for d in src_access.dims)
                target.source_dtype = src.dtype
        elif op.kind in ("copy", "activation", "tensor_scalar") and sources and target.source_dtype is None:
            target.source_dtype = sources[0].source_dtype or sources[0].dtype

    def created_inside(self, t: Tensor, loop_id: int) -> bool:
        """True when tensor `t` was created inside loop `loop_id` (so it is fresh per iteration)."""
        lid = t.loop
        while lid is not None:
            if lid == loop_id:
                return True
            lid = self.km.loops[lid].parent if lid in self.km.loops else None
        return False

    def result_tensor(self, name: str, info: nki_api.ApiInfo, op: Op, node: ast.Call,
                      kw: dict[str, Any]) -> Tensor | None:
        inputs = [self.km.tensors[t] for t in op.inputs]
        first = op.reads[0] if op.reads else None
        shape: tuple[Any, ...] | None = tuple(_region_shape(first)) if first is not None else None
        dtype = op.dtype or (self.km.root(inputs[0].id).dtype if inputs else None)
        buffer = "sbuf"
        if info.kind == "dma_load" and first is not None:
            shape = _loaded_shape(first)
        elif info.kind == "dma_load_transpose" and first is not None:
            shape = tuple(reversed(_loaded_shape(first) or ())) or None
        elif info.kind == "matmul":
            buffer = "psum"
            dtype = "float32"
            if len(op.reads) >= 2:
                a, b = op.reads[0], op.reads[1]
                transpose_x = kw.get("transpose_x", False) is True or name.startswith("nisa.")
                m = a.free if transpose_x else a.partitions
                shape = (m, b.free)
        elif info.kind == "transpose":
            if op.engine == "tensor":
                buffer = "psum"
            if shape is not None:
                shape = tuple(reversed(shape))
        elif info.kind == "bn_stats" and first is not None:
            shape = (first.partitions, 6)
            dtype = op.dtype or "float32"
        elif info.kind == "bn_aggr" and first is not None:
            shape = (first.partitions, 2)
            dtype = op.dtype or "float32"
        elif info.kind in ("reduce", "activation_reduce", "tensor_scalar_reduce") and first is not None:
            shape = (first.partitions, 1)
        if "buffer" in kw:
            buffer = _buffer_name(kw["buffer"])
        t = self.new_tensor(name=None, buffer=buffer, shape=shape, dtype=dtype, line=node.lineno, origin="op", api=name)
        if info.kind in ("dma_load", "dma_load_transpose"):
            t.origin = "load"
        return t

    def tensor_operator(self, name: str, tensors: list[TRef], node: ast.AST, *, alu: str | None = None,
                        scalars: list[Any] | None = None, kind: str = "elementwise",
                        engine: str = "vector") -> Any:
        op = self.new_op(name, kind, engine, node)
        op.alu = alu
        for ref in tensors:
            op.inputs.append(ref.tid)
            op.reads.append(self.access_of(ref))
        op.scalars.extend(scalars or [])
        if any(self.km.root(r.tid).is_hbm for r in tensors):
            tids = [self.km.root(r.tid).id for r in tensors]
            self.km.host_calls.append(HostCall(f"{name} on HBM tensors", getattr(node, "lineno", 0), tids,
                                               self.m.seg.text(node)))
        first = op.reads[0] if op.reads else None
        shape = tuple(_region_shape(first)) if first is not None else None
        dtype = self.km.root(tensors[0].tid).dtype if tensors else None
        t = self.new_tensor(name=None, buffer="psum" if kind == "matmul" else "sbuf", shape=shape, dtype=dtype,
                            line=getattr(node, "lineno", 0), origin="op", api=name)
        op.result = t.id
        return TRef(t.id)

    # ------------------------------------------------------------------------------------------

    def finish_op(self, op: Op) -> None:
        """Accumulation that only shows once writes are known: `nisa.tensor_tensor(dst=acc, data1=acc, ...)`."""
        if op.accumulate or op.alu not in ("add", "subtract"):
            return
        write_roots = {self.km.root(a.tensor).id for a in op.writes}
        input_roots = {self.km.root(t).id for t in op.inputs}
        common = write_roots & input_roots
        if common:
            op.accumulate = True
            op.kwargs.setdefault("_acc_target", str(next(iter(common))))


# ----------------------------------------------------------------------------------------------
# Free helpers


_PY_OPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b if abs(b) < 64 else (_ for _ in ()).throw(OverflowError()),
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else (_ for _ in ()).throw(OverflowError()),
    ast.RShift: lambda a, b: a >> b,
}


def _additive_terms(node: ast.expr, sign: int = 1) -> list[tuple[int, ast.expr]]:
    """`a + b - c` -> [(+1, a), (+1, b), (-1, c)]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right_sign = sign if isinstance(node.op, ast.Add) else -sign
        return _additive_terms(node.left, sign) + _additive_terms(node.right, right_sign)
    return [(sign, node)]


def _scalarize_slice(walker: _KernelWalker, item: Any) -> Any:
    if isinstance(item, SliceV):
        return SliceV(walker.scalarize(item.lower), walker.scalarize(item.upper), walker.scalarize(item.step))
    return item


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_plain(v: Any) -> bool:
    if isinstance(v, (tuple, list)):
        return all(_is_plain(i) for i in v)
    return not isinstance(v, TRef) and not (isinstance(v, Unk) and "host" in v.tags)


def _flatten(v: Any) -> list[Any]:
    if isinstance(v, (tuple, list)):
        out: list[Any] = []
        for item in v:
            out.extend(_flatten(item))
        return out
    return [v]


def _names_in(node: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_kernel_decorator(name: str | None) -> bool:
    return name is not None and (name in _KERNEL_DECORATORS or name.endswith(".nki_jit"))


def _combine_masks(values: list[Any]) -> Mask:
    deps: frozenset[str] = frozenset()
    cmps: tuple[str, ...] = ()
    grids: frozenset[str] = frozenset()
    bounds: tuple[tuple[frozenset[str], str, Any], ...] = ()
    texts: list[str] = []
    line: int | None = None
    for v in values:
        if isinstance(v, Mask):
            line = line or v.line
            deps |= v.deps
            cmps += v.cmps
            grids |= v.grids
            bounds += v.bounds
            if v.text:
                texts.append(v.text)
        else:
            deps |= deps_of(v)
    return Mask(deps=deps, cmps=cmps, grids=grids, bounds=bounds, text=" & ".join(texts), line=line)


def _math_call(name: str, args: list[Any]) -> Any:
    import math

    if args and all(_is_number(a) for a in args):
        fn = getattr(math, name, None)
        if fn is not None and name in ("ceil", "floor", "sqrt", "log2", "log", "prod", "gcd", "isqrt", "exp", "pow"):
            try:
                return fn(*args)
            except (ValueError, TypeError, OverflowError):
                return Unk()
    if name == "prod" and args and isinstance(args[0], (tuple, list)) and all(isinstance(i, int) for i in args[0]):
        return math.prod(args[0])
    tags = frozenset({"ceil"}) if name == "ceil" else frozenset()
    return Unk(deps=deps_of(args), tags=tags | tags_of(args))


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, Dtype):
        return value.name
    if isinstance(value, str):
        return canonical_dtype(value)
    if isinstance(value, Api):
        return canonical_dtype(value.name.rsplit(".", 1)[-1])
    return None


def _buffer_name(value: Any) -> str:
    if value is None:
        return "sbuf"
    if isinstance(value, Buffer):
        return value.name
    text = value if isinstance(value, str) else value.name if isinstance(value, Api) else ""
    if "psum" in text:
        return "psum"
    if "shared_hbm" in text:
        return "shared_hbm"
    if "hbm" in text:
        return "hbm"
    if "sbuf" in text:
        return "sbuf"
    return "unknown"


def _engine_name(value: Any) -> str | None:
    if isinstance(value, Api):
        return nki_api.ENGINE_NAMES.get(value.name.rsplit(".", 1)[-1])
    if isinstance(value, str):
        return nki_api.ENGINE_NAMES.get(value)
    return None


def _alu_of(name: str, kw: dict[str, Any]) -> str | None:
    if name in nki_api.ALU_OP:
        return nki_api.ALU_OP[name]
    for key in ("op", "op0"):
        value = kw.get(key)
        if isinstance(value, Api):
            short = value.name.rsplit(".", 1)[-1]
            mapped = nki_api.ALU_OP.get(f"nl.{short}")
            return mapped or short
    return None


def _activation_fn(name: str, rest: list[Any], kw: dict[str, Any]) -> str | None:
    info = nki_api.info(name)
    if info is not None and info.kind == "activation_fn":
        return name.split(".", 1)[1]
    if name in ("nisa.activation", "nisa.activation_reduce"):
        value = kw.get("op")
        if value is None and rest and isinstance(rest[0], Api):
            value = rest[0]
        if isinstance(value, Api):
            return value.name.rsplit(".", 1)[-1]
    return None


def _par_dim_index(shape_node: ast.expr | None, walker: _KernelWalker) -> int:
    if isinstance(shape_node, (ast.Tuple, ast.List)):
        for i, elt in enumerate(shape_node.elts):
            if isinstance(elt, ast.Call):
                callee = walker.quiet_eval(elt.func)
                if isinstance(callee, Api) and callee.name == "nl.par_dim":
                    return i
    return 0


def _slice_extent(s: SliceV, size: Any = None) -> int | None:
    lower = 0 if s.lower is None else s.lower
    upper = size if s.upper is None else s.upper
    lo, hi = as_lin(lower), as_lin(upper)
    if lo is None or hi is None:
        return None
    extent = known_int(lin_add(hi, lo, -1))
    step = 1 if s.step is None else known_int(s.step)
    if extent is None or step is None or step <= 0:
        return None
    return max(0, -(-extent // step))


def _dim_access(item: Any, size: Any, walker: _KernelWalker) -> DimAccess:
    if isinstance(item, SliceV):
        lower = 0 if item.lower is None else item.lower
        upper = size if item.upper is None else item.upper
        extent = _slice_extent(item, size)
        full = item.lower is None and item.upper is None and item.step is None
        bounded = "min" in (tags_of(upper) | tags_of(lower))
        parts: tuple[Any, ...] = ()
        if isinstance(upper, Unk) and upper.parts and as_lin(lower) is not None:
            # upper = min(a, b, ...): extent = min(a - lower, b - lower, ...)
            parts = tuple(lin_add(as_lin(p), as_lin(lower), -1) for p in upper.parts)  # type: ignore[arg-type]
        guard = upper.line if isinstance(upper, Unk) else lower.line if isinstance(lower, Unk) else None
        return DimAccess(kind="full" if full else "slice", extent=extent,
                         deps=deps_of(lower) | (deps_of(upper) if item.upper is not None else frozenset()),
                         bounded=bounded, start=lower, extent_parts=parts, guard_line=guard)
    if isinstance(item, DsV):
        size_i = known_int(item.size)
        parts = item.size.parts if isinstance(item.size, Unk) else ()
        return DimAccess(kind="slice", extent=size_i, deps=deps_of(item.start) | deps_of(item.size),
                         bounded="min" in tags_of(item.size) or "min" in tags_of(item.start), start=item.start,
                         extent_parts=parts, guard_line=item.size.line if isinstance(item.size, Unk) else None)
    if isinstance(item, Grid):
        start = item.offset if not item.scaled else Unk(deps=item.deps)
        return DimAccess(kind="grid", extent=item.extent if not item.scaled else None, deps=item.deps,
                         grid_axis=item.axis or "p", start=start, grid=item.gid)
    if isinstance(item, TRef):
        t = walker.km.tensors[item.tid]
        return DimAccess(kind="indirect", extent=t.partitions, deps=frozenset(), start=Unk())
    if isinstance(item, (int, Lin)) and not isinstance(item, bool):
        return DimAccess(kind="int", extent=1, deps=deps_of(item), start=item)
    if isinstance(item, Unk):
        return DimAccess(kind="int", extent=1, deps=item.deps, start=item)
    return DimAccess(kind="unknown", extent=None, deps=deps_of(item), start=Unk())


def _compose(prev: tuple[DimAccess, ...], items: list[Any]) -> list[DimAccess] | None:
    """Index a view again: new index items apply to the view's non-integer dims, in order."""
    items = [i for i in items if i is not None and i is not Ellipsis]
    out: list[DimAccess] = []
    pending = list(items)
    for d in prev:
        if d.kind == "int" or not pending:
            out.append(d)
            continue
        item = pending.pop(0)
        if isinstance(item, SliceV) and item.lower is None and item.upper is None:
            out.append(d)
        elif isinstance(item, (SliceV, DsV, int, Lin, Unk, Grid)):
            inner = _dim_access(item, d.extent, _NullWalker)  # type: ignore[arg-type]
            start = d.start
            s_lin, i_lin = as_lin(start), as_lin(inner.start)
            combined = lin_add(s_lin, i_lin) if s_lin is not None and i_lin is not None else Unk(
                deps=d.deps | inner.deps)
            out.append(replace(inner, deps=d.deps | inner.deps, start=combined, bounded=d.bounded or inner.bounded))
        else:
            return None
    if pending:
        return None
    return out


class _NullWalker:
    """Stand-in for `_dim_access` when no tensor lookup is needed."""

    km = None


def _finish_access(t: Tensor, dims: tuple[DimAccess, ...], text: str, whole: bool) -> Access:
    grid_dims = [i for i, d in enumerate(dims) if d.kind == "grid"]
    partitions: int | None
    free: int | None
    part_dim: int | None
    transposed = False
    if grid_dims:
        p_dims = [i for i in grid_dims if dims[i].grid_axis == "p"]
        f_dims = [i for i, d in enumerate(dims) if d.kind in ("grid", "slice", "full") and i not in p_dims]
        part_dim = p_dims[0] if p_dims else None
        partitions = dims[part_dim].extent if part_dim is not None else 1
        free = _product(dims[i].extent for i in f_dims)
        if part_dim is not None:
            transposed = any(dims[i].grid_axis == "f" and i < part_dim for i in grid_dims)
    elif t.on_chip:
        part_dim = t.pdim if t.pdim < len(dims) else (0 if dims else None)
        partitions = dims[part_dim].extent if part_dim is not None else None
        free = _product(d.extent for i, d in enumerate(dims) if i != part_dim and d.kind != "int") if dims else None
    else:
        non_int = [i for i, d in enumerate(dims) if d.kind != "int"]
        if not dims:
            part_dim, partitions, free = None, None, None
        elif len(non_int) >= 2:
            part_dim = non_int[0]
            partitions = dims[part_dim].extent
            free = _product(dims[i].extent for i in non_int[1:])
        elif len(non_int) == 1:
            only = non_int[0]
            if only > 0:
                part_dim, partitions, free = only - 1, 1, dims[only].extent
            else:
                part_dim, partitions, free = only, dims[only].extent, 1
        else:
            part_dim, partitions, free = len(dims) - 1, 1, 1
    return Access(tensor=t.id, dims=dims, text=text, whole=whole, partitions=partitions, free=free,
                  part_dim=part_dim, transposed=transposed)


def _product(values: Any) -> int | None:
    out = 1
    for v in values:
        if v is None:
            return None
        out *= v
    return out


def _region_shape(access: Access) -> list[Any]:
    shape = [d.extent for d in access.dims if d.kind != "int"]
    if access.dims and access.dims[0].kind == "int":
        shape.insert(0, 1)
    return shape


def _loaded_shape(access: Access) -> tuple[Any, ...] | None:
    """Shape of the SBUF tile that `nl.load(access)` creates: partitions first."""
    if access.partitions is None and access.free is None:
        return None
    grids = [d for d in access.dims if d.kind == "grid"]
    if grids:
        p = [d.extent for d in grids if d.grid_axis == "p"]
        f = [d.extent for d in access.dims if d.kind != "int" and not (d.kind == "grid" and d.grid_axis == "p")]
        return tuple(p[:1] or [1]) + tuple(f)
    non_int = [d.extent for d in access.dims if d.kind != "int"]
    if len(non_int) >= 2:
        return tuple(non_int)
    return (access.partitions, access.free)


def _trip_count(start: Any, stop: Any, step: Any) -> int | None:
    a, b, s = known_int(start), known_int(stop), known_int(step)
    if a is None or b is None or s is None or s == 0:
        return None
    if s > 0:
        return max(0, -(-(b - a) // s))
    return max(0, -(-(a - b) // -s))


# ----------------------------------------------------------------------------------------------
# Module level


def _module_constants(module: _Module, context: AnalysisContext | None) -> None:
    """Evaluate simple module-level assignments (tile sizes, dtypes) and find mutable containers."""
    fake = ast.FunctionDef(name="<module>", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                kw_defaults=[], defaults=[]),
                           body=[], decorator_list=[], lineno=1, end_lineno=1, col_offset=0)
    walker = _KernelWalker(module, fake, context, recording=False)
    walker.frames.append(_Frame(func="<module>"))
    for node in module.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value_node = node.value
            if value_node is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if _is_container_expr(value_node, module):
                for target in targets:
                    if isinstance(target, ast.Name):
                        module.containers[target.id] = node.lineno
                continue
            if isinstance(value_node, ast.Call):
                callee = walker.quiet_eval(value_node.func)
                if isinstance(callee, Api) and callee.name.split(".")[0] in ("nki", "torch_neuronx"):
                    continue
            value = walker.quiet_eval(value_node)
            for target in targets:
                if isinstance(target, ast.Name) and not isinstance(value, (TRef,)):
                    module.constants[target.id] = value
                elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) \
                        and len(value) == len(target.elts):
                    for elt, item in zip(target.elts, value):
                        if isinstance(elt, ast.Name):
                            module.constants[elt.id] = item


def _is_container_expr(node: ast.expr, module: _Module) -> bool:
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        dotted = _dotted(node.func)
        if dotted is None:
            return False
        head, _, rest = dotted.partition(".")
        if head in module.aliases:
            dotted = module.aliases[head] + ("." + rest if rest else "")
        return dotted in _CONTAINER_CALLS or dotted.rsplit(".", 1)[-1] in ("OrderedDict", "defaultdict")
    return False


def _kernel_functions(module: _Module, context: AnalysisContext | None) -> list[ast.FunctionDef]:
    walker_names: list[str] = []
    probe = _KernelWalker(module, next(iter(module.functions.values())), context, recording=False) \
        if module.functions else None
    decorated: list[str] = []
    for name, fdef in module.functions.items():
        if probe is not None and any(_is_kernel_decorator(probe.decorator_name(d)) for d in fdef.decorator_list):
            decorated.append(name)
    # `kernel = nki.jit(func)` at module level.
    for node in module.tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and probe is not None:
            name = probe.decorator_name(node.value.func)
            if _is_kernel_decorator(name) and node.value.args and isinstance(node.value.args[0], ast.Name):
                target = node.value.args[0].id
                if target in module.functions and target not in decorated:
                    decorated.append(target)
    if context is not None and context.kernel and context.kernel in module.functions:
        walker_names = [context.kernel]
    elif decorated:
        walker_names = decorated
    else:
        walker_names = [name for name, fdef in module.functions.items() if _uses_nki(fdef, module)]
    return [module.functions[name] for name in walker_names]


def _uses_nki(fdef: ast.FunctionDef, module: _Module) -> bool:
    nki_locals = {name for name, dotted in module.aliases.items()
                  if canonical(dotted).split(".")[0] in ("nl", "nisa", "nki")}
    return any(isinstance(n, ast.Name) and n.id in nki_locals for n in ast.walk(fdef))


def _container_writes(module: _Module) -> list[tuple[str, str, int]]:
    """Writes to module-level dicts/lists from any function: `_cache[key] = out`, `_cache.update(...)`."""
    out: list[tuple[str, str, int]] = []
    if not module.containers:
        return out
    for fname, fdef in module.functions.items():
        for node in ast.walk(fdef):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id in module.containers:
                    out.append((fname, target.value.id, node.lineno))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in module.containers \
                    and node.func.attr in _CONTAINER_WRITE_METHODS:
                out.append((fname, node.func.value.id, node.lineno))
    return out


def build(source: str, path: str, context: AnalysisContext | None = None) -> NkiModel:
    """Parse `source` (the NKI port at task-relative `path`) into an NkiModel."""
    model = NkiModel(path=path, namespace=None, line_count=source.count("\n") + 1)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        model.syntax_error = (exc.msg or "invalid syntax", exc.lineno)
        return model
    module = _Module(tree, source)
    model.imports = dict(module.aliases)
    model.import_lines = list(module.import_lines)
    model.namespace = module.namespace
    model.functions = {name: (f.lineno, f.end_lineno or f.lineno) for name, f in module.functions.items()}
    _module_constants(module, context)
    model.module_containers = dict(module.containers)
    probe = _KernelWalker(module, next(iter(module.functions.values())), context, recording=False) \
        if module.functions else None
    for name, fdef in module.functions.items():
        for deco in fdef.decorator_list:
            dname = probe.decorator_name(deco) if probe else None
            if dname in _CACHE_DECORATORS:
                model.cache_decorators.append((name, deco.lineno, dname))
    model.container_writes = _container_writes(module)
    for fdef in _kernel_functions(module, context):
        walker = _KernelWalker(module, fdef, context)
        model.kernels.append(walker.walk_kernel())
    return model
