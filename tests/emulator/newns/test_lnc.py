"""Logical cores: kernel[2] runs two physical cores concurrently with shared HBM, sendrecv and
core_barrier; failures and missing partners are reported instead of hanging."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nkitui import emulator
from nkitui.emulator.newns.cores import CollectiveError

F32 = np.float32


@nki.jit
def swap_halves(a):
    """Each core loads its half, sends it to the other core and stores what it receives."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    c = nl.program_id(axis=0)
    n = nl.num_programs(axes=0)
    rows = a.shape[0] // n
    mine = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[c * rows:(c + 1) * rows, :])
    other = nl.ndarray((rows, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=other, send_to_rank=(c + 1) % n, recv_from_rank=(c - 1) % n, pipe_id=0)
    nisa.dma_copy(dst=out[c * rows:(c + 1) * rows, :], src=other)
    return out


def test_sendrecv_exchanges_tiles_between_the_two_cores(rng):
    a = rng.random((256, 64)).astype(F32)
    out = swap_halves[2](a)
    assert np.array_equal(out[:128], a[128:]) and np.array_equal(out[128:], a[:128])


def test_lnc1_sendrecv_to_itself_is_a_copy(rng):
    a = rng.random((128, 64)).astype(F32)
    assert np.array_equal(swap_halves[1](a), a)


@nki.jit
def allreduce_sum(a):
    """Sum of a's two row halves on both cores: partial sums meet in shared HBM after a barrier."""
    c = nl.program_id(0)
    partial = nl.ndarray((2, 128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm, name="partials")
    out = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    mine = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=mine, src=a[c * 128:(c + 1) * 128, :])
    nisa.dma_copy(dst=partial[c], src=mine)
    nisa.core_barrier(partial, (0, 1))
    other = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=other, src=partial[1 - c])
    total = nl.ndarray((128, a.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=other, op=nl.add)
    if c == 0:
        nisa.dma_copy(dst=out, src=total)
    return out


def test_core_barrier_orders_shared_hbm_writes_and_reads(rng):
    a = rng.random((256, 32)).astype(F32)
    for _ in range(3):  # repeated: ordering must not depend on thread timing
        assert np.array_equal(allreduce_sum[2](a), a[:128] + a[128:])


def test_core_barrier_on_an_sbuf_tile_cites_the_documented_rule():
    """nki-library's bwmm_shard_on_I dynamic-block loop passes an SBUF tile; the docs say the data
    "must be data in shared HBM": the rule stays strict and the error quotes it."""
    @nki.jit
    def k(a):
        t = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
        nisa.memset(t, value=0)
        nisa.core_barrier(t, (0, 1))
        return a

    with pytest.raises(emulator.EngineMemoryError, match="must be data in shared HBM that multiple cores"):
        k[2](np.zeros((4, 4), F32))


def test_the_cores_really_run_concurrently():
    seen = []

    @nki.jit
    def k(a):
        seen.append((nl.program_id(0), threading.current_thread().name))
        nisa.core_barrier(a, (0, 1))  # would deadlock if the cores ran one after the other
        return a

    k[2](np.zeros((4, 4), F32))
    assert sorted(c for c, _ in seen) == [0, 1]
    assert len({name for _, name in seen}) == 2


def test_trace_records_both_cores_and_the_cross_core_instructions(rng):
    a = rng.random((256, 64)).astype(F32)
    k2 = swap_halves[2]
    with emulator.trace() as tr:
        k2(a)
    cores = {i.core for i in tr.instructions}
    assert cores == {0, 1}
    sr = [i for i in tr.instructions if i.opcode == "sendrecv"]
    assert len(sr) == 2 and all(i.engine == "dma" and i.meta["api"] == "nisa.sendrecv" for i in sr)
    assert [i.seq for i in tr.instructions] == list(range(len(tr.instructions)))
    launch = tr.meta["launches"][-1]
    assert launch["grid"] == [2] and launch["frontend"] == "nki"
    info = k2.last_run  # both cores' counts are folded into the launch summary
    assert info.instructions == len(tr.instructions)
    assert info.engine_counts["dma"] == sum(1 for i in tr.instructions if i.engine == "dma")


def test_a_missing_partner_is_an_error_not_a_hang():
    @nki.jit
    def k(a):
        c = nl.program_id(0)
        t = nl.ndarray((4, 4), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        if c == 0:
            nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=3)
        return a

    t0 = time.perf_counter()
    with pytest.raises(CollectiveError, match="core 1 finished the kernel without its matching call") as e:
        k[2](np.zeros((4, 4), F32))
    assert time.perf_counter() - t0 < 5
    assert e.value.file == "test_lnc.py"


def test_an_error_on_one_core_is_reported_and_the_other_core_released():
    @nki.jit
    def k(a):
        c = nl.program_id(0)
        if c == 1:
            nl.ndarray((256, 4), dtype=a.dtype, buffer=nl.sbuf)  # partition dim too large
        nisa.core_barrier(a, (0, 1))
        return a

    with pytest.raises(emulator.PartitionDimError, match="partition dimension 256 exceeds 128"):
        k[2](np.zeros((4, 4), F32))


def test_unnamed_shared_tensors_match_by_order_and_named_by_name(rng):
    @nki.jit
    def k(a):
        c = nl.program_id(0)
        if c == 1:
            extra = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm, name="only_core1")
            nisa.dma_copy(dst=extra, src=a)
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=a)
        if c == 1:
            nisa.dma_copy(dst=out, src=t)
        nisa.core_barrier(out, (0, 1))
        return out

    a = rng.random((4, 4)).astype(F32)
    assert np.array_equal(k[2](a), a)  # core 0 returns the tensor core 1 wrote


