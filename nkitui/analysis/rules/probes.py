"""HACK-ENV-PROBE: the task's code asks where it runs (red team A, finding 4).

A port can compute the right answer only where it is judged: `b if "nkitui" in str(type(a)) else a`, or
`"nkitui-run-" in os.getcwd()`. With no device the verdict is the emulator's, so such a port passes and is
wrong wherever it really runs. An NKI kernel is a pure function of its inputs; it has no use for the process's
folder, environment, command line, host, clock, the names of its tensors' types, or whether a module imports.
This file-level pass (ast only, nothing runs) flags each such probe at its line; high findings fail the run's
`integrity` check as HACK-TAMPER's do. What it cannot see (timing the emulator from outside Python's clocks,
probes hidden behind computed names, which HACK-TAMPER flags) is docs/executor.md's "inherent limit".
"""

from __future__ import annotations

import ast

from nkitui.analysis.rules.phrases import lines_phrase, severity_groups
from nkitui.analysis.rules.registry import RuleSpec, file_rule
from nkitui.common import pyast
from nkitui.common.findings import Finding

ENV_PROBE = file_rule(RuleSpec(
    id="HACK-ENV-PROBE",
    title="Probes the environment it runs in",
    category="integrity",
    severity="high",
    summary=(
        "The task's code asks where it runs instead of computing from its inputs: the working folder, the "
        "environment, the command line or the interpreter (os.getcwd, os.environ, sys.argv, sys.executable, "
        "platform, socket.gethostname, __file__), a clock, the names of its tensors' types (str(type(a)), "
        "a.__class__, __module__, __qualname__, isinstance against non-NKI classes), hasattr probes, strings "
        "naming nkitui, an emulator or the SDK's internals in comparisons, or whether a module imports (try/except "
        "ImportError deciding what runs). A port that behaves differently under nkitui's emulator can be right "
        "only where it is judged; the run's integrity check fails."
    ),
))

# os.* that tamper already fails (raw descriptors, os._exit, signals) are HACK-TAMPER's; every other os name
# is a question about the process or the machine (no kernel needs os at all)
_OS_TAMPER = {"_exit", "write", "dup", "dup2", "fdopen", "getppid", "kill", "killpg"}
_OS_WHAT = {
    "getcwd": "the working folder (nkitui's scratch folder)", "getcwdb": "the working folder",
    "environ": "the environment", "environb": "the environment", "getenv": "the environment",
    "getenvb": "the environment", "uname": "the host", "path": "the file system", "listdir": "the file system",
    "scandir": "the file system", "stat": "the file system", "lstat": "the file system", "walk": "the file system",
    "access": "the file system", "readlink": "the file system", "getpid": "the process", "getuid": "the user",
    "geteuid": "the user", "getlogin": "the user", "cpu_count": "the machine", "sched_getaffinity": "the machine",
    "getloadavg": "the machine", "sysconf": "the machine", "times": "a clock",
}
_SYS_TAMPER = {"_getframe", "_current_frames", "settrace", "setprofile", "modules", "addaudithook"}
_SYS_BENIGN = {"maxsize", "float_info", "int_info", "hash_info", "stdout", "stderr", "exit"}
# modules whose every use asks about the machine, the process or the clock
_PROBE_MODULES = {
    "platform": "the platform", "getpass": "the user", "pwd": "the user", "grp": "the user",
    "resource": "the process's limits", "sysconfig": "the interpreter's installation",
    "site": "the interpreter's installation", "pkgutil": "which modules exist", "pkg_resources": "which packages exist",
    "shutil": "the file system", "glob": "the file system", "tempfile": "the temporary folder",
    "uuid": "the host", "getopt": "the command line",
    "argparse": "the command line", "socket": "the host", "pathlib": "the file system",
}
_BUILTIN_TYPES = {"int", "float", "bool", "str", "bytes", "tuple", "list", "dict", "set", "frozenset", "slice",
                  "complex", "range", "type", "NoneType", "object"}
# strings that, compared against something, can only be looking for who runs the code
_TELLTALES = ("nkitui", "emulat", "simulat", "neuronxcc", "nki.", "ndarray", "numpy", "interpret", "sandbox",
              "scratch", "fake", "mock", "/tmp", "/proc", "/dev/neuron", "/sys/", "site-packages", "cpu")
