"""Static analysis of a CUDA->NKI port: idiom findings, CUDA constructs and the CUDA<->NKI alignment.

    report = analyze_task(task)                       # an nkitui.task.Task
    report = analyze_sources("k.cu", "k_nki.py", task_root=".", context=AnalysisContext(...))
    report.findings      # nkitui.common.findings.Finding, sorted by severity (file:line, rule, paragraph)
    report.alignment     # AlignmentPair(role, cuda=[LineRange], nki=[LineRange], labels, note)
    report.to_dict()     # what `nkitui analyze --json` prints

Nothing is executed: the NKI port is read with Python's ast, the CUDA source with tree-sitter-cuda.
Rules are documented in docs/analysis-rules.md.
"""

from __future__ import annotations

import ast
import re
import time
import traceback
from pathlib import Path
from typing import Any

from nkitui.analysis.alignment import AlignmentPair, LineRange, align
from nkitui.analysis.context import AnalysisContext, TensorInfo
from nkitui.analysis.cuda import CudaModel, build_cuda_model
from nkitui.analysis.nki import NkiModel
from nkitui.analysis.nki.module import parse_module
from nkitui.analysis.nki.walker import build
from nkitui.analysis.report import AnalysisReport, render
from nkitui.analysis.rules import (
    ALL_RULES,
    ALL_SPECS,
    FILE_RULES,
    KernelView,
    RuleSpec,
    file_rule,
    make_finding,
)
from nkitui.common.findings import Finding, dedupe_findings

__all__ = [
    "AlignmentPair", "AnalysisContext", "AnalysisReport", "LineRange", "RuleSpec", "TensorInfo",
    "all_rule_specs", "analyze_models", "analyze_sources", "analyze_task", "build_cuda_model", "build_nki_model",
    "render",
]

NKI_SYNTAX = file_rule(RuleSpec(
    id="NKI-SYNTAX", title="The NKI port does not parse", category="fidelity", severity="high",
    summary="The port is not valid Python, so it cannot be traced or compiled; nothing else can be checked.",
))
NKI_MIXED = file_rule(RuleSpec(
    id="NKI-MIXED-NAMESPACE", title="Mixes the legacy and new NKI namespaces", category="fidelity",
    severity="high",
    summary=("The file imports both `neuronxcc.nki` and the standalone `nki`. One file may not mix them (SDK "
             "2.27+), and since NKI 0.4.0 using neuronxcc.nki inside a kernel is a compile error."),
))
NKI_NO_KERNEL = file_rule(RuleSpec(
    id="NKI-NO-KERNEL", title="No NKI kernel found", category="task", severity="medium",
    summary=("No function in the port is decorated with @nki.jit (or similar), the manifest names none, and no "
             "function uses nki.language / nki.isa, so there is nothing to analyse."),
))
CUDA_PARSE = file_rule(RuleSpec(
    id="CUDA-PARSE", title="Parts of the CUDA source could not be parsed", category="task", severity="info",
    summary=("tree-sitter-cuda could not read some lines (macros, unusual templates); constructs there are missing "
             "from the alignment."),
))
ANALYSIS_ERROR = file_rule(RuleSpec(
    id="ANALYSIS-ERROR", title="An analysis rule failed on this source", category="task", severity="info",
    summary="A rule raised an error on unusual code; its findings are missing. Please report it with the source.",
))


def all_rule_specs() -> list[RuleSpec]:
    return list(ALL_SPECS) + FILE_RULES


def build_nki_model(source: str, path: str, context: AnalysisContext | None = None,
                    local_nki_modules: frozenset[str] = frozenset()) -> NkiModel:
    return build(source, path, context, local_nki_modules)


_NKI_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:neuronxcc\.nki|nki)\b", re.M)


def _imported_modules(source: str) -> set[str]:
    """Dotted names the port imports (`a.b` of `import a.b` / `from a.b import c`, and `a.b.c` too)."""
    try:
        tree = parse_module(source)
    except SyntaxError:
        return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom):  # `from . import helpers`
            out.update(a.name for a in node.names)
    return out


