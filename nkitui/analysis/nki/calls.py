"""Calls inside a kernel, by what is called: builtins (`min`, `len`, `range` ...), `math`, numpy / torch and
other host code (recorded as host computation when they touch kernel data), tensor methods (views such as
`reshape`, `.T`), module-level containers (state), and helper functions of the same file, which are
inlined (their body is walked with the arguments bound, so their operations count for the kernel that
calls them). NKI APIs go to `NkiCalls`.
"""

from __future__ import annotations

import ast
import math
from typing import TYPE_CHECKING

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.dtypes import canonical as canonical_dtype
from nkitui.analysis.nki import api as nki_api
from nkitui.analysis.nki.expressions import ExpressionEvaluator
from nkitui.analysis.nki.imports import FILE_READERS, HOST_LIBRARIES
from nkitui.analysis.nki.instructions import NkiCalls
from nkitui.analysis.nki.model import HostCall, StateUse
from nkitui.analysis.nki.module import CONTAINER_WRITE_METHODS, ModuleFacts
from nkitui.analysis.nki.recorder import KernelRecorder, tensor_refs
from nkitui.analysis.nki.scope import Frame, Scope
from nkitui.analysis.nki.values import (
    Api,
    Dtype,
    FuncRef,
    Method,
    MGrid,
    ShapeV,
    TRef,
    Unk,
    Value,
    as_lin,
    deps_of,
    is_number,
    known_int,
    tags_of,
)

if TYPE_CHECKING:
    from nkitui.analysis.nki.statements import StatementWalker

_HOST_TENSOR_METHODS = {"numpy", "cpu", "tolist", "item", "detach", "astype", "copy", "sum", "mean", "max", "min",
                        "dot", "matmul", "cumsum", "clone", "to", "float", "half", "double", "exp", "softmax"}
# Standard-library modules that never compute on array data; passing a tile to them is not host compute.
_PURE_PYTHON_MODULES = frozenset({"builtins", "math", "functools", "itertools", "typing", "operator", "dataclasses",
                                  "enum", "types", "collections", "contextlib", "warnings", "logging"})
# Methods no NKI tile has, whatever buffer it is in: they hand the data to host Python.
_HOST_ONLY_METHODS = {"numpy", "tolist", "item", "cpu", "detach"}
_VIEW_METHODS = {"reshape", "view", "ap", "broadcast", "broadcast_to", "permute", "select", "vector_select",
                 "flatten_dims", "reshape_dim", "expand_dim", "squeeze_dim", "rearrange", "indirect", "T"}
_MAX_INLINE_DEPTH = 8


