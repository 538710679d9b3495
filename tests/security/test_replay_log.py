"""The replayable instruction log (nkitui.emulator.replaylog / replay): valid kernels replay bit for bit in
a fresh replay, a report that differs from what the instructions compute is a mismatch, and a forged or
malformed log is a clear error, never a pass."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from nkitui import emulator
from nkitui.emulator import replay, replaylog
from nkitui.evaluate.pipeline.kernel import replay_launch
from tests.helpers.emulator_session import install_for_session

install_for_session()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.isa as nisa  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402

RNG = np.random.default_rng(7)


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out


@nki.jit
def matmul_kernel(a_t, b):  # a_t (K, M), b (K, N): PSUM accumulation over K tiles, `psum += nc_matmul`
    K, M = a_t.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // 128):
        at = nl.load(a_t[k * 128:(k + 1) * 128, :])
        bt = nl.load(b[k * 128:(k + 1) * 128, :])
        acc += nisa.nc_matmul(at, bt)
    nl.store(out, nl.copy(acc))
    return out


@nki.jit
def masked_kernel(a):  # a partial last tile (mask), iota and a shared constant
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(a.shape[1])[None, :]
    scale = nl.load(nl.shared_constant(np.full((128, a.shape[1]), 2.0, np.float32)))
    ramp = nisa.iota(i_f + 0 * i_p, dtype=nl.float32)
    for t in nl.affine_range((a.shape[0] + 127) // 128):
        rows = t * 128 + i_p
        x = nl.load(a[rows, i_f], mask=rows < a.shape[0])
        nl.store(out[rows, i_f], nl.add(nl.multiply(x, scale), ramp), mask=rows < a.shape[0])
    return out


@nki.jit
def indirect_kernel(table, idx):  # indirect DMA: the rows come from a device tile of indices
    out = nl.ndarray((4, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.zeros((4, 8), dtype=nl.float32)
    ids = nl.load(idx)
    nisa.dma_copy(dst=t, src=table[ids[nl.arange(4)[:, None], 0], nl.arange(8)[None, :]], oob_mode=nisa.oob_mode.skip)
    nl.store(out, t)
    return out


def _new_namespace_kernel():
    import nki as nki_new
    import nki.isa as nisa_new
    import nki.language as nl_new

    @nki_new.jit
    def scale_exp(x):  # the nki namespace: a reshape view, tensor_scalar immediates, an activation
        out = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.shared_hbm)
        t = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=t, src=x)
        s = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.tensor_scalar(dst=s, data=t, op0=nl_new.multiply, operand0=0.5, op1=nl_new.add, operand1=-1.25)
        e = nl_new.ndarray(x.shape, dtype=x.dtype, buffer=nl_new.sbuf)
        nisa_new.activation(dst=e, op=nl_new.exp, data=s)
        nisa_new.dma_copy(dst=out, src=e)
        return out

    return scale_exp


def _record(kernel, *inputs):
    with replaylog.recording(list(inputs)) as rec, emulator.options(target="trn2", precise=True):
        out = kernel(*inputs)
    view = rec.output_view(out)
    assert view is not None, rec.unavailable
    return out, replaylog.pack(rec, {"out": view})


CASES = {
    "add": (add_kernel, lambda: [RNG.standard_normal((128, 64)).astype(np.float32) for _ in range(2)]),
    "matmul-psum": (matmul_kernel, lambda: [RNG.standard_normal((256, 64)).astype(np.float32),
                                            RNG.standard_normal((256, 32)).astype(np.float32)]),
    "mask-iota-constant": (masked_kernel, lambda: [RNG.standard_normal((200, 16)).astype(np.float32)]),
    "indirect-dma": (indirect_kernel, lambda: [RNG.standard_normal((10, 8)).astype(np.float32),
                                               RNG.integers(0, 12, (4, 1)).astype(np.int32)]),
    "nki-namespace": (None, lambda: [RNG.standard_normal((128, 32)).astype(np.float32)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_valid_kernels_replay_bit_for_bit(name):
    kernel, make = CASES[name]
    kernel = kernel or _new_namespace_kernel()
    inputs = make()
    out, data = _record(kernel, *inputs)
    outcome = replay_launch(data, inputs, {"out": out}, target="trn2", precise=True)
    assert outcome.status == "exact", outcome.detail
    assert replay.unpack(data).unavailable is None


def test_a_reported_output_the_instructions_do_not_compute_is_a_mismatch():
    a, b = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    out, data = _record(add_kernel, a, b)
    forged = out.copy()
    forged[3, 5] = (a + b)[3, 5] + 1.0  # what a raw-memory rewrite of the kernel process's report does
    outcome = replay_launch(data, [a, b], {"out": forged}, target="trn2", precise=True)
    assert outcome.status == "mismatch" and outcome.failed
    assert "[3, 5]" in outcome.detail


def test_the_replay_runs_on_the_trusted_sides_inputs():
    """A log recorded on one input set, replayed on another: the outputs are those of the other set
    (the replay computes; it does not copy what the kernel process wrote)."""
    a, b = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    _, data = _record(add_kernel, a, b)
    c, d = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    outputs = replay.replay(replay.unpack(data), [c, d], target="trn2", precise=True)
    np.testing.assert_array_equal(outputs["out"], c + d)


def _sections(data: bytes) -> tuple[dict, list[int], list[int], list[bytes]]:
    """The header, the instruction stream and the storage stream (as integers) and the blobs of a log."""
    pos = len(replaylog.MAGIC)
    parts = []
    while pos < len(data):
        (m,) = struct.unpack_from("<Q", data, pos)
        parts.append(data[pos + 8:pos + 8 + m])
        pos += 8 + m
    head, stream, storages, *blobs = parts
    return (json.loads(head), np.frombuffer(stream, "<u4").tolist(), np.frombuffer(storages, "<u4").tolist(), blobs)


def _repack(header: dict, stream: list[int], storages: list[int], blobs: list[bytes]) -> bytes:
    sections = [json.dumps(header, separators=(",", ":")).encode(), np.array(stream, "<u4").tobytes(), np.array(storages, "<u4").tobytes(),
                *blobs]
    return replaylog.MAGIC + b"".join(struct.pack("<Q", len(b)) + b for b in sections)


def _valid_log() -> bytes:
    a, b = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    return _record(add_kernel, a, b)[1]


def _mutations() -> dict[str, bytes]:
    data = _valid_log()
    header, stream, storages, blobs = _sections(data)
    assert _repack(header, stream, storages, blobs) == data
    out: dict[str, bytes] = {"truncated": data[: len(data) - 7], "no magic": b"NOTALOG" + data,
                             "trailing bytes": data + b"\0", "an older version's magic": b"NKIREPLAY\x01\n" + data[11:]}
    out["huge header length"] = replaylog.MAGIC + struct.pack("<Q", 1 << 60) + data[len(replaylog.MAGIC) + 8:]

    def header_with(change) -> bytes:  # noqa: ANN001
        h = json.loads(json.dumps(header))
        change(h)
        return _repack(h, stream, storages, blobs)

    out["wrong blob count"] = header_with(lambda h: h.update(blobs=len(blobs) + 3))
    out["more instructions than the stream holds"] = header_with(lambda h: h.update(events=h["events"] + 1))
    out["more storages than the stream holds"] = header_with(lambda h: h.update(storages=h["storages"] + 1))
    out["unknown instruction"] = header_with(lambda h: h["templates"][0].__setitem__(0, "os.system"))

    def operators(h: dict) -> None:
        for tpl in h["templates"]:
            if tpl[0] == "vector.tensor_tensor":
                tpl[1][3] = ["op", "__import__"]
            for kv in tpl[2]:
                if isinstance(kv[1], list) and kv[1][:1] == ["op"]:
                    kv[1] = ["op", "eval"]

    out["unknown operator"] = header_with(operators)
    out["huge storage"] = header_with(lambda h: h["classes"][0].__setitem__(1, [1 << 31, 1 << 31]))
    out["a view names a slot out of order"] = header_with(
        lambda h: next(a for t in h["templates"] for a in t[1] if isinstance(a, list) and a[0] == "t").__setitem__(1, 7))
    out["enum outside nkitui"] = header_with(lambda h: h["templates"][0][1].__setitem__(0, ["en", "os", "path", "sep"]))
    out["object array"] = header_with(lambda h: h["templates"][0][1].__setitem__(0, ["a", "O", [1], 0]))
    out["a tuple dressed as a view"] = header_with(lambda h: next(t for t in h["templates"] if t[0] == "vector.tensor_tensor")[
        1].__setitem__(3, ["tu", ["t", 0, ["tu", []], ["tu", []]]]))  # what the version-1 replay took for a view
    out["nested too deeply"] = header_with(lambda h: h["templates"][0][1].__setitem__(0, [
        "l", [["l", [["l", [["l", [["l", [["l", [["l", [["l", [["l", [["l", [["l", [
            ["l", [["l", [["l", [1]]]]]]]]]]]]]]]]]]]]]]]]]]]]))
    out["an output names an unknown storage"] = header_with(
        lambda h: next(iter(h["outputs"].values())).__setitem__(1, 999999))
    bad = list(stream)
    bad[1] = 999999
    out["unknown storage"] = _repack(header, bad, storages, blobs)
    bad = list(stream)
    bad[0] = 4096
    out["unknown template"] = _repack(header, bad, storages, blobs)
    out["instruction stream cut short"] = _repack(header, stream[:-1], storages, blobs)
    bad = list(storages)
    bad[0] = 999  # the first storage's class
    out["unknown storage class"] = _repack(header, stream, bad, blobs)
    bad = list(storages)
    bad[1] = 9  # the first storage's source kind
    out["unknown storage source"] = _repack(header, stream, bad, blobs)
    out["storage stream cut short"] = _repack(header, stream, storages[:-1], blobs)
    return out


@pytest.mark.parametrize("name", list(_mutations()))
def test_a_malformed_log_is_a_clear_error_never_a_pass(name):
    data = _mutations()[name]
    a = np.zeros((128, 8), np.float32)
    outcome = replay_launch(data, [a, a], {"out": a}, target="trn2", precise=True)
    assert outcome.status in ("invalid", "mismatch") and outcome.failed, outcome
    assert outcome.detail


def test_a_missing_log_is_invalid():
    a = np.zeros((128, 8), np.float32)
    assert replay_launch("the kernel's process sent no instruction log for this launch", [a, a], {"out": a},
                         target="trn2", precise=True).failed


def test_a_storage_of_another_rank_in_a_views_slot_is_refused():
    data = _valid_log()
    header, stream, storages, blobs = _sections(data)
    header["classes"].append(["sbuf", [128, 2, 4], "float32", 0, "", "", False])  # a rank-3 class
    storages = storages + [len(header["classes"]) - 1, 1]  # one more storage of it, zeros
    header["storages"] += 1
    bad = list(stream)
    bad[1] = header["storages"] - 1
    with pytest.raises(replay.ReplayFormatError, match="rank"):
        replay.unpack(_repack(header, bad, storages, blobs))


def test_a_log_is_checked_anew_unless_its_header_and_streams_are_those_last_checked():
    """Seeds with the same instructions share one check of the header and streams (the unpack compares the
    bytes); a log that differs from the last one checked in its stream only, or in a blob's length, is
    still refused."""
    a, b = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    out1, first = _record(add_kernel, a, b)
    c, d = (RNG.standard_normal((128, 8)).astype(np.float32) for _ in range(2))
    out2, second = _record(add_kernel, c, d)
    assert first == second or _sections(first)[:3] == _sections(second)[:3]  # the same instructions
    replay.unpack(first)
    log = replay.unpack(second)
    assert replay.replay(log, [c, d], target="trn2", precise=True)["out"].tobytes() == out2.tobytes()
    header, stream, storages, blobs = _sections(second)
    bad = list(stream)
    bad[1] = 999999
    with pytest.raises(replay.ReplayFormatError):
        replay.unpack(_repack(header, bad, storages, blobs))
    scale = nl_constant_log()
    header, stream, storages, blobs = _sections(scale)
    replay.unpack(scale)
    with pytest.raises(replay.ReplayFormatError, match="blob"):
        replay.unpack(_repack(header, stream, storages, [blobs[0][:-4], *blobs[1:]]))


def nl_constant_log() -> bytes:
    return _record(masked_kernel, RNG.standard_normal((200, 16)).astype(np.float32))[1]


def test_no_correct_kernel_meets_the_template_cap_before_the_instruction_cap() -> None:
    # Each distinct operand geometry (an HBM offset) is a template: a correct kernel can have one per
    # instruction. A log past a cap is unavailable and fails the run (HACK-REPLAY-OPTOUT), so the only
    # cap a correct kernel may meet is the instruction count's; the header's bytes stay bounded.
    from nkitui.emulator import replay, replaylog

    assert replaylog.MAX_TEMPLATES >= replaylog.MAX_EVENTS
    assert replay.MAX_HEADER_BYTES <= 1 << 30