_STRING_TESTS = {"startswith", "endswith", "find", "rfind", "index", "rindex", "count", "__contains__",
                 "search", "match", "fullmatch", "findall", "partition", "rpartition", "split"}
_PUBLIC_TENSOR_ATTRS = {"shape", "dtype", "buffer", "ndim", "size", "itemsize", "name"}
_MODULE_IDENTITY = {"__file__", "__name__", "__path__", "__package__", "__cached__"}
_NKI_PUBLIC = ("nki", "nki.language", "nki.isa", "nki.isa.constants", "nki.typing", "nki.compiler", "nki.collectives",
               "nki.tensor", "nki.dtype", "neuronxcc.nki", "neuronxcc.nki.language", "neuronxcc.nki.isa",
               "neuronxcc.nki.typing", "neuronxcc.nki.compiler", "numpy", "math")
_SYSTEM_PATHS = ("/proc", "/dev/", "/sys/", "/tmp", "/etc/", "/home", "/root", "/opt/aws")
# clocks (the emulator is orders of magnitude slower than a device); time.sleep reads nothing
_CLOCK_READS = {"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "process_time",
                "process_time_ns", "thread_time", "thread_time_ns", "clock_gettime", "clock_gettime_ns", "localtime",
                "gmtime", "ctime", "asctime", "strftime", "now", "utcnow", "today", "get_clock_info"}
_HOST_CLASSES = {"numpy", "torch", "jax", "jaxlib", "ml_dtypes", "nkitui", "types", "builtins", "ctypes"}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _telltale(value: object) -> str | None:
    if isinstance(value, str):
        low = value.lower()
        return next((t for t in _TELLTALES if t in low), None)
    return None


