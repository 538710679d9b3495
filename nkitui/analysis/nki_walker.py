"""Build an `NkiModel` by walking a kernel's AST once, in program order, with abstract values.

Both namespaces are read: legacy `neuronxcc.nki` (return-value ISA calls, `nl.load`/`nl.store`,
`arange`/`mgrid` grids with `mask=`, `psum += nc_matmul(...)`, `nl.par_dim`) and the new `nki`
(destination-first ISA calls, `nisa.dma_copy`, slicing with `nl.ds`, `accumulate=`). Helper
functions defined in the same file are followed into (inlined) so their operations count for the
kernel that calls them. Nothing is executed.
"""

from __future__ import annotations

import ast
from typing import Any

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.nki_access import finish_access, trip_count
from nkitui.analysis.nki_calls import CONTAINER_WRITE_METHODS, CallsMixin, flatten
from nkitui.analysis.nki_exprs import ExprMixin, Frame, names_in
from nkitui.analysis.nki_imports import canonical, collect_imports, namespace_of
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
    FuncRef,
    MGrid,
    ShapeV,
    TRef,
    Unk,
    deps_of,
    known_int,
    symbol,
)

_KERNEL_DECORATORS = {"nki.jit", "nki.trace", "nki.baremetal", "nki.benchmark", "nki.profile",
                      "nki.simulate_kernel", "nki.simulate", "torch_neuronx.nki_jit", "nki_jit", "jit"}
_CACHE_DECORATORS = {"functools.lru_cache", "functools.cache", "lru_cache", "cache", "functools.cached_property"}
_LOOP_KINDS = {
    "nl.affine_range": "affine", "nl.sequential_range": "sequential", "nl.static_range": "static",
    "nl.dynamic_range": "dynamic", "builtins.range": "range",
}
_CEIL_HELPERS = {"cdiv", "ceil_div", "div_ceil", "ceildiv", "div_round_up", "ceil_divide", "round_up_div"}
_CONTAINER_CALLS = {"dict", "list", "set", "collections.OrderedDict", "collections.defaultdict", "OrderedDict",
                    "defaultdict", "weakref.WeakValueDictionary"}
_ALU_OF_AUG = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.BitOr: "bitwise_or",
               ast.BitAnd: "bitwise_and"}


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
        self.local_nki_modules: frozenset[str] = frozenset()  # the project's own NKI helper modules
        self.globals: set[str] = set()  # every name bound at module level (classes, imports, assignments)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node  # type: ignore[assignment]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.globals.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.globals.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.globals.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))


