"""Build an `NkiModel` by walking each kernel's AST once, in program order, with abstract values.

Both namespaces are read: legacy `neuronxcc.nki` (return-value ISA calls, `nl.load`/`nl.store`,
`arange`/`mgrid` grids with `mask=`, `psum += nc_matmul(...)`, `nl.par_dim`) and the new `nki`
(destination-first ISA calls, `nisa.dma_copy`, slicing with `nl.ds`, `accumulate=`). Helper
functions defined in the same file are followed into (inlined) so their operations count for the
kernel that calls them. Nothing is executed.

One `KernelWalk` wires the parts of a walk, each with one job: the `Scope` (names), the `KernelRecorder`
(the model under construction), the `ExpressionEvaluator`, the `CallEvaluator` (Python-level calls and
inlining), `NkiCalls` (NKI APIs: allocations and instructions) and the `StatementWalker`.
"""

from __future__ import annotations

import ast

from nkitui.analysis.context import AnalysisContext, TensorInfo
from nkitui.analysis.nki.calls import CallEvaluator
from nkitui.analysis.nki.expressions import ExpressionEvaluator
from nkitui.analysis.nki.instructions import NkiCalls
from nkitui.analysis.nki.model import KernelModel, NkiModel, Param
from nkitui.analysis.nki.module import FunctionNode, ModuleFacts, is_kernel_decorator, parse_module
from nkitui.analysis.nki.recorder import KernelRecorder
from nkitui.analysis.nki.scope import Frame, Scope
from nkitui.analysis.nki.statements import StatementWalker
from nkitui.analysis.nki.values import Api, TRef, Unk


class KernelWalk:
    """One walk over one function: the kernel (recording), or module constants (not recording)."""

    def __init__(self, module: ModuleFacts, fdef: FunctionNode, context: AnalysisContext | None,
                 *, recording: bool = True):
        self.module = module
        self.fdef = fdef
        self.context = context
        decos = [module.resolve(d) for d in fdef.decorator_list]
        self.km = KernelModel(
            name=fdef.name, line=fdef.lineno, end_line=fdef.end_lineno or fdef.lineno,
            decorators=[d for d in decos if d], decorated=any(is_kernel_decorator(d) for d in decos),
        )
        self.scope = Scope(module)
        self.recorder = KernelRecorder(self.km, self.scope, module.source, recording=recording)
        self.exprs = ExpressionEvaluator(module, self.scope, self.recorder)
        self.nki_calls = NkiCalls(module, context, self.scope, self.recorder, self.exprs)
        self.calls = CallEvaluator(module, context, self.scope, self.recorder, self.exprs, self.nki_calls)
        self.statements = StatementWalker(module, self.scope, self.recorder, self.exprs)
        self.exprs.calls = self.calls
        self.exprs.nki_calls = self.nki_calls
        self.nki_calls.calls = self.calls
        self.calls.statements = self.statements

    def walk_kernel(self) -> KernelModel:
        frame = Frame(func=self.fdef.name)
        self.scope.frames.append(frame)
        self.bind_parameters(frame)
        self.scope.call_stack.append(self.fdef.name)
        self.statements.walk_body(self.fdef.body)
        self.scope.call_stack.pop()
        self.scope.frames.pop()
        for op in self.km.ops:
            self.nki_calls.finish_op(op)
        return self.km

    def bind_parameters(self, frame: Frame) -> None:
        """Kernel parameters: tensors in HBM (typed from the task manifest when it has one), kwargs from the
        manifest, defaults evaluated."""
        ctx = self.context
        args = self.fdef.args
        positional = args.posonlyargs + args.args
        defaults: dict[str, ast.expr] = {}
        for a, d in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            defaults[a.arg] = d
        for a, kd in zip(args.kwonlyargs, args.kw_defaults):
            if kd is not None:
                defaults[a.arg] = kd
        inputs = list(ctx.inputs) if ctx else []
        outputs = list(ctx.outputs) if ctx and ctx.outputs_mode == "arguments" else []
        by_name = {t.name: ("input", t) for t in inputs}
        by_name.update({t.name: ("output", t) for t in outputs})
        tensor_slots = [("input", t) for t in inputs] + [("output", t) for t in outputs]
        for index, a in enumerate(positional + args.kwonlyargs):
            name = a.arg
            role: str | None = None
            spec: TensorInfo | None = None
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
                self.scope.state_params.add(name)
            if spec is None and name in defaults and not (ctx and tensor_slots):
                frame.env[name] = self.exprs.eval(defaults[name])
                self.km.params.append(Param(name, a.lineno, None, True, None))
                continue
            if spec is None and name in defaults:
                frame.env[name] = self.exprs.eval(defaults[name])
                self.km.params.append(Param(name, a.lineno, None, True, "kwarg" if ctx else None))
                continue
            t = self.recorder.new_tensor(
                name=name, buffer="hbm", shape=tuple(spec.shape) if spec and spec.shape else None,
                dtype=spec.dtype if spec else None, line=a.lineno, origin="param", param=name,
                typed=spec is not None,
            )
            frame.env[name] = TRef(t.id)
            self.km.params.append(Param(name, a.lineno, t.id, name in defaults, role))
        for extra in (args.vararg, args.kwarg):
            if extra is not None:
                frame.env[extra.arg] = Unk(text=extra.arg)


