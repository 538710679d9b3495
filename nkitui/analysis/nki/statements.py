"""Statements of a kernel body, walked once in program order (`ast.NodeVisitor`).

Loops become `Loop` records (kind, trip count, how the trip count divides a size by a tile); `if` on a
constant walks only the branch taken, other branches are both walked; `if`/`while` on tile data is noted
(NKI cannot branch on data); returns, asserts, `global` and local imports are recorded. Assignments are
delegated to `Assignments`, trip-count divisions to `TileDivisions`. Statement types without a visitor
(match, raise, delete ...) only have their expressions evaluated, so the names they use are still seen.
"""

from __future__ import annotations

import ast
import dataclasses

from nkitui.analysis.nki.access import trip_count
from nkitui.analysis.nki.assignments import Assignments
from nkitui.analysis.nki.divisions import TileDivisions
from nkitui.analysis.nki.expressions import ExpressionEvaluator, names_in
from nkitui.analysis.nki.imports import collect_imports
from nkitui.analysis.nki.model import HostCall, Loop, StateUse
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.recorder import KernelRecorder, tensor_refs
from nkitui.analysis.nki.scope import Scope
from nkitui.analysis.nki.values import Api, FuncRef, TRef, Unk, Value, deps_of, flatten, known_int, symbol

LOOP_KINDS = {
    "nl.affine_range": "affine", "nl.sequential_range": "sequential", "nl.static_range": "static",
    "nl.dynamic_range": "dynamic", "builtins.range": "range",
}
_ALU_OF_AUG = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.BitOr: "bitwise_or",
               ast.BitAnd: "bitwise_and"}

# (kind, api, start, stop, step, stop expression) of a `for` header
LoopHeader = tuple[str, str, Value, Value, Value, ast.expr | None]


