"""Name resolution during a kernel walk: the stack of function activations (the kernel, then each helper
it calls, inlined), falling back to module constants, module functions, imports and builtins.

The scope also answers "is this name state that outlives one call?" (module-level containers, mutable
default arguments, module-level objects), which the reward-hacking rules read.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from nkitui.analysis.nki.imports import canonical
from nkitui.analysis.nki.module import ModuleFacts
from nkitui.analysis.nki.values import Api, FuncRef, Unk, Value

BUILTINS = frozenset({
    "range", "min", "max", "len", "int", "float", "abs", "tuple", "list", "zip", "enumerate", "print",
    "isinstance", "open", "sum", "round", "divmod", "reversed", "sorted", "map", "bool", "str",
    "setattr", "getattr", "hasattr", "delattr", "globals", "vars", "dict", "set", "type", "id", "hash", "any",
    "all", "iter", "next", "eval", "exec", "compile", "__import__",
})


# (kind, numerator, numerator text, denominator) of a trip count that divides a size by a tile size
Division = tuple[str, Value, str, int | None]


@dataclass
class Frame:
    """One function activation during the walk: its bindings, local imports and return values."""

    func: str
    env: dict[str, Value] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    returns: list[Value] = field(default_factory=list)
    divisions: dict[str, Division] = field(default_factory=dict)


class Scope:
    """The activation stack of one kernel walk and how names resolve through it."""

    def __init__(self, module: ModuleFacts):
        self.module = module
        self.frames: list[Frame] = []
        self.call_stack: list[str] = []  # functions being walked (the kernel, inlined helpers): no recursion
        self.state_params: set[str] = set()  # mutable default arguments of the kernel

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def lookup(self, name: str, default: Value = ...) -> Value:
        for frame in reversed(self.frames):
            if name in frame.env:
                return frame.env[name]
            if name in frame.aliases:
                return Api(canonical(frame.aliases[name]))
        m = self.module
        if name in m.constants:
            return m.constants[name]
        if name in m.functions:
            return FuncRef(name, m.functions[name])
        if name in m.aliases:
            return Api(canonical(m.aliases[name]))
        if name in BUILTINS:
            return Api(f"builtins.{name}")
        if default is not ...:
            return default
        return Unk(text=name)

    def lookup_division(self, name: str) -> Division | None:
        """The tile division a name was bound to (`n_tiles = (n + 127) // 128`), innermost binding first."""
        for frame in reversed(self.frames):
            if name in frame.divisions:
                return frame.divisions[name]
            if name in frame.env:
                return None
        return None

    def is_module_container(self, name: str) -> bool:
        """A module-level dict/list/set (or a mutable default argument of the kernel): state that outlives
        one call."""
        if name in self.state_params and self.frames and name in self.frames[0].env \
                and all(name not in f.env for f in self.frames[1:]):
            return True
        if name not in self.module.containers:
            return False
        return all(name not in f.env for f in self.frames)

    def is_module_object(self, node: ast.expr) -> bool:
        """`node` (a name, or attributes/subscripts of one) is bound at module level, not in the kernel."""
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if not isinstance(node, ast.Name):
            return False
        return node.id in self.module.globals and all(node.id not in f.env and node.id not in f.aliases
                                                      for f in self.frames)