class _ProbeVisitor(ast.NodeVisitor):
    def __init__(self, tree: ast.Module) -> None:
        self.hits: list[tuple[int, str, str]] = []
        self._allowed: set[int] = set()  # ids of nodes read as part of something allowed (os.environ[...] = v)
        self.aliases: dict[str, str] = {}  # local name -> the module (or module.name) it stands for
        self.classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self._allowed_type_calls: set[int] = set()  # ids of `type(x)` calls compared with a builtin type

    def _hit(self, node: ast.AST, what: str, severity: str = "high") -> None:
        self.hits.append((getattr(node, "lineno", 0), what, severity))

    def _module_of(self, expr: ast.AST) -> str:
        """The module an attribute chain starts at (`os` of `os.path.exists`), or ''."""
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return self.aliases.get(expr.id, "") if isinstance(expr, ast.Name) else ""

    # -- imports -----------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self.generic_visit(node)

    def _probe_name(self, root: str, parts: list[str]) -> str | None:
        """What `root.parts[0]...` asks about, when it is a probe."""
        first = parts[0] if parts else ""
        if root in ("os", "posix", "nt"):
            if first and first not in _OS_TAMPER:
                return _OS_WHAT.get(first, "the process or the machine")
        elif root == "sys":
            if first and first not in _SYS_TAMPER and first not in _SYS_BENIGN:
                return "the interpreter and its command line"
        elif root in ("time", "datetime"):
            if first in _CLOCK_READS or (parts[1:2] and parts[1] in _CLOCK_READS):  # (datetime.datetime.now)
                return "a clock"
        elif root in _PROBE_MODULES and first:
            if root == "socket" and first not in ("gethostname", "getfqdn", "gethostbyname", "getaddrinfo"):
                return None  # sockets themselves are HACK-TAMPER's
            return _PROBE_MODULES[root]
        return None

    def visit_Try(self, node: ast.Try | ast.TryStar) -> None:
        imports = [n for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))]
        if imports and any(self._catches_import_error(h) for h in node.handlers):
            modules = [a.name for n in imports if isinstance(n, ast.Import) for a in n.names] + [
                n.module or "" for n in imports if isinstance(n, ast.ImportFrom)]
            private = [m for m in modules if m not in _NKI_PUBLIC]
            decides = any(not isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass))
                          for h in node.handlers for s in h.body) or bool(node.orelse)
            if private:
                self._hit(node, f"`try: import {private[0]}` ... `except`: whether a module imports tells an emulator "
                                "from the SDK")
            elif decides:  # (feature detection across SDK versions does this too: shown, not failed)
                self._hit(node, f"`try: import {modules[0]}` ... `except`: whether a module imports decides what runs",
                          "medium")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    @staticmethod
    def _catches_import_error(handler: ast.ExceptHandler) -> bool:
        if handler.type is None:
            return True
        names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any((isinstance(n, ast.Name) and n.id in _IMPORT_ERRORS)
                   or (isinstance(n, ast.Attribute) and n.attr in _IMPORT_ERRORS) for n in names)

    # -- names and attributes ----------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.id == "__file__":
            self._hit(node, "`__file__`: where the code was copied to (nkitui's scratch folder)")
        full = self.aliases.get(node.id, "")
        if "." in full and id(node) not in self._allowed:  # `from os import getcwd` ... `getcwd()`
            parts = full.split(".")
            what = self._probe_name(parts[0], parts[1:])
            if what:
                self._hit(node, f"`{node.id}` (`{full}`): {what}")

    def visit_Assign(self, node: ast.Assign) -> None:
        # `os.environ["NEURON_CC_FLAGS"] = ...`: configures the compiler, asks nothing
        for target in node.targets:
            if isinstance(target, ast.Subscript) and self._module_of(target.value).split(".")[0] == "os" \
                    and isinstance(target.value, ast.Attribute) and target.value.attr == "environ":
                self._allowed.add(id(target.value))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value.startswith(_SYSTEM_PATHS):
            self._hit(node, f"`{node.value[:40]!r}`: a path of the machine or the process ({node.value.split('/')[1]})")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        module = self._module_of(node)
        root = module.split(".")[0]
        text = ast.unparse(node)[:60]
        if isinstance(node.value, ast.Name) and module and id(node) not in self._allowed:
            parts = module.split(".")[1:] + [node.attr]
            what = self._probe_name(root, parts)
            if what:
                self._hit(node, f"`{text}`: {what}")
            elif node.attr in _MODULE_IDENTITY:
                self._hit(node, f"`{text}`: the identity of the imported module `{module}` (where it comes from)")
        if node.attr in ("__class__", "__module__", "__qualname__"):
            self._hit(node, f"`{text}`: the name of an object's type (which library made it)")
        self.generic_visit(node)

    # -- calls -------------------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        for operand in operands:
            if isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) and operand.func.id == "type" \
                    and len(operand.args) == 1 and all(self._builtin_type(o) for o in operands if o is not operand):
                self._allowed_type_calls.add(id(operand))
        for operand in operands:
            for const in ast.walk(operand):
                tell = _telltale(const.value) if isinstance(const, ast.Constant) else None
                if tell:
                    self._hit(node, f"`{ast.unparse(node)[:70]}`: compares with a string naming {tell!r}")
                    break
        self.generic_visit(node)

    def _builtin_type(self, expr: ast.expr) -> bool:
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(self._builtin_type(e) for e in expr.elts)
        return (isinstance(expr, ast.Name) and expr.id in _BUILTIN_TYPES) or (
            isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type"
            and len(expr.args) == 1 and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is None)

    def _nki_or_builtin_class(self, expr: ast.expr) -> bool:
        """A class a kernel may test against: a builtin, NKI's, or one of the project's own (not numpy's, torch's,
        jax's or nkitui's, whose instances only a host or an emulator hands a kernel; not a computed class)."""
        if isinstance(expr, (ast.Tuple, ast.List)):
            return all(self._nki_or_builtin_class(e) for e in expr.elts)
        if isinstance(expr, ast.Name) and (expr.id in _BUILTIN_TYPES or expr.id in self.classes):
            return True
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return False  # isinstance(a, type(b)), a subscript, a call
        module = self._module_of(expr) or (self.aliases.get(expr.id, "") if isinstance(expr, ast.Name) else "")
        return module.split(".")[0] not in _HOST_CLASSES

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) and func.id not in self.aliases else None
        if name == "type" and len(node.args) == 1 and id(node) not in self._allowed_type_calls:
            self._hit(node, f"`{ast.unparse(node)[:60]}`: an object's type (which library made it)")
        elif name in ("isinstance", "issubclass") and len(node.args) == 2 and not self._nki_or_builtin_class(node.args[1]):
            self._hit(node, f"`{ast.unparse(node)[:60]}`: tests an object against a class that is not NKI's "
                            "(which library made it)")
        elif name in ("hasattr", "getattr") and len(node.args) >= 2 and (name == "hasattr" or len(node.args) == 3):
            attr = node.args[1]
            if isinstance(attr, ast.Constant) and isinstance(attr.value, str) and attr.value not in _PUBLIC_TENSOR_ATTRS \
                    and not attr.value.startswith("__"):  # dunders and computed names: HACK-TAMPER's
                self._hit(node, f"`{ast.unparse(node)[:60]}`: asks whether an object has an attribute NKI does not "
                                "promise (which library made it)")
        elif name == "dir" and node.args and self._module_of(node.args[0]):
            self._hit(node, f"`{ast.unparse(node)[:60]}`: lists what an imported module holds")
        if isinstance(func, ast.Attribute) and func.attr in _STRING_TESTS:
            tell = next((t for a in node.args for c in ast.walk(a) if isinstance(c, ast.Constant)
                         and (t := _telltale(c.value))), None)
            if tell:
                self._hit(node, f"`{ast.unparse(node)[:70]}`: searches for a string naming {tell!r}")
        self.generic_visit(node)


