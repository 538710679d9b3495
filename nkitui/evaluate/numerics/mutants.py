"""Test strength: mutate the NKI port on purpose and see whether the task's tolerance notices.

Five mutation operators, each applied at every site it finds (up to a cap per operator), on the
legacy (`neuronxcc.nki`) and the new (`nki`) namespace alike, since both spell loops, `nl.ds`,
`nc_matmul` and dtypes the same way:

  drop-last-tile     a tile loop runs one trip fewer: range(n) -> range(n - 1), range(a, b, s) -> range(a, b - s, s)
  shift-index        an index that follows a loop variable (or an nl.ds offset, or a slice) moves by one
  skip-accumulation  an accumulation in a loop (`acc += ...`, `acc = acc + ...`, nc_matmul into PSUM)
                     does nothing on the loop's first trip
  swap-operands      the operands of a non-commutative op swap: a - b, a / b, matmul / nc_matmul,
                     subtract / divide, tensor_tensor data
  lower-accumulator  a float32 buffer or dtype (a PSUM/SBUF accumulator) becomes bfloat16

The source is edited as text at the AST node's position, so every other line keeps its number and
a mutant's file:line points at the original port. Each mutant runs (precise mode) on the task's
inputs and is compared with the reference under the task's own tolerance:

  caught      some output fails the tolerance
  crashed     the mutant raised (caught by crash, counted apart)
  equivalent    the outputs equal the unmutated port's bit for bit (no effect on these inputs)
  undetectable  every output passes, but also passes the advisor's tolerance: the change stays within
                the error a correct port may make, so no sound tolerance could catch it
  survived      every output passes the task's tolerance although the advisor's would reject it: the
                tolerance (or the inputs) is weaker than it could be
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from nkitui.common import pyast
from nkitui.common.codec import Record

from nkitui.common.findings import Finding
from nkitui.evaluate.numerics import findings as rules
from nkitui.evaluate.numerics.findings import g, numerics_finding
from nkitui.evaluate.numerics.callables import RunOptions, SourceRunner, describe_exception
from nkitui.evaluate.numerics.tolerance import check_policy, rel_l2_error

Operator = Literal["drop-last-tile", "shift-index", "skip-accumulation", "swap-operands", "lower-accumulator"]
OPERATORS: tuple[str, ...] = ("drop-last-tile", "shift-index", "skip-accumulation", "swap-operands", "lower-accumulator")
MutantStatus = Literal["caught", "crashed", "equivalent", "undetectable", "survived"]

LOOP_FUNCS = {"range", "affine_range", "sequential_range", "static_range", "tile_range"}
MATMUL_FUNCS = {"matmul", "nc_matmul"}
NONCOMMUTATIVE_FUNCS = {"subtract", "divide", "power", "fmod", "mod"}
NONCOMMUTATIVE_OPS = {"subtract", "divide", "power", "mod", "fmod"}
ALLOC_FUNCS = {"zeros", "ndarray", "full", "empty", "zeros_like", "ones"}
NKI_LANGUAGE_MODULES = {"neuronxcc.nki.language", "nki.language"}

OPERATOR_ADVICE = {
    "drop-last-tile": "the inputs may not reach the last tile, or its contribution fits inside the tolerance",
    "shift-index": "an index off by one goes unnoticed: the tolerance absorbs reading a neighbouring element",
    "skip-accumulation": "one missing term of the accumulation fits inside the tolerance",
    "swap-operands": "swapping the operands gives a result the tolerance accepts (symmetric or near-constant inputs?)",
    "lower-accumulator": "accumulating in bfloat16 instead of fp32 fits inside the tolerance",
}


@dataclass(frozen=True)
class Mutant:
    id: str  # e.g. "drop-last-tile#1"
    operator: str
    description: str  # e.g. "nl.affine_range(n_tiles) -> nl.affine_range(n_tiles - 1)"
    file: str
    line: int
    source: str  # the whole mutated file

    def to_dict(self, with_source: bool = False) -> dict[str, Any]:
        d = {"id": self.id, "operator": self.operator, "description": self.description, "file": self.file,
             "line": self.line}
        if with_source:
            d["source"] = self.source
        return d


@dataclass(frozen=True)
class MutantResult(Record):
    id: str
    operator: str
    description: str
    file: str
    line: int
    status: MutantStatus
    detail: str = ""  # the exception, or which output failed
    max_abs: float | None = None  # largest error against the reference over the outputs
    rel_l2: float | None = None
    advised: str = ""  # survived: the advised tolerance that would have caught it, in words


@dataclass(frozen=True)
class MutationReport(Record):
    _codec_computed = ("counts",)
    results: tuple[MutantResult, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)
    error: str | None = None  # the unmutated port could not run

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def counts(self) -> dict[str, int]:
        return {s: self.count(s) for s in ("caught", "crashed", "equivalent", "undetectable", "survived")}

    @property
    def score(self) -> float | None:
        """Share of effective mutants (all but equivalent/undetectable) caught, crashes included."""
        effective = [r for r in self.results if r.status not in ("equivalent", "undetectable")]
        if not effective:
            return None
        return sum(1 for r in effective if r.status in ("caught", "crashed")) / len(effective)


# ---------------------------------------------------------------------------------------------
# Finding mutation sites


def _func_name(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute):
        return f.attr
    if isinstance(f, ast.Name):
        return f.id
    return ""


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_float32(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("float32", "fp32")


@dataclass
class _Loop:
    var: str | None
    start: ast.AST | None  # None means 0


@dataclass
class _Site:
    operator: str
    node: ast.expr | ast.stmt  # a call, subscript or operation; a statement for skip-accumulation
    loop: _Loop | None = None


class _SiteCollector(ast.NodeVisitor):
    def __init__(self) -> None:
        self.sites: list[_Site] = []
        self.loops: list[_Loop] = []
        self.in_function = 0
        self.index_depth = 0

    # structure -------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.in_function += 1
        for stmt in node.body:
            self.visit(stmt)
        self.in_function -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]  # same fields, async or not

    def visit_If(self, node: ast.If) -> None:
        if _is_main_guard(node):
            return
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        if not self.in_function:
            return
        loop = _Loop(var=None, start=None)
        if isinstance(node.iter, ast.Call) and _func_name(node.iter) in LOOP_FUNCS and node.iter.args:
            self.sites.append(_Site("drop-last-tile", node.iter))
            if isinstance(node.target, ast.Name):
                loop = _Loop(node.target.id, node.iter.args[0] if len(node.iter.args) >= 2 else None)
        self.index_depth += 1
        self.visit(node.iter)
        self.index_depth -= 1
        self.loops.append(loop)
        for stmt in node.body + node.orelse:
            self.visit(stmt)
        self.loops.pop()

    # accumulation ------------------------------------------------------------------------
    def _innermost_loop(self) -> _Loop | None:
        for loop in reversed(self.loops):
            if loop.var is not None:
                return loop
        return None

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        loop = self._innermost_loop()
        if self.in_function and loop is not None and isinstance(node.op, (ast.Add, ast.Sub)):
            self.sites.append(_Site("skip-accumulation", node, loop))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        loop = self._innermost_loop()
        if self.in_function and loop is not None and len(node.targets) == 1:
            root = _root_name(node.targets[0])
            if root and _accumulates(node.value, root):
                self.sites.append(_Site("skip-accumulation", node, loop))
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        loop = self._innermost_loop()
        if (self.in_function and loop is not None and isinstance(node.value, ast.Call)
                and _func_name(node.value) in MATMUL_FUNCS and _writes_psum(node.value)):
            self.sites.append(_Site("skip-accumulation", node, loop))
        self.generic_visit(node)

    # indices -----------------------------------------------------------------------------
    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.in_function and self.index_depth == 0:
            loop_vars = {loop.var for loop in self.loops if loop.var}
            sl = node.slice
            has_ds = any(isinstance(n, ast.Call) and _func_name(n) == "ds" for n in ast.walk(sl))
            if has_ds or (_names_in(sl) & loop_vars):
                self.sites.append(_Site("shift-index", node))
        self.visit(node.value)
        self.index_depth += 1
        self.visit(node.slice)
        self.index_depth -= 1

    # operands ----------------------------------------------------------------------------
    def visit_BinOp(self, node: ast.BinOp) -> None:
        if (self.in_function and self.index_depth == 0 and isinstance(node.op, (ast.Sub, ast.Div))
                and not isinstance(node.left, ast.Constant) and not isinstance(node.right, ast.Constant)):
            self.sites.append(_Site("swap-operands", node))
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _func_name(node)
        if self.in_function and self.index_depth == 0:
            if name in MATMUL_FUNCS and _matmul_operands(node) is not None:
                self.sites.append(_Site("swap-operands", node))
            elif name in NONCOMMUTATIVE_FUNCS and len(node.args) >= 2:
                self.sites.append(_Site("swap-operands", node))
            elif name == "tensor_tensor" and _tensor_tensor_operands(node) is not None:
                self.sites.append(_Site("swap-operands", node))
            if (any(_is_float32(a) for a in node.args) or any(
                k.arg == "dtype" and _is_float32(k.value) for k in node.keywords
            )) and not _hbm_buffer(node):
                self.sites.append(_Site("lower-accumulator", node))
        if name in ("ds", "arange") or name in LOOP_FUNCS:
            self.index_depth += 1
            self.generic_visit(node)
            self.index_depth -= 1
        else:
            self.generic_visit(node)


def _hbm_buffer(call: ast.Call) -> bool:
    """An HBM tensor (a kernel output): its dtype is the output's, not an accumulator's."""
    for k in call.keywords:
        if k.arg == "buffer" and isinstance(k.value, ast.Attribute) and "hbm" in k.value.attr:
            return True
    return False


def _is_main_guard(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Compare) and isinstance(t.left, ast.Name) and t.left.id == "__name__")


def _accumulates(value: ast.AST, root: str) -> bool:
    """`value` adds something to `root`: root + x, x + root, nl.add(root, x), root - x."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)):
        return _root_name(value.left) == root or (isinstance(value.op, ast.Add) and _root_name(value.right) == root)
    if isinstance(value, ast.Call) and _func_name(value) in ("add", "subtract") and value.args:
        return any(_root_name(a) == root for a in value.args[:2])
    return False


