"""The replayable instruction log: what the kernel's process executed, as plain data.

The kernel's process is hostile: whatever it reports about itself (outputs, provenance) can be
rewritten from inside it (raw memory through numpy's `__array_interface__`). So, besides its
outputs, it records every instruction it executed at one boundary, the engine's instruction
functions (`nkitui.emulator.engine`, wrapped by `instrument`): the function's name and its
arguments as plain data (tensors as views onto storages: storage id, the view's dims or gather
indices, shape; scalars bit for bit; ALU operators and activation functions by name; masks and
index arrays as raw bytes). A trusted process that never imported task code rebuilds the storages
and calls the same engine functions on them (`nkitui.emulator.replay`), then requires its outputs to
equal the reported ones bit for bit.

Storages are described where an instruction first touches them: the harness's input (its index),
a constant (its bytes at that moment: nothing but instructions writes a storage after creation),
a fresh allocation (its fill), a tile at an explicit address (its byte space, partition and byte:
overlapping placements alias on replay as they did here), anything else by its bytes.

Every other way the front end touches device memory is an event of the log too:
  * a front-end write that is not an engine instruction (a collective's result across SPMD programs or
    logical cores) is `replaylog.put`, carrying the values written and the API that wrote them;
  * a host-side reseed of the launch's random numbers (legacy nl.random_seed) is `replaylog.seed`;
  * a host read of device values during the kernel's body (Tensor.array at depth 0: control flow or
    addressing fixed at trace time) is `replaylog.observe`, carrying the values seen;
  * a sequencer register is named by a number and carries its value at each use (registers.*).
The replay checks each observation: on the seed's inputs a difference is a forged log; on a fresh
input set it means the kernel's own instruction stream would differ there (data-dependent control).
What still makes a log *unavailable* (with the reason and the kernel's file:line): an argument that
is not plain data (a task-defined function as an operator), a collective across simulated ranks
(nki.multi_rank_simulate: several threads), and the size limits. The evaluator fails such a run
(HACK-REPLAY-OPTOUT): a kernel nkitui cannot replay is not proven correct.

The engine's instruction functions are wrapped only while a log is open (`recording` installs the
wrappers and takes them out when the last log closes): with no log open an instruction costs
nothing here.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import struct
import sys
import threading
import weakref
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

MAGIC = b"NKIREPLAY\x02\n"
VERSION = 2
MAX_EVENTS = 2_000_000
MAX_BLOB_BYTES = 1 << 30
# Distinct instruction templates of one log: as many as instructions. A template holds an operand's HBM
# offset, so a large correct kernel can have tens of thousands; a lower cap made its log "unavailable",
# which fails the run (HACK-REPLAY-OPTOUT). The header's bytes stay bounded (replay.MAX_HEADER_BYTES).
MAX_TEMPLATES = MAX_EVENTS
_F32 = np.float32
_PLAIN = frozenset((type(None), bool, str, int))

_rec: "Recorder | None" = None  # the open log (kernel process, during a run), else None
_local = threading.local()


class Unavailable(Exception):
    """An argument or event the log cannot carry as plain data."""


def depth() -> int:
    return getattr(_local, "depth", 0)


class Recorder:
    """The log being recorded, in the form it is sent (see `pack`): storages numbered densely in the order
    instructions first touch them, each instruction as a template (its name and plain-data arguments, with
    every tensor view's storage replaced by a slot number) interned once, and a stream of integers,
    [template, storage of slot 0, storage of slot 1, ...] per instruction."""

    def __init__(self, inputs: list[np.ndarray]) -> None:
        self.inputs = inputs  # the harness's arrays, in order (matched by identity)
        self.table: list[list[Any]] = []  # dense storage number -> [class, source]
        self.classes: dict[tuple[Any, ...], int] = {}  # (memory, shape, dtype, pax, kind, name, lossy) -> index
        self.templates: dict[tuple[Any, ...], int] = {}  # (name, args, kwargs, location, core) -> index
        self.stream = array("q")  # per instruction: template, then its slots' storage numbers
        self.count = 0  # instructions recorded
        self._index: dict[int, int] = {}  # storage id -> dense number (the first Storage object under that id)
        self.fills: dict[int, bool] = {}
        self.input_of: dict[int, int] = {}
        self.blobs: list[bytes] = []
        self.blob_bytes = 0
        self._blob_of: dict[int, int] = {}  # id(array) -> blob index (the arrays are kept alive below)
        self._keep: list[object] = []
        self.outputs: dict[int, Any] = {}  # id(output array) -> encoded view
        self._keep_out: list[object] = []
        self.unavailable: str | None = None
        self._alias_of: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # view storage -> number
        self._objs: dict[int, Any] = {}  # storage id -> a weak reference to the Storage first described under it
        self.data_dependent: str | None = None
        self.body = False  # inside a launch's kernel body (host reads there make the stream data-dependent)
        self._addr: dict[int, int] = {}  # storage id -> the address of its first cell when described
        self._regs: dict[int, int] = {}  # id(register) -> its number (the registers are kept alive in _keep)
        self._spaces: dict[int, int] = {}  # address of a core's SBUF/PSUM byte space -> its number (placed tiles)

    # -- storages, inputs, outputs -------------------------------------------------------------
    def note_storage(self, st: Any, fill: bool) -> None:
        self.fills[st.id] = fill

    def note_input(self, st: Any, original: object) -> None:
        for i, arr in enumerate(self.inputs):
            if arr is original:
                self.input_of[st.id] = i
                return

    def note_output(self, array: np.ndarray, view: Any) -> None:
        try:
            self.outputs[id(array)] = self.encode(view)
            self._keep_out.append(array)
        except Unavailable as exc:
            self.fail(f"an output: {exc}")

    def output_view(self, array: object) -> Any:
        return self.outputs.get(id(array))

    def fail(self, why: str, where: tuple[str, int] | None = None) -> None:
        if self.unavailable is None:
            self.unavailable = why + (f" at {where[0]}:{where[1]}" if where and where[0] else "")

    # -- values ----------------------------------------------------------------------------------
    def blob(self, arr: np.ndarray) -> int:
        k = id(arr)
        i = self._blob_of.get(k)
        if i is not None:
            return i
        data = np.ascontiguousarray(arr).tobytes()
        self.blob_bytes += len(data)
        if self.blob_bytes > MAX_BLOB_BYTES:
            raise Unavailable("the log's arrays exceed 1 GiB")
        i = self._blob_of[k] = len(self.blobs)
        self.blobs.append(data)
        self._keep.append(arr)
        return i

    def array(self, arr: np.ndarray) -> tuple[Any, ...]:
        if arr.dtype.kind not in "biuf" or arr.dtype.byteorder == ">":
            raise Unavailable(f"an array of dtype {arr.dtype}")
        return ("a", arr.dtype.str, tuple(arr.shape), self.blob(arr))

    def _describe(self, memory: str, shape: Any, dtype: str, pax: int, kind: str, name: str, lossy: bool,
                  source: list[Any]) -> int:
        """A new dense storage number for a storage of this class and source."""
        cls = (memory, shape if type(shape) is tuple else tuple(shape), dtype, pax, kind, name, lossy)
        c = self.classes.get(cls)
        if c is None:  # (numbers as Python ints for the header: numpy's hash and compare equal to them)
            cls = (memory, tuple(int(n) for n in shape), dtype, int(pax), kind, name, lossy)
            c = self.classes[cls] = len(self.classes)
        n = len(self.table)
        self.table.append([c, source])
        return n

    def storage(self, st: Any) -> int:
        """The dense number of storage `st` (described on first sight)."""
        sid: int = st.id
        n = self._index.get(sid)
        if n is not None and self._objs[sid]() is st:  # the common case: a storage seen before
            return n
        plain = type(st) is _storage_class()  # (a plain Storage has neither a root nor a placement)
        if not plain:
            root = getattr(st, "root", None)
            if root is not None and getattr(st, "geometry", None) is not None:  # nki's reshaped/bitcast views
                return self._alias(st, root)
        if n is not None:
            return self._view(st, sid)  # another Storage object with the same id: the legacy view()/reshape()
        if not plain and type(st).__name__ == "PlacedStorage":  # nki's explicit addresses: allocations may overlap
            return self._placed(st)
        if st.init is not None or st.mm_zone is not None:
            raise Unavailable("a PSUM tile first seen with accumulation state")
        data = st.data
        name = str(st.name)[:80]
        if sid in self.input_of:
            source: list[Any] = ["input", self.input_of[sid]]
        elif st.kind != "constant" and sid in self.fills and st.version == 0 and data is not None:
            # fill=False: the emulator allocates so only tiles their first instruction writes whole (a fresh
            # result tile); what the memory held is never read, and the replay starts it at zero
            source = ["fill" if self.fills[sid] else "zeros"]
            if st.memory != "hbm":
                name = ""  # a tile's name says nothing the replay needs (and one class serves many tiles)
        else:  # a constant, or storage made elsewhere: its bytes now (no instruction wrote it yet)
            if data is None:
                raise Unavailable("a storage without cells")
            source = ["bytes", self.blob(np.array(data, copy=True))]
        n = self._describe(st.memory, st.shape, st.dtype.name, st.partition_dim if st.partition_dim >= 0 else 0,
                           st.kind, name, bool(st.lossy), source)
        self._index[sid] = n
        self._objs[sid] = weakref.ref(st)  # not the storage itself: tiles must be freed as the kernel drops them
        if data is not None:  # where its cells start (a legacy view of it may outlive this object)
            self._addr[sid] = int(data.__array_interface__["data"][0])
        return n

    def _placed(self, st: Any) -> int:
        """A tile at an explicit address: its core's byte space (one per core and memory, numbered here), the
        partition and byte it starts at. The replay makes each space once (fresh: 0xFF bytes, as the emulator
        does) and the tile as the same view of it, so overlapping placements alias there as they did here."""
        space = st.space  # a flat view of the byte space (a new view per tile): keyed by its first byte's address
        addr = int(space.__array_interface__["data"][0])
        k = self._spaces.get(addr)
        if k is None:
            k = self._spaces[addr] = len(self._spaces)
            self._keep.append(space)  # alive: the address stays this space's
        partition, byte = divmod(int(st.base), int(st.pstride))
        n = self._describe(st.memory, st.shape, st.dtype.name, 0, "placed", "", bool(st.lossy),
                           ["placed", k, int(st.pstride), partition, byte])
        self._index[st.id] = n
        self._objs[st.id] = weakref.ref(st)
        return n

    def _view(self, st: Any, primary: int) -> int:
        """A storage sharing the memory of `primary` (same id, another object): its cells as a numpy view of
        the primary's, by byte offset and byte strides (numpy bounds-checks them again on replay)."""
        found = self._alias_of.get(st)
        if found is not None:
            return found
        first = self._objs[primary]()
        base, data = (first.data if first is not None else None), st.data
        if data is None:
            raise Unavailable("a view of a storage without cells")
        if base is not None:
            start = base.__array_interface__["data"][0]
        elif primary in self._addr:  # the first object is gone; its cells are not (this view holds them)
            start = self._addr[primary]
        else:
            raise Unavailable("a view of a storage that no longer exists")
        offset = data.__array_interface__["data"][0] - start
        n = self._alias_of[st] = self._describe(
            st.memory, st.shape, st.dtype.name, st.partition_dim if st.partition_dim >= 0 else 0, st.kind,
            str(st.name)[:80], bool(st.lossy),
            ["view", self._index[primary], int(offset), [int(s) for s in data.strides]])
        return n

    def _alias(self, st: Any, root: Any) -> int:
        found = self._alias_of.get(st)
        if found is not None:
            return found
        rid = self.storage(root)
        g = st.geometry
        n = self._alias_of[st] = self._describe(
            st.memory, g.shape, g.dtype.name, 0, st.kind, str(st.name)[:80], bool(st.lossy),
            ["alias", rid, int(g.p0), int(g.byte_offset), [int(b) for b in g.byte_strides]])
        return n

    def encode(self, v: Any, slots: list[int] | None = None) -> Any:
        """`v` as plain data (hashable: tuples throughout). With `slots`, a tensor view names its storage by
        a slot (its position in `slots`, where the storage's number is appended); without, by the number."""
        t = type(v)
        if t in _PLAIN:  # (first: most arguments are; no Tensor class is one of them)
            return v
        if t is float:
            return ("f", v.hex())
        if t in _TENSOR_TYPES or _is_tensor(t):
            st = v.storage
            sid = self._index.get(st.id)  # a storage seen before (storage(), its common case inlined)
            if sid is None or self._objs[st.id]() is not st:
                sid = self.storage(st)
            if slots is not None:
                slots.append(sid)
                sid = len(slots) - 1
            if v.gather_indices is not None:
                return ("tg", sid, tuple(v.shape), tuple(self.array(np.asarray(a)) for a in v.gather_indices))
            return ("t", sid, v.dims, v.shape)
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, (np.bool_, np.integer, np.floating)):
            return ("s", v.dtype.str, v.tobytes().hex())
        if t is tuple:
            return ("tu", tuple(self.encode(x, slots) for x in v))
        if t is list:
            return ("l", tuple(self.encode(x, slots) for x in v))
        if t is dict and all(type(k) is str for k in v):
            return ("d", tuple((k, self.encode(x, slots)) for k, x in v.items()))
        if t is slice:
            return ("sl", self.encode(v.start, slots), self.encode(v.stop, slots), self.encode(v.step, slots))
        if isinstance(v, enum.Enum) and type(v).__module__.startswith("nkitui."):
            return ("en", type(v).__module__, type(v).__qualname__, v.name)
        if t.__name__ == "VirtualRegister" and t.__module__ == "nkitui.emulator.newns.registers":
            return self.register(v)
        if t.__name__ == "ReplicaGroup" and t.__module__ == "nkitui.emulator.newns.collectives":
            return ("rg", tuple(tuple(int(r) for r in g) for g in v.replica_groups))
        try:
            known = _NAMED.get(v)
        except TypeError:  # unhashable
            known = None
        if known is not None:
            return known
        from nkitui.emulator import alu
        from nkitui.emulator import dtypes as dt

        if t is dt.DType:
            return ("dt", v.name)
        name = alu.op_name(v) if callable(v) else None
        if name is not None and (name in alu.BINARY or name in alu.ACTIVATIONS):
            enc: tuple[Any, ...] = ("op", name)
        else:
            try:
                d = dt.dtype_of(v)
            except Exception:  # noqa: BLE001  (any spelling the dtype table does not know)
                d = None
            if d is None or isinstance(v, np.ndarray):
                raise Unavailable(f"an argument of type {t.__name__}")
            enc = ("dt", d.name)
        if type(v).__module__ in _NAMED_MODULES:  # the library's own operators and dtypes: the same object,
            try:                                    # the same name (memoised; nothing of the task's)
                _NAMED[v] = enc
            except TypeError:
                pass
        return enc

    def register(self, reg: Any) -> tuple[Any, ...]:
        """A sequencer register: its number in this log and its value now (the replay checks the value)."""
        k = self._regs.get(id(reg))
        if k is None:
            k = self._regs[id(reg)] = len(self._regs)
            self._keep.append(reg)
        return ("reg", k, int(reg.value), bool(reg.frozen))

    def now(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Record an event that happens at this point (not an engine call: put, observe)."""
        if self.unavailable is not None:
            return
        if self.count >= MAX_EVENTS:
            self.fail(f"more than {MAX_EVENTS} instructions")
            return
        try:
            key, slots = self.event(name, args, kwargs)
        except Unavailable as exc:
            self.fail(f"{name}: {exc}", _location())
            return
        run = _current_run()
        self.append(key, slots, _traced_location(run), int(getattr(run, "core", 0) or 0))

    def event(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, list[int]]:
        """The instruction's arguments as a template key (without location) and its slots' storages."""
        slots: list[int] = []
        enc = self.encode
        return (name, tuple([enc(a, slots) for a in args]),
                tuple([(k, enc(v, slots)) for k, v in kwargs.items()]) if kwargs else ()), slots

    def append(self, key: tuple[Any, ...], slots: list[int], where: Any, core: int) -> None:
        full = (*key, where, core)
        t = self.templates.get(full)
        if t is None:
            if len(self.templates) >= MAX_TEMPLATES:
                self.fail(f"more than {MAX_TEMPLATES} distinct instructions")
                return
            t = self.templates[full] = len(self.templates)
        self.stream.append(t)
        if slots:
            self.stream.extend(slots)
        self.count += 1


_TENSOR_TYPES: set[type] = set()  # the Tensor classes met so far (the fast path of encode)
_NOT_TENSOR: set[type] = set()
_NAMED: dict[Any, tuple[Any, ...]] = {}  # operator functions and dtype objects -> their encoding
_NAMED_MODULES = {"numpy", "builtins", "nkitui.emulator.alu", "nkitui.emulator.dtypes", "ml_dtypes",
                  "numpy.core._multiarray_umath", "numpy._core._multiarray_umath"}


def _is_tensor(t: type) -> bool:
    if t in _NOT_TENSOR:
        return False
    from nkitui.emulator.tensor import Tensor

    if issubclass(t, Tensor):
        _TENSOR_TYPES.add(t)
        return True
    if t.__module__ in ("builtins", "numpy"):
        _NOT_TENSOR.add(t)
    return False


_current_or_none: Callable[[], Any] | None = None
_STORAGE: list[type] = []


def _storage_class() -> type:
    """nkitui.emulator.memory.Storage (imported on first use: the engine imports this module)."""
    if not _STORAGE:
        from nkitui.emulator.memory import Storage

        _STORAGE.append(Storage)
    return _STORAGE[0]


def _current_run() -> Any:
    global _current_or_none
    if _current_or_none is None:
        from nkitui.emulator.runtime import current_or_none

        _current_or_none = current_or_none
    return _current_or_none()


def _traced_location(run: Any = None) -> tuple[str, int] | None:
    """The kernel's file:line of the last instruction, when the launch records a trace (free then)."""
    tr = getattr(run if run is not None else _current_run(), "trace", None)
    if tr is not None and tr.instructions:
        ins = tr.instructions[-1]
        return (ins.file, ins.line)
    return None


def _location() -> tuple[str, int] | None:
    traced = _traced_location()
    if traced is not None:
        return traced[0], traced[1]
    try:
        from nkitui.emulator.errors import kernel_location

        loc = kernel_location()
        return (loc[0], loc[1]) if loc else None
    except Exception:  # noqa: BLE001  (a location is a courtesy)
        return None


def instruction(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` recorded as instruction `name` when a log is open (a call inside another is not)."""

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        rec = _rec
        if rec is None:
            return fn(*args, **kwargs)
        d = getattr(_local, "depth", 0)
        event: tuple[Any, list[int]] | None = None
        if d == 0 and rec.unavailable is None:
            if rec.count >= MAX_EVENTS:
                rec.fail(f"more than {MAX_EVENTS} instructions")
            else:
                try:  # the views' storages and dims now; appended when it ran (logical cores take turns: that
                    # is the order their instructions wrote in)
                    event = rec.event(name, args, kwargs)
                except Unavailable as exc:
                    rec.fail(f"{name}: {exc}", _location())
        _local.depth = d + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _local.depth = d
            if event is not None and rec.unavailable is None:
                run = _current_or_none() if _current_or_none is not None else _current_run()
                if run is None:
                    rec.append(event[0], event[1], None, 0)
                else:
                    tr = run.trace
                    where = None
                    if tr is not None and tr.instructions:  # (_traced_location, inlined)
                        ins = tr.instructions[-1]
                        where = (ins.file, ins.line)
                    rec.append(event[0], event[1], where, int(run.core or 0))
                if name in _SETS_REGISTER:  # the value it put there, checked on replay (the front end branches on it)
                    rec.now("replaylog.observe", (args[0] if args else kwargs.get("reg"),), {})

    recorded.__wrapped_instruction__ = name  # type: ignore[attr-defined]  # marks a recorded function
    return recorded


REGISTRY: dict[str, Callable[..., Any]] = {}  # instruction name -> the engine's (unwrapped) function


# (namespace, name, the engine's function, its recording wrapper): what `recording` installs while a log is
# open. Front ends call the instructions through these namespaces (`_eng.tensor_scalar(...)`), so the
# wrapper is in the call path exactly while a log can record it.
_WRAPPERS: list[tuple[dict[str, Any], str, Callable[..., Any], Callable[..., Any]]] = []
_open_logs = 0  # recordings open (any thread); the wrappers are installed while it is above 0
_install_lock = threading.Lock()


def instrument(modules: dict[str, Any], names: dict[str, list[str]], package: dict[str, Any]) -> None:
    """Prepare the recording wrapper of each named function of each engine module (the module's attribute
    and the package's), installed while a log is open (`_install`)."""
    for modname, fnames in names.items():
        mod = modules[modname]
        for f in fnames:
            fn: Callable[..., Any] = getattr(mod, f)
            key = f"{modname}.{f}"
            REGISTRY[key] = fn
            wrapped = instruction(key, fn)
            _WRAPPERS.append((vars(mod), f, fn, wrapped))
            if package.get(f) is fn:
                _WRAPPERS.append((package, f, fn, wrapped))
    if _open_logs:  # (instrumented while a log is open: a module imported late)
        _install(True)


def _install(on: bool) -> None:
    """Put the recording wrappers in place of the engine's functions (on), or the functions back."""
    for namespace, name, fn, wrapped in _WRAPPERS:
        namespace[name] = wrapped if on else fn


def wrappers_installed() -> bool:
    """Whether the engine's instructions go through their recording wrappers now (while a log is open)."""
    return bool(_WRAPPERS) and all(ns[name] is wrapped for ns, name, _fn, wrapped in _WRAPPERS)


_SETS_REGISTER = {"registers.register_load", "registers.register_move"}
INDEPENDENT_SOURCES: frozenset[str] = frozenset()  # front-end writes whose values do not depend on the inputs


def direct_write(dst: Any, result: Any = None, where: Any = None, accumulate: bool = False) -> None:
    """A device write outside any engine instruction (engine.common.write at depth 0: nl.rand, a collective
    across SPMD programs): a `replaylog.put` event carrying the values, and the front-end API that wrote them
    (stage 2 of the replay judges values that depend on the inputs as carried from the seed)."""
    rec = _rec
    if rec is None or getattr(_local, "depth", 0) != 0:
        return
    if result is None:
        rec.fail("a front-end write without values (a shape-only launch)", _location())
        return
    rec.now("replaylog.put", (dst, np.array(result, copy=True)),
            {"where": None if where is None else np.array(where, copy=True), "accumulate": bool(accumulate),
             "source": _front_end_api()})


def _front_end_api() -> str:
    """The public front-end function that is writing (the first caller outside nkitui.emulator.engine)."""
    f: Any = sys._getframe(2)
    while f is not None:
        mod = f.f_globals.get("__name__", "")
        if mod.startswith("nkitui.emulator.") and not mod.startswith(("nkitui.emulator.engine", "nkitui.emulator.replaylog")) \
                and not f.f_code.co_name.startswith("_"):
            return str(f.f_code.co_name)[:60]
        f = f.f_back
    return "?"


def host_read(t: Any = None) -> None:
    """Host code of the front end read device values during the kernel's body (Tensor.array at depth 0): a
    `replaylog.observe` event with the values seen, checked on replay."""
    rec = _rec
    if rec is None or not rec.body or getattr(_local, "depth", 0) != 0:
        return
    if rec.data_dependent is None:
        loc = _location()
        rec.data_dependent = "the front end read device values on the host" + (
            f" at {loc[0]}:{loc[1]}" if loc and loc[0] else "")
    if t is not None and t.storage.data is not None:
        _local.depth = 1  # the observation's own reads are not observations
        try:
            seen = np.array(t.storage.data[t.gather_indices] if t.gather_indices is not None else t._cells(), copy=True)
        finally:
            _local.depth = 0
        rec.now("replaylog.observe", (t, seen), {})


class Diverged(Exception):
    """On replay: a value the kernel's process observed (a host read, a register) differs here."""


def _put(dst: Any, values: np.ndarray, where: Any = None, accumulate: bool = False, source: str = "") -> None:
    from nkitui.emulator.engine.common import current, write

    write(current(), dst, values, where, accumulate)


def _observe(*values: Any) -> None:
    """Replay of an observation: a tensor and the values seen (a register's value is checked as it is built)."""
    if len(values) == 2 and not isinstance(values[0], np.ndarray) and hasattr(values[0], "storage"):
        t, seen = values
        got = t.storage.data[t.gather_indices] if t.gather_indices is not None else t._cells()
        got = np.ascontiguousarray(got)
        seen = np.asarray(seen)
        if got.shape != seen.shape or got.dtype.itemsize != seen.dtype.itemsize or got.tobytes() != seen.tobytes():
            raise Diverged(f"the kernel's process read other values from {t.storage.name or 'a tensor'} on the host "
                           "than its instructions compute here")


def _seed(value: int) -> None:
    """Replay of a host-side reseed of the launch's random numbers (legacy nl.random_seed)."""
    from nkitui.emulator.engine.common import current

    current().rng = np.random.default_rng(int(value) & 0xFFFFFFFFFFFFFFFF)


REGISTRY["replaylog.seed"] = _seed
REGISTRY["replaylog.put"] = _put
REGISTRY["replaylog.observe"] = _observe


@contextmanager
def recording(inputs: list[np.ndarray]) -> Iterator[Recorder]:
    global _rec, _open_logs
    _current_run()  # binds the run look-up (the instructions' wrapper calls it directly)
    with _install_lock:  # the wrappers first, then the log: no instruction runs unwrapped while it is open
        _open_logs += 1
        if _open_logs == 1:
            _install(True)
    prev = _rec
    rec = _rec = Recorder(inputs)
    try:
        yield rec
    finally:
        if _rec is rec:  # (a recording another thread opened meanwhile is not made current again when it ends)
            _rec = prev
        with _install_lock:
            _open_logs -= 1
            if _open_logs == 0:
                _install(False)


def active() -> Recorder | None:
    return _rec


# -- the binary form ------------------------------------------------------------------------------
def pack(rec: Recorder, outputs: dict[str, Any]) -> bytes:
    """The log as bytes: MAGIC, then four length-prefixed sections: the JSON header, the instruction
    stream (little-endian uint32: per instruction its template, then one storage number per slot of the
    template), the storage stream (uint32: per storage its class, source kind and the source's integers)
    and the blobs (each length-prefixed).

    The header: "classes" (storage classes [memory, shape, dtype, partition axis, kind, name, lossy]),
    "templates" (per distinct instruction [name, args, kwargs as [[key, value], ...], [file, line] or
    null, core], a tensor view naming a slot instead of a storage), "events" and "storages" (counts),
    "outputs" (name -> view, naming the storage), "unavailable", "data_dependent", "inputs", "blobs"."""
    unavailable = rec.unavailable
    # (json writes the tuples of the encoded values as arrays: nothing to convert)
    templates = [] if unavailable is not None else list(rec.templates)
    classes = sorted(rec.classes, key=rec.classes.__getitem__)
    stream = array("I")
    storages = array("I")
    if unavailable is None:
        stream = array("I", rec.stream)
        for c, src in rec.table:
            kind = _SOURCES[src[0]]
            storages.append(c)
            storages.append(kind)
            if kind == 4:  # alias: root, p0, byte offset, then the byte strides (two words each, signed)
                storages.extend((src[1], src[2]))
                storages.extend(_words(src[3]))
                for b in src[4]:
                    storages.extend(_words(b))
            elif kind == 5:  # view: storage, byte offset, byte strides
                storages.append(src[1])
                storages.extend(_words(src[2]))
                for b in src[3]:
                    storages.extend(_words(b))
            else:
                storages.extend(src[1:])
    header = {"version": VERSION, "classes": classes, "templates": templates, "events": rec.count if unavailable is None else 0,
              "storages": len(rec.table) if unavailable is None else 0,
              "outputs": outputs, "unavailable": unavailable,
              "data_dependent": rec.data_dependent, "inputs": len(rec.inputs), "blobs": len(rec.blobs)}
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    if sys.byteorder != "little":
        stream.byteswap()
        storages.byteswap()
    parts = [MAGIC]
    for section in (head, stream.tobytes(), storages.tobytes()):
        parts.append(struct.pack("<Q", len(section)))
        parts.append(section)
    for b in rec.blobs:
        parts.append(struct.pack("<Q", len(b)))
        parts.append(b)
    return b"".join(parts)


# source kinds in the storage stream, and how many integers follow each (alias and view: by the storage's rank)
_SOURCES = {"fill": 0, "zeros": 1, "input": 2, "bytes": 3, "alias": 4, "view": 5, "placed": 6}


def _words(v: int) -> tuple[int, int]:
    """A signed 64-bit integer as two uint32 words (low, high)."""
    u = v & 0xFFFFFFFFFFFFFFFF
    return u & 0xFFFFFFFF, u >> 32


def float_of(enc: list[Any]) -> float:
    return float.fromhex(enc[1])


def numel(shape: list[int]) -> int:
    return math.prod(shape)
