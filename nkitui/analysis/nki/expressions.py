"""Expressions of a kernel body evaluated to abstract values (see `values`): names, arithmetic,
comparisons and masks, attributes, subscripts of tensors, lists and shapes.

Dispatch is a table from AST node type to a `visit_<Node>` method, built once per evaluator; node types
without a method evaluate their children (for the symbols they depend on) and give `Unk`. Calls are
delegated to the `CallEvaluator`, which may walk helper bodies and so create operations.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nkitui.analysis.dtypes import canonical as canonical_dtype
from nkitui.analysis.nki import api as nki_api
from nkitui.analysis.nki.access import compose, dim_access, finish_access, region_shape, slice_extent
from nkitui.analysis.nki.imports import canonical
from nkitui.analysis.nki.model import DimAccess, StateUse
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.recorder import KernelRecorder, tensor_refs
from nkitui.analysis.nki.scope import Frame, Scope
from nkitui.analysis.nki.values import (
    Api,
    Buffer,
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
    Value,
    as_lin,
    combine_masks,
    deps_of,
    is_number,
    known_int,
    lin_add,
    lin_floordiv,
    lin_scale,
    require_lin,
    tags_of,
)

if TYPE_CHECKING:
    from nkitui.analysis.nki.calls import CallEvaluator
    from nkitui.analysis.nki.instructions import NkiCalls

_OPERATOR_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
                   ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and_", ast.BitOr: "or_",
                   ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}
_COMPARISONS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
                ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_PLAIN_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "is": lambda a, b: a is b,
    "is not": lambda a, b: a is not b,
}


def _overflow() -> Any:
    raise OverflowError()


_PY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b if abs(b) < 64 else _overflow(),
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else _overflow(),
    ast.RShift: lambda a, b: a >> b,
}


def names_in(node: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


class ExpressionEvaluator:
    """Evaluates expressions of one kernel walk to abstract values."""

    calls: CallEvaluator  # set by the walk once the call evaluators exist (they call each other)
    nki_calls: NkiCalls

    def __init__(self, module: ModuleFacts, scope: Scope, recorder: KernelRecorder):
        self.module = module
        self.source = module.source
        self.scope = scope
        self.recorder = recorder
        self.km = recorder.km
        self.compare_text = ""  # the comparison being evaluated, quoted by the masks it makes
        self.compare_line: int | None = None

    def eval(self, node: ast.expr | None) -> Value:
        if node is None:
            return None
        visitor = _VISITORS.get(type(node))
        if visitor is None:
            deps: frozenset[str] = frozenset()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    deps |= deps_of(self.eval(child))
            return Unk(deps=deps, text=self.source.text(node, 60))
        return visitor(self, node)

    def quiet_eval(self, node: ast.expr) -> Value:
        """Evaluate without recording operations (for re-reading sub-expressions)."""
        saved = self.recorder.recording
        self.recorder.recording = False
        try:
            return self.eval(node)
        finally:
            self.recorder.recording = saved

    # -- literals, names, containers -------------------------------------------------------------------

    def visit_Constant(self, node: ast.Constant) -> Value:
        return node.value

    def visit_Name(self, node: ast.Name) -> Value:
        if self.scope.is_module_container(node.id) and len(self.scope.frames) > 0:
            self.km.state.append(StateUse("container-read", node.id, node.lineno, self.source.text(node)))
        return self.scope.lookup(node.id)

    def visit_Tuple(self, node: ast.Tuple) -> Value:
        return tuple(self.eval(e) for e in node.elts)

    def visit_List(self, node: ast.List) -> Value:
        return [self.eval(e) for e in node.elts]

    def visit_Set(self, node: ast.Set) -> Value:
        for e in node.elts:
            self.eval(e)
        return Unk()

    def visit_Dict(self, node: ast.Dict) -> Value:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            key = self.eval(k) if k is not None else None
            val = self.eval(v)
            if isinstance(key, (str, int)):
                out[key] = val
        return out

    def visit_Slice(self, node: ast.Slice) -> Value:
        return SliceV(self.eval(node.lower), self.eval(node.upper), self.eval(node.step))

    def visit_Starred(self, node: ast.Starred) -> Value:
        value = self.eval(node.value)
        return Unk(deps=deps_of(value))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> Value:
        for v in node.values:
            self.eval(v)
        return Unk(text="str")

    def visit_FormattedValue(self, node: ast.FormattedValue) -> Value:
        self.eval(node.value)
        return Unk()

    def visit_Lambda(self, node: ast.Lambda) -> Value:
        return Unk(text="lambda")

    def visit_NamedExpr(self, node: ast.NamedExpr) -> Value:
        value = self.eval(node.value)
        self.scope.frame.env[node.target.id] = value
        return value

    def visit_IfExp(self, node: ast.IfExp) -> Value:
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

    def _comprehension(self, generators: list[ast.comprehension], elts: list[ast.expr]) -> Value:
        frame = Frame(func=self.scope.frame.func)
        self.scope.frames.append(frame)
        deps: frozenset[str] = frozenset()
        for gen in generators:
            it = self.eval(gen.iter)
            deps |= deps_of(it)
            for name in names_in(gen.target):
                frame.env[name] = Unk(deps=deps_of(it), text=name)
        refs = []
        for e in elts:
            value = self.eval(e)
            refs.extend(tensor_refs(value))
        self.scope.frames.pop()
        if refs:
            return [refs[0]]
        return Unk(deps=deps)

    def visit_ListComp(self, node: ast.ListComp) -> Value:
        return self._comprehension(node.generators, [node.elt])

    def visit_SetComp(self, node: ast.SetComp) -> Value:
        return self._comprehension(node.generators, [node.elt])

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> Value:
        return self._comprehension(node.generators, [node.elt])

    def visit_DictComp(self, node: ast.DictComp) -> Value:
        return self._comprehension(node.generators, [node.key, node.value])

    def visit_Await(self, node: ast.Await) -> Value:
        return self.eval(node.value)

    def visit_Call(self, node: ast.Call) -> Value:
        return self.calls.call(node)

    # -- operators ---------------------------------------------------------------------------------------

    def visit_BoolOp(self, node: ast.BoolOp) -> Value:
        values = [self.eval(v) for v in node.values]
        if all(isinstance(v, bool) for v in values):
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if any(isinstance(v, Mask) for v in values):
            return combine_masks(values)
        deps: frozenset[str] = frozenset()
        for v in values:
            deps |= deps_of(v)
        return Unk(deps=deps)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Value:
        v = self.eval(node.operand)
        if isinstance(node.op, ast.USub):
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            lin = as_lin(v)
            if lin is not None:
                return lin_scale(lin, -1)
            if isinstance(v, TRef):
                return self.nki_calls.tensor_operator("operator.neg", [v], node, alu="multiply", scalars=[-1])
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

    def visit_Compare(self, node: ast.Compare) -> Value:
        self.compare_text = self.source.text(node, 100)
        self.compare_line = node.lineno
        left = self.recorder.scalarize(self.eval(node.left))
        results: list[Value] = []
        for op, comp in zip(node.ops, node.comparators):
            right = self.recorder.scalarize(self.eval(comp))
            results.append(self.compare(op, left, right))
            left = right
        if len(results) == 1:
            return results[0]
        if all(isinstance(r, bool) for r in results):
            return all(results)
        return combine_masks(results)

    def compare(self, op: ast.cmpop, left: Value, right: Value) -> Value:
        sym = _COMPARISONS[type(op)]
        plain = (int, float, str, bool, type(None))
        if isinstance(left, plain) and isinstance(right, plain) and sym not in ("in", "not in"):
            try:
                return _PLAIN_COMPARE[sym](left, right)
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

    def visit_BinOp(self, node: ast.BinOp) -> Value:
        left = self.recorder.scalarize(self.eval(node.left))
        right = self.recorder.scalarize(self.eval(node.right))
        return self.binop(type(node.op), left, right, node)

    def binop(self, op: type[ast.operator], left: Value, right: Value, node: ast.AST) -> Value:
        if isinstance(left, TRef) or isinstance(right, TRef):
            name = f"operator.{_OPERATOR_NAMES.get(op, 'op')}"
            tensors = [v for v in (left, right) if isinstance(v, TRef)]
            scalars = [v for v in (left, right) if not isinstance(v, TRef)]
            alu = nki_api.ALU_OP.get(name)
            if op is ast.MatMult:
                return self.nki_calls.tensor_operator(name, tensors, node, kind="matmul", engine="tensor")
            return self.nki_calls.tensor_operator(name, tensors, node, alu=alu, scalars=scalars)
        if isinstance(left, Mask) or isinstance(right, Mask):
            return combine_masks([left, right])
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
        if is_number(left) and is_number(right):
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
            unk, other_lin = (left, b) if isinstance(left, Unk) and left.parts else (right, a)
            assert other_lin is not None  # the condition above checked it
            sign = -1 if op is ast.Sub else 1
            parts = tuple(lin_add(require_lin(p), other_lin, sign) for p in unk.parts)
            return Unk(deps=unk.deps | deps_of(other_lin), tags=unk.tags, parts=parts, line=unk.line)
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

    # -- attributes and subscripts ---------------------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> Value:
        base = self.eval(node.value)
        attr = node.attr
        if isinstance(base, Api):
            return self.api_attribute(base, attr)
        if isinstance(base, TRef):
            t = self.km.tensors[base.tid]
            self.recorder.as_tensor(base)
            if attr == "shape":
                if base.view is not None:
                    return tuple(region_shape(base.view))
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
                return self.calls.view_method(base, "T", [], {}, node)
            return Method(base, attr)
        if isinstance(base, MGrid):
            index = {"p": 0, "x": 1, "y": 2, "z": 3}.get(attr)
            if index is not None and index < len(base.grids):
                return base.grids[index]
        if isinstance(base, FuncRef):
            return Unk(text=f"{base.name}.{attr}")
        if isinstance(base, Dtype):
            return Unk()
        if isinstance(node.value, ast.Name) and self.scope.is_module_container(node.value.id):
            return Method(base, attr)
        if isinstance(base, Unk):
            return Unk(deps=base.deps, tags=base.tags - {"min", "max"}, text=f"{base.text}.{attr}")
        if isinstance(base, Lin):
            return Unk(deps=base.deps)
        return Method(base, attr)

    def api_attribute(self, base: Api, attr: str) -> Value:
        name = canonical(f"{base.name}.{attr}")
        if base.name in ("nl", "np", "torch", "jnp", "ml_dtypes", "nki.language") and attr in nki_api.DTYPE_ATTRS:
            return Dtype(canonical_dtype(attr) or attr)
        if base.name == "nl.tile_size" and attr in nki_api.TILE_SIZE:
            return nki_api.TILE_SIZE[attr]
        if base.name == "nl" and attr in nki_api.BUFFER_ATTRS:
            return Buffer(nki_api.BUFFER_ATTRS[attr])
        return Api(name)

    def visit_Subscript(self, node: ast.Subscript) -> Value:
        base = self.eval(node.value)
        if isinstance(base, TRef):
            return self.subscript_tensor(base, node)
        index = self.eval(node.slice)
        if isinstance(base, Api) and base.name == "nl.mgrid":
            items = index if isinstance(index, tuple) else (index,)
            grids = []
            for position, item in enumerate(items):
                extent = slice_extent(item) if isinstance(item, SliceV) else known_int(item)
                grids.append(self.recorder.make_grid(extent, "p" if position == 0 else "f"))
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
                return self.recorder.shape_symbol(base.tid, base.name, i)
            return Unk()
        if isinstance(base, dict):
            if isinstance(index, (str, int)) and index in base:
                return base[index]
            return Unk()
        if isinstance(node.value, ast.Name) and self.scope.is_module_container(node.value.id):
            return Unk(tags=frozenset({"cached"}))
        return Unk(deps=deps_of(base) | deps_of(index), tags=tags_of(base))

    def subscript_tensor(self, base: TRef, node: ast.Subscript) -> TRef:
        """`t[...]`: a view of part of a tensor, with how each dimension is indexed."""
        self.recorder.as_tensor(base)
        index = self.eval(node.slice)
        items = list(index) if isinstance(index, tuple) else [index]
        items = [self.recorder.scalarize(i) if isinstance(i, TRef) else self.recorder.scalarize_slice(i)
                 for i in items]
        t = self.km.tensors[base.tid]
        text = self.source.text(node)
        if base.view is not None and not base.view.whole:
            composed = compose(base.view.dims, items)
            if composed is None:
                return TRef(base.tid, finish_access(t, (DimAccess(kind="unknown", extent=None,
                                                                   deps=deps_of(index)),), text, whole=False))
            return TRef(base.tid, finish_access(t, tuple(composed), text, whole=False))
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
                return TRef(base.tid, self.recorder.whole_access(t, text))
        dims: list[DimAccess] = []
        items = [item for item in items if item is not None]
        for d, item in enumerate(items):
            size = t.shape[d] if t.shape is not None and d < len(t.shape) else None
            dims.append(dim_access(item, size, lambda tid: self.km.tensors[tid].partitions))
        if t.shape is not None:
            for d in range(len(items), len(t.shape)):
                size = t.shape[d]
                dims.append(DimAccess(kind="full", extent=known_int(size), deps=deps_of(size), text=":", start=0))
        return TRef(base.tid, finish_access(t, tuple(dims), text, whole=False))


# The dispatch table: AST node type -> the `visit_<Node>` method that evaluates it.
_VISITORS: dict[type[ast.AST], Callable[[ExpressionEvaluator, Any], Value]] = {
    getattr(ast, name[len("visit_"):]): getattr(ExpressionEvaluator, name)
    for name in dir(ExpressionEvaluator) if name.startswith("visit_")
}
