"""What a launch of task code leaves behind for a later launch in the same process (red team round 9c, finding 1).

A kernel that counts its calls (a module-level list, a global, an attribute on a function or on numpy, a file
in its scratch folder, a descriptor it opened at import, a shared mapping, the environment) can be right on
exactly the launches nkitui makes and wrong afterwards. Every seed is launched in a process of its own (the
evaluator forks one per seed), so each counted launch is a first launch; this audit is the other half: it
records, just before each launch and again once the launch's outputs are saved, everything of the process a
later launch could read, and names what differs. If nothing differs, a second launch starts from the very state
the first did, and by induction so does every later one; if something differs, the kernel keeps state across
launches, its later launches are not what nkitui judged, and the run cannot pass (HACK-LAUNCH-STATE).

    audit = LaunchStateAudit(task_roots, scratch_root)   # in the kernel process, before task code runs
    before = audit.snapshot()
    ...                                                  # the launch
    changed = audit.changes(before, audit.snapshot())    # ["global `_CALLS` of vector_add_nki.py", ...]

What is recorded:
* every module imported from the task's files: its globals, deep (containers, arrays and buffers by their bytes,
  mmaps by their contents, functions' attributes, defaults and closures, the task's classes and instances, the
  state of iterators and generators, lru_cache statistics);
* builtins, deep; every other module (numpy, nkitui, the standard library): which names it binds to which
  objects, the length of its containers and the attributes of its functions and classes;
* the random generators of `random` and `numpy.random`;
* the process's descriptors (what each refers to, its size, modification time and offset), the files and folders
  of its scratch folder but the requests' (size, modification time), the environment and the working folder.

It is the kernel process's own report, like the device provenance: task code that rewrites nkitui's functions is
caught by the patch watch and the introspection guard, not here. Walks are bounded (objects, bytes); state hidden
past the bound, in C memory, or in a library's own caches the shallow pass does not open is not seen, and is
what the fresh process per seed stands for.
"""

from __future__ import annotations

import builtins
import functools
import hashlib
import mmap
import os
import stat
import sys
import types
from pathlib import Path
from typing import Any

MAX_OBJECTS = 200_000  # objects walked per snapshot of the task's globals and builtins
MAX_BYTES = 256 << 20  # bytes of buffers and arrays hashed per snapshot
MAX_FILES = 20_000  # scratch entries listed
MAX_CHANGES = 6

# attributes nkitui's own emulator sets on the kernel object at every launch (nkitui.emulator.launch.Kernel)
_EMULATOR_KERNEL_RUN_ATTRS = frozenset({"last_run", "benchmark_result", "profile_result", "rank_runs"})
# module names whose values change as the process works, by nkitui's or the library's own doing
_OWN_CHANGES = frozenset({"__warningregistry__", "_cache", "_cached_objects",
                          "modules", "path_importer_cache"})  # sys's: every import adds to them
_REDUCIBLE_MODULES = frozenset({"builtins", "itertools", "collections", "_collections", "array"})
_key = object.__hash__  # identity without id()'s audit event (see nkitui.emulator.devmem.key_of)