def _writes_psum(call: ast.Call) -> bool:
    """A new-namespace nc_matmul (dst first, or accumulate=) that accumulates into its dst."""
    for k in call.keywords:
        if k.arg == "accumulate":
            return not (isinstance(k.value, ast.Constant) and k.value.value is False)
    return len(call.args) >= 3 or any(k.arg == "dst" for k in call.keywords)


def _matmul_operands(call: ast.Call) -> tuple[Any, Any] | None:
    """Where the two operands sit: ("arg", i) or ("kw", name) pairs."""
    kws = {k.arg: k for k in call.keywords}
    if "stationary" in kws and "moving" in kws:
        return ("kw", "stationary"), ("kw", "moving")
    if "x" in kws and "y" in kws:
        return ("kw", "x"), ("kw", "y")
    new_style = "dst" in kws or (_func_name(call) == "nc_matmul" and len(call.args) >= 3)
    first = 1 if new_style and "dst" not in kws else 0
    if len(call.args) >= first + 2:
        return ("arg", first), ("arg", first + 1)
    return None


def _tensor_tensor_operands(call: ast.Call) -> tuple[Any, Any] | None:
    kws = {k.arg: k for k in call.keywords}
    op = kws.get("op")
    if op is None or not (isinstance(op.value, ast.Attribute) and op.value.attr in NONCOMMUTATIVE_OPS):
        return None
    if "data1" in kws and "data2" in kws:
        return ("kw", "data1"), ("kw", "data2")
    first = 1 if ("dst" not in kws and len(call.args) >= 3) else 0
    if len(call.args) >= first + 2:
        return ("arg", first), ("arg", first + 1)
    return None