def local_nki_modules(port: Path, source: str, levels: int = 4) -> frozenset[str]:
    """Modules the port imports that are files of its own project importing NKI (helpers split into another
    file, found beside the port or under one of its parent folders): passing tiles to them is not host code."""
    names: set[str] = set()
    folders = [port.parent, *list(port.parent.parents)[:levels]]
    for dotted in _imported_modules(source):
        if dotted.split(".")[0] in ("nki", "neuronxcc", "numpy", "torch", "jax", "scipy"):
            continue
        rel = Path(*dotted.split("."))
        for folder in folders:
            for path in (folder / rel.with_suffix(".py"), folder / rel / "__init__.py"):
                try:
                    if path.is_file() and path.resolve() != port.resolve() \
                            and _NKI_IMPORT.search(path.read_text(encoding="utf-8", errors="replace")):
                        names.add(dotted)
                except OSError:
                    continue
    return frozenset(names)


def _rel(path: Path, root: Path | None) -> str:
    if root is None:
        return path.name
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {path} does not exist; check the path (or sources.{what} in task.toml)") from None
    except OSError as exc:
        raise OSError(f"cannot read {what} {path}: {exc}") from exc


def analyze_sources(cuda_path: str | Path | None, nki_path: str | Path, *, task_root: str | Path | None = None,
                    context: AnalysisContext | None = None) -> AnalysisReport:
    """Analyse an NKI port (and optionally its CUDA source). Paths in findings are relative to task_root."""
    started = time.perf_counter()
    root = Path(task_root) if task_root is not None else Path(nki_path).parent
    nki_p = Path(nki_path)
    nki_rel = _rel(nki_p, root)
    source = _read(nki_p, "nki")
    nki = build_nki_model(source, nki_rel, context, local_nki_modules(nki_p, source))
    cuda: CudaModel | None = None
    if cuda_path is not None:
        cuda_p = Path(cuda_path)
        cuda = build_cuda_model(_read(cuda_p, "cuda"), _rel(cuda_p, root))
    report = analyze_models(nki, cuda, context)
    if nki.syntax_error is None:
        from nkitui.analysis.rules.hacks import source_findings

        have = {f.rule for f in report.findings if f.file == nki_rel}
        # the kernel's own HACK-HOST-COMPUTE (no NKI work at all) already says what the entry check would
        extra = [f for f in source_findings(source, nki_rel, context.kernel if context else None)
                 if not (f.rule == "HACK-HOST-COMPUTE" and f.rule in have)]
        if extra:
            report.findings = dedupe_findings([*report.findings, *extra])
            report = report.sorted()
    report.elapsed_ms = (time.perf_counter() - started) * 1000.0
    return report


def integrity_findings(task: Any) -> list[Finding]:
    """HACK-TAMPER and the entry-point checks on every Python file of the task (the kernel and whatever it may
    import), read with `ast`: cheap, and run on every evaluation. The reference file gets HACK-TAMPER only (it
    is host code by design, so the entry checks do not apply; replacing part of an imported module there is
    shown, not failed: hacks.tamper_findings)."""
    from nkitui.analysis.rules.hacks import source_findings, tamper_findings
    from nkitui.analysis.rules.probes import env_probe_findings

    root = Path(task.root)
    kernel = getattr(task, "kernel", None)
    reference = getattr(getattr(task, "sources", None), "reference", None)
    reference_path = Path(reference.path).resolve() if reference is not None else None
    found: list[Finding] = []
    for path in sorted(root.rglob("*.py")):
        rel_parts = path.relative_to(root).parts
        if any(part.startswith(".") or part in ("reviews", "__pycache__", "venv", ".venv", "node_modules") for part in rel_parts):
            continue
        try:
            if not path.is_file():
                continue
            resolved = path.resolve()
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        is_kernel = kernel is not None and Path(kernel.path).resolve() == resolved
        if resolved == reference_path and not is_kernel:  # a reference in the kernel's own file gets the kernel's checks
            found.extend(tamper_findings(source, _rel(path, root), reference=True))
            found.extend(env_probe_findings(source, _rel(path, root), reference=True))
            continue
        entry = kernel.name if is_kernel and kernel is not None else None
        found.extend(source_findings(source, _rel(path, root), entry))
    return found