def _module_constants(module: ModuleFacts, context: AnalysisContext | None) -> None:
    """Evaluate simple module-level assignments (tile sizes, dtypes) and find mutable containers."""
    fake = ast.FunctionDef(name="<module>", args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                                kw_defaults=[], defaults=[]),
                           body=[], decorator_list=[], lineno=1, end_lineno=1, col_offset=0)
    walk = KernelWalk(module, fake, context, recording=False)
    walk.scope.frames.append(Frame(func="<module>"))
    for node in module.tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value_node = node.value
            if value_node is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if module.is_container_expr(value_node):
                for target in targets:
                    if isinstance(target, ast.Name):
                        module.containers[target.id] = node.lineno
                continue
            if isinstance(value_node, ast.Call):
                callee = walk.exprs.quiet_eval(value_node.func)
                if isinstance(callee, Api) and callee.name.split(".")[0] in ("nki", "torch_neuronx"):
                    continue
            value = walk.exprs.quiet_eval(value_node)
            for target in targets:
                if isinstance(target, ast.Name) and not isinstance(value, TRef):
                    module.constants[target.id] = value
                elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, tuple) \
                        and len(value) == len(target.elts):
                    for elt, item in zip(target.elts, value):
                        if isinstance(elt, ast.Name):
                            module.constants[elt.id] = item


def build(source: str, path: str, context: AnalysisContext | None = None,
          local_nki_modules: frozenset[str] = frozenset()) -> NkiModel:
    """Parse `source` (the NKI port at task-relative `path`) into an NkiModel.

    `local_nki_modules`: dotted names of the project's own modules that are NKI code themselves (helpers
    split into their own file); passing tiles to them is not host computation."""
    model = NkiModel(path=path, namespace=None, line_count=source.count("\n") + 1)
    try:
        tree = parse_module(source)
    except SyntaxError as exc:
        model.syntax_error = (exc.msg or "invalid syntax", exc.lineno)
        model.syntax_error_column = exc.offset
        return model
    module = ModuleFacts(tree, source, frozenset(local_nki_modules))
    model.imports = dict(module.aliases)
    model.import_lines = list(module.import_lines)
    model.namespace = module.namespace
    model.functions = {name: (f.lineno, f.end_lineno or f.lineno) for name, f in module.functions.items()}
    _module_constants(module, context)
    model.module_containers = dict(module.containers)
    model.cache_decorators = module.cache_decorators()
    model.container_writes = module.container_writes()
    for fdef in module.kernel_functions(context):
        model.kernels.append(KernelWalk(module, fdef, context).walk_kernel())
    return model
