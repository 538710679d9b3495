"""Discover a task in a folder that has no task.toml.

Discovery only reads files (task code is untrusted and never runs here). It guesses the CUDA
source, the NKI port and its kernel, and a reference function, and reports every guess in words.
Tensors cannot be guessed safely, so a discovered task is analysable but not runnable until a
manifest declares its inputs and outputs (`nkitui task init` writes one from these guesses).
"""

from __future__ import annotations

import re
from pathlib import Path

from nkitui.common.names import DEFAULT_TARGET
from nkitui.task.model import DEFAULT_RUBRIC, Namespace, FunctionRef, KernelEntry, Sources, Task
from nkitui.task.problems import Problem, TaskError
from nkitui.task.pysource import inspect_source

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", "reviews", ".pytest_cache"}
_REFERENCE_NAME = re.compile(r"^(reference|ref|golden|forward|numpy_.+|.+_ref|ref_.+|.+_reference|.+_numpy|cpu_.+)$")
_MAX_FILES = 500


def _candidate_files(root: Path, suffix: str) -> list[Path]:
    found: list[Path] = []
    for path in sorted(root.rglob(f"*{suffix}")):
        if any(part in _SKIP_DIRS for part in path.relative_to(root).parts[:-1]):
            continue
        found.append(path)
        if len(found) >= _MAX_FILES:
            break
    return found


def discover_task(root: Path) -> Task:
    root = root.resolve()
    display = str(root)
    if not root.is_dir():
        raise TaskError([Problem(display, "", "not a folder", "give the path of a task folder")])
    guesses: list[str] = []
    problems: list[Problem] = []

    cuda_files = _candidate_files(root, ".cu") + _candidate_files(root, ".cuh")
    cuda = cuda_files[0] if cuda_files else None
    if cuda is not None:
        extra = f" (also found {', '.join(p.name for p in cuda_files[1:4])})" if len(cuda_files) > 1 else ""
        guesses.append(f"CUDA source: {cuda.relative_to(root)}{extra}")

    nki_file: Path | None = None
    kernel_name: str | None = None
    namespace: Namespace | None = None
    reference: FunctionRef | None = None
    for path in _candidate_files(root, ".py"):
        info = inspect_source(path)
        if info.syntax_error:
            continue
        if info.imports_nki and info.kernels and nki_file is None:
            nki_file, kernel_name = path, next(iter(info.kernels))
            namespace = "legacy" if info.namespace == "legacy" else "new" if info.namespace == "new" else None
            others = [k for k in info.kernels if k != kernel_name]
            guesses.append(
                f"NKI port: {path.relative_to(root)}, kernel {kernel_name} ({namespace or 'unknown'} namespace)"
                + (f"; other kernels there: {', '.join(others)}" if others else "")
            )
        elif not info.imports_nki and reference is None:
            for name in info.functions:
                if _REFERENCE_NAME.match(name):
                    reference = FunctionRef(path=path, name=name)
                    guesses.append(f"reference: {path.relative_to(root)}::{name}")
                    break

    if nki_file is None:
        problems.append(Problem(display, "", "no task.toml and no Python file with an @nki.jit kernel was found",
                                "add a task.toml (see docs/task-format.md) or the NKI port"))
        raise TaskError(problems)
    if reference is None:
        guesses.append("reference: none found (looked for functions named reference, ref, *_ref, numpy_*, forward)")
    guesses.append("inputs and outputs: not declared; the task can be analysed but not run — write a task.toml "
                   "(`nkitui task init DIR` drafts one)")
    kernel = KernelEntry(path=nki_file, name=kernel_name or "", namespace=namespace)
    return Task(
        root=root, id=root.name, title=f"{root.name} (discovered)", target=DEFAULT_TARGET,
        sources=Sources(nki=nki_file, cuda=cuda, reference=reference), kernel=kernel,
        rubric=DEFAULT_RUBRIC, manifest=None, guesses=tuple(guesses),
    )