class _Walk:
    def __init__(self, task_roots: tuple[str, ...], task_modules: frozenset[str]) -> None:
        self.task_roots = task_roots
        self.task_modules = task_modules
        self.seen: dict[int, int] = {}
        self.objects = 0
        self.bytes = 0
        self.cut = False

    def digest(self, obj: Any) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        self._walk(obj, h, 0)
        return h.digest()

    def _task_defined(self, obj: Any) -> bool:
        module = getattr(obj, "__module__", None)
        return isinstance(module, str) and module in self.task_modules

    def _buffer(self, data: Any, h: Any) -> None:
        view = memoryview(data)
        if self.bytes + view.nbytes > MAX_BYTES:
            self.cut = True
            h.update(b"<cut>%d" % view.nbytes)
            return
        self.bytes += view.nbytes
        h.update(view.cast("B") if view.c_contiguous else view.tobytes())

    def _walk(self, obj: Any, h: Any, depth: int, library: bool = False) -> None:  # noqa: C901, PLR0912, PLR0915 - one case per kind
        if obj is None or isinstance(obj, (bool, int, float, complex)):
            h.update(f"{type(obj).__name__}:{obj!r};".encode() if not isinstance(obj, float) else obj.hex().encode())
            return
        if isinstance(obj, str):
            h.update(b"s%d:" % len(obj))
            h.update(obj.encode("utf-8", "surrogatepass"))
            return
        if isinstance(obj, bytes):
            h.update(b"b%d:" % len(obj))
            h.update(obj)
            return
        ptr = _key(obj)
        seen = self.seen.get(ptr)
        if seen is not None:
            h.update(b"@%d;" % seen)
            return
        self.seen[ptr] = len(self.seen)
        self.objects += 1
        if self.objects > MAX_OBJECTS or depth > 64:
            self.cut = True
            h.update(b"<cut>")
            return
        kind = type(obj)
        h.update(kind.__qualname__.encode())
        import numpy as np

        if isinstance(obj, np.ndarray):
            h.update(f"{obj.dtype.str}{obj.shape}".encode())
            if obj.dtype.kind == "O":
                for item in obj.flat:
                    self._walk(item, h, depth + 1)
            else:
                self._buffer(np.ascontiguousarray(obj).view(np.uint8) if obj.size else b"", h)
            return
        if isinstance(obj, np.generic):
            h.update(obj.tobytes())
            return
        if isinstance(obj, (bytearray, memoryview, mmap.mmap)) or kind.__module__ == "array":
            try:
                self._buffer(obj, h)
            except (ValueError, TypeError, BufferError):  # a closed mmap, a released view
                h.update(b"<closed>")
            return
        if isinstance(obj, (list, tuple)) or kind.__name__ == "deque":
            h.update(b"[%d" % len(obj))
            for item in list(obj):
                self._walk(item, h, depth + 1, library)
            return
        if isinstance(obj, dict):
            h.update(b"{%d" % len(obj))
            for k, v in list(obj.items()):
                self._walk(k, h, depth + 1, library)
                self._walk(v, h, depth + 1, library)
            return
        if isinstance(obj, (set, frozenset)):
            h.update(b"(%d" % len(obj))
            for item in list(obj):
                self._walk(item, h, depth + 1, library)
            return
        if isinstance(obj, types.ModuleType):  # the task's modules are roots of their own; others: the shallow pass
            h.update(str(ptr).encode())
            return
        if isinstance(obj, types.FunctionType):
            h.update(b"%d" % _key(obj.__code__))
            self._walk(getattr(obj, "__dict__", {}), h, depth + 1, library)
            self._walk(obj.__defaults__, h, depth + 1, library)
            self._walk(obj.__kwdefaults__, h, depth + 1, library)
            if self._task_defined(obj) and obj.__closure__:
                for cell in obj.__closure__:
                    try:
                        self._walk(cell.cell_contents, h, depth + 1, library)
                    except ValueError:  # an empty cell
                        h.update(b"<empty>")
            return
        if isinstance(obj, types.MethodType):
            self._walk(obj.__func__, h, depth + 1, library)
            self._walk(obj.__self__, h, depth + 1, library)
            return
        if isinstance(obj, functools.partial):
            self._walk((obj.func, obj.args, obj.keywords), h, depth + 1, library)
            return
        if type(obj).__name__ == "_lru_cache_wrapper":
            info = obj.cache_info()
            h.update(f"{info.hits},{info.misses},{info.currsize}".encode())
            self._walk(getattr(obj, "__wrapped__", None), h, depth + 1, library)
            return
        if isinstance(obj, types.GeneratorType):
            frame = obj.gi_frame
            h.update(b"gen%d" % (frame.f_lasti if frame is not None else -1))
            if frame is not None:
                self._walk(dict(frame.f_locals), h, depth + 1, library)
            return
        if isinstance(obj, type):
            if self._task_defined(obj):
                for name, value in list(vars(obj).items()):
                    if name not in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                        self._walk(name, h, depth + 1)
                        self._walk(value, h, depth + 1)
            else:
                h.update(str(ptr).encode())
            return
        task_class = self._task_defined(kind)
        if kind.__module__ in _REDUCIBLE_MODULES and not task_class:  # iterators' hidden position: itertools.count
            try:
                reduced = obj.__reduce_ex__(2)
            except Exception:  # noqa: BLE001 - not reducible: its identity only
                reduced = None
            if isinstance(reduced, tuple):
                self._walk(reduced[1:], h, depth + 1, library)
            return
        if library and not task_class:  # a library object inside a library object: its identity only
            h.update(str(ptr).encode())
            return
        try:
            attrs = object.__getattribute__(obj, "__dict__")
        except AttributeError:
            attrs = None
        if isinstance(attrs, dict):
            own = issubclass(kind, _emulator_kernel_classes())
            items = [(k, v) for k, v in list(attrs.items()) if not (own and k in _EMULATOR_KERNEL_RUN_ATTRS)]
            self._walk(dict(items), h, depth + 1, library=not task_class)
        for klass in kind.__mro__:
            for slot in klass.__dict__.get("__slots__", ()) if isinstance(klass.__dict__.get("__slots__", ()), (tuple, list)) else ():
                try:
                    self._walk(object.__getattribute__(obj, slot), h, depth + 1, library=not task_class)
                except AttributeError:
                    h.update(b"<unset>")


