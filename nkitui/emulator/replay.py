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
from nkitui.emulator import tensor as _tensor

MAX_HEADER_BYTES = 512 << 20
MAX_STREAM_BYTES = 1 << 30
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


@dataclass(frozen=True)
class Blob:
    """An array argument: its bytes are blob `index` of the log (read when the instruction is replayed)."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    index: int


@dataclass(frozen=True)
class ViewRef:
    """A range view: of the template's slot `ref` (of storage `ref` in a log's outputs)."""

    ref: int
    dims: tuple[tuple[int, int, int, int], ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class GatherRef:
    """A gather view: an index array per dimension of the slot's (storage's) cells."""

    ref: int
    shape: tuple[int, ...]
    indices: tuple[Blob, ...]


@dataclass(frozen=True)
class RegRef:
    """A sequencer register: its number in the log, and the value the kernel's process saw it hold."""

    key: int
    value: int
    frozen: bool


class Diverged(ReplayError):
    """A value the kernel's process observed (a host read, a register) is not what the replay computes at
    that point: on the seed's inputs the log is forged; on other inputs the kernel's own instruction stream
    would differ there (data-dependent control flow or addressing)."""


@dataclass
class Template:
    """One distinct instruction of a log: the engine function, its arguments with each tensor view's
    storage as a slot (ViewRef / GatherRef), where it ran."""

    name: str
    fn: Any
    args: list[Any]
    kwargs: dict[str, Any]
    where: str  # "file:line" or ""
    core: int
    ndims: list[int]  # per slot: the rank its storage must have
    views: list[tuple[bool, Any, int, Any, Any]]  # the top-level range views: (keyword?, position/key, slot, dims, shape)
    nested: list[tuple[bool, Any, Any]]  # the other top-level arguments rebuilt per call (containers, arrays, gathers)


@dataclass
class StorageInfo:
    memory: str
    shape: tuple[int, ...]
    dtype: Any
    pax: int
    kind: str
    name: str
    lossy: bool
    source: tuple[Any, ...]
    nbytes: int


@dataclass
class Parsed:
    """What a log's header and streams say, checked (shared by logs with the same header and streams)."""

    storages: list[StorageInfo]
    templates: list[Template]
    stream: list[int]  # per instruction: template, then its slots' storages
    count: int
    outputs: dict[str, Any]  # name -> ViewRef / GatherRef of a storage
    unavailable: str | None
    data_dependent: str | None
    inputs: int
    blob_sizes: dict[int, tuple[int, ...]]  # blob -> the byte lengths its users accept
    nblobs: int


@dataclass
class Log:
    parsed: Parsed
    blobs: list[bytes]

    @property
    def unavailable(self) -> str | None:
        return self.parsed.unavailable

    @property
    def data_dependent(self) -> str | None:
        return self.parsed.data_dependent

    @property
    def inputs(self) -> int:
        return self.parsed.inputs

    @property
    def count(self) -> int:
        """The number of instructions."""
        return self.parsed.count

    @property
    def outputs(self) -> dict[str, Any]:
        return self.parsed.outputs

    @property
    def storages(self) -> list[StorageInfo]:
        return self.parsed.storages

    def last_location(self) -> str:
        """The kernel's file:line of the last instruction ("" when not known)."""
        p = self.parsed
        pos, last = 0, ""
        while pos < len(p.stream):
            t = p.templates[p.stream[pos]]
            last = t.where or last
            pos += 1 + len(t.ndims)
        return last


_PREFIX = "malformed instruction log: "


def _bad(msg: str) -> ReplayFormatError:
    return ReplayFormatError(_PREFIX + msg.removeprefix(_PREFIX))


def _inner(exc: Exception) -> str:
    return str(exc).removeprefix(_PREFIX)


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


# The last header and streams checked, and what they say: the seeds of one check usually record the same
# instructions on the same storages (only the inputs' values differ), so the next seed's log is checked by
# comparing its bytes with these (the blobs, which differ, are checked for every log).
_last: tuple[bytes, Parsed] | None = None