class CallEvaluator:
    """Evaluates calls of one kernel walk: records the operations they issue and gives their values."""

    statements: StatementWalker  # set by the walk (inlining a helper walks its statements)

    def __init__(self, module: ModuleFacts, context: AnalysisContext | None, scope: Scope,
                 recorder: KernelRecorder, exprs: ExpressionEvaluator, nki: NkiCalls):
        self.module = module
        self.source = module.source
        self.context = context
        self.scope = scope
        self.recorder = recorder
        self.km = recorder.km
        self.exprs = exprs
        self.nki = nki

    def call(self, node: ast.Call) -> Value:
        callee = self.exprs.eval(node.func)
        args = [self.exprs.eval(a) for a in node.args]
        kwargs: dict[str, Value] = {}
        for kw in node.keywords:
            value = self.exprs.eval(kw.value)
            if kw.arg is not None:
                kwargs[kw.arg] = value
            else:
                self.recorder.escape(value)
        if isinstance(callee, Api):
            return self.api_call(callee.name, node, args, kwargs)
        if isinstance(callee, FuncRef):
            return self.inline(callee, node, args, kwargs)
        if isinstance(callee, Method):
            return self.method_call(callee, node, args, kwargs)
        self.recorder.escape(args)
        self.recorder.escape(kwargs)
        return Unk(deps=deps_of(callee) | deps_of(args) | deps_of(list(kwargs.values())))

    def method_call(self, m: Method, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if isinstance(m.obj, TRef):
            t = self.km.root(m.obj.tid)
            if m.name in _VIEW_METHODS:
                return self.view_method(m.obj, m.name, args, kwargs, node)
            if m.name in _HOST_ONLY_METHODS or (m.name in _HOST_TENSOR_METHODS and (t.is_hbm or t.origin == "param")):
                self.km.host_calls.append(HostCall(f"tensor.{m.name}", node.lineno, [t.id], self.source.text(node)))
                return Unk(tags=frozenset({"host"}), deps=deps_of(args))
            if m.name == "depends_on":
                return m.obj
            self.recorder.escape([m.obj])
            return Unk()
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and self.scope.is_module_container(func.value.id):
            kind = "container-write" if m.name in CONTAINER_WRITE_METHODS else "container-read"
            self.km.state.append(StateUse(kind, func.value.id, node.lineno, self.source.text(node)))
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
        self.recorder.escape(args)
        self.recorder.escape(kwargs)
        return Unk(deps=deps_of(args))

    def view_method(self, ref: TRef, name: str, args: list[Value], kwargs: dict[str, Value], node: ast.AST) -> Value:
        t = self.km.tensors[ref.tid]
        root = self.km.root(ref.tid)
        shape: tuple[Value, ...] | None = None
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
        view_t = self.recorder.new_tensor(name=t.name, buffer=root.buffer, shape=shape, dtype=dtype,
                                 line=getattr(node, "lineno", t.line), origin="view", alias_of=ref.tid,
                                 param=root.param, api=f"view.{name}")
        view_t.matmul = root.matmul
        return TRef(view_t.id)

    def api_call(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name.startswith("builtins."):
            return self.builtin_call(name[9:], node, args, kwargs)
        if name.startswith("math."):
            return _math_call(name[5:], args)
        head = name.split(".")[0]
        if name in FILE_READERS:
            self.km.state.append(StateUse("file-read", name, node.lineno, self.source.text(node)))
            self.km.host_calls.append(HostCall(name, node.lineno, [], self.source.text(node)))
            return Unk(tags=frozenset({"host", "cached"}))
        if head in HOST_LIBRARIES:
            return self.host_call(name, node, args, kwargs)
        if head == "importlib":  # a module fetched at run time: whatever it computes runs on the host
            self.km.host_calls.append(HostCall(name, node.lineno, [], self.source.text(node)))
            return Unk(tags=frozenset({"host"}), deps=deps_of(args))
        if head in ("nl", "nisa", "ncc", "nt", "nki", "ncoll"):
            return self.nki.call(name, node, args, kwargs)
        if head not in _PURE_PYTHON_MODULES and not any(name.startswith(m + ".") for m in self.module.local_nki_modules) \
                and not head.startswith(("neuronxcc", "torch_neuronx")) \
                and (tensor_refs(args) or tensor_refs(kwargs)):
            # Kernel data passed to some other imported module (the task's own reference.py, a helper
            # library): whatever that does, it runs on the host, not on the NeuronCore.
            return self.host_call(name, node, args, kwargs)
        self.recorder.escape(args)
        self.recorder.escape(kwargs)
        return Unk(deps=deps_of(args))

    def builtin_call(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        if name in ("min", "max", "int", "float", "round", "abs", "divmod", "range"):
            args = [self.recorder.scalarize(a) for a in args]
        ints = [known_int(a) for a in args]
        if name in ("min", "max"):
            values = list(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
            known = [known_int(v) if not isinstance(v, float) else v for v in values]
            present = [k for k in known if k is not None]
            if values and len(present) == len(known):
                return min(present) if name == "min" else max(present)
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
            return float(args[0]) if is_number(args[0]) else Unk(deps=deps_of(args[0]))
        if name == "abs" and args and is_number(args[0]):
            return abs(args[0])
        if name in ("tuple", "list") and args and isinstance(args[0], (tuple, list)):
            return tuple(args[0]) if name == "tuple" else list(args[0])
        if name in ("tuple", "list") and args and isinstance(args[0], ShapeV):
            return Unk()
        if name == "sum" and args and isinstance(args[0], (tuple, list)) and all(isinstance(i, int) for i in args[0]):
            return sum(args[0])
        if name == "divmod" and len(ints) == 2 and ints[0] is not None and ints[1]:
            return divmod(ints[0], ints[1])
        if name == "print":
            return None
        if name == "range":
            return Unk(deps=deps_of(args))
        if name == "isinstance":
            return Unk()
        if name == "open":
            self.km.state.append(StateUse("file-read", "open", node.lineno, self.source.text(node)))
            return Unk(tags=frozenset({"host", "cached"}))
        if name in ("setattr",) and args and isinstance(args[0], FuncRef):
            self.km.state.append(StateUse("attribute", args[0].name, node.lineno, self.source.text(node)))
            return None
        if name in ("eval", "exec", "compile", "__import__"):
            # Code built at run time runs on the host; nothing about it can be checked statically.
            self.km.host_calls.append(HostCall(f"builtins.{name}", node.lineno, [], self.source.text(node)))
            return Unk(tags=frozenset({"host"}), deps=deps_of(args))
        if name in ("setattr", "delattr", "globals", "vars"):
            # A kernel has no use for these: they keep values on modules or objects that outlive the call.
            self.km.state.append(StateUse("module-state", name, node.lineno, self.source.text(node)))
            self.recorder.escape(args)
            return Unk(tags=frozenset({"cached"}))
        if name in ("getattr", "hasattr") and args and isinstance(args[0], FuncRef):
            self.km.state.append(StateUse("attribute-read", args[0].name, node.lineno, self.source.text(node)))
            return Unk()
        if name in ("zip", "enumerate", "reversed", "sorted", "map", "iter"):
            return Unk(deps=deps_of(args))
        self.recorder.escape(args)
        return Unk(deps=deps_of(args))

    def host_call(self, name: str, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        attr = name.rsplit(".", 1)[-1]
        if attr in nki_api.DTYPE_ATTRS:
            if args and is_number(args[0]):
                return args[0]
            return Dtype(canonical_dtype(attr) or attr)
        if name in ("np.dtype", "torch.dtype") and args and isinstance(args[0], (str, Dtype)):
            return Dtype(canonical_dtype(args[0] if isinstance(args[0], str) else args[0].name))
        refs = tensor_refs(args) + tensor_refs(list(kwargs.values()))
        if not refs and all(is_plain(a) for a in list(args) + list(kwargs.values())):
            # numpy arithmetic on shapes and constants (np.prod(x.shape), np.ceil(n / 128)) is fine.
            if attr in ("prod", "product") and args and isinstance(args[0], (tuple, list)):
                factors = [known_int(v) for v in args[0]]
                present = [i for i in factors if i is not None]
                if len(present) == len(factors):
                    out = 1
                    for i in present:
                        out *= i
                    return out
            if attr == "ceil" and args and is_number(args[0]):
                return math.ceil(args[0])
            return Unk(deps=deps_of(args), tags=frozenset({"hostconst"}))
        tids = [self.km.root(r.tid).id for r in refs]
        self.km.host_calls.append(HostCall(name, node.lineno, tids, self.source.text(node)))
        return Unk(deps=deps_of(args), tags=frozenset({"host"}))

    def inline(self, fref: FuncRef, node: ast.Call, args: list[Value], kwargs: dict[str, Value]) -> Value:
        fdef = fref.node
        if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)) or fref.name in self.scope.call_stack \
                or len(self.scope.call_stack) > _MAX_INLINE_DEPTH:
            self.recorder.escape(args)
            self.recorder.escape(kwargs)
            return Unk(deps=deps_of(args))
        frame = Frame(func=fref.name)
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
                frame.env[a.arg] = self.exprs.eval(defaults[a.arg])
            else:
                frame.env[a.arg] = Unk(text=a.arg)
        for a in fdef.args.kwonlyargs:
            if a.arg in kwargs:
                frame.env[a.arg] = kwargs[a.arg]
            elif a.arg in defaults:
                frame.env[a.arg] = self.exprs.eval(defaults[a.arg])
        if fdef.args.vararg is not None:
            frame.env[fdef.args.vararg.arg] = tuple(args[len(params):])
        if fdef.args.kwarg is not None:
            frame.env[fdef.args.kwarg.arg] = {k: v for k, v in kwargs.items() if k not in {a.arg for a in params}}
        if fref.name not in self.km.helpers:
            self.km.helpers.append(fref.name)
        self.scope.frames.append(frame)
        self.scope.call_stack.append(fref.name)
        try:
            self.statements.walk_body(fdef.body)
        finally:
            self.scope.call_stack.pop()
            self.scope.frames.pop()
        values = [v for v in frame.returns if v is not None]
        if not values:
            return None
        for v in reversed(values):
            if tensor_refs(v):
                return v
        return values[-1]


def _math_call(name: str, args: list[Value]) -> Value:
    if args and all(is_number(a) for a in args):
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


def is_plain(v: Value) -> bool:
    if isinstance(v, (tuple, list)):
        return all(is_plain(i) for i in v)
    return not isinstance(v, TRef) and not (isinstance(v, Unk) and "host" in v.tags)