class LaunchStateAudit:
    def __init__(self, task_roots: tuple[str, ...], scratch_root: str | os.PathLike[str] | None) -> None:
        self.task_roots = tuple(task_roots)
        self.scratch_root = Path(scratch_root) if scratch_root is not None else None

    # -- snapshot --------------------------------------------------------------------------------
    def _task_module_names(self) -> frozenset[str]:
        names = set()
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if isinstance(file, str) and file.startswith(self.task_roots):
                names.add(name)
        return frozenset(names)

    def snapshot(self) -> dict[str, Any]:
        task_modules = self._task_module_names()
        walk = _Walk(self.task_roots, task_modules)
        state: dict[str, Any] = {}
        for name in sorted(task_modules):
            module = sys.modules.get(name)
            namespace = getattr(module, "__dict__", {})
            for key, value in list(namespace.items()):
                if key in ("__builtins__", "__loader__", "__spec__", "__cached__", "__file__", "__doc__"):
                    continue
                state[f"global `{key}` of {self._shown(module)}"] = walk.digest(value)
        for key, value in list(vars(builtins).items()):
            if key != "_":  # the interactive interpreter's last value
                state[f"builtins.{key}"] = walk.digest(value)
        for name, module in list(sys.modules.items()):
            if name in task_modules or name == "builtins":
                continue
            namespace = getattr(module, "__dict__", None)
            if not isinstance(namespace, dict):
                continue
            if _imported(module):  # a library imported during a launch is no state the kernel chose: only a
                key = f"module {name}"  # module made by hand (no file, no spec) is recorded from its first sight
            else:
                key = f"module {name} (made by hand, not imported)"
            own = namespace.get("__name__")  # the NKI names (neuronxcc.nki.language) are nkitui's modules too
            if isinstance(own, str) and (own == "nkitui" or own.startswith("nkitui.")):
                # nkitui's own caches fill on the first launch (dtypes, ALU tables, BLAS probe): names only, and none
                # for a module that makes names on first use (a module __getattr__: nl.bfloat16); reaching them from
                # task code is HACK-TAMPER anyway
                lazy = _lazy_names(namespace)
                state[key] = hash(tuple(
                    (k, len(v.__dict__) if isinstance(v, types.FunctionType) else None)  # nl.add.calls = n
                    for k, v in list(namespace.items())  # (private names: nkitui binds some on first use)
                    if not (k.startswith("_") or k in lazy or isinstance(v, types.ModuleType))))
                continue
            shallow = []
            for attr, value in list(namespace.items()):
                if attr in _OWN_CHANGES or isinstance(value, types.ModuleType):  # a submodule bound by its import
                    continue
                mark: Any = _key(value)
                if isinstance(value, (list, dict, set, bytearray)) or type(value).__name__ == "deque":
                    mark = (mark, len(value))
                elif isinstance(value, types.FunctionType):  # (not its __code__ or __defaults__: reading them is an
                    mark = (mark, len(value.__dict__))  # audit event, which the guards' hooks make costly here)
                elif isinstance(value, type) and not value.__module__ == "builtins":
                    mark = (mark, len(vars(value)))
                elif isinstance(getattr(value, "__dict__", None), dict):  # an object the library holds (logging.root)
                    mark = (mark, len(value.__dict__))
                shallow.append((attr, mark))
            state[key] = hash(tuple(shallow))
        state["the state of `random`"] = walk.digest(_random_state())
        if "numpy.random" in sys.modules:
            state["the state of `numpy.random`"] = walk.digest(_numpy_random_state())
        state["the environment"] = hash(tuple(sorted(os.environ.items())))
        try:
            state["the working folder"] = os.getcwd()
        except OSError:
            state["the working folder"] = None
        state.update(_descriptors())
        state.update(self._files())
        state["<imported>"] = frozenset(name for name, module in list(sys.modules.items()) if _imported(module))
        if walk.cut:  # past the walk's bounds a change would go unseen: no launch of such a process is vouched for
            state["the task's module state, too large to audit (more than 200,000 objects or 256 MB)"] = object()
        return state

    @staticmethod
    def _shown(module: Any) -> str:
        file = getattr(module, "__file__", None)
        return os.path.basename(file) if isinstance(file, str) else str(getattr(module, "__name__", "?"))

    def _files(self) -> dict[str, Any]:
        root = self.scratch_root
        if root is None:
            return {}
        out: dict[str, Any] = {}
        stack = [(str(root), "")]
        while stack and len(out) < MAX_FILES:
            path, rel = stack.pop()
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for entry in entries:
                name = f"{rel}{entry.name}"
                if name == "io":  # the requests' folders: the evaluator's inputs and this process's replies
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                out[f"scratch file {name}"] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, f"{name}/"))
        return out

    # -- comparison ------------------------------------------------------------------------------
    @staticmethod
    def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
        """What a later launch would see differently, in words (at most MAX_CHANGES)."""
        found: list[str] = []
        # a launch that imported a module (ml_dtypes on a kernel's first narrow type, a library it imports in its body)
        # changes other modules by doing so (numpy's type tables): their names and containers are not compared then.
        # The task's globals, builtins, files, descriptors and the environment are, on every launch.
        imported = {name for name in after.get("<imported>", frozenset()) - before.get("<imported>", frozenset())
                    if name != "nkitui" and not name.startswith("nkitui.")}  # nkitui's own: the outputs' transfer
        for key in sorted(set(before) | set(after)):
            if key == "<imported>" or (imported and key.startswith("module ")
                                       and not key.endswith("(made by hand, not imported)")):
                continue
            if key not in before and (key.startswith("the state of `numpy.random`") or (
                    key.startswith("module ") and not key.endswith("(made by hand, not imported)"))):
                continue  # a library imported during the launch (numpy imports some lazily): recorded from now on
            if key not in before:
                found.append(f"{key} (new)")
            elif key not in after:
                found.append(f"{key} (gone)")
            elif before[key] != after[key]:
                found.append(key)
            if len(found) >= MAX_CHANGES:
                break
        return found