# ---------------------------------------------------------------------------------------------
# Text edits at node positions


class _Source:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.blines = [line.encode("utf-8") for line in self.lines]

    def offset(self, lineno: int, col: int) -> int:
        """Character offset in the text of (1-based line, UTF-8 byte column)."""
        before = sum(len(line) for line in self.lines[: lineno - 1])
        return before + len(self.blines[lineno - 1][:col].decode("utf-8", errors="replace"))

    def replace(self, node: ast.AST, new_text: str) -> str:
        # the nodes replaced are parsed expressions and statements: they carry their positions
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]  # see above
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]  # see above
        spanned = node.end_lineno - node.lineno  # type: ignore[attr-defined]  # see above
        # Keep the line count: extra newlines sit inside the parentheses, where Python ignores them.
        replacement = f"({new_text}{chr(10) * spanned})"
        return self.text[:start] + replacement + self.text[end:]

    def insert(self, lineno: int, col: int, text: str) -> str:
        at = self.offset(lineno, col)
        return self.text[:at] + text + self.text[at:]

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ast.unparse(node)


def _language_alias(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in NKI_LANGUAGE_MODULES and a.asname:
                    return a.asname
        elif isinstance(node, ast.ImportFrom) and node.module in ("neuronxcc.nki", "nki"):
            for a in node.names:
                if a.name == "language":
                    return a.asname or "language"
    return None


def _one_less(call: ast.Call) -> ast.Call | None:
    new = ast.Call(func=call.func, args=list(call.args), keywords=call.keywords)
    if len(call.args) == 1:
        new.args[0] = ast.BinOp(call.args[0], ast.Sub(), ast.Constant(1))
    elif len(call.args) == 2:
        new.args[1] = ast.BinOp(call.args[1], ast.Sub(), ast.Constant(1))
    elif len(call.args) >= 3:
        new.args[1] = ast.BinOp(call.args[1], ast.Sub(), call.args[2])
    else:
        return None
    return new


def _plus_one(node: ast.expr) -> ast.expr:
    return ast.BinOp(node, ast.Add(), ast.Constant(1))


def _shift_slice(sl: ast.expr, loop_vars: set[str]) -> ast.expr | None:
    """The subscript's index with its first loop-dependent component (an nl.ds, a slice) moved by one."""
    elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    for i, e in enumerate(elts):
        if isinstance(e, ast.Call) and _func_name(e) == "ds" and e.args:
            moved: ast.expr = ast.Call(func=e.func, args=[_plus_one(e.args[0]), *e.args[1:]], keywords=e.keywords)
        elif isinstance(e, ast.Slice):
            if e.upper is None or not (_names_in(e) & loop_vars):
                continue
            lower = _plus_one(e.lower) if e.lower is not None else ast.Constant(1)
            moved = ast.Slice(lower=lower, upper=_plus_one(e.upper), step=e.step)
        elif _names_in(e) & loop_vars:
            moved = _plus_one(e)
        else:
            continue
        elts[i] = moved
        return ast.Tuple(elts=elts, ctx=ast.Load()) if isinstance(sl, ast.Tuple) else elts[0]
    return None


def _swap(call_or_binop: ast.AST) -> ast.expr | None:
    if isinstance(call_or_binop, ast.BinOp):
        return ast.BinOp(call_or_binop.right, call_or_binop.op, call_or_binop.left)
    call = call_or_binop
    assert isinstance(call, ast.Call)
    name = _func_name(call)
    where = (_matmul_operands(call) if name in MATMUL_FUNCS else
             _tensor_tensor_operands(call) if name == "tensor_tensor" else
             (("arg", 0), ("arg", 1)) if len(call.args) >= 2 else None)
    if where is None:
        return None
    args = list(call.args)
    kws = [ast.keyword(arg=k.arg, value=k.value) for k in call.keywords]
    (ka, a), (kb, b) = where
    if ka == "arg" and kb == "arg":
        args[a], args[b] = args[b], args[a]
    elif ka == "kw" and kb == "kw":
        ia = next(i for i, k in enumerate(kws) if k.arg == a)
        ib = next(i for i, k in enumerate(kws) if k.arg == b)
        kws[ia].value, kws[ib].value = kws[ib].value, kws[ia].value
    else:
        return None
    return ast.Call(func=call.func, args=args, keywords=kws)


def _lower(call: ast.Call, alias: str | None) -> ast.Call:
    def repl(node: ast.expr) -> ast.expr:
        if _is_float32(node):
            assert isinstance(node, ast.Attribute)
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("np", "numpy") and alias:
                base = ast.Name(alias, ast.Load())
            return ast.Attribute(value=base, attr="bfloat16", ctx=ast.Load())
        return node

    return ast.Call(
        func=call.func,
        args=[repl(a) for a in call.args],
        keywords=[ast.keyword(arg=k.arg, value=repl(k.value) if k.arg == "dtype" else k.value) for k in call.keywords],
    )


def _mutate(site: _Site, src: _Source, tree: ast.Module, loops: dict[int, set[str]]) -> tuple[str, str] | None:
    """(mutated source, description) for one site, or None when the site cannot be mutated."""
    node = site.node
    before = src.segment(node)
    if site.operator == "drop-last-tile":
        assert isinstance(node, ast.Call)  # the collector's drop-last-tile sites are loop calls
        new: ast.expr | None = _one_less(node)
        if new is None:
            return None
        text = ast.unparse(new)
        return src.replace(node, text), f"{before} -> {text}"
    if site.operator == "shift-index":
        assert isinstance(node, ast.Subscript)
        loop_vars = loops.get(id(node), set())
        moved = _shift_slice(node.slice, loop_vars)
        if moved is None:
            return None
        text = ast.unparse(ast.Subscript(value=node.value, slice=moved, ctx=ast.Load()))
        return src.replace(node, text), f"{before} -> {text}"
    if site.operator == "skip-accumulation":
        loop = site.loop
        assert loop is not None and loop.var is not None
        first = ast.unparse(loop.start) if loop.start is not None else "0"
        line = src.blines[node.lineno - 1]
        if line[: node.col_offset].strip():
            return None  # a statement after `for ...:` on the same line: no room for an `if`
        cond = f"if {loop.var} != {first}: "
        text = src.insert(node.lineno, node.col_offset, cond)
        first_line = before.splitlines()[0] if before else ""
        return text, f"{first_line} skipped when {loop.var} == {first} (first trip of its loop)"
    if site.operator == "swap-operands":
        new = _swap(node)
        if new is None:
            return None
        text = ast.unparse(new)
        return src.replace(node, text), f"{_short(before)} -> {_short(text)}"
    if site.operator == "lower-accumulator":
        assert isinstance(node, ast.Call)  # the collector's lower-accumulator sites are allocation calls
        new = _lower(node, _language_alias(tree))
        text = ast.unparse(new)
        return src.replace(node, text), f"{_short(before)} -> {_short(text)}"
    return None


def _short(text: str, limit: int = 90) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def _loop_vars_by_subscript(tree: ast.Module) -> dict[int, set[str]]:
    """Loop variables in scope at every Subscript node (by id)."""
    out: dict[int, set[str]] = {}

    def walk(node: ast.AST, scope: set[str]) -> None:
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            walk(node.iter, scope)
            inner = scope | {node.target.id}
            for child in node.body + node.orelse:
                walk(child, inner)
            return
        if isinstance(node, ast.Subscript):
            out[id(node)] = scope
        for part in ast.iter_child_nodes(node):
            walk(part, scope)

    walk(tree, set())
    return out


def _site_order(site: _Site) -> tuple[int, int, int, int]:
    # PSUM buffers are the accumulators that matter most: lower them first.
    psum_first = 0
    if site.operator == "lower-accumulator" and isinstance(site.node, ast.Call):
        psum_first = 0 if any(
            k.arg == "buffer" and isinstance(k.value, ast.Attribute) and k.value.attr == "psum"
            for k in site.node.keywords
        ) else 1
    return OPERATORS.index(site.operator), psum_first, site.node.lineno, site.node.col_offset


def generate_mutants(source: str, file: str = "kernel.py", max_per_operator: int = 4) -> list[Mutant]:
    """Every mutant of `source` (up to `max_per_operator` per operator, in source order).

    Raises SyntaxError (with the file and line) when the source does not parse.
    """
    try:
        tree = pyast.parse(source, filename=file, max_depth=pyast.ANALYSIS_MAX_DEPTH)  # TooDeep: the visitors recurse
    except SyntaxError as exc:
        raise SyntaxError(f"{file}:{exc.lineno}: cannot parse the NKI port for mutation: {exc.msg}") from exc
    collector = _SiteCollector()
    collector.visit(tree)
    loops = _loop_vars_by_subscript(tree)
    src = _Source(source)
    mutants: list[Mutant] = []
    per_op: dict[str, int] = {}
    seen: set[str] = set()
    for site in sorted(collector.sites, key=_site_order):
        if per_op.get(site.operator, 0) >= max_per_operator:
            continue
        made = _mutate(site, src, tree, loops)
        if made is None:
            continue
        text, description = made
        if text in seen or text == source:
            continue
        try:
            pyast.parse(text)
        except SyntaxError:
            continue
        seen.add(text)
        per_op[site.operator] = per_op.get(site.operator, 0) + 1
        mutants.append(Mutant(
            id=f"{site.operator}#{per_op[site.operator]}",
            operator=site.operator,
            description=description,
            file=file,
            line=site.node.lineno,
            source=text,
        ))
    return mutants


# ---------------------------------------------------------------------------------------------
# Running mutants


def run_mutants(
    mutants: Sequence[Mutant],
    run_source: SourceRunner,
    inputs: dict[str, np.ndarray],
    reference_outputs: Mapping[str, np.ndarray],
    outputs: Sequence[Any],
    original_outputs: Mapping[str, np.ndarray] | None = None,
    advised: Mapping[str, Any] | None = None,
) -> MutationReport:
    """Run every mutant on `inputs` and judge it with each output's tolerance (`outputs`: the specs).

    `advised`: {output: the advisor's TolerancePolicy}; a mutant every output of which also passes
    it is "undetectable" rather than "survived".
    """
    results: list[MutantResult] = []
    for m in mutants:
        results.append(_run_one(m, run_source, inputs, reference_outputs, outputs, original_outputs, advised))
    report = MutationReport(tuple(results))
    return MutationReport(report.results, tuple(mutant_findings(report, outputs)))


def _run_one(m: Mutant, run_source: SourceRunner, inputs: dict[str, np.ndarray], reference_outputs: Mapping[str, np.ndarray],
             outputs: Sequence[Any], original: Mapping[str, np.ndarray] | None,
             advised: Mapping[str, Any] | None = None) -> MutantResult:
    base: dict[str, Any] = dict(id=m.id, operator=m.operator, description=m.description, file=m.file, line=m.line)
    try:
        with np.errstate(all="ignore"):
            got = run_source(m.source, dict(inputs), RunOptions(precise=True, label=f"mutant {m.id}"))
    except Exception as exc:  # noqa: BLE001 - a crash is one of the outcomes
        return MutantResult(**base, status="crashed", detail=describe_exception(exc))
    failing, max_abs, rel = [], 0.0, 0.0
    for spec in outputs:
        a = got.get(spec.name) if hasattr(got, "get") else None
        b = np.asarray(reference_outputs[spec.name])
        if a is None:
            return MutantResult(**base, status="crashed", detail=f"no output named {spec.name!r}")
        a = np.asarray(a)
        if a.shape != b.shape:
            return MutantResult(**base, status="caught", detail=f"`{spec.name}` has shape {a.shape}, not {b.shape}")
        outcome = check_policy(a, b, spec.tolerance, spec.dtype)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        both = np.isfinite(a64) & np.isfinite(b64)
        if both.any():
            max_abs = max(max_abs, float(np.abs(a64[both] - b64[both]).max()))
        # NaN/Inf where the other side differs (e.g. a tile never written keeps the emulator's NaN):
        # the error there is infinite, as in the metrics, not left out of max_abs
        same_nonfinite = (np.isnan(a64) & np.isnan(b64)) | (np.isinf(a64) & (a64 == b64))
        nonfinite_bad = int(np.count_nonzero(~both & ~same_nonfinite))
        if nonfinite_bad:
            max_abs = float("inf")
        rel = max(rel, rel_l2_error(a64, b64))
        if not outcome.passed:
            extra = f", {nonfinite_bad} of them NaN/Inf against the reference" if nonfinite_bad else ""
            failing.append(f"`{spec.name}` fails ({outcome.mismatches} of {outcome.total} elements{extra})")
    if failing:
        return MutantResult(**base, status="caught", detail="; ".join(failing), max_abs=max_abs, rel_l2=rel)
    if original is not None and all(
        np.array_equal(np.asarray(got[s.name]).astype(np.float64), np.asarray(original[s.name]).astype(np.float64),
                       equal_nan=True)
        for s in outputs if s.name in original
    ):
        return MutantResult(**base, status="equivalent", detail="outputs identical to the unmutated port",
                            max_abs=max_abs, rel_l2=rel)
    if advised and all(
        s.name in advised and check_policy(np.asarray(got[s.name]), np.asarray(reference_outputs[s.name]),
                                           advised[s.name], s.dtype).passed
        for s in outputs
    ):
        return MutantResult(**base, status="undetectable",
                            detail="within the error a correct port may make (passes the advised tolerance too)",
                            max_abs=max_abs, rel_l2=rel)
    advised_text = "; ".join(f"`{n}`: {p.describe()}" for n, p in (advised or {}).items())
    return MutantResult(**base, status="survived", detail="every output passes the tolerance", max_abs=max_abs,
                        rel_l2=rel, advised=advised_text)


def mutant_findings(report: MutationReport, outputs: Sequence[Any]) -> list[Finding]:
    policies = "; ".join(f"`{o.name}`: {o.tolerance.describe()}" for o in outputs)
    findings = []
    for r in report.results:
        if r.status != "survived":
            continue
        findings.append(
            numerics_finding(
                rules.MUTANT_SURVIVED,
                "high" if r.operator == "lower-accumulator" else "medium",
                f"Tolerance accepts a broken port ({r.operator})",
                f"The task's tolerance ({policies}) accepts a deliberately broken port: {r.description} "
                f"({r.file}:{r.line}) still passes, with max abs error {g(r.max_abs)} and relative L2 {g(r.rel_l2)} "
                f"against the reference"
                + (f", although the tolerance the advisor derives for a correct port ({r.advised}) rejects it"
                   if r.advised else "")
                + f". {OPERATOR_ADVICE.get(r.operator, '').capitalize()}; tighten the tolerance "
                "or use inputs that expose this change.",
                r.to_dict(),
                file=r.file,
                line=r.line,
            )
        )
    return findings


def iter_sites(source: str) -> Iterator[tuple[str, int]]:
    """(operator, line) of every mutation site in `source` (uncapped), for display."""
    collector = _SiteCollector()
    try:
        tree = pyast.parse(source, max_depth=pyast.ANALYSIS_MAX_DEPTH)
    except SyntaxError:  # TooDeep too: no sites to show
        return
    collector.visit(tree)
    for s in collector.sites:
        yield s.operator, s.node.lineno
