"""Static facts about a Python source file (never executed: task code is untrusted)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from nkitui.common import pyast

_JIT_DECORATORS = {"jit", "trace", "baremetal", "benchmark", "profile", "nki_jit", "simulate"}


@dataclass
class PySourceInfo:
    path: Path
    syntax_error: str | None = None
    syntax_error_line: int | None = None
    syntax_error_column: int | None = None  # 1-based, where Python reports one
    legacy_import_lines: list[int] = field(default_factory=list)  # neuronxcc.nki imports
    new_import_lines: list[int] = field(default_factory=list)  # standalone nki imports
    functions: dict[str, int] = field(default_factory=dict)  # top-level function -> line
    kernels: dict[str, int] = field(default_factory=dict)  # functions decorated like NKI kernels
    parameters: dict[str, list[str]] = field(default_factory=dict)  # function -> positional names

    @property
    def imports_nki(self) -> bool:
        return bool(self.legacy_import_lines or self.new_import_lines)

    @property
    def namespace(self) -> str | None:
        """"legacy", "new", "mixed" or None (no NKI import)."""
        if self.legacy_import_lines and self.new_import_lines:
            return "mixed"
        if self.legacy_import_lines:
            return "legacy"
        if self.new_import_lines:
            return "new"
        return None


def _decorator_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def inspect_source(path: Path) -> PySourceInfo:
    info = PySourceInfo(path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        info.syntax_error = f"cannot read file: {exc}"
        return info
    try:
        tree = pyast.parse(text, filename=str(path))
    except SyntaxError as exc:
        info.syntax_error = exc.msg
        info.syntax_error_line = exc.lineno
        info.syntax_error_column = exc.offset
        _imports_by_line(text, info)  # the namespace still shows in the import lines
        return info
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _classify_module(alias.name, node.lineno, info)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "neuronxcc" and any(a.name == "nki" for a in node.names):
                info.legacy_import_lines.append(node.lineno)
            else:
                _classify_module(node.module, node.lineno, info)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.functions[node.name] = node.lineno
            info.parameters[node.name] = [a.arg for a in node.args.posonlyargs + node.args.args]
            if any(_decorator_name(d) in _JIT_DECORATORS for d in node.decorator_list):
                info.kernels[node.name] = node.lineno
    return info


_IMPORT_LINE = re.compile(r"^\s*(?:import\s+([\w.]+)|from\s+([\w.]+)\s+import\s+([\w, ()]+))")


def _imports_by_line(text: str, info: PySourceInfo) -> None:
    """The NKI imports of a file that does not parse, read line by line (no tree to walk)."""
    for number, line in enumerate(text.splitlines(), 1):
        m = _IMPORT_LINE.match(line)
        if m is None:
            continue
        if m[1]:
            _classify_module(m[1], number, info)
        elif m[2] == "neuronxcc" and "nki" in re.split(r"[\s,()]+", m[3]):
            info.legacy_import_lines.append(number)
        else:
            _classify_module(m[2], number, info)


def _classify_module(module: str, line: int, info: PySourceInfo) -> None:
    if module == "neuronxcc.nki" or module.startswith("neuronxcc.nki."):
        info.legacy_import_lines.append(line)
    elif module == "nki" or module.startswith("nki."):
        info.new_import_lines.append(line)
