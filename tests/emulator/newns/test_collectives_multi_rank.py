"""nki.collectives across several ranks (`nki.multi_rank_simulate`): every collective with 2, 4 and
8 ranks against numpy, the ring all-gather style of nki-library's fine-grained all-gather, LNC=2
ranks, deterministic reductions, and failures that are reported instead of hanging."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nki
import nki.collectives as ncc
import nki.isa as nisa
import nki.language as nl
from nki.collectives import ReplicaGroup
from nkitui import emulator

F32 = np.float32
BF16 = ml_dtypes.bfloat16
SIZES = (2, 4, 8)


def _inputs(arrays, **static):
    return [((a,), dict(static)) for a in arrays]


@nki.jit
def all_reduce_kernel(x, replica_group, op):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.private_hbm)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[out], replica_group=replica_group, op=op)
    return out


@pytest.mark.parametrize("n", SIZES)
def test_all_reduce_sums_every_rank_in_group_order(rng, n):
    xs = [rng.standard_normal((64, 32)).astype(F32) for _ in range(n)]
    group = ReplicaGroup([list(range(n))])
    outs = nki.multi_rank_simulate(all_reduce_kernel, world_size=n, per_rank_inputs=_inputs(xs, replica_group=group,
                                                                                          op=nl.add))
    expect = xs[0].copy()
    for x in xs[1:]:  # fp32, left to right in replica-group order
        expect = expect + x
    for out in outs:
        np.testing.assert_array_equal(out, expect)


def test_all_reduce_max_within_two_sub_groups(rng):
    xs = [rng.standard_normal((16, 8)).astype(F32) for _ in range(8)]
    group = ReplicaGroup([[0, 1, 2, 3], [4, 5, 6, 7]])
    outs = nki.multi_rank_simulate(all_reduce_kernel, world_size=8,
                                   per_rank_inputs=_inputs(xs, replica_group=group, op=nl.maximum))
    for r, out in enumerate(outs):
        members = range(0, 4) if r < 4 else range(4, 8)
        np.testing.assert_array_equal(out, np.max([xs[m] for m in members], axis=0))


def test_bf16_all_reduce_is_deterministic_and_rounds_once(rng):
    xs = [(rng.standard_normal((32, 16)) * 100).astype(BF16) for _ in range(4)]
    group = ReplicaGroup([[2, 0, 3, 1]])  # the group's order, not rank order, is the reduction order
    runs = [nki.multi_rank_simulate(all_reduce_kernel, world_size=4,
                                    per_rank_inputs=_inputs(xs, replica_group=group, op=nl.add)) for _ in range(3)]
    acc = xs[2].astype(F32)
    for m in (0, 3, 1):
        acc = acc + xs[m].astype(F32)
    for outs in runs:
        for out in outs:
            assert out.dtype == BF16
            np.testing.assert_array_equal(out, acc.astype(BF16))


@nki.jit
def all_gather_kernel(x, replica_group, num_ranks):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray((x.shape[0] * num_ranks, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    ncc.all_gather(srcs=[src], dsts=[dst], replica_group=replica_group, collective_dim=0)
    return dst


@pytest.mark.parametrize("n", SIZES)
def test_all_gather_concatenates_in_group_order(rng, n):
    xs = [rng.standard_normal((8, 16)).astype(F32) for _ in range(n)]
    group = ReplicaGroup([list(range(n))])
    outs = nki.multi_rank_simulate(all_gather_kernel, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=group, num_ranks=n))
    for out in outs:
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=0))


@nki.jit
def sbuf_all_gather_kernel(x, replica_group, num_ranks):
    """nki-library's allgather_sb2sb style: SBUF tiles gathered along the free dimension."""
    H, W = x.shape
    t = nl.ndarray((H, W), dtype=x.dtype, buffer=nl.sbuf)
    g = nl.ndarray((H, W * num_ranks), dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray((H, W * num_ranks), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=t, src=x)
    ncc.all_gather(dsts=[g], srcs=[t], replica_group=replica_group, collective_dim=1)
    nisa.dma_copy(dst=out, src=g)
    return out


@pytest.mark.parametrize("n", SIZES)
def test_sbuf_all_gather_along_the_free_dimension(rng, n):
    xs = [rng.standard_normal((32, 8)).astype(F32) for _ in range(n)]
    outs = nki.multi_rank_simulate(sbuf_all_gather_kernel, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([list(range(n))]),
                                                           num_ranks=n))
    for out in outs:
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=1))


@nki.jit
def reduce_scatter_kernel(x, replica_group, num_ranks):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray((x.shape[0] // num_ranks, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    ncc.reduce_scatter(srcs=[src], dsts=[dst], op=nl.add, replica_group=replica_group, collective_dim=0)
    return dst


@pytest.mark.parametrize("n", SIZES)
def test_reduce_scatter_gives_each_rank_its_summed_chunk(rng, n):
    xs = [rng.standard_normal((4 * n, 8)).astype(F32) for _ in range(n)]
    outs = nki.multi_rank_simulate(reduce_scatter_kernel, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([list(range(n))]),
                                                           num_ranks=n))
    total = xs[0].copy()
    for x in xs[1:]:
        total = total + x
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, total[4 * r:4 * (r + 1)])