class _KernelWalker(ExprMixin, CallsMixin):
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
        self.frames: list[Frame] = []
        self.loop_stack: list[int] = []
        self.next_tid = 0
        self.next_loop = 0
        self.next_op = 0
        self.call_stack: list[str] = []
        self.grid_counter = 0
        self.compare_text = ""
        self.state_params: set[str] = set()  # mutable default arguments of the kernel
        self.compare_line: int | None = None

    # ------------------------------------------------------------------------------------------
    # Entry points

    def walk_kernel(self) -> KernelModel:
        frame = Frame(func=self.fdef.name)
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
    def frame(self) -> Frame:
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
        return finish_access(t, dims, text or (t.name or ""), whole=True)

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

    def bind_kernel_params(self, fdef: ast.FunctionDef, frame: Frame) -> None:
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
            if name in defaults and isinstance(defaults[name], (ast.Dict, ast.List, ast.Set)):
                # `def kernel(x, _cache={})`: the default object persists across calls.
                self.state_params.add(name)
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
            for tag_value in flatten(value):
                if isinstance(tag_value, Unk) and "host" in tag_value.tags:
                    self.km.host_calls.append(HostCall("return of a host-computed value", node.lineno, [],
                                                       self.m.seg.text(node)))

    def stmt_Assert(self, node: ast.Assert) -> None:
        value = self.eval(node.test)
        self.km.asserts.append((node.lineno, self.m.seg.text(node.test), deps_of(value) | names_in(node.test)))

    def note_data_branch(self, test: Any, node: ast.If | ast.While) -> None:
        """`if tile[...] > 0:` / `while s > 1:` on tile values: NKI traces Python control flow once, on
        no data, so a branch on tensor values cannot work."""
        if isinstance(test, TRef) or self._tensor_operands(node.test):
            self.km.data_branches.append((node.lineno, self.m.seg.text(node.test)))

    def _tensor_operands(self, test: ast.expr) -> bool:
        if isinstance(test, ast.BoolOp):
            return any(self._tensor_operands(v) for v in test.values)
        if isinstance(test, ast.UnaryOp):
            return self._tensor_operands(test.operand)
        if isinstance(test, ast.Compare):
            if all(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
                return False  # `x is None`, `key in cache`: about the object, not its data
            operands = [test.left, *test.comparators]
        else:
            operands = [test]
        # Only names and subscripts: re-evaluating a call here could repeat its side effects.
        return any(isinstance(n, (ast.Name, ast.Subscript)) and isinstance(self.quiet_eval(n), TRef)
                   for n in operands)

    def stmt_If(self, node: ast.If) -> None:
        test = self.eval(node.test)
        self.note_data_branch(test, node)
        if isinstance(test, bool):
            self.walk_body(node.body if test else node.orelse)
            return
        self.walk_body(node.body)
        self.walk_body(node.orelse)

    def stmt_While(self, node: ast.While) -> None:
        self.note_data_branch(self.eval(node.test), node)
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
        trip = trip_count(start, stop, step) if kind not in ("iter", "dynamic") else None
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
            for name in names_in(node.target):
                self.frame.env[name] = Unk(deps=frozenset({loop.sym}) if loop.sym else frozenset(), text=name)
        before = dict(self.frame.env)
        self.walk_body(node.body)
        self.record_rebinds(loop, before)
        self.pop_loop(loop)
        self.walk_body(node.orelse)

    def record_rebinds(self, loop: Loop, before: dict[str, Any]) -> None:
        """Names rebound in the loop body whose earlier tensor the body reads: `t = op(t)` carries `t` from
        one iteration to the next."""
        if not self.recording:
            return
        read = {self.km.root(t).id for op in self.km.ops if loop.id in op.loops for t in op.inputs}
        for name, old in before.items():
            new = self.frame.env.get(name)
            if isinstance(old, TRef) and new is not old and self.km.root(old.tid).id in read:
                loop.rebinds.append(name)

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
            elif self.is_module_object(target.value):
                # `_Memo.last = out`, `sys.modules[__name__].x = out`: state on a module-level object.
                self.km.state.append(StateUse("module-state", self.m.seg.text(target), stmt.lineno,  # type: ignore[attr-defined]
                                              self.m.seg.text(stmt)))
        elif isinstance(target, ast.Starred):
            self.assign(target.value, Unk(), stmt)

    def is_module_object(self, node: ast.expr) -> bool:
        """`node` (a name, or attributes/subscripts of one) is bound at module level, not in the kernel."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if not isinstance(node, ast.Name):
            return False
        return node.id in self.m.globals and all(node.id not in f.env and node.id not in f.aliases for f in self.frames)

    def unpack(self, value: Any, n: int) -> list[Any]:
        if isinstance(value, (tuple, list)) and len(value) == n:
            return list(value)
        if isinstance(value, ShapeV):
            return [self.shape_symbol(value.tid, value.name, i) for i in range(n)]
        if isinstance(value, MGrid) and len(value.grids) == n:
            return list(value.grids)
        value = self.scalarize(value)  # `rows, cols = dims` unpacks a tuple parameter, not a tensor
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


    # -- tensor indexing ---------------------------------------------------------------------------


    # -- calls -------------------------------------------------------------------------------------


    # -- NKI calls ---------------------------------------------------------------------------------


    # ------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Free helpers


def _additive_terms(node: ast.expr, sign: int = 1) -> list[tuple[int, ast.expr]]:
    """`a + b - c` -> [(+1, a), (+1, b), (-1, c)]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        right_sign = sign if isinstance(node.op, ast.Add) else -sign
        return _additive_terms(node.left, sign) + _additive_terms(node.right, right_sign)
    return [(sign, node)]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_kernel_decorator(name: str | None) -> bool:
    return name is not None and (name in _KERNEL_DECORATORS or name.endswith(".nki_jit"))


# ----------------------------------------------------------------------------------------------
# Module level


def _module_constants(module: _Module, context: AnalysisContext | None) -> None:
    """Evaluate simple module-level assignments (tile sizes, dtypes) and find mutable containers."""
    fake = ast.FunctionDef(name="<module>", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                kw_defaults=[], defaults=[]),
                           body=[], decorator_list=[], lineno=1, end_lineno=1, col_offset=0)
    walker = _KernelWalker(module, fake, context, recording=False)
    walker.frames.append(Frame(func="<module>"))
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
        walker_names = _top_level(decorated, module)
    else:
        # No decorated kernel: undecorated functions that use NKI (the harness decorates them), but not
        # tests, fixtures or functions that wrap nested kernels of their own.
        walker_names = _top_level([name for name, fdef in module.functions.items()
                                   if _uses_nki(fdef, module) and not fdef.decorator_list
                                   and not name.startswith("test") and not _has_nested_kernel(fdef, probe)],
                                  module)
    return [module.functions[name] for name in walker_names]


def _has_nested_kernel(fdef: ast.FunctionDef, probe: _KernelWalker | None) -> bool:
    for node in ast.walk(fdef):
        if node is not fdef and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and probe is not None \
                and any(_is_kernel_decorator(probe.decorator_name(d)) for d in node.decorator_list):
            return True
    return False


def _top_level(names: list[str], module: _Module) -> list[str]:
    """Drop functions that another candidate calls: sub-kernels are analysed inside their callers."""
    called: set[str] = set()
    for name in names:
        for node in ast.walk(module.functions[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != name:
                called.add(node.func.id)
    top = [n for n in names if n not in called]
    return top or names


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
                    and node.func.attr in CONTAINER_WRITE_METHODS:
                out.append((fname, node.func.value.id, node.lineno))
    return out


def build(source: str, path: str, context: AnalysisContext | None = None,
          local_nki_modules: frozenset[str] = frozenset()) -> NkiModel:
    """Parse `source` (the NKI port at task-relative `path`) into an NkiModel.

    `local_nki_modules`: dotted names of the project's own modules that are NKI code themselves (helpers
    split into their own file); passing tiles to them is not host computation."""
    model = NkiModel(path=path, namespace=None, line_count=source.count("\n") + 1)
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        model.syntax_error = (exc.msg or "invalid syntax", exc.lineno)
        model.syntax_error_column = exc.offset
        return model
    module = _Module(tree, source)
    module.local_nki_modules = frozenset(local_nki_modules)
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
