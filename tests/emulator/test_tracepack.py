"""The trace's binary form (nkitui.emulator.tracepack): the same instructions back, and malformed
bytes from the untrusted kernel process refused with a TraceFormatError, never half-built."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import nkitui.emulator as emu
from nkitui.emulator import tracepack
from nkitui.emulator.trace import Trace


@pytest.fixture(scope="module")
def trace() -> Trace:
    emu.install(force=True)
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl

    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(2):
            x = nl.load(a[i * 64:(i + 1) * 64, :])
            y = nl.load(b[i * 64:(i + 1) * 64, :])
            nl.store(out[i * 64:(i + 1) * 64, :], nl.multiply(nl.exp(x), y))
        return out

    a = np.ones((128, 32), np.float32)
    with emu.trace() as tr:
        k(a, a)
    tr.instructions[0].meta["note"] = {"nested": [1, 2]}
    return tr


def test_pack_then_unpack_gives_the_same_trace_as_the_json_form(trace):
    back = tracepack.unpack(tracepack.pack(trace))
    via_json = Trace.from_json(trace.to_json())
    assert back.instructions == via_json.instructions and len(back) == len(trace) > 5
    assert back.storages == via_json.storages and back.meta == via_json.meta
    assert (back.target, back.kernel) == (trace.target, trace.kernel)
    # each instruction owns its meta dict (the cost model may annotate one without touching others)
    assert back.instructions[1].meta is not back.instructions[2].meta or not back.instructions[1].meta


def test_metas_that_compare_equal_but_encode_differently_keep_their_own_values(trace):
    """pack() caches each meta dict's index by a cheap key: 1 == True == 1.0 and key order must not
    merge metas whose JSON differs, and metas that differ only in order share one table entry."""
    import copy

    tr = copy.deepcopy(trace)
    values = [{"x": 1}, {"x": True}, {"x": 1.0}, {"x": (1, 2)}, {"x": [True, 2]}, {"a": 1, "b": 2}, {"b": 2, "a": 1}]
    for ins, meta in zip(tr.instructions, values):
        ins.meta = dict(meta)
    data = tracepack.pack(tr)
    back = tracepack.unpack(data)
    got = [ins.meta for ins in back.instructions[:len(values)]]
    assert [type(m.get("x")) for m in got[:3]] == [int, bool, float]
    assert got[3]["x"] == [1, 2] and got[4]["x"] == [True, 2] and type(got[4]["x"][0]) is bool
    assert got[5] == got[6] == {"a": 1, "b": 2}
    metas = _header(data)[0]["metas"]
    assert len(metas) == len(set(metas))


def test_an_empty_trace_round_trips():
    back = tracepack.unpack(tracepack.pack(Trace(target="trn1", kernel="k")))
    assert back.instructions == [] and back.target == "trn1"


def _header(data: bytes) -> tuple[dict, int]:
    import json

    (hlen,) = struct.unpack_from("<Q", data, len(tracepack.MAGIC))
    start = len(tracepack.MAGIC) + 8
    return json.loads(data[start:start + hlen]), start + hlen


def _with_header(data: bytes, header: dict) -> bytes:
    import json

    _, body = _header(data)
    head = json.dumps(header).encode()
    return tracepack.MAGIC + struct.pack("<Q", len(head)) + head + data[body:]


@pytest.mark.parametrize("damage", ["magic", "truncated", "extra", "string index", "box count", "memory", "version",
                                    "header", "meta"])
def test_malformed_bytes_are_refused(trace, damage):
    data = tracepack.pack(trace)
    header, body = _header(data)
    n = header["instructions"]
    ints = np.frombuffer(data, dtype="<i8", count=n * 21, offset=body).reshape(n, 21).copy()
    rest = data[body + ints.nbytes:]
    if damage == "magic":
        data = b"X" + data[1:]
    elif damage == "truncated":
        data = data[:-8]
    elif damage == "extra":
        data = data + b"\0" * 8
    elif damage == "string index":
        ints[0, 2] = 10_000
        data = data[:body] + ints.tobytes() + rest
    elif damage == "box count":
        ints[0, 14] += 1
        data = data[:body] + ints.tobytes() + rest
    elif damage == "memory":
        boxes = np.frombuffer(rest, dtype="<i8").reshape(-1, 6).copy()
        boxes[0, 1] = 99
        data = data[:body] + ints.tobytes() + boxes.tobytes()
    elif damage == "version":
        data = _with_header(data, {**header, "version": 99})
    elif damage == "header":
        data = tracepack.MAGIC + struct.pack("<Q", 5) + b"{nope" + data[body:]
    elif damage == "meta":
        data = _with_header(data, {**header, "metas": ["[1]"] * len(header["metas"])})
    with pytest.raises(tracepack.TraceFormatError):
        tracepack.unpack(data)


def test_the_evaluator_unpacking_on_a_thread_gives_what_it_gives_at_once(trace, tmp_path):
    """The pipeline unpacks the first seed's trace on a thread (PendingTrace) while the kernel process
    runs on: the result is the one _read_trace builds at once, a malformed trace the same error."""
    from nkitui.evaluate.pipeline.kernel import PendingTrace, _read_trace

    (tmp_path / "t.bin").write_bytes(tracepack.pack(trace))
    (tmp_path / "bad.bin").write_bytes(tracepack.MAGIC + b"\xff" * 8)
    eager = _read_trace(tmp_path, "t.bin")
    pending = _read_trace(tmp_path, "t.bin", soon=True)
    assert isinstance(pending, PendingTrace) and isinstance(eager, Trace)
    lazy = pending.result()
    assert lazy.instructions == eager.instructions and lazy.storages == eager.storages and lazy.meta == eager.meta
    assert _read_trace(tmp_path, "bad.bin", soon=True).result() == _read_trace(tmp_path, "bad.bin")
    assert "error" in _read_trace(tmp_path, "bad.bin")
    assert _read_trace(tmp_path, "absent.bin", soon=True) is None


def test_pack_and_unpack_leave_the_collector_as_they_found_it(trace):
    """Both build with the cyclic collector off (acyclic containers only) and switch it back on after,
    also when the bytes are refused; a collector the caller switched off stays off."""
    import gc

    data = tracepack.pack(trace)
    assert gc.isenabled()
    with pytest.raises(tracepack.TraceFormatError):
        tracepack.unpack(data[:-8])
    assert gc.isenabled() and len(tracepack.unpack(data)) == len(trace)
    gc.disable()
    try:
        tracepack.unpack(tracepack.pack(trace))
        assert not gc.isenabled()
    finally:
        gc.enable()