@nki.jit
def all_to_all_kernel(x, replica_group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    ncc.all_to_all(dsts=[dst], srcs=[src], replica_group=replica_group, collective_dim=0)
    return dst


@pytest.mark.parametrize("n", SIZES)
def test_all_to_all_exchanges_chunks(rng, n):
    xs = [rng.standard_normal((2 * n, 4)).astype(F32) for _ in range(n)]
    outs = nki.multi_rank_simulate(all_to_all_kernel, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([list(range(n))])))
    for i, out in enumerate(outs):  # rank i's chunk j comes from rank j's chunk i
        np.testing.assert_array_equal(out, np.concatenate([x[2 * i:2 * i + 2] for x in xs], axis=0))


@nki.jit
def all_to_all_v_kernel(x, meta_in, replica_group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    zero = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    meta = nl.ndarray(meta_in.shape, dtype=meta_in.dtype, buffer=nl.shared_hbm, name="meta")
    nisa.memset(dst=zero, value=0.0)
    nisa.dma_copy(dst=dst, src=zero)
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=meta, src=meta_in)
    ncc.all_to_all_v(srcs=[src], dsts=[dst], replica_group=replica_group, metadata_tensor=meta)
    return dst, meta


@pytest.mark.parametrize("n", SIZES)
def test_all_to_all_v_sends_variable_counts(rng, n):
    xs = [rng.standard_normal((1, 64)).astype(F32) for _ in range(n)]
    metas = []
    for r in range(n):  # rank r sends (r + j) % 3 + 1 elements to rank j, from offset 2 * j
        m = np.zeros((3, n), dtype=np.uint32)
        m[0] = [(r + j) % 3 + 1 for j in range(n)]
        m[1] = [2 * j for j in range(n)]
        metas.append(m)
    inputs = [((xs[r], metas[r]), {"replica_group": ReplicaGroup([list(range(n))])}) for r in range(n)]
    outs = nki.multi_rank_simulate(all_to_all_v_kernel, world_size=n, per_rank_inputs=inputs)
    for i, (out, meta) in enumerate(outs):
        parts = [xs[s][0, 2 * i:2 * i + (s + i) % 3 + 1] for s in range(n)]
        packed = np.concatenate(parts)
        np.testing.assert_array_equal(out[0, :packed.size], packed)
        np.testing.assert_array_equal(meta[2], [(s + i) % 3 + 1 for s in range(n)])


@nki.jit
def shift_kernel(x, pairs):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    nisa.dma_copy(dst=dst, src=x)
    ncc.collective_permute(srcs=[src], dsts=[dst], source_target_pairs=pairs)
    return dst


@pytest.mark.parametrize("n", SIZES)
def test_collective_permute_follows_the_pairs(rng, n):
    xs = [np.full((4, 4), r, dtype=F32) for r in range(n)]
    pairs = [(r, (r + 1) % n) for r in range(n - 1)]  # rank n-1 sends nowhere; rank 0 receives nothing
    outs = nki.multi_rank_simulate(shift_kernel, world_size=n, per_rank_inputs=_inputs(xs, pairs=pairs))
    assert [int(o[0, 0]) for o in outs] == [0] + list(range(n - 1))


@nki.jit
def ring_all_gather(x, replica_group, num_ranks):
    """The fine-grained ring all-gather style: hold your own chunk, then pass chunks around the
    ring with collective_permute_implicit, placing each at the rank the ring says it came from."""
    rows, cols = x.shape
    out = nl.ndarray((num_ranks * rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    bufs = [nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf) for _ in range(2)]
    nisa.dma_copy(dst=bufs[0], src=x)
    for step in range(num_ranks):
        holder = ncc.collective_permute_implicit_current_processing_rank_id(iteration_id=step,
                                                                            replica_group=replica_group)
        nisa.dma_copy(dst=out[holder * rows:(holder + 1) * rows, :], src=bufs[step % 2])
        if step + 1 < num_ranks:
            ncc.collective_permute_implicit(srcs_by_channel=[[bufs[step % 2]]], dsts_by_channel=[[bufs[(step + 1) % 2]]],
                                            replica_group=replica_group)
    return out


@pytest.mark.parametrize("n", SIZES)
def test_ring_all_gather_with_implicit_permutes(rng, n):
    xs = [rng.standard_normal((16, 8)).astype(F32) for _ in range(n)]
    order = list(range(n))[::-1]  # a ring in replica-group order, not rank order
    outs = nki.multi_rank_simulate(ring_all_gather, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([order]), num_ranks=n))
    for out in outs:
        np.testing.assert_array_equal(out, np.concatenate(xs, axis=0))