class StatementWalker(ast.NodeVisitor):
    """Walks the statements of the kernel and of the helpers it inlines."""

    def __init__(self, module: ModuleFacts, scope: Scope, recorder: KernelRecorder, exprs: ExpressionEvaluator):
        self.module = module
        self.source = module.source
        self.scope = scope
        self.recorder = recorder
        self.km = recorder.km
        self.exprs = exprs
        self.assignments = Assignments(module, scope, recorder, exprs)
        self.divisions = TileDivisions(module, exprs)

    def walk_body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            self.visit(stmt)

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.exprs.eval(child)

    # -- simple statements -------------------------------------------------------------------------------

    def visit_Expr(self, node: ast.Expr) -> None:
        self.exprs.eval(node.value)

    def visit_Pass(self, node: ast.Pass) -> None:
        return

    def visit_Delete(self, node: ast.Delete) -> None:
        return

    def visit_Raise(self, node: ast.Raise) -> None:
        return

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        aliases, _ = collect_imports([node])
        self.scope.frame.aliases.update(aliases)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.visit_Import(node)

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> None:
        for name in node.names:
            self.km.state.append(StateUse("global", name, node.lineno, self.source.text(node)))

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.visit_Global(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.frame.env[node.name] = FuncRef(node.name, node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.frame.env[node.name] = Unk(text=node.name)

    def visit_Return(self, node: ast.Return) -> None:
        value = self.exprs.eval(node.value) if node.value is not None else None
        self.scope.frame.returns.append(value)
        if len(self.scope.frames) == 1:
            tids = [self.km.root(r.tid).id for r in tensor_refs(value)]
            self.km.returns.append((node.lineno, tids))
            for tag_value in flatten(value):
                if isinstance(tag_value, Unk) and "host" in tag_value.tags:
                    self.km.host_calls.append(HostCall("return of a host-computed value", node.lineno, [],
                                                       self.source.text(node)))

    def visit_Assert(self, node: ast.Assert) -> None:
        value = self.exprs.eval(node.test)
        self.km.asserts.append((node.lineno, self.source.text(node.test), deps_of(value) | names_in(node.test)))

    # -- control flow ------------------------------------------------------------------------------------

    def note_data_branch(self, test: Value, node: ast.If | ast.While) -> None:
        """`if tile[...] > 0:` / `while s > 1:` on tile values: NKI traces Python control flow once, on
        no data, so a branch on tensor values cannot work."""
        if isinstance(test, TRef) or self._tensor_operands(node.test):
            self.km.data_branches.append((node.lineno, self.source.text(node.test)))

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
        return any(isinstance(n, (ast.Name, ast.Subscript)) and isinstance(self.exprs.quiet_eval(n), TRef)
                   for n in operands)

    def visit_If(self, node: ast.If) -> None:
        test = self.exprs.eval(node.test)
        self.note_data_branch(test, node)
        if isinstance(test, bool):
            self.walk_body(node.body if test else node.orelse)
            return
        self.walk_body(node.body)
        self.walk_body(node.orelse)

    def visit_While(self, node: ast.While) -> None:
        self.note_data_branch(self.exprs.eval(node.test), node)
        self.recorder.push_loop("while", "while", None, node, trip=None, stop_text=self.source.text(node.test))
        self.walk_body(node.body)
        self.recorder.pop_loop()
        self.walk_body(node.orelse)

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            value = self.exprs.eval(item.context_expr)
            if item.optional_vars is not None:
                self.assignments.assign(item.optional_vars, value, node)
        self.walk_body(node.body)

    def visit_AsyncWith(self, node: ast.AsyncWith) -> None:
        self.visit_With(node)

    def visit_Try(self, node: ast.Try | ast.TryStar) -> None:
        self.walk_body(node.body)
        for handler in node.handlers:
            self.walk_body(handler.body)
        self.walk_body(node.orelse)
        self.walk_body(node.finalbody)

    def visit_TryStar(self, node: ast.TryStar) -> None:
        self.visit_Try(node)

    # -- assignments -------------------------------------------------------------------------------------

    def visit_Assign(self, node: ast.Assign) -> None:
        before = len(self.km.ops)
        value = self.exprs.eval(node.value)
        division = self.divisions.of(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and division is not None:
                self.scope.frame.divisions[target.id] = division
            self.assignments.assign(target, value, node, ops_before=before)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is None:
            return
        before = len(self.km.ops)
        value = self.exprs.eval(node.value)
        self.assignments.assign(node.target, value, node, ops_before=before)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        before = len(self.km.ops)
        value = self.exprs.eval(node.value)
        current = self.exprs.eval(node.target)
        if isinstance(current, TRef):
            self.assignments.accumulate_into(current, value, node, _ALU_OF_AUG.get(type(node.op), "other"), before)
            if isinstance(node.target, ast.Name):
                self.scope.frame.env[node.target.id] = current
            return
        result = self.exprs.binop(type(node.op), current, value, node)
        if isinstance(node.target, ast.Name):
            self.scope.frame.env[node.target.id] = result
        elif isinstance(node.target, ast.Subscript):
            self.assignments.store_subscript(node.target, result, node, before)

    # -- loops -------------------------------------------------------------------------------------------

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        kind, api, start, stop, step, stop_node = self.loop_header(node.iter)
        trip = trip_count(start, stop, step) if kind not in ("iter", "dynamic") else None
        items: list[Value] | tuple[Value, ...] | None = None
        if kind == "iter":
            seq = self.exprs.eval(node.iter)
            if not isinstance(seq, (list, tuple)):
                seq = self._iterated(node.iter)
            items = seq if isinstance(seq, (list, tuple)) else None
            trip = len(items) if items is not None else None
        stop_text = self.source.text(stop_node) if stop_node is not None else self.source.text(node.iter)
        loop = self.recorder.push_loop(kind, api, node.target, node, trip=trip, stop_text=stop_text)
        loop.start, loop.step = start, step
        if stop_node is not None:
            division = self.divisions.of(stop_node)
            if division is None and isinstance(stop_node, ast.Name):
                division = self.scope.lookup_division(stop_node.id)
            if division is not None:
                loop.division, loop.div_numerator, loop.div_numerator_text, loop.div_denominator = division
            else:
                step_i = known_int(step)
                if step_i is not None and step_i > 1 and known_int(start) == 0:
                    loop.division, loop.div_numerator = "step", stop
                    loop.div_numerator_text, loop.div_denominator = self.source.text(stop_node), step_i
        var_value: Value = symbol(loop.sym) if loop.sym else Unk()
        if isinstance(node.target, ast.Name):
            self.scope.frame.env[node.target.id] = var_value
        else:
            for name in names_in(node.target):
                self.scope.frame.env[name] = Unk(deps=frozenset({loop.sym}) if loop.sym else frozenset(), text=name)
        others: dict[int, list[int]] = {}
        if items:
            others = self._bind_tensor_items(node.target, items)
        first_op = len(self.km.ops)
        before = dict(self.scope.frame.env)
        self.walk_body(node.body)
        if others and self.recorder.recording:
            self._substitute_items(first_op, others)
            loop.picks.update(self.km.root(t).id for t in others)
            loop.picks.update(self.km.root(t).id for alts in others.values() for t in alts)
        self.record_rebinds(loop, before)
        self.recorder.pop_loop()
        self.walk_body(node.orelse)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.visit_For(node)

    def _iterated(self, it: ast.expr) -> Value:
        """The items of `zip` / `enumerate` / `reversed` over known tuples or lists (a literal, or a name bound to
        one), else None. Read with recording off: the header was evaluated already."""
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords
                and it.func.id in ("zip", "enumerate", "reversed") and it.func.id not in self.scope.frame.env):
            return None
        recording, self.recorder.recording = self.recorder.recording, False
        try:
            parts = [self.exprs.eval(a) for a in it.args]
        finally:
            self.recorder.recording = recording
        if not parts or not all(isinstance(p, (list, tuple)) for p in parts):
            return None
        if it.func.id == "zip":
            return list(zip(*parts))
        if len(parts) != 1:
            return None
        return list(enumerate(parts[0])) if it.func.id == "enumerate" else list(reversed(parts[0]))

    def _bind_tensor_items(self, target: ast.expr, items: list[Value] | tuple[Value, ...]) -> dict[int, list[int]]:
        """`for dst, src in ((a_tile, a_rows), (b_tile, b_rows))`: a Python loop over known items is unrolled
        when NKI traces the kernel, so every item's tensors are used. The body is walked once, each name bound to
        a view of the first item's tensor made for the loop (its shape and dtype hold for the others); returned:
        for each such view, the tensors the other items put in its place, which `_substitute_items` adds to the
        operations the body records through that name (so an input loaded through the loop counts as read, and
        one the body names directly does not stand for the others)."""
        first = _destructure(target, items[0])
        others: dict[int, list[int]] = {}
        for name, value in first.items():
            if not isinstance(value, TRef):
                continue
            alts = [alt.tid for item in items[1:] if isinstance(alt := _destructure(target, item).get(name), TRef)]
            bound = value
            if value.view is None:
                t = self.km.tensors[value.tid]
                view = self.recorder.new_tensor(
                    name=t.name, buffer=t.buffer, shape=t.shape, dtype=t.dtype, line=t.line, origin="view",
                    alias_of=t.id, param=t.param, api="loop-item", typed=t.typed, pdim=t.pdim)
                bound = TRef(view.id)
            self.scope.frame.env[name] = bound
            if alts:
                others[bound.tid] = alts
        return others

    def _substitute_items(self, first_op: int, others: dict[int, list[int]]) -> None:
        """Each operation the loop body recorded through a name bound to the first item's tensor also uses the
        other items' tensors in its place (same region: the items' views are assumed alike)."""
        tensors = self.km.tensors

        def alts(tid: int) -> list[int]:
            seen: set[int] = set()
            while tid not in others and tid not in seen:
                seen.add(tid)
                parent = tensors[tid].alias_of
                if parent is None:
                    return []
                tid = parent
            return others.get(tid, [])

        for op in self.km.ops[first_op:]:
            for accesses in (op.reads, op.writes):
                accesses.extend([dataclasses.replace(a, tensor=alt) for a in list(accesses) for alt in alts(a.tensor)])
            op.inputs.extend([alt for tid in list(op.inputs) for alt in alts(tid)])

    def record_rebinds(self, loop: Loop, before: dict[str, Value]) -> None:
        """Names rebound in the loop body whose earlier tensor the body reads: `t = op(t)` carries `t` from
        one iteration to the next."""
        if not self.recorder.recording:
            return
        read = {self.km.root(t).id for op in self.km.ops if loop.id in op.loops for t in op.inputs}
        for name, old in before.items():
            new = self.scope.frame.env.get(name)
            if isinstance(old, TRef) and new is not old and self.km.root(old.tid).id in read:
                loop.rebinds.append(name)

    def loop_header(self, it: ast.expr) -> LoopHeader:
        if isinstance(it, ast.Call):
            callee = self.exprs.eval(it.func)
            if isinstance(callee, Api) and callee.name in LOOP_KINDS:
                args = [self.recorder.scalarize(self.exprs.eval(a)) for a in it.args]
                for kw in it.keywords:
                    self.exprs.eval(kw.value)
                start: Value = 0
                step: Value = 1
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
                return LOOP_KINDS[callee.name], callee.name, start, stop, step, stop_node
        return "iter", "iter", 0, None, 1, None

def _destructure(target: ast.expr, value: Value) -> dict[str, Value]:
    """The names a `for` target binds to one known item: `x` -> item, `(d, s)` -> its parts (nested patterns too);
    names whose part is not known are left out."""
    if isinstance(target, ast.Name):
        return {target.id: value}
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (tuple, list)) \
            and len(target.elts) == len(value) and not any(isinstance(e, ast.Starred) for e in target.elts):
        out: dict[str, Value] = {}
        for elt, part in zip(target.elts, value):
            out.update(_destructure(elt, part))
        return out
    return {}
