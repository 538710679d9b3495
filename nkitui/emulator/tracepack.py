"""A compact binary form of a `Trace`, for handing it from the kernel's process to the evaluator.

The JSON form (`Trace.to_json`) of a 27k-instruction trace is 8 MB of nested lists: building,
writing, parsing and rebuilding it cost seconds. This form is columnar: one int64 matrix of the
instructions' numeric fields (strings, tuples and meta dicts as indices into tables kept in a small
JSON header), and one int64 matrix each for the read and write boxes with their offsets. Packing
walks the instructions once; unpacking rebuilds the same `Instruction`s.

    data = pack(trace)          # bytes
    trace = unpack(data)        # TraceFormatError (a ValueError) on anything malformed

The data comes from an untrusted process: `unpack` checks the magic, the header, every size against
the bytes present, every table index and every offset before it builds anything, and builds only
plain data (ints, strings, tuples, dicts from JSON); nothing in it is executed.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from nkitui.common.gcpause import collector_paused
from nkitui.emulator.trace import MEMORIES, TRACE_VERSION, Access, Instruction, StorageInfo, Trace

MAGIC = b"NKITRACE\x01\n"
# instruction columns; the *_i ones index a table of the header
_COLS = ("seq", "engine_i", "opcode_i", "partitions", "free", "in_dtypes_i", "out_dtype_i", "in_mems_i",
         "out_mem_i", "bytes_read", "bytes_written", "hbm_read", "hbm_write", "flops", "reads_n", "writes_n",
         "file_i", "line", "core", "program_i", "meta_i")
_NCOL = len(_COLS)
_STR_COLS = (1, 2, 6, 8, 16)  # engine, opcode, out_dtype, out_mem, file: the strings table
_TUP_COLS = (5, 7, 19)  # in_dtypes, in_mems, program: the tuples table
_META_COL = 20
_MEM_CODE = {m: i for i, m in enumerate(MEMORIES)}
_new_tuple = tuple.__new__


class TraceFormatError(ValueError):
    """The bytes are not a trace this version of nkitui wrote."""


def pack(trace: Trace) -> bytes:
    with collector_paused():
        return _pack(trace)


def _pack(trace: Trace) -> bytes:
    strings: dict[str, int] = {}
    tuples: dict[tuple[object, ...], int] = {}
    metas: dict[str, int] = {}
    rows: list[list[int]] = []
    boxes: list[Access] = []
    mem_code = _MEM_CODE

    def s(v: str) -> int:
        i = strings.get(v)
        if i is None:
            i = strings[v] = len(strings)
        return i

    def t(v: tuple[object, ...]) -> int:
        i = tuples.get(v)
        if i is None:
            i = tuples[v] = len(tuples)
        return i

    # repr(meta) -> its index: the meta dicts of a kernel's instructions repeat (a few per opcode), and
    # repr (one C call) is a fraction of json.dumps; a repr seen the first time goes through the JSON
    # key, which alone decides what is written (two reprs of one JSON share its entry)
    seen: dict[str, int] = {}
    for ins in trace.instructions:
        meta = ins.meta
        if meta:
            fast = repr(meta)
            mi = seen.get(fast)
            if mi is None:
                key = json.dumps(meta, sort_keys=True, separators=(",", ":"), default=repr)
                mi = metas.get(key)
                if mi is None:
                    mi = metas[key] = len(metas)
                seen[fast] = mi
        else:
            mi = -1
        reads, writes = ins.reads, ins.writes
        rows.append([ins.seq, s(ins.engine), s(ins.opcode), ins.partitions, ins.free, t(ins.in_dtypes),
                     s(ins.out_dtype), t(ins.in_mems), s(ins.out_mem), ins.bytes_read, ins.bytes_written,
                     ins.hbm_read, ins.hbm_write, ins.flops, len(reads), len(writes), s(ins.file), ins.line,
                     ins.core, t(ins.program), mi])
        boxes.extend(reads)
        boxes.extend(writes)
    ints = np.array(rows, dtype=np.int64).reshape(len(rows), _NCOL)
    acc = np.array([(a[0], mem_code.get(a[1], len(MEMORIES) - 1), a[2], a[3], a[4], a[5]) for a in boxes],
                   dtype=np.int64).reshape(len(boxes), 6)
    header = {
        "version": TRACE_VERSION, "target": trace.target, "kernel": trace.kernel, "meta": trace.meta,
        "storages": [[si.storage, si.name, si.memory, list(si.shape), si.dtype] for si in trace.storages.values()],
        "strings": list(strings), "tuples": [list(k) for k in tuples], "metas": list(metas),
        "instructions": len(rows), "boxes": len(boxes),
    }
    head = json.dumps(header, separators=(",", ":"), default=repr).encode()
    return b"".join((MAGIC, struct.pack("<Q", len(head)), head, ints.tobytes(), acc.tobytes()))


def _fail(why: str) -> TraceFormatError:
    return TraceFormatError(f"not a readable instruction trace: {why}")


def unpack(data: bytes, *, max_instructions: int = 5_000_000) -> Trace:
    with collector_paused():
        return _unpack(data, max_instructions)


def _unpack(data: bytes, max_instructions: int) -> Trace:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise _fail("wrong magic")
    (hlen,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if hlen > len(data) - start:
        raise _fail("header longer than the data")
    try:
        header = json.loads(data[start:start + hlen])
    except ValueError as exc:
        raise _fail(f"header: {exc}") from None
    if not isinstance(header, dict) or header.get("version") != TRACE_VERSION:
        raise _fail(f"version {header.get('version') if isinstance(header, dict) else None!r}, expected {TRACE_VERSION}")
    n, nbox = header.get("instructions"), header.get("boxes")
    strings, tuples, metas = header.get("strings"), header.get("tuples"), header.get("metas")
    if not (type(n) is int and type(nbox) is int and 0 <= n <= max_instructions and 0 <= nbox <= 8 * max_instructions):
        raise _fail("bad counts")
    if not (isinstance(strings, list) and all(type(x) is str for x in strings)):
        raise _fail("bad string table")
    if not (isinstance(tuples, list) and all(isinstance(x, list) and all(type(y) in (str, int) for y in x)
                                             for x in tuples)):
        raise _fail("bad tuple table")
    if not (isinstance(metas, list) and all(type(x) is str for x in metas)):
        raise _fail("bad meta table")
    body = start + hlen
    if len(data) - body != (n * _NCOL + nbox * 6) * 8:
        raise _fail("the arrays do not match the counts")
    ints = np.frombuffer(data, dtype="<i8", count=n * _NCOL, offset=body).reshape(n, _NCOL)
    acc = np.frombuffer(data, dtype="<i8", count=nbox * 6, offset=body + n * _NCOL * 8).reshape(nbox, 6)
    if n:
        for c in _STR_COLS:
            if ints[:, c].min() < 0 or ints[:, c].max() >= len(strings):
                raise _fail(f"column {_COLS[c]} out of its table")
        for c in _TUP_COLS:
            if ints[:, c].min() < 0 or ints[:, c].max() >= len(tuples):
                raise _fail(f"column {_COLS[c]} out of its table")
        if ints[:, _META_COL].min() < -1 or ints[:, _META_COL].max() >= len(metas):
            raise _fail("column meta_i out of its table")
        if ints[:, 14].min() < 0 or ints[:, 15].min() < 0 or int(ints[:, 14].sum() + ints[:, 15].sum()) != nbox:
            raise _fail("box counts do not add up")
    if nbox and (acc[:, 1].min() < 0 or acc[:, 1].max() >= len(MEMORIES)):
        raise _fail("box memory out of range")
    try:
        meta_dicts = [json.loads(m) for m in metas]
    except ValueError as exc:
        raise _fail(f"meta: {exc}") from None
    if not all(isinstance(m, dict) for m in meta_dicts):
        raise _fail("meta entries must be objects")
    trace = Trace(target=str(header.get("target", "trn2")), kernel=str(header.get("kernel", "")),
                  meta=dict(header.get("meta") or {}))
    for st in header.get("storages") or []:
        if not (isinstance(st, list) and len(st) == 5 and isinstance(st[3], list)):
            raise _fail("bad storage entry")
        trace.storages[st[0]] = StorageInfo(st[0], st[1], st[2], tuple(st[3]), st[4])
    tups = [tuple(x) for x in tuples]
    mems = MEMORIES
    boxes = [_new_tuple(Access, (b[0], mems[b[1]], b[2], b[3], b[4], b[5])) for b in acc.tolist()]
    out = []
    k = 0
    for r in ints.tolist():
        nr, nw = r[14], r[15]
        reads = tuple(boxes[k:k + nr])
        k += nr
        writes = tuple(boxes[k:k + nw])
        k += nw
        mi = r[20]
        out.append(Instruction(r[0], strings[r[1]], strings[r[2]], r[3], r[4], tups[r[5]], strings[r[6]], tups[r[7]],
                               strings[r[8]], r[9], r[10], r[11], r[12], r[13], reads, writes, strings[r[16]], r[17],
                               r[18], tups[r[19]], dict(meta_dicts[mi]) if mi >= 0 else {}))
    trace.instructions = out
    return trace