def _main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (code nkitui never runs: it imports the file)."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def probe_lines(source: str) -> list[tuple[int, str, str]]:
    """(line, what, severity) for every probe of the environment in `source` (none when it does not parse: HACK-TAMPER
    and NKI-SYNTAX say so)."""
    try:
        tree = pyast.parse(source, max_depth=pyast.ANALYSIS_MAX_DEPTH)
    except (SyntaxError, ValueError):  # TooDeep too
        return []
    name_assigned = any(isinstance(n, ast.Name) and n.id == "__name__" and isinstance(n.ctx, ast.Store)
                        for n in ast.walk(tree))
    visitor = _ProbeVisitor(tree)
    try:
        for stmt in tree.body:
            if _main_guard(stmt) and not name_assigned:
                continue  # a self-test block runs only as a script (unless the file rebinds __name__)
            visitor.visit(stmt)
    except RecursionError:
        return []
    return sorted(set(visitor.hits))


def env_probe_findings(source: str, path: str, reference: bool = False) -> list[Finding]:
    """HACK-ENV-PROBE of one file: high (fails the run's integrity check) for the kernel's files, medium
    (shown for review) for the task's reference, which defines the right answer in its own process, and for
    feature detection (a public NKI module's import deciding what runs)."""
    hits = [(line, what, "medium" if reference else sev) for line, what, sev in probe_lines(source)]
    found: list[Finding] = []
    for severity, group, lines, shown in severity_groups(hits):
        if reference:
            message = (f"{path}, the task's reference, asks where it runs: {shown}. A reference that answers "
                       "differently under nkitui than elsewhere changes what counts as right; check that each probe "
                       "is harmless.")
        elif severity == "high":
            message = (f"{path} asks where it runs instead of computing from its inputs: {shown}. A kernel that can "
                       "tell nkitui's emulator from a NeuronCore can be right only where it is judged (e.g. `b if "
                       "\"nkitui\" in str(type(a)) else a`), and with no device the verdict is the emulator's. No NKI "
                       "kernel needs these; nkitui fails the run's integrity check. Remove them.")
        else:
            message = (f"{path} decides what runs by whether a module imports: {shown}. Feature detection across "
                       "SDK versions does this too, so it does not fail the run; check that both branches compute "
                       "the same.")
        found.append(Finding(
            rule=ENV_PROBE.id, severity=severity, category="integrity", source="analysis", file=path,
            line=min(lines), end_line=max(lines) if max(lines) > min(lines) else None,
            title=f"Probes the environment it runs in ({lines_phrase(lines)})", message=message,
            data={"lines": sorted(set(lines)), "probes": [what for _, what in group][:40]},
        ))
    return found
