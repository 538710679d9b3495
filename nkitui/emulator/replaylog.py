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
a fresh allocation (its fill), anything else by its bytes. A device write that does not happen
inside a recorded instruction (front-end code writing directly), an argument that is not plain
data, or a launch that runs on several threads makes the log *unavailable*, with the reason and
the kernel's file:line: the replay then says so instead of judging.

Recording costs one global test per instruction when no log is open.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

MAGIC = b"NKIREPLAY\x01\n"
MAX_EVENTS = 2_000_000
MAX_BLOB_BYTES = 1 << 30
ALIAS_BASE = 1 << 40  # storage keys of views of another storage (nki's AliasStorage shares its root's id)
_F32 = np.float32

_rec: "Recorder | None" = None  # the open log (kernel process, during a run), else None
_local = threading.local()


class Unavailable(Exception):
    """An argument or event the log cannot carry as plain data."""


def depth() -> int:
    return getattr(_local, "depth", 0)


class Recorder:
    def __init__(self, inputs: list[np.ndarray]) -> None:
        self.inputs = inputs  # the harness's arrays, in order (matched by identity)
        self.events: list[list[Any]] = []
        self.storages: dict[int, dict[str, Any]] = {}
        self.fills: dict[int, bool] = {}
        self.input_of: dict[int, int] = {}
        self.blobs: list[bytes] = []
        self.blob_bytes = 0
        self._blob_of: dict[int, int] = {}  # id(array) -> blob index (the arrays are kept alive below)
        self._keep: list[object] = []
        self.outputs: dict[int, Any] = {}  # id(output array) -> encoded view
        self._keep_out: list[object] = []
        self.unavailable: str | None = None
        self._alias_of: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # view storage -> key
        self._aliases = 0
        self._objs: dict[int, Any] = {}  # storage id -> a weak reference to the Storage first described under it
        self.data_dependent: str | None = None
        self.body = False  # inside a launch's kernel body (host reads there make the stream data-dependent)

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

    def array(self, arr: np.ndarray) -> list[Any]:
        if arr.dtype.kind not in "biuf" or arr.dtype.byteorder == ">":
            raise Unavailable(f"an array of dtype {arr.dtype}")
        return ["a", arr.dtype.str, list(arr.shape), self.blob(arr)]

    def storage(self, st: Any) -> int:
        root = getattr(st, "root", None)
        if root is not None and getattr(st, "geometry", None) is not None:  # nki's reshaped/bitcast views
            return self._alias(st, root)
        sid: int = st.id
        if sid in self.storages:
            if self._objs[sid]() is st:
                return sid
            return self._view(st, sid)  # another Storage object with the same id: the legacy view()/reshape()
        if type(st).__name__ == "PlacedStorage":  # nki's explicit addresses: allocations may overlap
            raise Unavailable("a tile placed at an explicit address (allocations that may overlap)")
        data = st.data
        info: dict[str, Any] = {"memory": st.memory, "shape": list(st.shape), "dtype": st.dtype.name,
                                "pax": st.partition_dim if st.partition_dim >= 0 else 0, "kind": st.kind,
                                "name": str(st.name)[:80], "lossy": bool(st.lossy)}
        if sid in self.input_of:
            info["source"] = ["input", self.input_of[sid]]
        elif st.kind != "constant" and sid in self.fills and st.version == 0 and data is not None:
            # fill=False: the emulator allocates so only tiles their first instruction writes whole (a fresh
            # result tile); what the memory held is never read, and the replay starts it at zero
            info["source"] = ["fill" if self.fills[sid] else "zeros"]
        else:  # a constant, or storage made elsewhere: its bytes now (no instruction wrote it yet)
            if data is None:
                raise Unavailable("a storage without cells")
            info["source"] = ["bytes", self.blob(np.array(data, copy=True))]
        if st.init is not None or st.mm_zone is not None:
            raise Unavailable("a PSUM tile first seen with accumulation state")
        self.storages[sid] = info
        self._objs[sid] = weakref.ref(st)  # not the storage itself: tiles must be freed as the kernel drops them
        return sid

    def _view(self, st: Any, primary: int) -> int:
        """A storage sharing the memory of `primary` (same id, another object): its cells as a numpy view of
        the primary's, by byte offset and byte strides (numpy bounds-checks them again on replay)."""
        found = self._alias_of.get(st)
        if found is not None:
            return found
        first = self._objs[primary]()
        base, data = (first.data if first is not None else None), st.data
        if base is None or data is None:
            raise Unavailable("a view of a storage that no longer exists")
        offset = data.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        key = self._alias_of[st] = ALIAS_BASE + self._aliases
        self._aliases += 1
        self.storages[key] = {"memory": st.memory, "shape": list(st.shape), "dtype": st.dtype.name,
                              "pax": st.partition_dim if st.partition_dim >= 0 else 0, "kind": st.kind,
                              "name": str(st.name)[:80], "lossy": bool(st.lossy),
                              "source": ["view", primary, int(offset), [int(s) for s in data.strides]]}
        return key

    def _alias(self, st: Any, root: Any) -> int:
        found = self._alias_of.get(st)
        if found is not None:
            return found
        rid = self.storage(root)
        g = st.geometry
        key = self._alias_of[st] = ALIAS_BASE + self._aliases
        self._aliases += 1
        self.storages[key] = {"memory": st.memory, "shape": list(g.shape), "dtype": g.dtype.name, "pax": 0,
                              "kind": st.kind, "name": str(st.name)[:80], "lossy": bool(st.lossy),
                              "source": ["alias", rid, int(g.p0), int(g.byte_offset), [int(b) for b in g.byte_strides]]}
        return key

    def encode(self, v: Any) -> Any:
        t = type(v)
        if t in _TENSOR_TYPES or _is_tensor(t):
            sid = self.storage(v.storage)
            if v.gather_indices is not None:
                return ["tg", sid, list(v.shape), [self.array(np.asarray(a)) for a in v.gather_indices]]
            return ["t", sid, v.dims, v.shape]
        if v is None or t is bool or t is str or t is int:
            return v
        if t is float:
            return ["f", v.hex()]
        if isinstance(v, np.ndarray):
            return self.array(v)
        if isinstance(v, (np.bool_, np.integer, np.floating)):
            return ["s", v.dtype.str, v.tobytes().hex()]
        if t is tuple:
            return ["tu", [self.encode(x) for x in v]]
        if t is list:
            return ["l", [self.encode(x) for x in v]]
        if t is dict and all(type(k) is str for k in v):
            return ["d", {k: self.encode(x) for k, x in v.items()}]
        if t is slice:
            return ["sl", self.encode(v.start), self.encode(v.stop), self.encode(v.step)]
        if isinstance(v, enum.Enum) and type(v).__module__.startswith("nkitui."):
            return ["en", type(v).__module__, type(v).__qualname__, v.name]
        from nkitui.emulator import alu
        from nkitui.emulator import dtypes as dt

        if t is dt.DType:
            return ["dt", v.name]
        name = alu.op_name(v) if callable(v) else None
        if name is not None and (name in alu.BINARY or name in alu.ACTIVATIONS):
            return ["op", name]
        try:
            d = dt.dtype_of(v)
        except Exception:  # noqa: BLE001  (any spelling the dtype table does not know)
            d = None
        if d is not None and not isinstance(v, np.ndarray):
            return ["dt", d.name]
        raise Unavailable(f"an argument of type {t.__name__}")


