"""NKI API calls inside a kernel: allocations (`nl.ndarray`, `nl.zeros` ...), index helpers (`nl.arange`,
`nl.ds`, `nl.par_dim`), SPMD queries, functional loops, and the device instructions that become the
model's operations — with the engine that runs them, the regions they read and write, the tile they return,
and whether they accumulate. Arithmetic on tiles (`a + b`, `a @ b`) is recorded here too.

Both calling conventions: legacy ISA calls return their result; in the new namespace they take the
destination first (or as `dst=`).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.dtypes import canonical as canonical_dtype
from nkitui.analysis.nki import api as nki_api
from nkitui.analysis.nki.access import loaded_shape, region_shape, trip_count
from nkitui.analysis.nki.expressions import ExpressionEvaluator
from nkitui.analysis.nki.model import Access, HostCall, Op, Tensor
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.recorder import KernelRecorder, tensor_refs
from nkitui.analysis.nki.scope import Scope
from nkitui.analysis.nki.values import (
    Api,
    Buffer,
    DsV,
    Dtype,
    FuncRef,
    ShapeV,
    TRef,
    Unk,
    Value,
    as_lin,
    deps_of,
    known_int,
    lin_add,
    symbol,
)

if TYPE_CHECKING:
    from nkitui.analysis.nki.calls import CallEvaluator

# Keyword arguments of device instructions that configure the instruction rather than carry data.
_CONFIG_KEYWORDS = frozenset({
    "name", "engine", "buffer", "op", "op0", "op1", "reduce_op", "reduce_cmd", "axis", "keepdims",
    "negate", "reverse0", "reverse1", "perf_mode", "dge_mode", "oob_mode", "shuffle_mask",
    "transpose_x", "is_stationary_onezero", "is_moving_onezero", "is_transpose", "accumulate",
    "tile_position", "tile_size", "priority", "pattern", "cmp_op", "comp_op0", "comp_op1",
    "channel_multiplier", "num_elem_per_idx", "num_valid_indices", "mode", "dst_rmw_op",
})


class NkiCalls:
    """Evaluates calls of NKI APIs: records the tensors and operations they create."""

    calls: CallEvaluator  # set by the walk (a functional loop inlines its body function)

    def __init__(self, module: ModuleFacts, context: AnalysisContext | None, scope: Scope,
                 recorder: KernelRecorder, exprs: ExpressionEvaluator):
        self.module = module
        self.source = module.source
        self.context = context
        self.scope = scope
        self.recorder = recorder
        self.km = recorder.km
        self.exprs = exprs

    def call(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        info = nki_api.info(name)
        if info is None:
            if name.startswith(("nl.", "nisa.")):
                self.km.notes.append(f"line {node.lineno}: {name} is not an NKI API the analysis knows")
            self.recorder.escape(args)
            self.recorder.escape(kwargs)
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
                grid = self.context.grid if self.context else None
                axis = known_int(args[0]) if args else known_int(kwargs.get("axes", 0))
                if grid and axis is not None and axis < len(grid):
                    return grid[axis]
                return symbol(f"num_programs({axis if axis is not None else 0})")
            return Unk()
        if name in ("nl.fori_loop", "nl.while_loop"):
            return self.functional_loop(name, node, args, kwargs)
        if info.kind in ("loop", "query", "schedule", "debug"):
            return Unk(deps=deps_of(args))
        return self.device_op(name, info, node, args, kwargs)

    def functional_loop(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        """`nl.fori_loop(lo, hi, body, step)` / `nl.while_loop(reg, body)`: a runtime loop around `body`."""
        if name == "nl.fori_loop":
            lo = args[0] if args else kwargs.get("lower", 0)
            hi = args[1] if len(args) > 1 else kwargs.get("upper")
            body = args[2] if len(args) > 2 else kwargs.get("body_fun")
            step = args[3] if len(args) > 3 else kwargs.get("step", 1)
            trip = trip_count(lo, hi, step)
        else:
            body = args[1] if len(args) > 1 else kwargs.get("body_fun")
            lo, step, trip = 0, 1, None
        loop = self.recorder.push_loop("dynamic", name, None, node, trip=trip, stop_text=self.source.text(node, 60))
        loop.start, loop.step = lo, step
        result: Value = Unk()
        if isinstance(body, FuncRef):
            fdef = body.node
            n_params = len(fdef.args.posonlyargs + fdef.args.args) if hasattr(fdef, "args") else 0
            call_args: list[Value] = [symbol(loop.sym)] if name == "nl.fori_loop" and loop.sym else []
            call_args += [Unk(deps=frozenset({loop.sym}) if loop.sym else frozenset())] * max(0, n_params - len(call_args))
            result = self.calls.inline(body, node, call_args[:n_params], {})
        self.recorder.pop_loop()
        return result

    def index_api(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name == "nl.arange":
            if len(args) >= 2:
                lo, hi = as_lin(args[0]), as_lin(args[1])
                extent = known_int(lin_add(hi, lo, -1)) if lo is not None and hi is not None else None
            else:
                extent = known_int(args[0]) if args else None
            return self.recorder.make_grid(extent, None)
        if name == "nl.ds":
            start = self.recorder.scalarize(args[0] if args else kwargs.get("start"))
            size = self.recorder.scalarize(args[1] if len(args) > 1 else kwargs.get("size"))
            return DsV(start, size)
        if name == "nl.par_dim":
            return args[0] if args else Unk()
        return Unk()

    def alloc(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        short = name.split(".", 1)[1]
        shape_value: Value = None
        dtype_value: Value = kwargs.get("dtype")
        buffer_value: Value = kwargs.get("buffer")
        init = None
        shape_node: ast.expr | None = node.args[0] if node.args else None
        if short in ("zeros_like", "ones_like", "empty_like", "full_like"):
            like = args[0] if args else kwargs.get("a") or kwargs.get("x")
            if isinstance(like, TRef):
                lt = self.km.tensors[like.tid]
                shape_value = region_shape(like.view) if like.view is not None else lt.shape
                if dtype_value is None:
                    dtype_value = Dtype(lt.dtype)
            init = {"zeros_like": "zeros", "ones_like": "ones", "full_like": "full"}.get(short)
            shape_node = None
        elif short == "shared_constant":
            t = self.recorder.new_tensor(name=None, buffer="shared_hbm", shape=None, dtype=dtype_name(dtype_value),
                                line=node.lineno, origin="alloc", api=name)
            if args and isinstance(args[0], Unk) and "host" in args[0].tags:
                self.km.host_calls.append(HostCall("nl.shared_constant of a host-computed value", node.lineno, [],
                                                   self.source.text(node)))
            return TRef(t.id)
        elif short == "shared_identity_matrix":
            n = args[0] if args else kwargs.get("n")
            t = self.recorder.new_tensor(name=None, buffer="shared_hbm", shape=(n, n), dtype=dtype_name(dtype_value) or "uint8",
                                line=node.lineno, origin="alloc", api=name)
            return TRef(t.id)
        else:
            shape_value = args[0] if args else kwargs.get("shape")
            rest = list(args[1:])
            if short == "full":
                if rest:
                    self.recorder.scalarize(rest.pop(0))  # the fill value is a number (a parameter used so is not a tensor)
                elif "fill_value" in kwargs:
                    self.recorder.scalarize(kwargs["fill_value"])
                init = "full"
            elif short in ("zeros", "ones"):
                init = short
            if rest and dtype_value is None:
                dtype_value = rest.pop(0)
            if rest and buffer_value is None:
                buffer_value = rest.pop(0)
        # Parameters of unknown type passed as a shape or dtype are numbers / dtypes, not tensors.
        shape_value = self.recorder.scalarize(shape_value)
        dtype_value = self.recorder.scalarize(dtype_value)
        shape: tuple[Value, ...] | None
        if isinstance(shape_value, (tuple, list)):
            shape = tuple(shape_value)
        elif shape_value is not None and not isinstance(shape_value, (ShapeV, Unk)):
            shape = (shape_value,)
        else:
            shape = None
        pdim = _par_dim_index(shape_node, self.exprs)
        buffer = _buffer_name(buffer_value)
        t = self.recorder.new_tensor(name=kwargs.get("name") if isinstance(kwargs.get("name"), str) else None,
                            buffer=buffer, shape=shape, dtype=dtype_name(dtype_value), line=node.lineno,
                            origin="alloc", api=name, init=init, pdim=pdim)
        if init is not None and t.on_chip:
            op = self.recorder.new_op(name, "memset", "vector" if buffer != "psum" else "vector", node)
            op.writes.append(self.recorder.whole_access(t, t.name or ""))
        return TRef(t.id)

    def dst_and_args(self, name: str, args: list[Value], kwargs: dict[str, Value]) -> tuple[Value, list[Value], dict[str, Value]]:
        kwargs = dict(kwargs)
        for key in nki_api.DST_KEYWORDS:
            if key in kwargs and isinstance(kwargs[key], TRef):
                return kwargs.pop(key), list(args), kwargs
        if name == "nl.store":
            dst = args[0] if args else kwargs.pop("dst", None)
            return dst, list(args[1:]), kwargs
        if name == "nisa.nc_stream_shuffle" and self.module.namespace != "new" and len(args) >= 2:
            return args[1], [args[0]] + list(args[2:]), kwargs
        if (self.module.namespace == "new" and name.startswith("nisa.") and name not in nki_api.NEW_RETURNING
                and args and isinstance(args[0], TRef)):
            return args[0], list(args[1:]), kwargs
        return None, list(args), kwargs

    def device_op(self, name: str, info: nki_api.ApiInfo, node: ast.Call, args: list[Value],
                  kwargs: dict[str, Value]) -> Value:
        dst, rest, kw = self.dst_and_args(name, args, kwargs)
        engine = info.engine
        if "engine" in kw:
            engine = _engine_name(kw.pop("engine")) or engine
        mask = kw.pop("mask", None)
        dtype = dtype_name(self.recorder.scalarize(kw.pop("dtype", None)))
        op = self.recorder.new_op(name, info.kind, engine, node)
        op.mask = mask
        op.dtype = dtype
        op.kwargs = {kwn.arg: self.source.text(kwn.value, 80) for kwn in node.keywords if kwn.arg}
        op.fn = _activation_fn(name, rest, kw)
        op.alu = _alu_of(name, kw)
        operands: list[Value] = list(rest) + [v for k, v in kw.items() if k not in _CONFIG_KEYWORDS
                                            and k not in nki_api.EXTRA_OUTPUT_KEYWORDS]
        for key in nki_api.EXTRA_OUTPUT_KEYWORDS:
            extra = kw.get(key)
            if isinstance(extra, TRef):
                op.writes.append(self.recorder.access_of(extra))
        for value in operands:
            if isinstance(value, TRef):
                self.recorder.as_tensor(value)
                op.inputs.append(value.tid)
                op.reads.append(self.recorder.access_of(value))
            elif isinstance(value, (list, tuple)) and tensor_refs(value):
                for ref in tensor_refs(value):
                    op.inputs.append(ref.tid)
                    op.reads.append(self.recorder.access_of(ref))
            elif value is None or isinstance(value, (Api, Dtype, Buffer, str, bool)):
                continue
            else:
                op.scalars.append(value)
                if isinstance(value, Unk) and "host" in value.tags:
                    self.km.host_calls.append(HostCall(f"{name} of a host-computed value", node.lineno, [],
                                                       self.source.text(node)))
        # Activation: scale/bias given?
        for key in ("scale", "bias"):
            if key in kw and kw[key] is not None and not (key == "scale" and kw[key] == 1.0):
                op.kwargs.setdefault(f"_has_{key}", "1")
        if dst is not None and isinstance(dst, TRef):
            self.recorder.as_tensor(dst)
            dst_access = self.recorder.access_of(dst)
            op.writes.append(dst_access)
            self.after_write(op, dst_access, node, kw)
            return None if self.module.namespace == "new" or name == "nl.store" else dst
        if name == "nl.store" or info.kind in ("dma_store", "collective", "register", "rng") and dst is None:
            return None
        result = self.result_tensor(name, info, op, node, kw)
        if result is not None:
            op.result = result.id
            self.after_write(op, self.recorder.whole_access(result, ""), node, kw)
            return TRef(result.id)
        return Unk()

    def after_write(self, op: Op, dst: Access, node: ast.Call, kw: dict[str, Value]) -> None:
        target = self.km.root(dst.tensor)
        sources = [self.km.root(t) for t in op.inputs]
        if op.kind == "matmul":
            target.matmul = True
            acc = kw.get("accumulate", ...)
            if acc is True:
                op.accumulate = True
            elif acc is not False and self.module.namespace == "new" and dst.tensor is not None:
                inner = [lid for lid in op.loops if not self.recorder.created_inside(target, lid)]
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

    def result_tensor(self, name: str, info: nki_api.ApiInfo, op: Op, node: ast.Call,
                      kw: dict[str, Value]) -> Tensor | None:
        inputs = [self.km.tensors[t] for t in op.inputs]
        first = op.reads[0] if op.reads else None
        shape: tuple[Value, ...] | None = tuple(region_shape(first)) if first is not None else None
        dtype = op.dtype or (self.km.root(inputs[0].id).dtype if inputs else None)
        buffer = "sbuf"
        if info.kind == "dma_load" and first is not None:
            shape = loaded_shape(first)
        elif info.kind == "dma_load_transpose" and first is not None:
            shape = tuple(reversed(loaded_shape(first) or ())) or None
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
        t = self.recorder.new_tensor(name=None, buffer=buffer, shape=shape, dtype=dtype, line=node.lineno, origin="op", api=name)
        if info.kind in ("dma_load", "dma_load_transpose"):
            t.origin = "load"
        return t

    def tensor_operator(self, name: str, tensors: list[TRef], node: ast.AST, *, alu: str | None = None,
                        scalars: list[Value] | None = None, kind: str = "elementwise",
                        engine: str = "vector") -> Value:
        op = self.recorder.new_op(name, kind, engine, node)
        op.alu = alu
        for ref in tensors:
            op.inputs.append(ref.tid)
            op.reads.append(self.recorder.access_of(ref))
        op.scalars.extend(scalars or [])
        if any(self.km.root(r.tid).is_hbm for r in tensors):
            tids = [self.km.root(r.tid).id for r in tensors]
            self.km.host_calls.append(HostCall(f"{name} on HBM tensors", getattr(node, "lineno", 0), tids,
                                               self.source.text(node)))
        first = op.reads[0] if op.reads else None
        shape = tuple(region_shape(first)) if first is not None else None
        dtype = self.km.root(tensors[0].tid).dtype if tensors else None
        t = self.recorder.new_tensor(name=None, buffer="psum" if kind == "matmul" else "sbuf", shape=shape, dtype=dtype,
                            line=getattr(node, "lineno", 0), origin="op", api=name)
        op.result = t.id
        return TRef(t.id)

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


def dtype_name(value: Value) -> str | None:
    if isinstance(value, Dtype):
        return value.name
    if isinstance(value, str):
        return canonical_dtype(value)
    if isinstance(value, Api):
        return canonical_dtype(value.name.rsplit(".", 1)[-1])
    return None


def _buffer_name(value: Value) -> str:
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


def _engine_name(value: Value) -> str | None:
    if isinstance(value, Api):
        return nki_api.ENGINE_NAMES.get(value.name.rsplit(".", 1)[-1])
    if isinstance(value, str):
        return nki_api.ENGINE_NAMES.get(value)
    return None


def _alu_of(name: str, kw: dict[str, Value]) -> str | None:
    if name in nki_api.ALU_OP:
        return nki_api.ALU_OP[name]
    for key in ("op", "op0"):
        value = kw.get(key)
        if isinstance(value, Api):
            short = value.name.rsplit(".", 1)[-1]
            mapped = nki_api.ALU_OP.get(f"nl.{short}")
            return mapped or short
    return None


def _activation_fn(name: str, rest: list[Value], kw: dict[str, Value]) -> str | None:
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


def _shape_elements(node: ast.expr | None) -> list[ast.expr] | None:
    """Element nodes of a literal shape, including list/tuple concatenations (`[2] + [P, n]`)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        return list(node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _shape_elements(node.left), _shape_elements(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _par_dim_index(shape_node: ast.expr | None, exprs: ExpressionEvaluator) -> int:
    elts = _shape_elements(shape_node)
    if elts is not None:
        for i, elt in enumerate(elts):
            if isinstance(elt, ast.Call):
                callee = exprs.quiet_eval(elt.func)
                if isinstance(callee, Api) and callee.name == "nl.par_dim":
                    return i
    return 0