def analyze_models(nki: NkiModel, cuda: CudaModel | None, context: AnalysisContext | None = None) -> AnalysisReport:
    """Run every rule on already-built models and align them."""
    findings: list[Finding] = []
    if nki.syntax_error is not None:
        msg, line = nki.syntax_error
        column = nki.syntax_error_column
        where = f"line {line}, column {column}" if column else f"line {line}"
        too_deep = "more than nkitui's analysis follows" in msg  # common.pyast.TooDeep
        findings.append(make_finding(
            NKI_SYNTAX, file=nki.path, severity="high", line=line,
            title=f"Too deeply nested to analyse: {msg} ({where})" if too_deep else f"Syntax error: {msg} ({where})",
            message=(f"{nki.path} has {msg.split(',')[0]} at {where}. Python may run it, but nkitui's analysis "
                     "cannot read it: no rule checked this port, and the run's integrity check fails on it."
                     if too_deep else
                     f"{nki.path} does not parse as Python ({msg} at {where}). NKI kernels are traced from "
                     "their Python source, so this port cannot compile or run; fix the syntax first."),
            data={"column": column} if column else None,
        ))
    else:
        findings.extend(_module_findings(nki, context))
        for km in nki.kernels:
            findings.extend(_kernel_findings(KernelView(km, nki, cuda, context)))
    if cuda is not None and cuda.error_lines:
        lines = cuda.error_lines
        findings.append(make_finding(
            CUDA_PARSE, severity="info", title=f"{len(lines)} CUDA line(s) could not be parsed", line=lines[0],
            file=cuda.path,
            message=(f"tree-sitter-cuda could not parse {cuda.path} at line(s) {', '.join(map(str, lines[:8]))}"
                     f"{' …' if len(lines) > 8 else ''}; constructs there may be missing from the alignment."),
            data={"lines": lines},
        ))
    alignment = align(cuda, nki) if nki.syntax_error is None else []
    report = AnalysisReport(
        nki_file=nki.path, cuda_file=cuda.path if cuda else None, namespace=nki.namespace,
        findings=dedupe_findings(findings), alignment=alignment, nki=nki.summary(), cuda=cuda.summary() if cuda else None,
        context=bool(context and (context.inputs or context.outputs)),
    )
    return report.sorted()


def _kernel_findings(view: KernelView) -> list[Finding]:
    """Every rule on one kernel; a rule that raises becomes an ANALYSIS-ERROR finding, the others still run."""
    km = view.kernel
    findings: list[Finding] = []
    for rule in ALL_RULES:
        try:
            findings.extend(rule.run(view))
        except Exception as exc:  # one broken rule must not hide the others' findings
            where = traceback.extract_tb(exc.__traceback__)[-1]
            findings.append(view.finding(
                ANALYSIS_ERROR, severity="info", title=f"{rule.name} failed on {km.name}", line=km.line,
                message=(f"The check {rule.name} ({rule.spec.id}) raised {type(exc).__name__}: {exc} "
                         f"({Path(where.filename).name}:{where.lineno}) while reading kernel {km.name}. "
                         "Its findings are missing from this report."),
            ))
    return findings


def _module_findings(nki: NkiModel, context: AnalysisContext | None) -> list[Finding]:
    out: list[Finding] = []
    if nki.namespace == "mixed":
        legacy = [line for line, m in nki.import_lines if m.startswith("neuronxcc.nki")]
        new = [line for line, m in nki.import_lines if m == "nki" or m.startswith("nki.")]
        out.append(make_finding(
            NKI_MIXED, file=nki.path, severity="high", title="Imports both neuronxcc.nki and nki",
            line=min(legacy + new), end_line=max(legacy + new),
            message=(f"{nki.path} imports the legacy `neuronxcc.nki` (line {', '.join(map(str, legacy))}) and the "
                     f"standalone `nki` (line {', '.join(map(str, new))}). A file may not mix the two namespaces: "
                     "their ISA calls differ (return values vs destination-first arguments, masks vs slices), and "
                     "since NKI 0.4.0 neuronxcc.nki inside a kernel is a compile error. Port the file to one "
                     "namespace."),
        ))
    if not nki.kernels:
        wanted = context.kernel if context else None
        out.append(make_finding(
            NKI_NO_KERNEL, file=nki.path, severity="medium",
            title=f"Kernel {wanted} not found" if wanted else "No NKI kernel found", line=None,
            message=(f"{nki.path} has no function named {wanted}" if wanted else
                     f"{nki.path} has no @nki.jit-style kernel and no function using nki.language / nki.isa")
            + "; static checks had nothing to read. Check kernel.entry in task.toml.",
        ))
    return out


def analyze_task(task: Any) -> AnalysisReport:
    """Analyse an `nkitui.task.Task`: its NKI port, its CUDA source (if any), with the manifest's shapes."""
    context = AnalysisContext.from_task(task)
    sources = task.sources
    kernel = getattr(task, "kernel", None)
    nki_path = sources.nki or (kernel.path if kernel is not None else None)
    if nki_path is None:
        raise ValueError(f"task {task.id} has no NKI source (sources.nki in {task.root / 'task.toml'})")
    return analyze_sources(sources.cuda, nki_path, task_root=task.root, context=context)