def _sections(data: bytes) -> tuple[list[bytes], list[bytes]]:
    if not isinstance(data, (bytes, bytearray)) or not data.startswith(replaylog.MAGIC):
        raise _bad("it does not start with nkitui's replay magic (or was written by another version of nkitui)")
    pos = len(replaylog.MAGIC)
    sections: list[bytes] = []
    for what, limit in (("header", MAX_HEADER_BYTES), ("instruction stream", MAX_STREAM_BYTES),
                        ("storage stream", MAX_STREAM_BYTES)):
        if len(data) < pos + 8:
            raise _bad(f"truncated before the {what}'s length")
        (n,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if n > limit or pos + n > len(data):
            raise _bad(f"the {what} claims {n} bytes; {len(data) - pos} are present")
        sections.append(bytes(data[pos:pos + n]))
        pos += n
    blobs: list[bytes] = []
    while pos < len(data):
        if pos + 8 > len(data):
            raise _bad(f"truncated: blob {len(blobs)}'s length is cut off")
        (m,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        if pos + m > len(data):
            raise _bad(f"blob {len(blobs)} claims {m} bytes; {len(data) - pos} are present")
        blobs.append(bytes(data[pos:pos + m]))
        pos += m
        if len(blobs) > 1 << 24:
            raise _bad("more than 16M blobs")
    return sections, blobs


def _unpack(data: bytes) -> Log:
    global _last
    sections, blobs = _sections(data)
    key = b"".join(struct.pack("<Q", len(s)) + s for s in sections)
    cached = _last
    if cached is not None and cached[0] == key:
        parsed = cached[1]
    else:
        parsed = _parse(*sections)
        _last = (key, parsed)
    if len(blobs) != parsed.nblobs:
        raise _bad(f"the header says {parsed.nblobs} blobs; {len(blobs)} are present")
    for b, sizes in parsed.blob_sizes.items():
        if len(blobs[b]) not in sizes:
            raise _bad(f"blob {b} has {len(blobs[b])} bytes, not those of its array ({' or '.join(map(str, sizes))})")
    return Log(parsed, blobs)


def _parse(head: bytes, stream_bytes: bytes, storage_bytes: bytes) -> Parsed:
    try:
        header = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _bad(f"the header is not JSON ({str(exc)[:100]})") from None
    keys = {"version", "classes", "templates", "events", "storages", "outputs", "unavailable", "data_dependent",
            "inputs", "blobs"}
    if type(header) is not dict or set(header) != keys:
        raise _bad(f"the header must have exactly the fields {sorted(keys)}")
    if header["version"] != replaylog.VERSION:
        raise _bad(f"unknown version {str(header['version'])[:20]}")
    nblobs = _int(header["blobs"], "blobs", 0, 1 << 24)
    for k in ("unavailable", "data_dependent"):
        if header[k] is not None and type(header[k]) is not str:
            raise _bad(f"{k} must be a string or null")
    unavailable = header["unavailable"]
    inputs = _int(header["inputs"], "inputs", 0, 4096)
    count = _int(header["events"], "events", 0, replaylog.MAX_EVENTS)
    nstorages = _int(header["storages"], "storages", 0, 1 << 26)
    for k in ("classes", "templates"):
        if type(header[k]) is not list:
            raise _bad(f"{k} must be a list")
    if type(header["outputs"]) is not dict:
        raise _bad("outputs must be an object")
    reader = _Reader(nblobs, inputs)
    sizes: dict[int, set[int]] = {}
    if unavailable is not None:  # not replayed: nothing else need be read
        return Parsed([], [], [], 0, {}, unavailable, header["data_dependent"], inputs, {}, nblobs)
    if len(header["templates"]) > replaylog.MAX_TEMPLATES or len(header["classes"]) > 1 << 20:
        raise _bad("too many templates or storage classes")
    classes = [reader.storage_class(c, i) for i, c in enumerate(header["classes"])]
    storages = reader.storages = _storages(storage_bytes, nstorages, classes, inputs, nblobs, sizes)
    templates = []
    for i, tpl in enumerate(header["templates"]):
        try:
            templates.append(reader.template(tpl, i))
        except ReplayFormatError as exc:
            raise _bad(f"instruction template {i}: {_inner(exc)}") from None
    stream = _stream(stream_bytes, count, templates, storages)
    outputs = {}
    for name, enc in header["outputs"].items():
        reader.slots = None
        v = reader.value(enc, 0)
        if not isinstance(v, (ViewRef, GatherRef)):
            raise _bad(f"output {str(name)[:60]!r} must be a tensor view")
        rank = len(v.dims) if isinstance(v, ViewRef) else len(v.indices)
        if rank != len(storages[v.ref].shape):
            raise _bad(f"output {str(name)[:60]!r}: a view needs one entry per dimension of its storage "
                       f"({len(storages[v.ref].shape)}), got {rank}")
        outputs[str(name)] = v
    for b, n in reader.blob_sizes:
        sizes.setdefault(b, set()).add(n)
    blob_sizes: dict[int, tuple[int, ...]] = {b: tuple(sorted(v)) for b, v in sizes.items()}
    return Parsed(storages, templates, stream, count, outputs, None, header["data_dependent"], inputs, blob_sizes,
                  nblobs)


def _words(a: list[int], pos: int) -> int:
    """The signed 64-bit integer in words a[pos] (low) and a[pos + 1] (high)."""
    v = a[pos] | (a[pos + 1] << 32)
    return v - (1 << 64) if v >= 1 << 63 else v


def _u32(data: bytes, what: str) -> list[int]:
    if len(data) % 4:
        raise _bad(f"the {what} is not a whole number of 32-bit words")
    words: list[int] = np.frombuffer(data, dtype="<u4").tolist()
    return words


def _storages(data: bytes, n: int, classes: list[dict[str, Any]], inputs: int, nblobs: int,
              sizes: dict[int, set[int]]) -> list[StorageInfo]:
    a = _u32(data, "storage stream")
    out: list[StorageInfo] = []
    pos, total, end = 0, 0, len(a)
    ncls = len(classes)
    for sid in range(n):
        if pos + 2 > end:
            raise _bad(f"the storage stream ends before storage {sid} of {n}")
        c, kind = a[pos], a[pos + 1]
        pos += 2
        if c >= ncls:
            raise _bad(f"storage {sid}: unknown class {c}")
        cls = classes[c]
        shape = cls["shape"]
        rank = len(shape)
        nbytes = cls["nbytes"]
        if kind == 0 or kind == 1:
            src: tuple[Any, ...] = ("fill",) if kind == 0 else ("zeros",)
        elif kind == 2 or kind == 3:
            if pos + 1 > end:
                raise _bad(f"the storage stream ends inside storage {sid}")
            i = a[pos]
            pos += 1
            if kind == 2:
                if i >= inputs:
                    raise _bad(f"storage {sid}: input {i} of {inputs}")
                src = ("input", i)
            else:
                if i >= nblobs:
                    raise _bad(f"storage {sid}: blob {i} of {nblobs}")
                sizes.setdefault(i, set()).update(cls["sizes"])
                src = ("bytes", i)
        elif kind == 4 or kind == 5:
            need = (4 if kind == 4 else 3) + 2 * rank
            if pos + need > end:
                raise _bad(f"the storage stream ends inside storage {sid}")
            root = a[pos]
            if root >= sid or out[root].source[0] in (("alias",) if kind == 4 else ("alias", "view")):
                raise _bad(f"storage {sid}: its root {root} is not a storage described before it")
            if kind == 4:
                p0 = a[pos + 1]
                if p0 > 1 << 20:
                    raise _bad(f"storage {sid}'s first partition {p0} is out of range")
                off = _words(a, pos + 2)
                first = pos + 4
            else:
                off = _words(a, pos + 1)
                first = pos + 3
            if not 0 <= off <= 1 << 40:
                raise _bad(f"storage {sid}'s byte offset {off} is out of range")
            strides = tuple(_words(a, first + 2 * j) for j in range(rank))
            if any(not -(1 << 40) <= b <= 1 << 40 for b in strides):
                raise _bad(f"storage {sid}'s byte strides are out of range")
            src = ("alias", root, p0, off, strides) if kind == 4 else ("view", root, off, strides)
            pos += need
            nbytes = 0
        elif kind == 6:  # placed: byte space, its width (bytes per partition), first partition, first byte
            if pos + 4 > end:
                raise _bad(f"the storage stream ends inside storage {sid}")
            space, width, p0, byte = a[pos:pos + 4]
            pos += 4
            if cls["memory"] == "hbm" or not 0 < width <= 1 << 22 or space > 1 << 10:
                raise _bad(f"storage {sid}: a placed tile needs an on-chip memory, a space and a width in range")
            src = ("placed", space, width, p0, byte)
            nbytes = 0
        else:
            raise _bad(f"storage {sid}: unknown source kind {kind}")
        total += nbytes
        if total > MAX_STORAGE_BYTES:
            raise _bad("the storages exceed 8 GiB together")
        out.append(StorageInfo(cls["memory"], shape, cls["dtype"], cls["pax"], cls["kind"], cls["name"], cls["lossy"],
                           src, nbytes))
    if pos != end:
        raise _bad(f"{end - pos} words follow the last storage")
    return out


def _stream(data: bytes, count: int, templates: list[Template], storages: list[StorageInfo]) -> list[int]:
    """The instruction stream, every template and storage number in range and every storage of the rank
    its slot's view needs."""
    a = _u32(data, "instruction stream")
    ranks = [len(s.shape) for s in storages]
    nt, ns, end = len(templates), len(storages), len(a)
    slot_ranks = [t.ndims for t in templates]
    pos = 0
    for i in range(count):
        if pos >= end:
            raise _bad(f"the instruction stream ends before instruction {i} of {count}")
        t = a[pos]
        if t >= nt:
            raise _bad(f"instruction {i} names template {t} of {nt}")
        want = slot_ranks[t]
        k = len(want)
        if pos + 1 + k > end:
            raise _bad(f"the instruction stream ends inside instruction {i}")
        for j in range(k):
            sid = a[pos + 1 + j]
            if sid >= ns or ranks[sid] != want[j]:
                where = templates[t].where
                raise _bad(f"instruction {i} ({templates[t].name}{' at ' + where if where else ''}): slot {j} names "
                           + (f"storage {sid}, which the log does not describe" if sid >= ns else
                              f"storage {sid} of rank {ranks[sid]}; its view needs rank {want[j]}"))
        pos += 1 + k
    if pos != end:
        raise _bad(f"{end - pos} words follow the last instruction")
    return a


class _Reader:
    def __init__(self, nblobs: int, inputs: int) -> None:
        self.nblobs = nblobs
        self.inputs = inputs
        self.storages: list[StorageInfo] = []
        self.slots: list[int] | None = None  # while a template is read: each slot's rank (views name slots)
        self.blob_sizes: list[tuple[int, int]] = []  # (blob, byte length) the arrays read so far need

    def _dtype(self, name: Any) -> Any:
        from nkitui.emulator import dtypes as dt

        if type(name) is str and name in dt.LAZY_NAMES:
            dt.load_narrow()  # the bf16/fp8/MX types are made on first use
        if type(name) is not str or name not in dt._BY_NAME:
            raise _bad(f"unknown dtype {str(name)[:40]!r}")
        return dt._BY_NAME[name]

    def storage_class(self, info: Any, i: int) -> dict[str, Any]:
        from nkitui.emulator import dtypes as dt

        keys = ("memory", "shape", "dtype", "pax", "kind", "name", "lossy")
        if type(info) is not list or len(info) != len(keys):
            raise _bad(f"storage class {i} must be [{', '.join(keys)}]")
        info = dict(zip(keys, info))
        if info["memory"] not in MEMORIES:
            raise _bad(f"storage class {i}: unknown memory {str(info['memory'])[:20]!r}")
        shape = _shape(info["shape"], f"storage class {i}'s shape")
        d = self._dtype(info["dtype"])
        pax = _int(info["pax"], f"storage class {i}'s partition axis", 0, max(len(shape) - 1, 0))
        if type(info["kind"]) is not str or type(info["name"]) is not str or type(info["lossy"]) is not bool:
            raise _bad(f"storage class {i}: kind and name must be strings, lossy a boolean")
        n = math.prod(shape)
        sizes = (n * dt.storage_dtype(d, True).itemsize, n * dt.storage_dtype(d, False).itemsize)
        return {"memory": info["memory"], "shape": shape, "dtype": d, "pax": pax, "kind": info["kind"][:40],
                "name": info["name"][:80], "lossy": info["lossy"], "nbytes": sizes[0], "sizes": sizes}

    def template(self, tpl: Any, i: int) -> Template:
        if type(tpl) is not list or len(tpl) != 5 or type(tpl[0]) is not str:
            raise _bad("it must be [name, args, kwargs, location, core]")
        name = tpl[0]
        fn = replaylog.REGISTRY.get(name)
        if fn is None:
            raise _bad(f"it names an unknown instruction {name[:60]!r}")
        if type(tpl[1]) is not list or type(tpl[2]) is not list or len(tpl[1]) > 64 or len(tpl[2]) > 64:
            raise _bad(f"{name}: arguments must be a list and a list of [key, value] pairs")
        loc = tpl[3]
        core = _int(tpl[4], f"{name}'s core", 0, 7)
        where = ""
        if loc is not None:
            if type(loc) is not list or len(loc) != 2 or type(loc[0]) is not str or type(loc[1]) is not int:
                raise _bad(f"{name}: location must be [file, line]")
            where = f"{loc[0][:200]}:{loc[1]}"
        self.slots = []
        try:
            args = [self.value(a, 0) for a in tpl[1]]
            kwargs = {}
            for kv in tpl[2]:
                if type(kv) is not list or len(kv) != 2 or type(kv[0]) is not str or len(kv[0]) > 60:
                    raise _bad("a keyword argument must be [key, value]")
                kwargs[kv[0]] = self.value(kv[1], 0)
        except ReplayFormatError as exc:
            raise _bad(f"{name}{' at ' + where if where else ''}: {_inner(exc)}") from None
        ndims, self.slots = self.slots, None
        views: list[tuple[bool, Any, int, Any, Any]] = []
        nested: list[tuple[bool, Any, Any]] = []
        for kw, items in ((False, list(enumerate(args))), (True, list(kwargs.items()))):
            for k, v in items:
                if type(v) is ViewRef:
                    views.append((kw, k, v.ref, v.dims, v.shape))
                elif _needs_build(v):
                    nested.append((kw, k, v))
        return Template(name, fn, args, kwargs, where, core, ndims, views, nested)

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

    def _slot(self, v: Any, rank: int) -> int:
        """A view's slot (inside a template: the next slot, in order) or storage (an output)."""
        if self.slots is None:
            if type(v) is not int or not 0 <= v < len(self.storages):
                raise _bad(f"a view names storage {str(v)[:20]}, which the log does not describe")
            return v
        if type(v) is not int or v != len(self.slots):
            raise _bad(f"a view names slot {str(v)[:20]}; the next slot is {len(self.slots)}")
        self.slots.append(rank)
        return v

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
            b = _int(v[3], "a blob index", 0, self.nblobs - 1)
            self.blob_sizes.append((b, math.prod(shape) * d.itemsize))
            return Blob(d, shape, b)
        if tag in ("tu", "l") and len(v) == 2 and type(v[1]) is list and len(v[1]) <= 4096:
            items = [self.value(x, depth + 1) for x in v[1]]
            return tuple(items) if tag == "tu" else items
        if tag == "d" and len(v) == 2 and type(v[1]) is list and len(v[1]) <= 256:
            out = {}
            for kv in v[1]:
                if type(kv) is not list or len(kv) != 2 or type(kv[0]) is not str:
                    raise _bad("a dict argument's items must be [key, value]")
                out[kv[0][:60]] = self.value(kv[1], depth + 1)
            return out
        if tag == "sl" and len(v) == 4:
            parts = [self.value(x, depth + 1) for x in v[1:]]
            if any(p is not None and type(p) is not int for p in parts):
                raise _bad("a slice's bounds must be integers or null")
            return slice(*parts)
        if tag == "t" and len(v) == 4:
            if type(v[2]) is not list or len(v[2]) > 8:
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
            return ViewRef(self._slot(v[1], len(dims)), tuple(dims), tuple(shape))
        if tag == "tg" and len(v) == 4:
            if type(v[3]) is not list or len(v[3]) > 8:
                raise _bad("a gather view needs one index array per storage dimension")
            slot = self._slot(v[1], len(v[3]))
            idx = []
            for a in v[3]:
                arr = self.value(a, depth + 1)
                if not isinstance(arr, Blob) or arr.dtype.kind not in "iu":
                    raise _bad("a gather view's indices must be integer arrays")
                idx.append(arr)
            return GatherRef(slot, _shape(v[2], "a view's shape"), tuple(idx))
        if tag == "reg" and len(v) == 4:
            key = _int(v[1], "a register's number", 0, 1 << 20)
            value = _int(v[2], "a register's value", -(1 << 31), (1 << 32) - 1)
            if type(v[3]) is not bool:
                raise _bad("a register's frozen flag must be a boolean")
            return RegRef(key, value, v[3])
        if tag == "rg" and len(v) == 2 and type(v[1]) is list and len(v[1]) <= 1024:
            groups = []
            for g in v[1]:
                if type(g) is not list or len(g) > 1024:
                    raise _bad("a replica group is a list of rank lists")
                groups.append([_int(r, "a rank", 0, 1 << 16) for r in g])
            try:  # the nki front end's class (loaded by name, as the aliases' are: the engine core imports no front end)
                return _nkitui_module("nkitui.emulator.newns.collectives").ReplicaGroup(groups)
            except Exception as exc:  # noqa: BLE001 - the emulator's own check of the groups
                raise _bad(f"a replica group: {str(exc)[:100]}") from None
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


def _needs_build(v: Any) -> bool:
    """Whether a decoded argument must be made anew for each call (it holds views, arrays or mutable containers)."""
    return isinstance(v, (tuple, list, dict, Blob, GatherRef, RegRef))


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
    from nkitui.emulator.config import Options
    from nkitui.emulator.runtime import Run, set_current
    from nkitui.emulator.tensor import Tensor

    if log.unavailable is not None:
        raise ValueError("the log is unavailable: " + log.unavailable)
    if len(inputs) != log.inputs:
        raise ReplayError(f"the log was recorded on {log.inputs} inputs; {len(inputs)} were given", -1, "")
    p = log.parsed
    gc_was_enabled = gc.isenabled()
    gc.disable()  # as a launch does: tiles are freed by reference counting (and the log is many small objects)
    prev = set_current(None)
    saved = np.seterr(all="ignore")
    try:
        storages = _make_storages(log, inputs, precise)
        blobs = log.blobs
        views: dict[tuple[Any, ...], Any] = {}  # range views are immutable: one Tensor per view (its checks once)
        regs: dict[int, Any] = {}  # the log's sequencer registers, made on first sight

        def build(v: Any, sids: Any) -> Any:
            t = type(v)
            if t is RegRef:
                reg = regs.get(v.key)
                if reg is None:
                    registers = _nkitui_module("nkitui.emulator.newns.registers")
                    reg = regs[v.key] = registers.VirtualRegister(v.value, frozen=v.frozen)
                elif reg.value != v.value:
                    raise Diverged(f"register {v.key} holds {reg.value} here; the kernel's process saw {v.value}",
                                   -1, "")
                return reg
            if t is ViewRef:
                key = (sids[v.ref], v.dims, v.shape)
                view = views.get(key)
                if view is None:
                    view = views[key] = _view(storages[key[0]], v.dims, v.shape)
                return view
            if t is GatherRef:
                return Tensor(storages[sids[v.ref]], None, v.shape, gather_indices=tuple(build(b, sids) for b in v.indices))
            if t is Blob:  # a fresh array for each use (an instruction may keep or change what it is given)
                return np.frombuffer(blobs[v.index], dtype=v.dtype).reshape(v.shape).copy()
            if t is tuple:
                return tuple(build(x, sids) for x in v)
            if t is list:
                return [build(x, sids) for x in v]
            if t is dict:
                return {k: build(x, sids) for k, x in v.items()}
            return v

        opts = Options(target=target, precise=precise, execute=True, check_affine=False, capacity="off").validated()
        runs: dict[int, Any] = {}  # one per logical core: each has its own accumulator registers
        templates, stream = p.templates, p.stream
        pos, end, i, core = 0, len(stream), 0, -1
        tpl: Template | None = None
        try:
            while pos < end:
                tpl = templates[stream[pos]]
                k = len(tpl.ndims)
                sids = stream[pos + 1:pos + 1 + k]
                pos += 1 + k
                if tpl.core != core:
                    core = tpl.core
                    run = runs.get(core)
                    if run is None:
                        run = runs[core] = Run(opts, "replay", (), None)
                        run.core = core
                    set_current(run)
                if k or tpl.nested:
                    args = list(tpl.args)
                    kwargs = dict(tpl.kwargs)
                    for kw, at, slot, dims, shape in tpl.views:
                        key = (sids[slot], dims, shape)
                        view = views.get(key)
                        if view is None:
                            view = views[key] = _view(storages[key[0]], dims, shape)
                        if kw:
                            kwargs[at] = view
                        else:
                            args[at] = view
                    for kw, at, v in tpl.nested:
                        if kw:
                            kwargs[at] = build(v, sids)
                        else:
                            args[at] = build(v, sids)
                    tpl.fn(*args, **kwargs)
                else:
                    tpl.fn(*tpl.args, **tpl.kwargs)
                i += 1
        except Exception as exc:  # noqa: BLE001  (any failure of a logged instruction is the log's)
            name, where = (tpl.name, tpl.where) if tpl is not None else ("?", "")
            if isinstance(exc, (Diverged, replaylog.Diverged)):
                raise Diverged(f"instruction {i} ({name}): {exc}", i, where) from None
            raise ReplayError(f"instruction {i} ({name}) failed on replay: {type(exc).__name__}: "
                              f"{str(exc)[:300]}", i, where) from None
        out: dict[str, np.ndarray] = {}
        everything = range(len(storages))
        for name, ref in p.outputs.items():
            t = build(ref, everything)
            a = t.array() if t.gather_indices is not None else t._apply(t.storage.data)
            a = np.array(a, copy=True)
            if t.storage.dtype.host is not None:
                a = a.view(t.storage.dtype.host)
            out[name] = a
        return out
    finally:
        np.seterr(**saved)
        set_current(prev)
        if gc_was_enabled:
            gc.enable()


def _view(storage: Any, dims: Any, shape: tuple[int, ...]) -> Any:
    """The range view `dims` of `storage`: the whole storage made as the emulator makes a fresh tile's view
    (Tensor.whole: its cells, bounds and bounds check known; most of a log's views are that), any other
    view checked on first use."""
    if shape == storage.shape:
        whole = _tensor._WHOLE.get(shape)
        if whole is None:  # (what Tensor.whole makes, and keeps, for this shape)
            whole = tuple((0, 1, n, i) for i, n in enumerate(shape))
        if dims == whole:
            return _tensor.Tensor.whole(storage)
    return _tensor.Tensor(storage, dims, shape)


def _make_storages(log: Log, inputs: list[np.ndarray], precise: bool) -> list[Any]:
    """The log's storages, made here: inputs from `inputs`, constants from their bytes, fresh tiles filled
    as the emulator fills them, views of earlier storages bounds-checked by numpy."""
    from nkitui.emulator import dtypes as dt
    from nkitui.emulator.memory import Storage, _fill

    storages: list[Any] = []
    spaces: dict[int, Any] = {}  # placed tiles' byte spaces: number -> (memory, bytes, counter)
    for sid, info in enumerate(log.parsed.storages):  # roots before their views (described first)
        if info.source[0] == "placed":
            storages.append(_placed(spaces, sid, info))
            continue
        d = info.dtype
        sd = dt.storage_dtype(d, precise)
        src = info.source
        kind = src[0]
        if kind == "fill" or kind == "zeros":
            data = np.zeros(info.shape, dtype=sd)
            if kind == "fill":
                _fill(data, d)
        elif kind == "input":
            arr = np.asarray(inputs[src[1]])
            size = math.prod(info.shape)
            if dt.dtype_of(arr.dtype) is not d and (d.host is None or arr.dtype != d.host) \
                    and arr.nbytes == size * sd.itemsize:
                arr = np.ascontiguousarray(arr).view(sd)  # the front end saw the input through view(dtype)
            if arr.shape != info.shape and arr.size == size:
                arr = np.ascontiguousarray(arr).reshape(info.shape)  # a front end's view of a 1-D input
            if dt.dtype_of(arr.dtype) is not d and arr.dtype != sd:
                raise ReplayError(f"input {src[1]} is {arr.dtype}; the log says {d.name}", -1, "")
            if d.host is not None and arr.dtype == d.host:
                arr = arr.view(d.np)
            data = np.array(arr, dtype=sd, copy=True, order="C")
            if data.shape != info.shape:
                raise ReplayError(f"input {src[1]} has shape {data.shape}; the log says {info.shape}", -1, "")
        elif kind == "bytes":
            raw = log.blobs[src[1]]
            if len(raw) != math.prod(info.shape) * sd.itemsize:
                raise ReplayError(f"storage {sid}'s bytes do not match its dtype in this precision mode", -1, "")
            data = np.frombuffer(raw, dtype=sd).reshape(info.shape).copy()
        elif kind == "alias":  # a view of the root's memory, bounds checked by numpy's ndarray(buffer=...)
            storages.append(_alias(storages[src[1]], info, src))
            continue
        else:  # "view"
            try:
                data = np.ndarray(info.shape, dtype=sd, buffer=storages[src[1]].data, offset=src[2], strides=src[3])
            except (TypeError, ValueError) as exc:
                raise ReplayError(f"a view of storage {src[1]} reaches outside it: {exc}", -1, "") from None
        st = Storage(info.name, info.memory, info.shape, d, data, info.pax, info.kind)
        st.lossy = info.lossy
        storages.append(st)
    return storages


def carried_sources(log: Log) -> list[str]:
    """The front-end APIs whose written values the log carries and that depend on the kernel's inputs (a
    collective's result across SPMD programs): replayed on other inputs they are the seed's values."""
    found = {str(t.kwargs.get("source", "?")) for t in log.parsed.templates if t.name == "replaylog.put"}
    return sorted(found - replaylog.INDEPENDENT_SOURCES)


def _placed(spaces: dict[int, Any], sid: int, info: StorageInfo) -> Any:
    """A tile at an explicit address: a view of its byte space (made once per space, fresh 0xFF bytes as the
    emulator makes it), bounds-checked here (a slice past the space's end would be silently short)."""
    tensor = _nkitui_module("nkitui.emulator.newns.tensor")
    _, space_no, width, p0, byte = info.source
    space = spaces.get(space_no)
    if space is None:
        space = spaces[space_no] = (info.memory, np.full((128, width), 0xFF, dtype=np.uint8), tensor.SpaceCell())
    memory, arr, cell = space
    P = info.shape[0] if info.shape else 0
    nbytes = (math.prod(info.shape) // P if P else 0) * info.dtype.itemsize
    if memory != info.memory or arr.shape[1] != width or p0 + P > 128 or byte + nbytes > width or not info.shape:
        raise ReplayError(f"placed tile {sid} ({info.memory}, {info.shape} at partition {p0}, byte {byte}) does not "
                          f"fit its byte space ({memory}, 128 x {arr.shape[1]} bytes)", -1, "")
    return tensor.PlacedStorage(info.name, info.memory, info.shape, info.dtype, arr, cell, p0, byte)


def _alias(root: Any, info: StorageInfo, src: tuple[Any, ...]) -> Any:
    tensor = _nkitui_module("nkitui.emulator.newns.tensor")
    geo = tensor.Geo(root, info.dtype, info.shape, src[2], src[3], src[4])
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