@nki.jit
def ring_reduce(x, replica_group, num_ranks):
    """A ring all-reduce by repeated permute-with-reduce: after n-1 steps every rank holds the sum
    over the ring, accumulated along the ring."""
    acc = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    mine = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nxt = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=mine, src=x)
    zeros = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=zeros, value=0.0)
    nisa.tensor_copy(dst=acc, src=zeros)
    for _ in range(num_ranks):
        ncc.collective_permute_implicit_reduce(srcs0_by_channel=[[acc]], srcs1_by_channel=[[mine]],
                                               dsts_by_channel=[[nxt]], replica_group=replica_group, op=nl.add)
        nisa.tensor_copy(dst=acc, src=nxt)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", SIZES)
def test_permute_implicit_reduce_around_the_ring(n):
    xs = [np.full((4, 8), 2.0 ** r, dtype=F32) for r in range(n)]
    outs = nki.multi_rank_simulate(ring_reduce, world_size=n,
                                   per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([list(range(n))]),
                                                           num_ranks=n))
    for out in outs:  # after n steps each rank holds the sum of all n contributions
        np.testing.assert_array_equal(out, np.full((4, 8), 2.0 ** n - 1, dtype=F32))


@nki.jit
def rank_slice(table):
    """rank_id() picks each rank's slice (nki-library's rank_id_kernel does the same with
    `.ap(scalar_offset=rank_id, indirect_dim=0)`)."""
    _, H, W = table.shape
    out = nl.ndarray((H, W), dtype=table.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=table[ncc.rank_id()])
    return out


def test_rank_id_selects_each_ranks_slice(rng):
    table = rng.standard_normal((4, 3, 5)).astype(F32)
    outs = nki.multi_rank_simulate(rank_slice, world_size=4, per_rank_inputs=[((table,), {})] * 4)
    for r, out in enumerate(outs):
        np.testing.assert_array_equal(out, table[r])


def test_lnc2_ranks_run_collectives_core_by_core(rng):
    xs = [rng.standard_normal((128, 64)).astype(F32) for _ in range(2)]
    with emulator.options(target="trn2"):
        outs = nki.multi_rank_simulate(all_reduce_kernel[2], world_size=2,
                                       per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([[0, 1]]), op=nl.add))
    for out in outs:
        np.testing.assert_array_equal(out, xs[0] + xs[1])


def test_trace_names_each_instructions_rank(rng):
    xs = [rng.standard_normal((8, 8)).astype(F32) for _ in range(2)]
    with emulator.trace() as tr:
        nki.multi_rank_simulate(all_reduce_kernel, world_size=2,
                                per_rank_inputs=_inputs(xs, replica_group=ReplicaGroup([[0, 1]]), op=nl.add))
    ranks = [i.meta["rank"] for i in tr.instructions]
    assert ranks == sorted(ranks) and set(ranks) == {0, 1}
    coll = [i for i in tr.instructions if i.meta.get("collective") == "all_reduce"]
    assert len(coll) == 2 and all(i.engine == "dma" and i.meta["ranks"] == 2 for i in coll)
    assert [launch["rank"] for launch in tr.meta["launches"]] == [0, 1]
    assert [i.seq for i in tr.instructions] == list(range(len(tr.instructions)))


# -- failures are reported, never hang ----------------------------------------------------------------
@nki.jit
def mismatched(x, replica_group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    if ncc.rank_id() == 0:
        ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=replica_group, op=nl.add)
    else:
        ncc.all_to_all(srcs=[src], dsts=[dst], replica_group=replica_group, collective_dim=0)
    return dst


def test_ranks_waiting_on_different_collectives_get_an_error():
    x = np.ones((4, 4), F32)
    with pytest.raises(emulator.NKIEmulatorError, match="do not match|without calling"):
        nki.multi_rank_simulate(mismatched, world_size=2, per_rank_inputs=_inputs([x, x],
                                                                                  replica_group=ReplicaGroup([[0, 1]])))


@nki.jit
def fails_on_rank_one(x, replica_group):
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    nisa.dma_copy(dst=src, src=x)
    if ncc.rank_id() == 1:
        nisa.dma_copy(dst=dst, src=x[0:8, :])  # shape mismatch: a real error on rank 1
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=replica_group, op=nl.add)
    return dst


def test_a_failing_rank_is_reported_with_its_rank():
    x = np.ones((4, 4), F32)
    with pytest.raises(emulator.NKIEmulatorError) as info:
        nki.multi_rank_simulate(fails_on_rank_one, world_size=2,
                                per_rank_inputs=_inputs([x, x], replica_group=ReplicaGroup([[0, 1]])))
    assert "(in rank 1 of 2)" in str(getattr(info.value, "__notes__", []))


def test_single_rank_launch_names_the_multi_rank_entry_point():
    x = np.ones((4, 4), F32)
    with pytest.raises(emulator.UnsupportedError, match="multi_rank_simulate"):
        all_reduce_kernel(x, ReplicaGroup([[0, 1]]), nl.add)


def test_static_arguments_must_agree_across_ranks():
    x = np.ones((4, 4), F32)
    with pytest.raises(emulator.KernelArgumentError, match="static and must be equal"):
        nki.multi_rank_simulate(all_gather_kernel, world_size=2,
                                per_rank_inputs=[((x,), {"replica_group": ReplicaGroup([[0, 1]]), "num_ranks": n})
                                                 for n in (2, 3)])