def test_lnc_degree_is_1_or_2_and_lnc2_needs_trn2_or_later():
    with pytest.raises(emulator.KernelArgumentError, match="must be 1 or 2"):
        swap_halves[4]
    with emulator.options(target="trn1"):
        with pytest.raises(emulator.KernelArgumentError, match="need trn2 or trn3"):
            swap_halves[2](np.zeros((256, 4), F32))


def test_program_ndim_and_num_programs_without_a_launch_degree():
    seen = {}

    @nki.jit
    def k(a):
        seen["plain"] = (nl.program_ndim(), nl.num_programs(), nl.program_id())
        return a

    k(np.zeros(2, F32))
    assert seen["plain"] == (0, 1, 0)  # no launch degree: not an SPMD launch
    k[1](np.zeros(2, F32))
    assert seen["plain"] == (1, 1, 0)


def test_sendrecv_shapes_must_match_between_the_cores():
    @nki.jit
    def k(a):
        c = nl.program_id(0)
        n = 4 if c == 0 else 8
        t = nl.ndarray((n, 4), dtype=a.dtype, buffer=nl.sbuf)
        nisa.memset(dst=t, value=0.0)
        nisa.sendrecv(src=t, dst=t, send_to_rank=1 - c, recv_from_rank=1 - c, pipe_id=0)
        return a

    with pytest.raises(emulator.OperandShapeError, match="sent a \\(8, 4\\) float32 tile on pipe 0"):
        k[2](np.zeros((4, 4), F32))


def test_cores_run_in_lockstep_so_early_writes_land_before_late_ones(rng):
    # nki-library's cascaded_max utility test: both cores zero-fill the shared output, then each
    # stores its half, with no barrier. On the device both cores start together and run at the same
    # pace; the emulator takes turns at instruction boundaries, so a slow start of one core's Python
    # (here: a sleep) cannot let its zero-fill land after the other core's store.
    @nki.jit
    def k(x):
        P, F = x.shape
        half = P // 2
        c = nl.program_id(0)
        out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
        if c == 1:
            time.sleep(0.3)
        zero = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.memset(dst=zero, value=0.0)
        nisa.dma_copy(dst=out, src=zero)
        t = nl.ndarray((half, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[c * half:(c + 1) * half, :])
        nisa.dma_copy(dst=out[c * half:(c + 1) * half, :], src=t)
        return out

    x = rng.random((8, 16)).astype(F32)
    assert np.array_equal(k[2](x), x)


def test_observable_instructions_run_in_lockstep_order():
    # each core: a private memset, then a store to shared HBM (its instruction 1, 3, 5): the stores
    # interleave round robin, as if both cores issued one instruction each in turn
    order = []

    @nki.jit
    def k(x):
        c = nl.program_id(0)
        out = nl.ndarray((2, 4, 4), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
        t = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        for i in range(3):
            nisa.memset(dst=t, value=float(i))
            nisa.dma_copy(dst=out[c], src=t)
            order.append((c, i))
        return out

    k[2](np.zeros((4, 4), F32))
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_private_instructions_do_not_hand_the_turn_over():
    # SBUF-only instructions cannot be seen by the other core: the core keeps the turn through them
    # (each hand-over is a thread switch, a scheduler wake-up on a loaded host)
    order = []

    @nki.jit
    def k(x):
        c = nl.program_id(0)
        t = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        for i in range(3):
            nisa.memset(dst=t, value=float(i))
            order.append((c, i))
        return x

    k[2](np.zeros((4, 4), F32))
    assert order == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("early", [0, 1])
def test_a_store_issued_earlier_by_instruction_count_lands_first(early):
    # the `early` core stores after 3 private instructions, the other after 7: in lockstep the
    # early store lands first and the late one wins, whichever core is which
    @nki.jit
    def k(x):
        c = nl.program_id(0)
        out = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.shared_hbm, name="out")
        t = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.sbuf)
        for _ in range(3 if c == early else 7):
            nisa.memset(dst=t, value=float(c + 1))
        nisa.dma_copy(dst=out, src=t)
        return out

    assert np.all(k[2](np.zeros((4, 4), F32)) == 2 - early)
