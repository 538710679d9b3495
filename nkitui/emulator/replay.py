"""Replay of a kernel process's instruction log (nkitui.emulator.replaylog), in a trusted process.

    log = unpack(data)                     # ReplayFormatError on anything malformed
    outputs = replay(log, inputs, target="trn2", precise=True)   # {name: array}, kernel layout
    diff = first_difference(reported, outputs)                   # None when bit for bit equal

The bytes come from the kernel's process, which is hostile. `unpack` checks the magic, every length
against the bytes present, the header's structure, every storage (memory, shape, dtype, where its
first bytes come from), every argument (tags, types, sizes, blob indices, storage ids) and every
instruction name against the engine's table before anything runs; it builds plain data only
(numbers, strings, numpy arrays from raw bytes of numeric dtypes, enum members and ALU operator
names already defined by nkitui). `replay` then calls the engine's own instruction functions, in
log order, on storages it builds itself. Nothing of the task is imported; nothing in the log is
executed but the engine's instructions with checked arguments.
"""

from __future__ import annotations

import enum
import gc
import importlib
import json
import math
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from nkitui.emulator import engine as _engine  # noqa: F401  (fills replaylog.REGISTRY: the instructions)
from nkitui.emulator import replaylog

MAX_HEADER_BYTES = 512 << 20
MAX_STORAGE_BYTES = 8 << 30  # all storages of a log together
MAX_DEPTH = 12
MEMORIES = ("hbm", "sbuf", "psum")
_B = 1 << 40  # bound of a view's start and step


class ReplayFormatError(ValueError):
    """The bytes are not a log this version of nkitui wrote, or they are inconsistent."""


class ReplayError(Exception):
    """An instruction of the log failed when replayed (`index`: the event, `location`: file:line)."""

    def __init__(self, message: str, index: int, location: str) -> None:
        super().__init__(message)
        self.index = index
        self.location = location


@dataclass
class Log:
    storages: dict[int, dict[str, Any]]
    events: list[tuple[str, list[Any], dict[str, Any], str, int]]  # name, args, kwargs, "file:line" or "", core
    outputs: dict[str, Any]  # name -> decoded view
    unavailable: str | None
    data_dependent: str | None
    inputs: int
    blobs: list[bytes]


def _bad(msg: str) -> ReplayFormatError:
    return ReplayFormatError(f"malformed instruction log: {msg}")


def _int(v: Any, what: str, lo: int = 0, hi: int = 1 << 62) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _bad(f"{what} must be an integer in [{lo}, {hi}], got {str(v)[:40]}")
    return v


def _shape(v: Any, what: str) -> tuple[int, ...]:
    if type(v) is not list or len(v) > 8:
        raise _bad(f"{what} must be a list of at most 8 integers")
    shape = tuple(_int(x, what, 0, 1 << 31) for x in v)
    if math.prod(shape) > 1 << 34:
        raise _bad(f"{what} {shape} is too large")
    return shape


def unpack(data: bytes) -> Log:
    enabled = gc.isenabled()
    gc.disable()  # a large log is many small containers: the cyclic collector would only rescan them
    try:
        return _unpack(data)
    finally:
        if enabled:
            gc.enable()