def _emulator_kernel_classes() -> tuple[type, ...]:
    """The emulator's kernel objects' classes, by identity: their `__module__` names the NKI package a real kernel
    would see (`neuronxcc.nki`, `nki`: red team A, finding 4), so a name test would take them for the task's."""
    found = []
    for module, name in (("nkitui.emulator.launch", "Kernel"), ("nkitui.emulator.newns.launcher", "NkiKernel")):
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def _lazy_names(namespace: dict[str, Any]) -> frozenset[str]:
    """The public names an nkitui module makes on first use (its module __getattr__ and the tables it reads: `_LAZY`,
    `LAZY_PUBLIC`, `NARROW`, ...): nl.bfloat16 appears the first time a kernel asks for it."""
    if "__getattr__" not in namespace:
        return frozenset()
    names: set[str] = set()
    for key, value in list(namespace.items()):
        if ("LAZY" in key or key in ("NARROW", "_MADE")) and isinstance(value, (tuple, list, set, frozenset, dict)):
            names.update(v for v in value if isinstance(v, str))
    return frozenset(names) | {"bfp16"}


def _imported(module: Any) -> bool:
    """Whether a module came from the import system (a spec, or a file): not one task code made and put in
    sys.modules as a store of its own."""
    if getattr(module, "__spec__", None) is not None or isinstance(getattr(module, "__file__", None), str):
        return True
    name = getattr(module, "__name__", "")  # Cython's extension modules register helpers of their own
    return isinstance(name, str) and (name == "cython_runtime" or name.startswith("_cython_"))


def _random_state() -> Any:
    import random

    return random.getstate()


def _numpy_random_state() -> Any:
    import numpy as np

    return np.random.get_state(legacy=True)


def _descriptors() -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        fds = sorted(int(n) for n in os.listdir("/proc/self/fd") if n.isdigit())
    except OSError:
        return out
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        mode = stat.S_IFMT(st.st_mode)
        if mode in (stat.S_IFIFO, stat.S_IFSOCK, stat.S_IFCHR):  # pipes to the evaluator, /dev/null: what, not how full
            out[f"descriptor {fd}"] = (mode, st.st_dev, st.st_ino)
            continue
        try:
            offset: int | None = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            offset = None
        out[f"descriptor {fd}"] = (mode, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, offset)
    return out
