"""Emulator state lives in context variables: kernels running at the same time in two threads (or
two asyncio tasks) keep their own launch, trace and options."""

from __future__ import annotations

import asyncio
import threading

import ml_dtypes
import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.emulator import runtime

BF16 = ml_dtypes.bfloat16


def _legacy_kernel(meet):
    @nki.jit
    def legacy_exp(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        meet()  # both kernels are running here, each with its own current run
        nl.store(out, value=nl.exp(t))
        return out

    return legacy_exp


def _new_kernel(meet):
    import nki as nki_new
    import nki.isa as nisa_new
    import nki.language as nl_new

    @nki_new.jit
    def new_add(a, b):
        out = nl_new.ndarray(a.shape, dtype=a.dtype, buffer=nl_new.shared_hbm)
        x = nl_new.ndarray(a.shape, dtype=a.dtype, buffer=nl_new.sbuf)
        y = nl_new.ndarray(a.shape, dtype=a.dtype, buffer=nl_new.sbuf)
        nisa_new.dma_copy(dst=x, src=a)
        nisa_new.dma_copy(dst=y, src=b)
        meet()
        nisa_new.tensor_tensor(dst=x, data1=x, data2=y, op=nl_new.add)
        nisa_new.tensor_tensor(dst=x, data1=x, data2=y, op=nl_new.add)
        nisa_new.dma_copy(dst=out, src=x)
        return out

    return new_add


def test_two_kernels_in_two_threads_keep_their_own_trace_options_and_run():
    barrier = threading.Barrier(2, timeout=30)
    runs: dict[str, object] = {}
    results: dict[str, tuple] = {}
    errors: list[BaseException] = []

    def meet(who: str):
        def wait() -> None:
            runs[who] = runtime.current()
            barrier.wait()  # the other thread's kernel is inside its launch too
            assert runtime.current() is runs[who]
        return wait

    legacy = _legacy_kernel(meet("legacy"))
    new = _new_kernel(meet("new"))
    a = np.linspace(-1, 1, 128 * 64, dtype=np.float32).reshape(128, 64).astype(BF16)

    def legacy_thread() -> None:
        try:
            with emulator.options(target="trn1", precise=False), emulator.trace() as tr:
                barrier.wait()  # both trace blocks and both option layers are open from here on
                out = legacy(a)
                results["legacy"] = (tr, out, emulator.current_options())
        except BaseException as e:  # noqa: BLE001 (reported by the main thread)
            errors.append(e)
            barrier.abort()

    def new_thread() -> None:
        try:
            with emulator.options(target="trn3"), emulator.trace() as tr:
                barrier.wait()
                out = new(a, a)
                results["new"] = (tr, out, emulator.current_options())
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=legacy_thread), threading.Thread(target=new_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert runs["legacy"] is not runs["new"]

    tr_legacy, out_legacy, opts_legacy = results["legacy"]
    tr_new, out_new, opts_new = results["new"]
    assert (opts_legacy.target, opts_legacy.precise) == ("trn1", False)
    assert (opts_new.target, opts_new.precise) == ("trn3", True)
    # each trace holds its own kernel's instructions only, under its own options
    assert [i.opcode for i in tr_legacy.instructions] == ["dma_copy", "activation", "dma_copy"]
    assert [i.opcode for i in tr_new.instructions] == ["dma_copy", "dma_copy", "tensor_tensor", "tensor_tensor",
                                                       "dma_copy"]
    assert [launch["kernel"] for launch in tr_legacy.meta["launches"]] == ["legacy_exp"]
    assert [launch["kernel"] for launch in tr_new.meta["launches"]] == ["new_add"]
    assert (tr_legacy.meta["launches"][0]["target"], tr_legacy.meta["launches"][0]["precise"]) == ("trn1", False)
    assert (tr_new.meta["launches"][0]["target"], tr_new.meta["launches"][0]["precise"]) == ("trn3", True)
    # precise=False keeps floats in fp32 in the legacy thread only
    assert out_legacy.dtype == np.float32
    assert out_new.dtype == BF16
    np.testing.assert_allclose(out_new.astype(np.float32), (a.astype(np.float32) * 3).astype(BF16).astype(np.float32))
    # nothing leaked into this thread
    assert runtime.current_or_none() is None
    assert runtime.active_trace() is None
    assert emulator.current_options() == emulator.configure()


def test_asyncio_tasks_keep_their_own_options_and_trace():
    exp = _legacy_kernel(lambda: None)
    a = np.ones((128, 8), np.float32)

    async def audit(target: str, entered: asyncio.Event, other_entered: asyncio.Event):
        with emulator.options(target=target), emulator.trace() as tr:
            entered.set()
            await other_entered.wait()  # the other task has opened its own options and trace
            assert emulator.current_options().target == target
            exp(a)
            await asyncio.sleep(0)
        return tr

    async def main():
        e1, e2 = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(audit("trn1", e1, e2), audit("trn3", e2, e1))

    tr1, tr3 = asyncio.run(main())
    assert tr1.target == "trn1" and tr3.target == "trn3"
    assert len(tr1.instructions) == 3 and len(tr3.instructions) == 3
    assert tr1.meta["launches"][0]["target"] == "trn1"
    assert tr3.meta["launches"][0]["target"] == "trn3"


def test_configure_is_the_process_default_seen_by_other_threads():
    seen = []
    before = emulator.current_options()
    try:
        emulator.configure(seed=7)
        t = threading.Thread(target=lambda: seen.append(emulator.current_options().seed))
        t.start()
        t.join()
        with emulator.options(seed=3):
            t = threading.Thread(target=lambda: seen.append(emulator.current_options().seed))
            t.start()
            t.join()
            assert emulator.current_options().seed == 3
    finally:
        emulator.configure(seed=before.seed)
    assert seen == [7, 7]  # a thread sees the process default, not another thread's options() block
