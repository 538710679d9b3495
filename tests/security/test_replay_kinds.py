"""Every kind of device access the emulator has is in the replayable log (issue #14: a log the kernel's process
marks unavailable is no longer an escape, so nothing legitimate may need the mark): front-end writes (nl.rand,
nl.all_reduce across SPMD programs) as `replaylog.put` with their values, legacy nl.gather_flattened and the
nki collectives as instructions, sequencer registers by number with their values checked, tiles at explicit
addresses as views of their byte space (overlaps alias on replay too), and host reads of device values as
observations the replay checks. Each kernel is recorded, packed, unpacked and replayed here, bit for bit; on
other inputs, a log whose control flow read the data is refused (`Diverged`), never silently replayed."""

from __future__ import annotations

import numpy as np
import pytest

from nkitui import emulator
from nkitui.emulator import replay, replaylog
from tests.helpers.emulator_session import install_for_session

install_for_session()
import neuronxcc.nki as lnki  # noqa: E402
import neuronxcc.nki.language as lnl  # noqa: E402
import nki  # noqa: E402
import nki.collectives as ncoll  # noqa: E402
import nki.isa as nisa  # noqa: E402
import nki.language as nl  # noqa: E402

F32 = np.float32
RNG = np.random.default_rng(11)


@lnki.jit
def rand_kernel(a):
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, lnl.add(lnl.load(a), lnl.rand(a.shape)))
    return out


@lnki.jit
def gather_kernel(data, idx):
    out = lnl.ndarray(idx.shape, dtype=data.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, lnl.gather_flattened(lnl.load(data), lnl.load(idx)))
    return out


@lnki.jit
def all_reduce_kernel(x):
    n = lnl.num_programs(0)
    out = lnl.ndarray((n, x.shape[1], x.shape[2]), dtype=x.dtype, buffer=lnl.shared_hbm)
    p = lnl.program_id(0)
    lnl.store(out[p], value=lnl.all_reduce(lnl.load(x[p]), op=np.add, program_axes=0))
    return out


@nki.jit
def register_kernel(a, n_in):
    F = a.shape[1]
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    zero = nl.zeros((1, F), dtype=a.dtype)
    for r in range(a.shape[0]):
        nisa.dma_copy(dst=out[r:r + 1, :], src=zero)
    ub = nisa.register_alloc()
    nsb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=nsb, src=n_in)
    nisa.register_load(ub, nsb)

    def body(i):
        row = nl.ndarray((1, F), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=row, src=a.ap(pattern=[[F, 1], [1, F]], offset=0, scalar_offset=i, indirect_dim=0))
        nisa.dma_copy(dst=out[nl.ds(i, 1), :], src=row)

    nl.fori_loop(0, ub, body)
    return out


@nki.jit
def placed_kernel(a):
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096))
    u = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096 + 128))
    nisa.dma_copy(dst=t, src=a)
    nisa.memset(dst=u, value=7.0)  # overlaps columns 32..63 of t
    out = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def collective_kernel(a):
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=t, src=a)
    ncoll.all_reduce(srcs=[t], dsts=[out], replica_group=ncoll.ReplicaGroup([[0]]), op=nl.add)
    return out


def _record(kernel, inputs, grid=None):
    k = kernel[grid] if grid else kernel
    with replaylog.recording(list(inputs)) as rec, emulator.options(target="trn2", precise=True):
        out = k(*inputs)
    assert rec.unavailable is None, rec.unavailable
    view = rec.output_view(out)
    assert view is not None
    return out, replay.unpack(replaylog.pack(rec, {"out": view}))


def _replay(log, inputs):
    return replay.replay(log, list(inputs), target="trn2", precise=True)["out"]


CASES = {
    "nl.rand": (rand_kernel, lambda: [RNG.standard_normal((128, 16)).astype(F32)], None),
    "nl.gather_flattened": (gather_kernel, lambda: [RNG.standard_normal((64, 32)).astype(F32),
                                                     RNG.integers(0, 32, (64, 8)).astype(np.uint32)], None),
    "nl.all_reduce over programs": (all_reduce_kernel, lambda: [RNG.standard_normal((4, 8, 16)).astype(F32)], (4,)),
    "register bound": (register_kernel, lambda: [RNG.random((6, 8)).astype(F32), np.array([[4]], np.int32)], None),
    "placed tiles": (placed_kernel, lambda: [RNG.random((128, 64)).astype(F32)], None),
    "ncoll.all_reduce": (collective_kernel, lambda: [RNG.random((128, 32)).astype(F32)], None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_kind_replays_bit_for_bit(name):
    kernel, make, grid = CASES[name]
    inputs = make()
    out, log = _record(kernel, inputs, grid)
    got = _replay(log, inputs)
    assert got.dtype == out.dtype and got.tobytes() == out.tobytes()


@pytest.mark.parametrize("name", ["nl.gather_flattened", "placed tiles", "ncoll.all_reduce"])
def test_instructions_replay_from_their_operands_on_other_inputs(name):
    """Not the seed's values: the replay on another input set equals the kernel run on that set."""
    kernel, make, grid = CASES[name]
    _, log = _record(kernel, make(), grid)
    other = make()
    with emulator.options(target="trn2", precise=True):
        expected = kernel(*other)
    assert _replay(log, other).tobytes() == expected.tobytes()
    assert replay.carried_sources(log) == []


def test_a_register_the_data_set_differently_diverges_on_other_inputs():
    kernel, make, _ = CASES["register bound"]
    a, n = make()
    _, log = _record(kernel, [a, n])
    assert _replay(log, [a * 2, n]).tobytes() != _replay(log, [a, n]).tobytes()  # same count: replayed
    with pytest.raises(replay.Diverged, match="register"):
        _replay(log, [a, np.array([[5]], np.int32)])  # the loop would run 5 times there, not 4


def test_values_carried_from_the_seed_are_named():
    _, log = _record(all_reduce_kernel, CASES["nl.all_reduce over programs"][1](), (4,))
    assert replay.carried_sources(log) == ["all_reduce"]
    _, log = _record(rand_kernel, CASES["nl.rand"][1]())
    assert replay.carried_sources(log) == []  # nl.rand's values do not depend on the inputs


def test_a_forged_observation_is_caught_on_the_seed():
    """A log whose register value was rewritten (so a different stream would look consistent) does not replay."""
    kernel, make, _ = CASES["register bound"]
    a, n = make()
    with replaylog.recording([a, n]) as rec, emulator.options(target="trn2", precise=True):
        out = kernel(a, n)
    rec.templates = {tuple(_forge(k)): v for k, v in rec.templates.items()}
    log = replay.unpack(replaylog.pack(rec, {"out": rec.output_view(out)}))
    with pytest.raises(replay.ReplayError):
        _replay(log, [a, n])


def _forge(key):
    if isinstance(key, tuple) and len(key) == 4 and key[0] == "reg":
        return ("reg", key[1], key[2] + 1, key[3])
    if isinstance(key, tuple):
        return tuple(_forge(x) for x in key)
    return key
