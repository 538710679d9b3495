"""The kernel model under construction: the one place a walk creates tensors, operations and loops.

A walk also evaluates sub-expressions a second time (to read a trip count, a shape or a test); those
re-reads run with `recording` off, so they add no operations or loops to the model. Tensors they create
still get ids (ids only need to be unique), which keeps ids identical whichever way an expression is read.
"""

from __future__ import annotations

import ast

from nkitui.analysis.nki.access import finish_access
from nkitui.analysis.nki.model import Access, DimAccess, KernelModel, Loop, Op, Tensor
from nkitui.analysis.nki.scope import Scope
from nkitui.analysis.nki.source import SourceText
from nkitui.analysis.nki.values import Grid, SliceV, TRef, Value, deps_of, known_int, symbol


class KernelRecorder:
    """Adds tensors, operations and loops to one `KernelModel`, and keeps the loop nest of the walk."""

    def __init__(self, km: KernelModel, scope: Scope, source: SourceText, *, recording: bool = True):
        self.km = km
        self.scope = scope
        self.source = source
        self.recording = recording
        self.loop_stack: list[int] = []  # loops around the statement being walked, outermost first
        self.next_tid = 0
        self.next_loop = 0
        self.next_op = 0
        self.grid_counter = 0

    # -- tensors ---------------------------------------------------------------------------------------

    def new_tensor(self, *, name: str | None, buffer: str, shape: tuple[Value, ...] | None, dtype: str | None,
                   line: int, origin: str, api: str | None = None, param: str | None = None,
                   typed: bool = False, alias_of: int | None = None, init: str | None = None,
                   pdim: int = 0) -> Tensor:
        t = Tensor(id=self.next_tid, name=name, buffer=buffer, shape=shape, dtype=dtype, line=line, origin=origin,
                   api=api, loop=self.loop_stack[-1] if self.loop_stack else None, param=param, typed=typed,
                   alias_of=alias_of, init=init, pdim=pdim)
        self.next_tid += 1
        self.km.tensors[t.id] = t
        return t

    def whole_access(self, t: Tensor, text: str) -> Access:
        dims: tuple[DimAccess, ...] = ()
        if t.shape is not None:
            dims = tuple(DimAccess(kind="full", extent=known_int(s), deps=deps_of(s), text=":", start=0)
                         for s in t.shape)
        return finish_access(t, dims, text or (t.name or ""), whole=True)

    def access_of(self, ref: TRef, text: str = "") -> Access:
        if ref.view is not None:
            view: Access = ref.view
            return view
        return self.whole_access(self.km.tensors[ref.tid], text)

    def escape(self, values: Value) -> None:
        """Tensors handed to code the analysis cannot follow: their uses are unknown."""
        for ref in tensor_refs(values):
            self.km.escaped.add(self.km.root(ref.tid).id)

    def as_tensor(self, ref: TRef) -> None:
        """Evidence that a parameter of unknown type is a tensor (indexed, loaded, .shape read)."""
        t = self.km.tensors[ref.tid]
        if t.origin == "param" and t.param is not None:
            self.km.tensor_params.add(t.param)

    def scalarize(self, value: Value) -> Value:
        """A kernel parameter of unknown type used as a number becomes a symbol (not a tensor)."""
        if isinstance(value, TRef) and value.view is None:
            t = self.km.tensors[value.tid]
            if t.origin == "param" and not t.typed and t.param is not None and t.param not in self.km.tensor_params:
                self.km.scalar_params.add(t.param)
                return symbol(t.param)
        if isinstance(value, tuple):
            return tuple(self.scalarize(v) for v in value)
        return value

    def scalarize_slice(self, item: Value) -> Value:
        if isinstance(item, SliceV):
            return SliceV(self.scalarize(item.lower), self.scalarize(item.upper), self.scalarize(item.step))
        return item

    def inherit(self, dst_tid: int, src: Tensor, access: Access | None = None) -> None:
        """Facts a copy carries from its source: holds a matmul result, which HBM region and dtype it came from."""
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

    def created_inside(self, t: Tensor, loop_id: int) -> bool:
        """True when tensor `t` was created inside loop `loop_id` (so it is fresh per iteration)."""
        lid = t.loop
        while lid is not None:
            if lid == loop_id:
                return True
            lid = self.km.loops[lid].parent if lid in self.km.loops else None
        return False

    def shape_symbol(self, tid: int, name: str, dim: int) -> Value:
        """`x.shape[dim]`: the known size, else a symbol that rules can tie back to the tensor."""
        t = self.km.tensors.get(tid)
        if t is not None and t.shape is not None and dim < len(t.shape):
            return t.shape[dim]
        sym = f"{name}.shape[{dim}]"
        self.km.shape_symbols[sym] = (tid, dim)
        return symbol(sym)

    def make_grid(self, extent: int | None, axis: str | None) -> Grid:
        self.grid_counter += 1
        return Grid(gid=f"g{self.grid_counter}", extent=extent, axis=axis)

    # -- operations and loops --------------------------------------------------------------------------

    def new_op(self, api: str, kind: str, engine: str | None, node: ast.AST) -> Op:
        line: int = getattr(node, "lineno", 0)
        op = Op(id=self.next_op, api=api, kind=kind, engine=engine, line=line,
                end_line=getattr(node, "end_lineno", None) or line, loops=tuple(self.loop_stack),
                text=self.source.text(node), func=self.scope.frame.func)
        self.next_op += 1
        if self.recording:
            self.km.ops.append(op)
        return op

    def push_loop(self, kind: str, api: str, target: ast.expr | None, node: ast.AST, *, trip: int | None,
                  stop_text: str) -> Loop:
        var = target.id if isinstance(target, ast.Name) else (self.source.text(target) if target is not None else None)
        loop_id = self.next_loop
        self.next_loop += 1
        sym = f"{var or 'loop'}@L{loop_id}"
        parent = self.loop_stack[-1] if self.loop_stack else None
        line: int = getattr(node, "lineno", 0)
        loop = Loop(id=loop_id, api=api, kind=kind, var=var, sym=sym, line=line,
                    end_line=getattr(node, "end_lineno", None) or line,
                    trip=trip, stop_text=stop_text, parent=parent, depth=len(self.loop_stack))
        if self.recording:
            self.km.loops[loop_id] = loop
            self.km.symbols[sym] = loop_id
        self.loop_stack.append(loop_id)
        return loop

    def pop_loop(self) -> None:
        self.loop_stack.pop()


def tensor_refs(values: Value) -> list[TRef]:
    """Every tensor reference in a value, through tuples, lists and dicts."""
    out: list[TRef] = []
    if isinstance(values, TRef):
        out.append(values)
    elif isinstance(values, (list, tuple)):
        for v in values:
            out.extend(tensor_refs(v))
    elif isinstance(values, dict):
        for v in values.values():
            out.extend(tensor_refs(v))
    return out
