"""Module-level facts of an NKI port, read once and shared by every kernel walk: imports and the namespace
they imply, top-level functions, module constants, mutable module-level containers, every module-level name.

Also which functions are the kernels to analyse (decorated with `@nki.jit` and friends, named by the task
manifest, or — in a port its harness decorates — the undecorated functions that use NKI), and the module
facts the reward-hacking rules read (functools caches, writes into module-level containers).
"""

from __future__ import annotations

import ast
from functools import lru_cache

from nkitui.analysis.context import AnalysisContext
from nkitui.analysis.nki.imports import canonical, collect_imports, namespace_of
from nkitui.analysis.nki.source import SourceText
from nkitui.analysis.nki.values import Value
from nkitui.common import pyast

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

KERNEL_DECORATORS = frozenset({
    "nki.jit", "nki.trace", "nki.baremetal", "nki.benchmark", "nki.profile", "nki.simulate_kernel",
    "nki.simulate", "torch_neuronx.nki_jit", "nki_jit", "jit",
})
CACHE_DECORATORS = frozenset({"functools.lru_cache", "functools.cache", "lru_cache", "cache",
                              "functools.cached_property"})
_CONTAINER_CALLS = frozenset({"dict", "list", "set", "collections.OrderedDict", "collections.defaultdict",
                              "OrderedDict", "defaultdict", "weakref.WeakValueDictionary"})
# Methods that write into a container (`_cache.update(...)`): a module-level one so written is state.
CONTAINER_WRITE_METHODS = frozenset({"append", "update", "setdefault", "add", "extend", "insert", "__setitem__",
                                     "appendleft", "put"})


@lru_cache(maxsize=8)
def parse_module(source: str) -> ast.Module:
    """`ast.parse(source)`, kept for the few sources read last: the analysis reads a port's imports and then
    walks it, and parsing is a good part of the cost. The trees are only read, never changed."""
    return pyast.parse(source, max_depth=pyast.ANALYSIS_MAX_DEPTH)  # TooDeep: a syntax error to the analysis


class ModuleFacts:
    """What the module defines at top level, for name resolution and kernel discovery."""

    def __init__(self, tree: ast.Module, source: str, local_nki_modules: frozenset[str] = frozenset()):
        self.tree = tree
        self.source = SourceText(source)
        self.aliases, self.import_lines = collect_imports(tree.body)
        self.namespace = namespace_of(self.import_lines)
        self.functions: dict[str, FunctionNode] = {}
        self.containers: dict[str, int] = {}  # module-level mutable containers -> line
        self.constants: dict[str, Value] = {}  # filled by the walker (it evaluates module assignments)
        self.local_nki_modules = local_nki_modules  # the project's own NKI helper modules
        self.globals: set[str] = set()  # every name bound at module level (classes, imports, assignments)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.globals.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                self.globals.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.globals.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))

    def resolve(self, node: ast.expr) -> str | None:
        """Canonical dotted name of a decorator or callee (`nki.jit`, `nki.jit(...)`), through import aliases."""
        target = node.func if isinstance(node, ast.Call) else node
        dotted = dotted_name(target)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            dotted = self.aliases[head] + ("." + rest if rest else "")
        return canonical(dotted)

    def is_container_expr(self, node: ast.expr) -> bool:
        """`{}`, `[]`, `dict()`, `collections.OrderedDict()` ...: a mutable container."""
        if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
            return True
        if isinstance(node, ast.Call):
            dotted = dotted_name(node.func)
            if dotted is None:
                return False
            head, _, rest = dotted.partition(".")
            if head in self.aliases:
                dotted = self.aliases[head] + ("." + rest if rest else "")
            return dotted in _CONTAINER_CALLS or dotted.rsplit(".", 1)[-1] in ("OrderedDict", "defaultdict")
        return False

    # -- kernels ---------------------------------------------------------------------------------------

    def kernel_functions(self, context: AnalysisContext | None) -> list[FunctionNode]:
        """The functions to analyse as kernels (sub-kernels they call are walked inside them)."""
        decorated = [name for name, fdef in self.functions.items()
                     if any(is_kernel_decorator(self.resolve(d)) for d in fdef.decorator_list)]
        # `kernel = nki.jit(func)` at module level.
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and self.functions:
                name = self.resolve(node.value.func)
                if is_kernel_decorator(name) and node.value.args and isinstance(node.value.args[0], ast.Name):
                    target = node.value.args[0].id
                    if target in self.functions and target not in decorated:
                        decorated.append(target)
        if context is not None and context.kernel and context.kernel in self.functions:
            names = [context.kernel]
        elif decorated:
            names = self._top_level(decorated)
        else:
            # No decorated kernel: undecorated functions that use NKI (the harness decorates them), but not
            # tests, fixtures or functions that wrap nested kernels of their own.
            names = self._top_level([name for name, fdef in self.functions.items()
                                     if self._uses_nki(fdef) and not fdef.decorator_list
                                     and not name.startswith("test") and not self._has_nested_kernel(fdef)])
        return [self.functions[name] for name in names]

    def _has_nested_kernel(self, fdef: FunctionNode) -> bool:
        for node in ast.walk(fdef):
            if node is not fdef and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and any(is_kernel_decorator(self.resolve(d)) for d in node.decorator_list):
                return True
        return False

    def _top_level(self, names: list[str]) -> list[str]:
        """Drop functions that another candidate calls: sub-kernels are analysed inside their callers."""
        called: set[str] = set()
        for name in names:
            for node in ast.walk(self.functions[name]):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id != name:
                    called.add(node.func.id)
        top = [n for n in names if n not in called]
        return top or names

    def _uses_nki(self, fdef: FunctionNode) -> bool:
        nki_locals = {name for name, dotted in self.aliases.items()
                      if canonical(dotted).split(".")[0] in ("nl", "nisa", "nki")}
        return any(isinstance(n, ast.Name) and n.id in nki_locals for n in ast.walk(fdef))

    # -- state that outlives a call ----------------------------------------------------------------------

    def cache_decorators(self) -> list[tuple[str, int, str]]:
        """(function, line, decorator) for functions wrapped in a functools cache."""
        out: list[tuple[str, int, str]] = []
        for name, fdef in self.functions.items():
            for deco in fdef.decorator_list:
                dname = self.resolve(deco)
                if dname is not None and dname in CACHE_DECORATORS:
                    out.append((name, deco.lineno, dname))
        return out

    def container_writes(self) -> list[tuple[str, str, int]]:
        """Writes to module-level dicts/lists from any function: `_cache[key] = out`, `_cache.update(...)`."""
        out: list[tuple[str, str, int]] = []
        if not self.containers:
            return out
        for fname, fdef in self.functions.items():
            for node in ast.walk(fdef):
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                                and target.value.id in self.containers:
                            out.append((fname, target.value.id, node.lineno))
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id in self.containers \
                        and node.func.attr in CONTAINER_WRITE_METHODS:
                    out.append((fname, node.func.value.id, node.lineno))
        return out


def dotted_name(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def is_kernel_decorator(name: str | None) -> bool:
    return name is not None and (name in KERNEL_DECORATORS or name.endswith(".nki_jit"))
