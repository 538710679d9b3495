"""Assignments in a kernel body: binding names, unpacking, stores into tensor regions and accumulation.

`x[...] = nisa.op(...)` makes the op write straight into `x`; `x[...] = y` is a DMA (HBM on either side) or
an on-chip copy; `x[...] = 0` a memset; `psum += nc_matmul(...)` is TensorE accumulation into PSUM, and
`acc += t` / `acc = acc + t` a VectorE accumulation. Stores into module-level containers and attributes of
module-level objects are recorded as state that outlives the call.
"""

from __future__ import annotations

import ast

from nkitui.analysis.nki.expressions import ExpressionEvaluator
from nkitui.analysis.nki.model import HostCall, StateUse
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.recorder import KernelRecorder
from nkitui.analysis.nki.scope import Scope
from nkitui.analysis.nki.values import Api, FuncRef, MGrid, ShapeV, TRef, Unk, Value, deps_of


class Assignments:
    """Applies assignment statements to the scope and the kernel model."""

    def __init__(self, module: ModuleFacts, scope: Scope, recorder: KernelRecorder, exprs: ExpressionEvaluator):
        self.module = module
        self.source = module.source
        self.scope = scope
        self.recorder = recorder
        self.km = recorder.km
        self.exprs = exprs

    def assign(self, target: ast.expr, value: Value, stmt: ast.stmt, ops_before: int | None = None) -> None:
        if isinstance(target, ast.Name):
            previous = self.scope.lookup(target.id, default=None)
            if isinstance(value, TRef):
                t = self.km.tensors[value.tid]
                if t.name is None:
                    t.name = target.id
                self.mark_rebind_accumulate(previous, value, ops_before)
            self.scope.frame.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts))
            for elt, item in zip(target.elts, items):
                self.assign(elt, item, stmt)
        elif isinstance(target, ast.Subscript):
            self.store_subscript(target, value, stmt, ops_before)
        elif isinstance(target, ast.Attribute):
            base = self.exprs.eval(target.value)
            if isinstance(base, FuncRef) or (isinstance(target.value, ast.Name)
                                             and target.value.id in self.module.functions):
                self.km.state.append(StateUse("attribute", self.source.text(target), stmt.lineno,
                                              self.source.text(stmt)))
            elif self.scope.is_module_object(target.value):
                # `_Memo.last = out`, `sys.modules[__name__].x = out`: state on a module-level object.
                self.km.state.append(StateUse("module-state", self.source.text(target), stmt.lineno,
                                              self.source.text(stmt)))
        elif isinstance(target, ast.Starred):
            self.assign(target.value, Unk(), stmt)

    def unpack(self, value: Value, n: int) -> list[Value]:
        if isinstance(value, (tuple, list)) and len(value) == n:
            return list(value)
        if isinstance(value, ShapeV):
            return [self.recorder.shape_symbol(value.tid, value.name, i) for i in range(n)]
        if isinstance(value, MGrid) and len(value.grids) == n:
            return list(value.grids)
        value = self.recorder.scalarize(value)  # `rows, cols = dims` unpacks a tuple parameter, not a tensor
        deps = deps_of(value)
        return [Unk(deps=deps) for _ in range(n)]

    def mark_rebind_accumulate(self, previous: Value, value: TRef, ops_before: int | None) -> None:
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

    def store_subscript(self, target: ast.Subscript, value: Value, stmt: ast.stmt, ops_before: int | None) -> None:
        base = self.exprs.eval(target.value)
        container = isinstance(target.value, ast.Name) and self.scope.is_module_container(target.value.id)
        if isinstance(base, Api) or container:
            if container and isinstance(target.value, ast.Name):
                self.km.state.append(StateUse("container-write", target.value.id, stmt.lineno,
                                              self.source.text(stmt)))
            return
        if not isinstance(base, TRef):
            return
        dst_ref = self.exprs.subscript_tensor(base, target)
        dst = self.recorder.access_of(dst_ref, self.source.text(target))
        new_ops = self.km.ops[ops_before:] if ops_before is not None else []
        if isinstance(value, TRef) and new_ops and new_ops[-1].result == value.tid:
            # `x[...] = nisa.op(...)`: the op writes straight into x.
            op = new_ops[-1]
            produced = self.km.tensors.pop(value.tid)
            op.result = None
            op.writes.append(dst)
            self.recorder.inherit(dst.tensor, produced)
            if dst.tensor in {self.km.root(t).id for t in op.inputs} and op.alu in ("add", "subtract"):
                op.accumulate = True
            return
        if isinstance(value, TRef):
            src = self.recorder.access_of(value)
            src_t = self.km.root(value.tid)
            dst_t = self.km.root(dst.tensor)
            if src_t.is_hbm and dst_t.on_chip:
                kind, engine = "dma", "dma"
            elif dst_t.is_hbm:
                kind, engine = "dma", "dma"
            else:
                kind, engine = "copy", "vector"
            op = self.recorder.new_op("assign", kind, engine, stmt)
            op.reads.append(src)
            op.inputs.append(value.tid)
            op.writes.append(dst)
            self.recorder.inherit(dst.tensor, src_t, access=src)
            return
        if isinstance(value, Unk) and "host" in value.tags:
            self.km.host_calls.append(HostCall("store of a host-computed value", stmt.lineno, [],
                                               self.source.text(stmt)))
        op = self.recorder.new_op("assign", "memset", "vector", stmt)
        op.writes.append(dst)
        op.scalars.append(value)

    def accumulate_into(self, acc: TRef, value: Value, node: ast.AugAssign, alu: str, ops_before: int) -> None:
        acc_access = self.recorder.access_of(acc, self.source.text(node.target))
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
        op = self.recorder.new_op("augassign", "accumulate", "vector", node)
        op.alu = alu
        op.accumulate = True
        op.reads.append(acc_access)
        op.inputs.append(acc.tid)
        if isinstance(value, TRef):
            op.reads.append(self.recorder.access_of(value))
            op.inputs.append(value.tid)
            src = self.km.root(value.tid)
            if src.matmul and alu == "add":
                acc_root.matmul = True
        else:
            op.scalars.append(value)
        op.writes.append(acc_access)
        op.kwargs["_acc_target"] = str(acc_root.id)