def _unpack(data: bytes) -> Log:
    if not isinstance(data, (bytes, bytearray)) or not data.startswith(replaylog.MAGIC):
        raise _bad("it does not start with nkitui's replay magic")
    pos = len(replaylog.MAGIC)
    if len(data) < pos + 8:
        raise _bad("truncated before the header's length")
    (n,) = struct.unpack_from("<Q", data, pos)
    pos += 8
    if n > MAX_HEADER_BYTES or pos + n > len(data):
        raise _bad(f"the header claims {n} bytes; {len(data) - pos} are present")
    try:
        header = json.loads(bytes(data[pos:pos + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad(f"the header is not JSON ({str(exc)[:100]})") from None
    pos += n
    keys = {"version", "storages", "events", "outputs", "unavailable", "data_dependent", "inputs", "blobs"}
    if type(header) is not dict or set(header) != keys:
        raise _bad(f"the header must have exactly the fields {sorted(keys)}")
    if header["version"] != 1:
        raise _bad(f"unknown version {str(header['version'])[:20]}")
    nblobs = _int(header["blobs"], "blobs", 0, 1 << 24)
    blobs: list[bytes] = []
    for i in range(nblobs):
        if pos + 8 > len(data):
            raise _bad(f"truncated: blob {i} of {nblobs} is missing")
        (m,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + m > len(data):
            raise _bad(f"blob {i} claims {m} bytes; {len(data) - pos} are present")
        blobs.append(bytes(data[pos:pos + m]))
        pos += m
    if pos != len(data):
        raise _bad(f"{len(data) - pos} bytes follow the last blob")
    for k in ("unavailable", "data_dependent"):
        if header[k] is not None and type(header[k]) is not str:
            raise _bad(f"{k} must be a string or null")
    inputs = _int(header["inputs"], "inputs", 0, 4096)
    reader = _Reader(blobs, inputs)
    if type(header["storages"]) is not dict:
        raise _bad("storages must be an object")
    total = 0
    for key, info in sorted(header["storages"].items(), key=lambda kv: (len(kv[0]), kv[0])):
        sid = _int(int(key) if key.isdigit() and len(key) < 19 else -1, "a storage id")
        reader.storages[sid] = st = reader.storage(info, sid)
        total += st["nbytes"]
        if total > MAX_STORAGE_BYTES:
            raise _bad("the storages exceed 8 GiB together")
    if type(header["events"]) is not list or len(header["events"]) > replaylog.MAX_EVENTS:
        raise _bad(f"events must be a list of at most {replaylog.MAX_EVENTS}")
    unavailable = header["unavailable"]
    events = []
    for i, ev in enumerate(header["events"]):
        if type(ev) is not list or len(ev) != 5 or type(ev[0]) is not str:
            raise _bad(f"event {i} must be [name, args, kwargs, location, core]")
        if ev[0] not in replaylog.REGISTRY:
            raise _bad(f"event {i} names an unknown instruction {ev[0][:60]!r}")
        if unavailable is not None:
            continue  # not replayed: its arguments need not be read
        if type(ev[1]) is not list or type(ev[2]) is not dict:
            raise _bad(f"event {i} ({ev[0]}): arguments must be a list and an object")
        loc = ev[3]
        core = _int(ev[4], f"event {i}'s core", 0, 7)
        where = ""
        if loc is not None:
            if type(loc) is not list or len(loc) != 2 or type(loc[0]) is not str or type(loc[1]) is not int:
                raise _bad(f"event {i} ({ev[0]}): location must be [file, line]")
            where = f"{loc[0][:200]}:{loc[1]}"
        try:
            args = [reader.value(a, 0) for a in ev[1]]
            kwargs = {str(k)[:60]: reader.value(v, 0) for k, v in ev[2].items()}
        except ReplayFormatError as exc:
            raise _bad(f"event {i} ({ev[0]}{' at ' + where if where else ''}): {exc}") from None
        events.append((ev[0], args, kwargs, where, core))
    if type(header["outputs"]) is not dict:
        raise _bad("outputs must be an object")
    outputs = {}
    if unavailable is None:
        for name, enc in header["outputs"].items():
            v = reader.value(enc, 0)
            if not (isinstance(v, tuple) and v and v[0] in ("t", "tg")):
                raise _bad(f"output {str(name)[:60]!r} must be a tensor view")
            outputs[str(name)] = v
    return Log(reader.storages, events, outputs, unavailable, header["data_dependent"], inputs, blobs)


class _Reader:
    def __init__(self, blobs: list[bytes], inputs: int) -> None:
        self.blobs = blobs
        self.inputs = inputs
        self.storages: dict[int, dict[str, Any]] = {}

    def _dtype(self, name: Any) -> Any:
        from nkitui.emulator import dtypes as dt

        if type(name) is str and name in dt.LAZY_NAMES:
            dt.load_narrow()  # the bf16/fp8/MX types are made on first use
        if type(name) is not str or name not in dt._BY_NAME:
            raise _bad(f"unknown dtype {str(name)[:40]!r}")
        return dt._BY_NAME[name]

    def storage(self, info: Any, sid: int) -> dict[str, Any]:
        from nkitui.emulator import dtypes as dt

        keys = ("memory", "shape", "dtype", "pax", "kind", "name", "lossy", "source")
        if type(info) is not list or len(info) != len(keys):
            raise _bad(f"storage {sid} must be [{', '.join(keys)}]")
        info = dict(zip(keys, info))
        if info["memory"] not in MEMORIES:
            raise _bad(f"storage {sid}: unknown memory {str(info['memory'])[:20]!r}")
        shape = _shape(info["shape"], f"storage {sid}'s shape")
        d = self._dtype(info["dtype"])
        pax = _int(info["pax"], f"storage {sid}'s partition axis", 0, max(len(shape) - 1, 0))
        if type(info["kind"]) is not str or type(info["name"]) is not str or type(info["lossy"]) is not bool:
            raise _bad(f"storage {sid}: kind and name must be strings, lossy a boolean")
        nbytes = math.prod(shape) * dt.storage_dtype(d, True).itemsize
        src = info["source"]
        if type(src) is not list or not src or src[0] not in ("input", "fill", "zeros", "bytes", "alias", "view"):
            raise _bad(f"storage {sid}: unknown source {str(src)[:40]}")
        if src[0] == "input":
            if len(src) != 2:
                raise _bad(f"storage {sid}: an input source is [\"input\", index]")
            _int(src[1], f"storage {sid}'s input index", 0, self.inputs - 1)
        elif src[0] == "bytes":
            if len(src) != 2:
                raise _bad(f"storage {sid}: a bytes source is [\"bytes\", blob]")
            b = _int(src[1], f"storage {sid}'s blob", 0, len(self.blobs) - 1)
            if len(self.blobs[b]) not in (math.prod(shape) * dt.storage_dtype(d, True).itemsize,
                                          math.prod(shape) * dt.storage_dtype(d, False).itemsize):
                raise _bad(f"storage {sid}: blob {b} has {len(self.blobs[b])} bytes, not those of {shape} {d.name}")
        elif src[0] == "alias":
            if len(src) != 5 or type(src[4]) is not list or len(src[4]) != len(shape):
                raise _bad(f"storage {sid}: an alias is [\"alias\", root, p0, byte offset, byte strides]")
            root = _int(src[1], f"storage {sid}'s root")
            if root not in self.storages or self.storages[root]["source"][0] == "alias":
                raise _bad(f"storage {sid}: its root {root} is not a storage described before it")
            _int(src[2], f"storage {sid}'s first partition", 0, 1 << 20)
            _int(src[3], f"storage {sid}'s byte offset", 0, 1 << 40)
            for b in src[4]:
                _int(b, f"storage {sid}'s byte strides", -(1 << 40), 1 << 40)
            src = [src[0], root, src[2], src[3], tuple(src[4])]
            nbytes = 0
        elif src[0] == "view":
            if len(src) != 4 or type(src[3]) is not list or len(src[3]) != len(shape):
                raise _bad(f"storage {sid}: a view is [\"view\", storage, byte offset, byte strides]")
            root = _int(src[1], f"storage {sid}'s storage")
            if root not in self.storages or self.storages[root]["source"][0] in ("alias", "view"):
                raise _bad(f"storage {sid}: its storage {root} is not one described before it")
            _int(src[2], f"storage {sid}'s byte offset", 0, 1 << 40)
            for b in src[3]:
                _int(b, f"storage {sid}'s byte strides", -(1 << 40), 1 << 40)
            src = [src[0], root, src[2], tuple(src[3])]
            nbytes = 0
        elif len(src) != 1:
            raise _bad(f"storage {sid}: source {src[0]} takes no arguments")
        return {"memory": info["memory"], "shape": shape, "dtype": d, "pax": pax, "kind": info["kind"],
                "name": info["name"][:80], "lossy": info["lossy"], "source": tuple(src), "nbytes": nbytes}

    def _np_dtype(self, s: Any) -> np.dtype[Any]:
        if type(s) is not str or len(s) > 8:
            raise _bad("an array dtype must be a short string")
        try:
            d = np.dtype(s)
        except TypeError:
            raise _bad(f"unknown array dtype {s!r}") from None
        if d.kind not in "biuf" or d.byteorder == ">" or d.itemsize > 8:
            raise _bad(f"array dtype {s!r} is not a plain number type")
        return d

    def value(self, v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise _bad("arguments nested too deeply")
        t = type(v)
        if v is None or t is bool or t is str or t is int:
            if t is str and len(v) > 200:
                raise _bad("a string argument longer than 200 characters")
            if t is int and abs(v) > 1 << 64:
                raise _bad("an integer argument out of range")
            return v
        if t is not list or not v or type(v[0]) is not str:
            raise _bad(f"an argument must be plain JSON or a tagged list, got {str(v)[:40]}")
        tag = v[0]
        if tag == "f" and len(v) == 2 and type(v[1]) is str and len(v[1]) < 40:
            try:
                return float.fromhex(v[1])
            except ValueError:
                raise _bad(f"bad float {v[1]!r}") from None
        if tag == "s" and len(v) == 3:
            d = self._np_dtype(v[1])
            if type(v[2]) is not str or len(v[2]) != 2 * d.itemsize:
                raise _bad("a numpy scalar's bytes do not match its dtype")
            try:
                return np.frombuffer(bytes.fromhex(v[2]), dtype=d)[0]
            except ValueError:
                raise _bad("a numpy scalar's bytes are not hex") from None
        if tag == "a" and len(v) == 4:
            d = self._np_dtype(v[1])
            shape = _shape(v[2], "an array's shape")
            b = _int(v[3], "a blob index", 0, len(self.blobs) - 1)
            if len(self.blobs[b]) != math.prod(shape) * d.itemsize:
                raise _bad(f"blob {b} has {len(self.blobs[b])} bytes, not those of {shape} {d}")
            return np.frombuffer(self.blobs[b], dtype=d).reshape(shape).copy()
        if tag in ("tu", "l") and len(v) == 2 and type(v[1]) is list and len(v[1]) <= 4096:
            items = [self.value(x, depth + 1) for x in v[1]]
            return tuple(items) if tag == "tu" else items
        if tag == "d" and len(v) == 2 and type(v[1]) is dict and len(v[1]) <= 256:
            return {str(k)[:60]: self.value(x, depth + 1) for k, x in v[1].items()}
        if tag == "sl" and len(v) == 4:
            parts = [self.value(x, depth + 1) for x in v[1:]]
            if any(p is not None and type(p) is not int for p in parts):
                raise _bad("a slice's bounds must be integers or null")
            return slice(*parts)
        if tag == "t" and len(v) == 4:  # the common argument: checked inline
            st = self.storages.get(v[1]) if type(v[1]) is int else None
            if st is None:
                st = self._sid(v[1])
            if type(v[2]) is not list or len(v[2]) != len(st["shape"]):
                raise _bad("a view needs one (start, step, length, axis) entry per storage dimension")
            dims = []
            for e in v[2]:
                if type(e) is not list or len(e) != 4 or not all(type(x) is int and -_B <= x <= _B for x in e) \
                        or e[2] < 0 or not -1 <= e[3] <= 16:
                    raise _bad("a view's dimension entry is (start, step, length >= 0, axis) in range")
                dims.append(tuple(e))
            shape = v[3]
            if type(shape) is not list or len(shape) > 8 or not all(type(x) is int and 0 <= x <= 1 << 31 for x in shape):
                raise _bad("a view's shape must be a list of at most 8 sizes")
            return ("t", v[1], tuple(dims), tuple(shape))
        if tag == "tg" and len(v) == 4:
            st = self._sid(v[1])
            if type(v[3]) is not list or len(v[3]) != len(st["shape"]):
                raise _bad("a gather view needs one index array per storage dimension")
            idx = []
            for a in v[3]:
                arr = self.value(a, depth + 1)
                if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu":
                    raise _bad("a gather view's indices must be integer arrays")
                idx.append(arr)
            return ("tg", v[1], _shape(v[2], "a view's shape"), tuple(idx))
        if tag == "op" and len(v) == 2:
            from nkitui.emulator import alu

            if v[1] not in alu.BINARY and v[1] not in alu.ACTIVATIONS:
                raise _bad(f"unknown operator {str(v[1])[:40]!r}")
            return v[1]
        if tag == "dt" and len(v) == 2:
            return self._dtype(v[1])
        if tag == "en" and len(v) == 4 and all(type(x) is str for x in v[1:]):
            mod = _nkitui_module(v[1])
            cls = mod
            for part in v[2].split(".") if mod is not None else ():
                cls = getattr(cls, part, None) if not part.startswith("_") else None
            if not (isinstance(cls, type) and issubclass(cls, enum.Enum)) or v[3] not in cls.__members__:
                raise _bad(f"unknown enum member {v[1][:60]}.{v[2][:40]}.{v[3][:40]}")
            return cls.__members__[v[3]]
        raise _bad(f"unknown argument tag {str(tag)[:20]!r}")

    def _sid(self, sid: Any) -> dict[str, Any]:
        if type(sid) is not int or sid not in self.storages:
            raise _bad(f"a view names storage {str(sid)[:20]}, which the log does not describe")
        return self.storages[sid]


_MODULE_NAME = re.compile(r"nkitui\.emulator(\.[a-z_][a-z0-9_]*){1,3}")


def _nkitui_module(name: str) -> Any:
    """One of nkitui's own emulator modules (imported if need be: nkitui's code, never the task's)."""
    if not _MODULE_NAME.fullmatch(name):
        return None
    mod = sys.modules.get(name)
    if mod is None:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            return None
    return mod


# -- the replay -----------------------------------------------------------------------------------
def replay(log: Log, inputs: list[np.ndarray], *, target: str, precise: bool) -> dict[str, np.ndarray]:
    """The outputs of `log`'s instructions on `inputs` (the kernel's layout, the harness's order)."""
    from nkitui.emulator import dtypes as dt
    from nkitui.emulator.config import Options
    from nkitui.emulator.memory import Storage, _fill
    from nkitui.emulator.runtime import Run, set_current
    from nkitui.emulator.tensor import Tensor

    if log.unavailable is not None:
        raise ValueError("the log is unavailable: " + log.unavailable)
    if len(inputs) != log.inputs:
        raise ReplayError(f"the log was recorded on {log.inputs} inputs; {len(inputs)} were given", -1, "")
    storages: dict[int, Any] = {}
    for sid, info in sorted(log.storages.items()):  # roots before their aliases (larger keys)
        d = info["dtype"]
        sd = dt.storage_dtype(d, precise)
        src = info["source"]
        if src[0] == "input":
            arr = np.asarray(inputs[src[1]])
            if dt.dtype_of(arr.dtype) is not d and (d.host is None or arr.dtype != d.host) \
                    and arr.nbytes == math.prod(info["shape"]) * sd.itemsize:
                arr = np.ascontiguousarray(arr).view(sd)  # the front end saw the input through view(dtype)
            if arr.shape != info["shape"] and arr.size == math.prod(info["shape"]):
                arr = np.ascontiguousarray(arr).reshape(info["shape"])  # a front end's view of a 1-D input
            if dt.dtype_of(arr.dtype) is not d and arr.dtype != sd:
                raise ReplayError(f"input {src[1]} is {arr.dtype}; the log says {d.name}", -1, "")
            if d.host is not None and arr.dtype == d.host:
                arr = arr.view(d.np)
            data = np.array(arr, dtype=sd, copy=True, order="C")
            if data.shape != info["shape"]:
                raise ReplayError(f"input {src[1]} has shape {data.shape}; the log says {info['shape']}", -1, "")
        elif src[0] == "bytes":
            raw = log.blobs[src[1]]
            if len(raw) != math.prod(info["shape"]) * sd.itemsize:
                raise ReplayError(f"storage {sid}'s bytes do not match its dtype in this precision mode", -1, "")
            data = np.frombuffer(raw, dtype=sd).reshape(info["shape"]).copy()
        elif src[0] == "alias":  # a view of the root's memory, bounds checked by numpy's ndarray(buffer=...)
            storages[sid] = _alias(storages[src[1]], info, src)
            continue
        elif src[0] == "view":
            try:
                data = np.ndarray(info["shape"], dtype=sd, buffer=storages[src[1]].data, offset=src[2], strides=src[3])
            except (TypeError, ValueError) as exc:
                raise ReplayError(f"a view of storage {src[1]} reaches outside it: {exc}", -1, "") from None
        else:
            data = np.zeros(info["shape"], dtype=sd)
            if src[0] == "fill":
                _fill(data, d)
        st = Storage(info["name"], info["memory"], info["shape"], d, data, info["pax"], info["kind"])
        st.lossy = info["lossy"]
        storages[sid] = st

    views: dict[tuple[Any, ...], Any] = {}  # range views are immutable: one Tensor per view (its checks once)

    def build(v: Any) -> Any:
        if isinstance(v, tuple) and v and v[0] == "t" and len(v) == 4 and isinstance(v[1], int):
            t = views.get(v)
            if t is None:
                t = views[v] = Tensor(storages[v[1]], v[2], v[3])
            return t
        if isinstance(v, tuple) and v and v[0] == "tg" and len(v) == 4 and isinstance(v[1], int):
            return Tensor(storages[v[1]], None, v[2], gather_indices=v[3])
        if isinstance(v, tuple):
            return tuple(build(x) for x in v)
        if isinstance(v, list):
            return [build(x) for x in v]
        if isinstance(v, dict):
            return {k: build(x) for k, x in v.items()}
        return v

    opts = Options(target=target, precise=precise, execute=True, check_affine=False, capacity="off").validated()
    runs: dict[int, Any] = {}  # one per logical core: each has its own accumulator registers
    prev = set_current(None)
    saved = np.seterr(all="ignore")
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as a launch does: tiles are freed by reference counting
    try:
        for i, (name, args, kwargs, where, core) in enumerate(log.events):
            fn = replaylog.REGISTRY[name]
            run = runs.get(core)
            if run is None:
                run = runs[core] = Run(opts, "replay", (), None)
                run.core = core
            set_current(run)
            try:
                fn(*build(args), **build(kwargs))
            except Exception as exc:  # noqa: BLE001  (any failure of a logged instruction is the log's)
                raise ReplayError(f"instruction {i} ({name}) failed on replay: {type(exc).__name__}: "
                                  f"{str(exc)[:300]}", i, where) from None
    finally:
        if gc_was_enabled:
            gc.enable()
        np.seterr(**saved)
        set_current(prev)
    out: dict[str, np.ndarray] = {}
    for name, view in log.outputs.items():
        t = build(view)
        a = t.array() if t.gather_indices is not None else t._apply(t.storage.data)
        a = np.array(a, copy=True)
        if t.storage.dtype.host is not None:
            a = a.view(t.storage.dtype.host)
        out[name] = a
    return out


def _alias(root: Any, info: dict[str, Any], src: tuple[Any, ...]) -> Any:
    tensor = _nkitui_module("nkitui.emulator.newns.tensor")
    geo = tensor.Geo(root, info["dtype"], info["shape"], src[2], src[3], src[4])
    try:
        data = geo.build()
    except (TypeError, ValueError) as exc:
        raise ReplayError(f"a view of storage {src[1]} reaches outside it: {exc}", -1, "") from None
    return tensor.AliasStorage(root, geo, data)


@dataclass(frozen=True)
class Difference:
    output: str
    index: tuple[int, ...] | None
    reported: str
    replayed: str

    def describe(self) -> str:
        at = f" at index {list(self.index)}" if self.index is not None else ""
        return f"output `{self.output}`{at}: the kernel process reported {self.reported}, the replay gives {self.replayed}"


def first_difference(reported: dict[str, np.ndarray], replayed: dict[str, np.ndarray]) -> Difference | None:
    """The first output (in `reported`'s order) whose bytes differ from the replay's, else None."""
    for name, a in reported.items():
        b = replayed.get(name)
        if b is None:
            return Difference(name, None, "an output", "no tensor for it in the log")
        a = np.asarray(a)
        if a.dtype != b.dtype and a.shape == b.shape:
            b = b.astype(a.dtype)  # an argument the kernel wrote: its storage's cells converted, as the launch does
        if a.shape != b.shape or a.dtype.itemsize != b.dtype.itemsize:
            return Difference(name, None, f"shape {a.shape} {a.dtype}", f"shape {b.shape} {b.dtype}")
        ua = np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
        ub = np.ascontiguousarray(b).view(f"u{b.dtype.itemsize}") if ua is not None else None
        if ua is None or ub is None:
            if a.tobytes() != b.tobytes():
                return Difference(name, None, "other bytes", "other bytes")
            continue
        diff = np.flatnonzero(ua.reshape(-1) != ub.reshape(-1))
        if diff.size:
            idx = tuple(int(x) for x in np.unravel_index(int(diff[0]), a.shape)) if a.shape else ()
            return Difference(name, idx, repr(a.reshape(-1)[diff[0]].item()), repr(b.reshape(-1)[diff[0]].item()))
    return None