_TENSOR_TYPES: set[type] = set()  # the Tensor classes met so far (the fast path of encode)


def _is_tensor(t: type) -> bool:
    from nkitui.emulator.tensor import Tensor

    if issubclass(t, Tensor):
        _TENSOR_TYPES.add(t)
        return True
    return False


def _traced_location() -> list[Any] | None:
    """The kernel's file:line of the last instruction, when the launch records a trace (free then)."""
    from nkitui.emulator.runtime import current_or_none

    run = current_or_none()
    tr = getattr(run, "trace", None)
    if tr is not None and tr.instructions:
        ins = tr.instructions[-1]
        return [ins.file, ins.line]
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
        event: list[Any] | None = None
        if d == 0 and rec.unavailable is None:
            if len(rec.events) >= MAX_EVENTS:
                rec.fail(f"more than {MAX_EVENTS} instructions")
            else:
                try:  # the views' ids and dims now; appended when it ran (logical cores take turns: that is
                    # the order their instructions wrote in)
                    event = [name, [rec.encode(a) for a in args], {k: rec.encode(v) for k, v in kwargs.items()}]
                except Unavailable as exc:
                    rec.fail(f"{name}: {exc}", _location())
        _local.depth = d + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _local.depth = d
            if event is not None:
                from nkitui.emulator.runtime import current_or_none

                event.append(_traced_location())
                event.append(int(getattr(current_or_none(), "core", 0) or 0))
                rec.events.append(event)

    recorded.__wrapped_instruction__ = name  # type: ignore[attr-defined]  # marks a recorded function
    return recorded


