"""Expressions of a kernel body evaluated to abstract values (see nki_values): names, arithmetic,
comparisons and masks, attributes, subscripts of tensors, lists and shapes.

`ExprMixin` is one part of the kernel walker (`nki_walker._KernelWalker`); it relies on the walker's
frames, kernel model and call handling (`ev_Call` lives in nki_calls.CallsMixin).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from nkitui.analysis import nki_api
from nkitui.analysis.dtypes import canonical as canonical_dtype
from nkitui.analysis.nki_access import compose, dim_access, finish_access, region_shape, slice_extent
from nkitui.analysis.nki_imports import canonical
from nkitui.analysis.nki_model import DimAccess, StateUse
if TYPE_CHECKING:
    from nkitui.analysis.nki_walker import _KernelWalker

from nkitui.analysis.nki_values import (
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
    as_lin,
    deps_of,
    known_int,
    lin_add,
    lin_floordiv,
    lin_scale,
    symbol,
    tags_of,
)

BUILTINS = {"range", "min", "max", "len", "int", "float", "abs", "tuple", "list", "zip", "enumerate", "print",
            "isinstance", "open", "sum", "round", "divmod", "reversed", "sorted", "map", "bool", "str",
            "setattr", "getattr", "hasattr", "delattr", "globals", "vars", "dict", "set", "type", "id", "hash", "any",
            "all", "iter", "next", "eval", "exec", "compile", "__import__"}
_OPERATOR_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
                   ast.Mod: "mod", ast.Pow: "pow", ast.MatMult: "matmul", ast.BitAnd: "and_", ast.BitOr: "or_",
                   ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}


@dataclass
class Frame:
    """One function activation during the walk: its bindings, local imports and return values."""

    func: str
    env: dict[str, Any] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    returns: list[Any] = field(default_factory=list)
    divisions: dict[str, tuple[str, Any, str, int | None]] = field(default_factory=dict)


def names_in(node: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))


class ExprMixin:
    """Evaluation of expressions (mixed into the kernel walker)."""

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
        if name in BUILTINS:
            return Api(f"builtins.{name}")
        if default is not ...:
            return default
        return Unk(text=name)

    def is_module_container(self, name: str) -> bool:
        """A module-level dict/list/set (or a mutable default argument of the kernel): state that outlives
        one call."""
        if name in self.state_params and self.frames and name in self.frames[0].env \
                and all(name not in f.env for f in self.frames[1:]):
            return True
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
        frame = Frame(func=self.frame.func)
        frame.env = {}
        self.frames.append(frame)
        deps: frozenset[str] = frozenset()
        for gen in node.generators:  # type: ignore[attr-defined]
            it = self.eval(gen.iter)
            deps |= deps_of(it)
            for name in names_in(gen.target):
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
            return combine_masks(values)
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
        return combine_masks(results)

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
                extent = slice_extent(item) if isinstance(item, SliceV) else known_int(item)
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

    def subscript_tensor(self, base: TRef, node: ast.Subscript) -> TRef:
        self.as_tensor(base)
        index = self.eval(node.slice)
        items = list(index) if isinstance(index, tuple) else [index]
        items = [self.scalarize(i) if isinstance(i, TRef) else scalarize_slice(self, i) for i in items]
        t = self.km.tensors[base.tid]
        text = self.m.seg.text(node)
        if base.view is not None and not base.view.whole:
            dims = compose(base.view.dims, items)
            if dims is None:
                return TRef(base.tid, finish_access(t, (DimAccess(kind="unknown", extent=None,
                                                                   deps=deps_of(index)),), text, whole=False))
            return TRef(base.tid, finish_access(t, tuple(dims), text, whole=False))
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
            dims.append(dim_access(item, size, lambda tid: self.km.tensors[tid].partitions))
        if rank is not None:
            for d in range(len(items), rank):
                size = t.shape[d]  # type: ignore[index]
                dims.append(DimAccess(kind="full", extent=known_int(size), deps=deps_of(size), text=":", start=0))
        return TRef(base.tid, finish_access(t, tuple(dims), text, whole=False))



_PY_OPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b if abs(b) < 64 else (_ for _ in ()).throw(OverflowError()),
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b, ast.BitXor: lambda a, b: a ^ b,
    ast.LShift: lambda a, b: a << b if 0 <= b < 64 else (_ for _ in ()).throw(OverflowError()),
    ast.RShift: lambda a, b: a >> b,
}


def combine_masks(values: list[Any]) -> Mask:
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


def scalarize_slice(walker: _KernelWalker, item: Any) -> Any:
    if isinstance(item, SliceV):
        return SliceV(walker.scalarize(item.lower), walker.scalarize(item.upper), walker.scalarize(item.step))
    return item


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
