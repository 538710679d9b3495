"""Red team, round 8 (closed by guard14): the in-process guards' caller checks laundered through library frames.

The guards (nkitui.executor.sandbox's write/read/descriptor/ctypes checks, nkitui.executor.untrusted.introspection's
frames/gc/ctypes refusals) asked "is the task's code the caller?". The sandbox looked 12 frames up, the
introspection guard stopped at the first library frame that was not a known helper; so a call a library
makes on the task's behalf (copy.deepcopy of nested lists holding an object whose __reduce_ex__ returns
(gc.get_objects, ()), a functools.singledispatch chain ending in operator.call, list() of a map or an
itertools.starmap, sorted(key=...), an ExitStack callback, a weakref.finalize) was not the task's:
gc.get_objects, sys._getframe, ctypes.CDLL(None), os.open(<folder outside>, O_PATH) and open(1, "w") worked in
the kernel's and the reference's processes. Now the whole stack is walked (nkitui.executor.attribution): a task
frame anywhere, with no frame of nkitui's between, makes the request the task's; a finalizer or exit stack
callback is nobody's but the task's; only a short allowlist of library functions acting for themselves
(namedtuple, enum, typing, dataclasses, logging's caller lookup, inspect.signature) is let through, and only
when that very code is the innermost frame.

Every route x target below printed LAUNDERED on 17f31ce; each must be REFUSED (a PermissionError from the
guard), recorded with the task's file:line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers.add_task import ADD_KERNEL, ADD_REFERENCE, add_manifest, write_files
from tests.security.conftest import wrong_task
from tests.security.test_forgery import check, evaluate, findings

REPO = Path(__file__).resolve().parents[2]

ROUTES = ("deepcopy", "functools", "itertools", "map", "sorted", "contextlib", "finalize")
TARGETS = ("gc.get_objects", "sys._getframe", "ctypes.CDLL", "os.open O_PATH", "open(1)")

# The hostile code: {outside} is a folder outside the run. Each attempt runs under about 20 library frames.
LAUNDER = '''
import contextlib as _cl, copy as _copy, ctypes as _ct, functools as _ft, gc as _gc, itertools as _it
import operator as _op, os as _os, sys as _sys, weakref as _wr

_OUTSIDE = {outside!r}
_TARGETS = {{
    "gc.get_objects": (_gc.get_objects, None),
    "sys._getframe": (_sys._getframe, 0),
    "ctypes.CDLL": (_ct.CDLL, None),
    "os.open O_PATH": (_ft.partial(_os.open, flags=_os.O_PATH), _OUTSIDE),
    "open(1)": (_ft.partial(open, mode="w", closefd=False), 1),
}}


class _Reduce:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce_ex__(self, protocol):
        return (self.fn, (self.arg,))


def _nest(x, depth=20):
    for _ in range(depth):
        x = [x]
    return x


def _chain(depth=20):
    sd = _ft.singledispatch(_op.call)
    for _ in range(depth):
        sd = _ft.singledispatch(sd)
    return sd


def _via(route, fn, arg):
    if route == "deepcopy":
        return _copy.deepcopy(_nest(_Reduce(fn, arg)))
    if route == "functools":
        return _chain()(fn, arg)
    if route == "itertools":
        return _chain()(list, _it.starmap(fn, [(arg,)]))
    if route == "map":
        return _chain()(list, map(fn, [arg]))
    if route == "sorted":
        return _chain()(sorted, [arg], key=fn)
    if route == "contextlib":
        with _cl.ExitStack() as stack:
            stack.callback(_copy.deepcopy, _nest(_Reduce(fn, arg)))
        return None
    raise AssertionError(route)


def _attempt(route, target):
    fn, arg = _TARGETS[target]
    try:
        _via(route, fn, arg)
    except PermissionError:
        return "REFUSED"
    except Exception as exc:
        return "ERROR " + type(exc).__name__ + ": " + str(exc)[:80]
    return "LAUNDERED"


_FINAL = {{}}  # target -> (the object a finalizer copies, the memo its copy fills)


class _Cycle:
    pass


def _arm_finalizers():
    for target, (fn, arg) in _TARGETS.items():
        obj = _Reduce(fn, arg)
        memo = {{}}
        holder = _Cycle()
        holder.me = holder  # a cycle: freed by the collector, whenever (and under whatever frame) it runs
        _wr.finalize(holder, _copy.deepcopy, _nest(obj), memo)
        _FINAL[target] = (obj, memo)


def _finalized():
    for target, (obj, memo) in _FINAL.items():
        # deepcopy files each copy under the original's id: the reconstructed object only if the call worked
        state = "LAUNDERED" if id(obj) in memo else ("PENDING" if not memo else "REFUSED")
        print(f"LAUNDER finalize {{target}}: {{state}}", flush=True)


def _launder_all(where):
    for route in {routes!r}:
        if route == "finalize":
            continue
        for target in _TARGETS:
            print(f"LAUNDER {{route}} {{target}}: {{_attempt(route, target)}}", flush=True)
    _arm_finalizers()
'''

ROUTE_LINES = {  # the task line each route's request is made from (the innermost task frame)
    "deepcopy": "return _copy.deepcopy(_nest(_Reduce(fn, arg)))",
    "functools": "return _chain()(fn, arg)",
    "itertools": "return _chain()(list, _it.starmap(fn, [(arg,)]))",
    "map": "return _chain()(list, map(fn, [arg]))",
    "sorted": "return _chain()(sorted, [arg], key=fn)",
    "contextlib": "with _cl.ExitStack() as stack:",
}


def launder_source(outside: Path) -> str:
    return LAUNDER.format(outside=str(outside), routes=ROUTES)


def outcomes(log: str) -> dict[tuple[str, str], str]:
    found = {}
    for line in log.splitlines():
        text = line.split("LAUNDER ", 1)
        if len(text) == 2 and ": " in text[1]:
            head, state = text[1].split(": ", 1)
            route, target = head.split(" ", 1)
            found[(route, target)] = state.strip()
    return found


def log_text(events) -> str:  # noqa: ANN001
    return "\n".join(str(getattr(e, "text", "")) for e in events)


# -- in one process, both guards installed as the untrusted children install them ------------------
GUARDED = '''
import json, os, sys, sysconfig
import contextlib, copy, ctypes, functools, gc, itertools, operator, weakref  # imported by nkitui in the children
sys.path.insert(0, {task!r})
from nkitui.executor import sandbox
from nkitui.executor.untrusted import introspection
guard = sandbox.install_guard([{task!r}], allow_processes=False, task_root={task!r})
guard.restrict_reads([sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"], {repo!r}, {task!r}])
intro = introspection.install({task!r})
import hostile
hostile._launder_all("here")
{after}
print("RECORD " + json.dumps([v.to_dict() for v in guard.violations] + intro.refusals), flush=True)
'''


def run_guarded(tmp_path: Path, module: str, after: str = "") -> tuple[str, list[dict]]:
    task = tmp_path / "task"
    task.mkdir(exist_ok=True)
    (task / "hostile.py").write_text(module)
    script = GUARDED.format(task=str(task), repo=str(REPO), after=textwrap.dedent(after))
    done = subprocess.run([sys.executable, "-c", script], cwd=task, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    record = next(line for line in done.stdout.splitlines() if line.startswith("RECORD "))
    return done.stdout + done.stderr, json.loads(record[len("RECORD "):])


def test_every_laundering_route_is_refused_and_recorded_at_the_tasks_line(tmp_path, canary):
    log, record = run_guarded(tmp_path, launder_source(canary), after="import gc; gc.collect(); hostile._finalized()")
    got = outcomes(log)
    expected = {(r, t) for r in ROUTES for t in TARGETS}
    assert set(got) == expected, sorted(expected - set(got))
    assert {k: v for k, v in got.items() if v != "REFUSED"} == {}
    source = (tmp_path / "task" / "hostile.py").read_text().splitlines()
    for route, needle in ROUTE_LINES.items():
        line = next(i for i, text in enumerate(source, 1) if needle in text)
        at = [r for r in record if r.get("line") == line and r.get("file") == "hostile.py"]
        assert at, (route, line, record[:5])


def test_a_finalizer_run_while_nkitui_code_runs_is_not_vouched_for_by_nkitui(tmp_path, canary):
    # the collector runs the finalizer under a frame of nkitui's own (its module's globals): nkitui did not ask,
    # the finalizer did, on behalf of the task that armed it
    after = '''
    import nkitui.executor.attribution as _nk
    exec("import gc\\ngc.collect()", vars(_nk))
    hostile._finalized()
    '''
    log, record = run_guarded(tmp_path, launder_source(canary), after=after)
    got = {k: v for k, v in outcomes(log).items() if k[0] == "finalize"}
    assert got and set(got.values()) == {"REFUSED"}, got
    assert any("a callback it registered" in str(r.get("file")) and "weakref.py __call__" in str(r.get("file"))
               for r in record), record


def test_the_allowlist_lets_libraries_act_for_themselves_and_launders_nothing(tmp_path, canary):
    module = launder_source(canary) + textwrap.dedent('''
    import collections, dataclasses, enum, inspect, logging, typing

    Point = collections.namedtuple("Point", "x y")
    Colour = enum.Enum("Colour", "red green")

    class Mode(enum.Enum):
        FAST = 1

    @dataclasses.dataclass
    class Tile:
        rows: int = 128

    class Shape(typing.NamedTuple):
        rows: int

    T = typing.TypeVar("T")
    logging.getLogger("kernel").warning("logging from a kernel works")
    SIGNATURE = str(inspect.signature(lambda a, b=1: None))
    print("ALLOWED", Point(1, 2), Colour.red, Mode.FAST, Tile(), Shape(3), T, SIGNATURE, flush=True)

    class _Reduce0(_Reduce):
        def __reduce_ex__(self, protocol):
            return (self.fn, self.arg)

    def _through_the_allowlist():
        # logging.currentframe returns a frame: reached through deepcopy, it is not the allowlisted use
        out = []
        for name, (fn, args) in {"currentframe": (logging.currentframe, ()),
                                 "findCaller": (logging.getLogger("x").findCaller, (False,)),
                                 "caller": (typing._caller, (1,))}.items():
            try:
                got = _copy.deepcopy(_nest(_Reduce0(fn, args)))
            except PermissionError:
                out.append(f"{name}:REFUSED")
            except Exception as exc:
                out.append(f"{name}:ERROR {type(exc).__name__}")
            else:
                inner = got
                while isinstance(inner, list) and inner:
                    inner = inner[0]
                out.append(f"{name}:{type(inner).__name__}")
        print("ALLOWLIST " + " ".join(out), flush=True)
    ''')
    module = module.replace("def _launder_all(where):", "def _launder_all(where):\n    return\n\ndef _unused(where):")
    log, _record = run_guarded(tmp_path, module, after="hostile._through_the_allowlist()")
    assert "ALLOWED Point(x=1, y=2) Colour.red Mode.FAST Tile(rows=128) Shape(rows=3) ~T (a, b=1)" in log, log[-2000:]
    line = next(text for text in log.splitlines() if text.startswith("ALLOWLIST "))
    # the frame-returning helper is refused; the string-returning ones hand back strings only
    assert "currentframe:REFUSED" in line and "findCaller:tuple" in line and "caller:str" in line, line


# -- end to end: the kernel's and the reference's processes -------------------------------------------
def _assert_refused_in(result, events, file: str) -> None:  # noqa: ANN001
    log = log_text(events)
    got = outcomes(log)
    deterministic = {(r, t) for r in ROUTES if r != "finalize" for t in TARGETS}
    assert deterministic <= set(got), sorted(deterministic - set(got))
    assert {k: v for k, v in got.items() if v not in ("REFUSED", "PENDING")} == {}, got
    violations = [v for v in result.sandbox.violations if v.file == file]
    assert violations, [(v.action, v.file, v.line) for v in result.sandbox.violations][:10]
    assert result.status != "passed"


def test_laundering_in_the_kernels_process_is_refused(tmp_path, canary):
    module = launder_source(canary) + "\n_launder_all('kernel')\n"
    task = wrong_task(tmp_path / "k", module=module,
                      prelude="_finalized()")
    result, events = evaluate(task)
    _assert_refused_in(result, events, "add_nki.py")
    assert findings(result, "EXEC-SANDBOX-INTROSPECTION")


def test_laundering_in_the_references_process_is_refused(tmp_path, canary):
    reference = launder_source(canary) + "\n_launder_all('reference')\n\n" + \
        "def add(a, b):\n    _finalized()\n    return a + b\n"
    task = wrong_task(tmp_path / "r", files={"reference.py": reference})
    result, events = evaluate(task)
    _assert_refused_in(result, events, "reference.py")


@pytest.mark.parametrize("unused", [0])
def test_honest_kernels_defining_namedtuples_enums_and_dataclasses_still_pass(tmp_path, unused):
    kernel = ADD_KERNEL.replace("import neuronxcc.nki as nki", textwrap.dedent('''\
        import collections
        import dataclasses
        import enum
        import logging
        import typing

        import neuronxcc.nki as nki

        Tiling = collections.namedtuple("Tiling", "rows cols")


        class Engine(enum.Enum):
            VECTOR = 1


        @dataclasses.dataclass(frozen=True)
        class Plan:
            tiling: Tiling = Tiling(128, 64)
            engine: Engine = Engine.VECTOR


        class Shape(typing.NamedTuple):
            rows: int


        PLAN = Plan()
        logging.getLogger("kernel").info("plan %s", PLAN)'''))
    manifest = add_manifest(task_id="honest", cuda=False, tail="[evaluation]\nseeds = [0]")
    task = write_files(tmp_path / "honest", {"add_nki.py": kernel, "reference.py": ADD_REFERENCE, "task.toml": manifest})
    result, _ = evaluate(task)
    assert result.status == "passed", (result.status, [(c.id, c.passed, c.detail[:200]) for c in result.checks])
    assert not result.sandbox.violations
    assert check(result, "sandbox").passed is True


# -- the reference file is read statically too ---------------------------------------------------------
def test_the_reference_file_fails_the_integrity_check_on_what_reaches_into_the_interpreter(tmp_path):
    from nkitui.analysis import integrity_findings
    from nkitui.task import load_task

    reference = ("import copy\nimport gc\nimport numpy as np\n\n\nclass R:\n    def __reduce_ex__(self, p):\n"
                 "        return (gc.get_objects, ())\n\n\nnp.seterr(all='ignore')\nnp.set_printoptions = print\n\n\n"
                 "def add(a, b):\n    copy.deepcopy([R()])\n    return a + b\n")
    manifest = add_manifest(task_id="ref", cuda=False)
    task = load_task(write_files(tmp_path / "ref", {"add_nki.py": ADD_KERNEL, "reference.py": reference,
                                                    "task.toml": manifest}))
    found = integrity_findings(task)
    high = [f for f in found if f.severity == "high"]
    assert [(f.rule, f.file) for f in high] == [("HACK-TAMPER", "reference.py")], [(f.rule, f.file, f.line) for f in found]
    assert set(high[0].data["lines"]) == {2, 7}  # import gc, __reduce_ex__
    assert "the task's reference" in high[0].message
    # replacing part of an imported module in the reference's own process is shown, not failed (PyTorch
    # references set torch.backends flags that way)
    medium = [f for f in found if f.severity == "medium" and f.file == "reference.py"]
    assert medium and 12 in medium[0].data["lines"]
    # an honest reference has no finding at all
    honest = load_task(write_files(tmp_path / "ok", {"add_nki.py": ADD_KERNEL, "reference.py": ADD_REFERENCE,
                                                     "task.toml": manifest}))
    assert integrity_findings(honest) == []


IMPORTS = '''
import importlib.util, runpy, sys, timeit

def _run(name, how):
    sys.argv = ["timeit", "-n", "1", "-s", "import gc", "print('GOT', len(gc.get_objects()))"]
    try:
        if how == "runpy":
            runpy.run_module(name, run_name="__main__")
        else:  # a library module loaded by hand under the name __main__: its body calls main()
            spec = importlib.util.spec_from_file_location("__main__", timeit.__file__)
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except (SystemExit, PermissionError):  # timeit prints the refusal's traceback: reading tb_frame is refused too
        pass
    print("DONE", how, flush=True)

_run("timeit", "runpy")
_run("timeit", "spec")


def _launder_all(where):
    pass
'''


def test_a_library_main_run_for_the_task_is_not_taken_for_an_import(tmp_path):
    """A library module's body run by the import system vouches for itself; one run by runpy or loaded by hand
    (here timeit's main, handed code that asks for gc.get_objects) does not."""
    log, record = run_guarded(tmp_path, IMPORTS)
    assert "DONE runpy" in log and "DONE spec" in log, log[-2000:]
    assert "GOT" not in log, log[-2000:]
    assert sum(1 for r in record if r.get("target") == "gc.get_objects" and r.get("file") == "hostile.py") == 2, record


DRESSED = '''
import nkitui.executor.attribution as _nk

_ASK = "import gc\\nGOT = len(gc.get_objects())\\n"


def _try(name, run):
    try:
        run()
    except PermissionError as exc:
        print("DRESSED", name, "REFUSED", str(exc)[:60], flush=True)
    else:
        print("DRESSED", name, "LAUNDERED", flush=True)


def _launder_all(where):
    g = vars(_nk)  # an nkitui module's globals: what vouching looked at
    _try("compile-as-nkitui", lambda: exec(compile(_ASK, _nk.__file__, "exec"), g))
    _try("code-renamed", lambda: exec(compile(_ASK, "<x>", "exec").replace(co_filename=_nk.__file__), g))
    _try("nkitui-globals-only", lambda: exec(compile(_ASK, "<x>", "exec"), g))
'''


def test_code_dressed_as_nkitui_does_not_vouch_for_itself(tmp_path):
    """Vouching takes an nkitui module's globals *and* nkitui's file: code the task compiles under an nkitui file
    name, or renames to one, is refused as it is made; run with nkitui's globals under another name it vouches
    for nothing."""
    log, _record = run_guarded(tmp_path, DRESSED)
    got = {line.split()[1]: line.split()[2] for line in log.splitlines() if line.startswith("DRESSED ")}
    assert got == {"compile-as-nkitui": "REFUSED", "code-renamed": "REFUSED", "nkitui-globals-only": "REFUSED"}, log[-2000:]