REGISTRY: dict[str, Callable[..., Any]] = {}  # instruction name -> the engine's (unwrapped) function


def instrument(modules: dict[str, Any], names: dict[str, list[str]], package: dict[str, Any]) -> None:
    """Wrap each named function of each engine module (the module's attribute and the package's)."""
    for modname, fnames in names.items():
        mod = modules[modname]
        for f in fnames:
            fn = getattr(mod, f)
            key = f"{modname}.{f}"
            REGISTRY[key] = fn
            wrapped = instruction(key, fn)
            setattr(mod, f, wrapped)
            if package.get(f) is fn:
                package[f] = wrapped


def direct_write(dst: Any) -> None:
    """A device write outside any recorded instruction (called by engine.common.write)."""
    rec = _rec
    if rec is not None and getattr(_local, "depth", 0) == 0:
        rec.fail(f"a front-end write into {getattr(dst.storage, 'name', '') or 'a tensor'} that is not an "
                 "instruction the log records", _location())


def host_read() -> None:
    """Host code of the front end read device values during the kernel's body (Tensor.array at depth 0)."""
    rec = _rec
    if rec is not None and rec.body and getattr(_local, "depth", 0) == 0 and rec.data_dependent is None:
        loc = _location()
        rec.data_dependent = "the front end read device values on the host" + (
            f" at {loc[0]}:{loc[1]}" if loc and loc[0] else "")


@contextmanager
def recording(inputs: list[np.ndarray]) -> Iterator[Recorder]:
    global _rec
    prev = _rec
    rec = _rec = Recorder(inputs)
    try:
        yield rec
    finally:
        _rec = prev


def active() -> Recorder | None:
    return _rec


# -- the binary form ------------------------------------------------------------------------------
def pack(rec: Recorder, outputs: dict[str, Any]) -> bytes:
    """The log as bytes: MAGIC, a JSON header (length-prefixed), then the blobs (each length-prefixed).
    A storage is [memory, shape, dtype, partition axis, kind, name, lossy, source]; an event is
    [instruction, args, kwargs, [file, line] or null, core]."""
    storages = {str(k): [v["memory"], v["shape"], v["dtype"], v["pax"], v["kind"],
                         "" if v["memory"] != "hbm" and v["source"][0] in ("fill", "zeros") else v["name"],
                         v["lossy"], v["source"]] for k, v in rec.storages.items()}
    header = {"version": 1, "storages": storages, "events": rec.events,
              "outputs": outputs, "unavailable": rec.unavailable, "data_dependent": rec.data_dependent,
              "inputs": len(rec.inputs), "blobs": len(rec.blobs)}
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    parts = [MAGIC, struct.pack("<Q", len(head)), head]
    for b in rec.blobs:
        parts.append(struct.pack("<Q", len(b)))
        parts.append(b)
    return b"".join(parts)


def float_of(enc: list[Any]) -> float:
    return float.fromhex(enc[1])


def numel(shape: list[int]) -> int:
    return math.prod(shape)
