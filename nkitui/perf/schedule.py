"""List-scheduling simulation of one NeuronCore running an instruction trace.

Model (nki-spec.md §2.5, §6.4, §6.5, §7):

* each compute engine (Tensor, Vector, Scalar, GpSimd) runs its instructions in program order;
  an instruction starts when its engine is free and its inputs are ready;
* dependencies come from overlapping `Access` boxes: read-after-write waits for the producer's
  result (its end plus a dependency latency), write-after-read and write-after-write wait for the
  earlier access to finish. Matmuls accumulating into the same PSUM tile follow each other
  without that latency (the accumulation is pipelined inside PSUM);
* an instruction that had to wait exposes its start-up cost: the ~100-cycle static overhead on
  Vector/Scalar/GpSimd, the foreground LoadStationary on TensorE;
* a DMA is triggered by its queue's sequencer (Sync unless the trace names a compute engine),
  starts no earlier than the fixed ~1.3 µs latency after the trigger, keeps the order of its
  queue, and needs bytes / (engines x per-engine bandwidth x efficiency) on the 16 DMA engines,
  bounded by the per-core HBM bandwidth. The engines serve all queues, so a transfer can use any
  idle gap (a store waiting for its data does not hold back later loads);
* PSUM has 8 banks: a new PSUM tile takes the least recently used bank(s) and waits until the
  tile that held them was last touched (bank rotation: TensorE stalls behind slow evictions);
* NC-v2 port sharing (Vector+GpSimd on SBUF, Vector+Scalar on PSUM) and the trn2/trn3 TensorE
  throttle after idle periods are modelled as documented.

Dependency lookup is indexed by storage id and drops accesses that a later write covers, so a
trace costs O(n x live accesses per storage), not O(n^2). Instruction costs are cached by their
signature (engine, opcode, shapes, dtypes, memories, meta), so repeated loop bodies cost one lookup.
"""

from __future__ import annotations

import gc
import math
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field

from nkitui.emulator.trace import ENGINES, Trace
from nkitui.perf.costs import MATMUL_OPCODES, TRANSPOSE_OPCODES, compute_cost, dma_plan, matmul_cost
from nkitui.perf.hardware import TargetSpec, itemsize

# A storage keeps at most this many live write/read records; beyond it the oldest half is merged
# into one bounding record (conservative: it can only add dependencies, never drop one).
_MAX_RECORDS = 64
# trn2/trn3 TensorE throttle [NX-SUM]: starts at 50% after idle and ramps to 100% over ~3 µs; it
# re-engages when utilisation over a ~3 µs window falls below 50%, i.e. after a gap > 1.5 µs (inferred).
_THROTTLE_RAMP_S = 3e-6
_THROTTLE_GAP_S = 1.5e-6
_ISSUERS = frozenset({"tensor", "vector", "scalar", "gpsimd"})
_ACTIVATE = frozenset({"activation", "activate", "activation_reduce", "activate2"})
_EPS = 1e-15


@dataclass
class DmaTotals:
    transfer_count: int = 0
    total_bytes: int = 0
    packet_time: float = 0.0  # sum over DMA engines of busy time
    transfer_time: float = 0.0  # sum over transfers of their duration
    queues: set[str] = field(default_factory=set)
    small_run_transfers: int = 0  # transfers with < 2 KiB contiguous per partition
    small_run_bytes: int = 0
    efficiency_weighted: float = 0.0  # sum(bytes x efficiency), for the mean efficiency


@dataclass
class Schedule:
    """Result of simulating a trace: per-instruction times, per-lane busy intervals, totals."""

    spec: TargetSpec
    start: list[float]  # seconds, per instruction in trace order
    end: list[float]
    total_time: float = 0.0
    intervals: dict[str, list[list[float]]] = field(default_factory=dict)  # lane -> merged busy intervals
    # (file, line, lane, opcode) -> [seconds, count, flops, hbm bytes]; lane is "tensor", "dma", ...
    by_line: dict[tuple[str, int, str, str], list] = field(default_factory=dict)
    lane_time: Counter = field(default_factory=Counter)  # base lane -> sum of instruction busy time
    lane_count: Counter = field(default_factory=Counter)
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    adjusted_hardware_flops: float = 0.0
    transpose_flops: float = 0.0
    adjusted_transpose_flops: float = 0.0
    matmul_count: int = 0
    matmul_dtype_flops: Counter = field(default_factory=Counter)
    activate_time: float = 0.0
    activate_count: int = 0
    hbm_read: int = 0
    hbm_write: int = 0
    mem_bytes: Counter = field(default_factory=Counter)  # sbuf/psum read/write bytes
    psum_to_sbuf_bytes: int = 0
    psum_to_sbuf_count: int = 0
    perf_modes: Counter = field(default_factory=Counter)
    dma: DmaTotals = field(default_factory=DmaTotals)
    throttled_time: float = 0.0
    psum_bank_stall: float = 0.0  # engine time lost only because no PSUM bank was free
    undocumented_opcodes: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    cores: int = 1
    sbuf_peak_bytes: int = 0  # peak live SBUF bytes per partition (storages live first..last use)


class _Storage:
    __slots__ = ("writes", "reads", "last_end", "first_idx", "last_idx", "memory", "extent")

    def __init__(self, memory: str, idx: int) -> None:
        self.writes: list[tuple] = []  # (p0, p1, b0, b1, ready, end, by_matmul)
        self.reads: list[tuple] = []  # (p0, p1, b0, b1, end)
        self.last_end = 0.0
        self.first_idx = idx
        self.last_idx = idx
        self.memory = memory
        self.extent = 0  # largest byte offset touched (per partition on chip)


class _Core:
    """Per-physical-core scheduling state."""

    __slots__ = ("pool", "dma_iv", "sync_iv", "queue_start", "psum")

    def __init__(self, psum_banks: int) -> None:
        self.pool = _Calendar()  # the 16 DMA engines
        self.dma_iv: list[tuple[float, float]] = []
        self.sync_iv: list[tuple[float, float]] = []
        self.queue_start: dict[str, float] = {}  # queue -> start of its last transfer
        self.psum = _PsumBanks(psum_banks)


def _merge_oldest(records: list[tuple], is_write: bool) -> list[tuple]:
    half = len(records) // 2
    old, keep = records[:half], records[half:]
    box = (min(r[0] for r in old), max(r[1] for r in old), min(r[2] for r in old), max(r[3] for r in old))
    if is_write:
        merged = (*box, max(r[4] for r in old), max(r[5] for r in old), False)
    else:
        merged = (*box, max(r[4] for r in old))
    return [merged, *keep]


class _Calendar:
    """Busy intervals of a shared resource that can start work in any idle gap (backfilling)."""

    __slots__ = ("bs", "be")

    def __init__(self) -> None:
        self.bs: list[float] = []
        self.be: list[float] = []

    def place(self, release: float, dur: float) -> float:
        """Earliest start >= release with `dur` idle time; books it and returns the start."""
        bs, be = self.bs, self.be
        n = len(be)
        if dur <= 0:
            return release
        if n == 0 or release >= be[-1]:
            if n and release <= be[-1] + _EPS:
                be[-1] = release + dur
            else:
                bs.append(release)
                be.append(release + dur)
            return release
        i = bisect_right(be, release)
        t = release
        while i < n and t + dur > bs[i] + _EPS:
            if be[i] > t:
                t = be[i]
            i += 1
        e = t + dur
        if i > 0 and be[i - 1] >= t - _EPS:  # touches the previous interval
            be[i - 1] = e
            if i < n and bs[i] <= e + _EPS:
                be[i - 1] = be[i]
                del bs[i], be[i]
        elif i < n and bs[i] <= e + _EPS:  # touches the next interval
            bs[i] = t
        else:
            bs.insert(i, t)
            be.insert(i, e)
        return t


class _PsumBanks:
    """Least-recently-used assignment of PSUM tiles to the 8 banks of one core."""

    __slots__ = ("occupant",)

    def __init__(self, banks: int) -> None:
        self.occupant: list[int | None] = [None] * banks

    def acquire(self, sid: int, need: int, storages: dict[int, _Storage]) -> float:
        """Banks for new tile `sid`; returns when their previous tiles were last touched."""
        order = []
        for b, occ in enumerate(self.occupant):
            st = storages.get(occ) if occ is not None else None
            order.append((st.last_idx if st else -2, st.last_end if st else 0.0, b))
        order.sort()
        ready = 0.0
        for _, t, b in order[:need]:
            self.occupant[b] = sid
            if t > ready:
                ready = t
        return ready


def _lane_name(engine: str, core: int) -> str:
    return engine if core == 0 else f"{engine}@{core}"


class _Plan:
    """Everything about an instruction that follows from its signature, computed once per signature."""

    __slots__ = ("kind", "engine", "opcode", "dur", "extra", "queue", "issuer", "issue", "occupancy",
                 "cost", "matmul", "transpose", "activate", "psum_to_sbuf", "ports", "flops", "hbm_read",
                 "hbm_write", "mem", "mm_dtype")

    KIND_COMPUTE, KIND_TENSOR, KIND_DMA = 0, 1, 2

    def __init__(self, ins, spec: TargetSpec) -> None:
        eng = ins.engine
        clock = spec.clock_hz
        self.engine = eng
        self.opcode = ins.opcode
        self.flops = float(ins.flops)
        self.hbm_read = int(ins.hbm_read)
        self.hbm_write = int(ins.hbm_write)
        self.matmul = self.transpose = self.activate = self.psum_to_sbuf = False
        self.ports: tuple[str, ...] = ()
        self.queue = self.issuer = ""
        self.mm_dtype = ins.in_dtypes[0] if ins.in_dtypes else "bfloat16"
        self.issue = self.occupancy = self.extra = 0.0
        nin = max(1, len(ins.in_mems))
        mem = [0, 0, 0, 0]  # sbuf read, psum read, sbuf write, psum write
        for m in ins.in_mems:
            if m == "sbuf":
                mem[0] += ins.bytes_read // nin
            elif m == "psum":
                mem[1] += ins.bytes_read // nin
        if ins.out_mem == "sbuf":
            mem[2] += ins.bytes_written
        elif ins.out_mem == "psum":
            mem[3] += ins.bytes_written
        self.mem = tuple(mem)
        if eng == "dma":
            self.kind = self.KIND_DMA
            plan = dma_plan(ins, spec)
            self.cost = plan
            dur = plan.seconds
            if plan.hbm_bytes and spec.hbm_core_bytes_per_s:
                dur = max(dur, plan.hbm_bytes / spec.hbm_core_bytes_per_s)  # per-core HBM limit
            self.dur = dur
            # the 16 engines as one fluid server: a transfer on k engines occupies k/16 of it
            self.occupancy = dur * plan.engines / spec.dma_engines
            meta = ins.meta
            self.queue = str(meta.get("queue") or _default_queue(ins))
            self.issuer = self.queue if self.queue in _ISSUERS else "sync"
            if meta.get("dge_mode") == "hwdge" and spec.hwdge_issue_s:
                self.issue = spec.hwdge_issue_s
            else:
                self.issue = spec.cycles.min_ii / clock[self.issuer]
        elif eng == "tensor" and (ins.opcode in MATMUL_OPCODES or ins.opcode in TRANSPOSE_OPCODES):
            self.kind = self.KIND_TENSOR
            mm = matmul_cost(ins, spec)
            self.cost = mm
            self.dur = mm.cycles / clock["tensor"]
            self.extra = mm.load_stationary / clock["tensor"]  # foreground LoadStationary if it waited
            self.transpose = mm.transpose
            self.matmul = not mm.transpose and ins.opcode in MATMUL_OPCODES
        else:
            self.kind = self.KIND_COMPUTE
            cc = compute_cost(ins, spec)
            self.cost = cc
            self.dur = cc.cycles / clock[eng]
            self.extra = spec.cycles.static_overhead / clock[eng]  # exposed if it waited
            self.activate = ins.opcode in _ACTIVATE
            self.psum_to_sbuf = "psum" in ins.in_mems and ins.out_mem == "sbuf"
            if spec.port_serialization:
                mems = set(ins.in_mems) | {ins.out_mem}
                ports = []
                if eng in ("vector", "gpsimd") and "sbuf" in mems:
                    ports.append("sbuf")
                if eng in ("vector", "scalar") and "psum" in mems:
                    ports.append("psum")
                self.ports = tuple(ports)


def simulate(trace: Trace, spec: TargetSpec) -> Schedule:
    """Schedule every instruction of `trace` on `spec`; see the module docstring for the model."""
    # The loop allocates many small objects but no reference cycles; pausing the cyclic collector
    # keeps it from re-walking the whole trace over and over (several times faster on big traces).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(trace, spec)
    finally:
        if was_enabled:
            gc.enable()


def _signature(ins) -> tuple:
    meta = ins.meta
    return (ins.engine, ins.opcode, ins.partitions, ins.free, ins.in_dtypes, ins.out_dtype, ins.in_mems,
            ins.out_mem, ins.bytes_read, ins.bytes_written, ins.hbm_read, ins.hbm_write, ins.flops,
            tuple(meta.items()) if meta else ())


def _plan_for(ins, key: tuple, plans: dict, spec: TargetSpec) -> "_Plan":
    if ins.engine not in ENGINES:
        raise ValueError(
            f"instruction {ins.seq} ({ins.opcode} at {ins.location}): unknown engine {ins.engine!r}; "
            f"expected one of {', '.join(ENGINES)}")
    plan = _Plan(ins, spec)
    try:
        plans[key] = plan
    except TypeError:  # unhashable meta value: no caching for this signature
        pass
    return plan


def _simulate(trace: Trace, spec: TargetSpec) -> Schedule:
    instrs = trace.instructions
    n = len(instrs)
    cyc = spec.cycles
    clock = spec.clock_hz
    sched = Schedule(spec=spec, start=[0.0] * n, end=[0.0] * n)
    notes = sched.notes
    starts, ends = sched.start, sched.end

    storages: dict[int, _Storage] = {}
    engine_free: dict[tuple[int, str], float] = {}
    port_free: dict[tuple[int, str], float] = {}
    core_state: dict[int, _Core] = {}
    tensor_state: dict[int, list[float]] = {}  # core -> [last_end, warm_since]
    lane_iv: dict[tuple[int, str], list[list[float]]] = {}  # (core, engine) -> busy intervals
    storage_info = trace.storages
    plans: dict[tuple, _Plan] = {}
    rows: dict[tuple, list] = {}  # (file, line, plan) -> [busy seconds, count]
    psum_count = spec.psum_banks

    dep_latency = {e: cyc.dependency_latency / clock[e] for e in clock}
    dep_latency["tensor"] = cyc.mm_init_latency / clock["tensor"]
    dma_latency = spec.dma_fixed_latency_s
    throttle = spec.tensor_throttle
    throttled = 0.0
    psum_stall = 0.0
    KIND_DMA, KIND_TENSOR = _Plan.KIND_DMA, _Plan.KIND_TENSOR
    cs = None
    cs_core = None

    for idx, ins in enumerate(instrs):
        key = _signature(ins)
        try:
            plan = plans.get(key)
        except TypeError:
            plan = None
        if plan is None:
            plan = _plan_for(ins, key, plans, spec)
        eng = plan.engine
        core = ins.core
        if core != cs_core:
            cs = core_state.get(core)
            if cs is None:
                cs = core_state[core] = _Core(psum_count)
            cs_core = core
        kind = plan.kind
        is_tensor = kind == KIND_TENSOR
        reads = ins.reads
        writes = ins.writes

        # ---- dependency-ready time (and the storage records, reused when registering) ----
        ready = 0.0
        psum_ready = 0.0
        read_st = []
        for a in reads:
            st = storages.get(a.storage)
            if st is None:
                st = storages[a.storage] = _Storage(a.memory, idx)
            else:
                wl = st.writes
                if wl:
                    ap0, ap1, ab0, ab1 = a.p0, a.p1, a.b0, a.b1
                    for w in wl:
                        if ap0 < w[1] and w[0] < ap1 and ab0 < w[3] and w[2] < ab1:
                            t = w[5] if (is_tensor and w[6]) else w[4]
                            if t > ready:
                                ready = t
            read_st.append(st)
        write_st = []
        for a in writes:
            st = storages.get(a.storage)
            if st is None:
                st = storages[a.storage] = _Storage(a.memory, idx)
                if a.memory == "psum":
                    t = _new_psum_tile(a, cs.psum, storages, storage_info, spec)
                    if t > psum_ready:
                        psum_ready = t
            else:
                ap0, ap1, ab0, ab1 = a.p0, a.p1, a.b0, a.b1
                for w in st.writes:
                    if ap0 < w[1] and w[0] < ap1 and ab0 < w[3] and w[2] < ab1 and w[5] > ready:
                        if not (is_tensor and w[6]):  # accumulation into PSUM keeps the order by itself
                            ready = w[5]
                for r in st.reads:
                    if ap0 < r[1] and r[0] < ap1 and ab0 < r[3] and r[2] < ab1 and r[4] > ready:
                        ready = r[4]
            write_st.append(st)

        # ---- timing ----
        if kind == KIND_DMA:
            if psum_ready > ready:
                ready = psum_ready
            issue = plan.issue
            if plan.issuer == "sync":
                # the Sync sequencer only triggers DMAs; the compiler spreads triggers over queues,
                # so a trigger waiting for its data does not hold back later ones (inferred)
                t0 = ready
                cs.sync_iv.append((t0, t0 + issue))
            else:
                ekey = (core, plan.issuer)
                t0 = engine_free.get(ekey, 0.0)
                if ready > t0:
                    t0 = ready
                engine_free[ekey] = t0 + issue
                _add_interval(lane_iv, ekey, t0, t0 + issue)
            queue = plan.queue
            release = t0 + issue + dma_latency
            qs = cs.queue_start.get(queue, 0.0)
            if qs > release:
                release = qs
            start = cs.pool.place(release, plan.occupancy)
            busy = plan.dur
            end = start + busy
            cs.queue_start[queue] = start
            cs.dma_iv.append((start, end))
            result_ready = end
        else:
            ekey = (core, eng)
            free = engine_free.get(ekey, 0.0)
            dep = ready if ready > psum_ready else psum_ready
            busy = plan.dur
            if dep > free:
                start = dep
                busy += plan.extra  # start-up cost exposed after a wait
                if psum_ready > ready:
                    psum_stall += psum_ready - (ready if ready > free else free)
            else:
                start = free
            if plan.ports:
                for port in plan.ports:
                    pf = port_free.get((core, port), 0.0)
                    if pf > start:
                        start = pf
            if is_tensor and throttle:
                tstate = tensor_state.get(core)
                if tstate is None:
                    tstate = tensor_state[core] = [0.0, 0.0]
                if start - tstate[0] > _THROTTLE_GAP_S:
                    tstate[1] = start
                elapsed = start - tstate[1]
                if elapsed < _THROTTLE_RAMP_S:
                    slow = busy / (0.5 + 0.5 * elapsed / _THROTTLE_RAMP_S) - busy
                    throttled += slow
                    busy += slow
            end = start + busy
            if plan.ports:
                for port in plan.ports:
                    port_free[(core, port)] = end
            engine_free[ekey] = end
            if is_tensor and throttle:
                tensor_state[core][0] = end
            result_ready = end + dep_latency[eng]
            ivs = lane_iv.get(ekey)
            if ivs is None:
                lane_iv[ekey] = [[start, end]]
            else:
                last = ivs[-1]
                if start <= last[1] + _EPS:
                    if end > last[1]:
                        last[1] = end
                else:
                    ivs.append([start, end])

        starts[idx] = start
        ends[idx] = end
        rkey = (ins.file, ins.line, plan)
        row = rows.get(rkey)
        if row is None:
            rows[rkey] = [busy, 1]
        else:
            row[0] += busy
            row[1] += 1

        # ---- register the accesses ----
        for a, st in zip(reads, read_st):
            rl = st.reads
            rl.append((a.p0, a.p1, a.b0, a.b1, end))
            if len(rl) > _MAX_RECORDS:
                st.reads = _merge_oldest(rl, False)
            if end > st.last_end:
                st.last_end = end
            st.last_idx = idx
            if a.b1 > st.extent:
                st.extent = a.b1
        by_matmul = plan.matmul
        for a, st in zip(writes, write_st):
            ap0, ap1, ab0, ab1 = a.p0, a.p1, a.b0, a.b1
            wl = st.writes
            if wl:
                if len(wl) == 1:
                    w = wl[0]
                    if ap0 <= w[0] and w[1] <= ap1 and ab0 <= w[2] and w[3] <= ab1:
                        wl.clear()
                else:
                    st.writes = wl = [w for w in wl
                                      if not (ap0 <= w[0] and w[1] <= ap1 and ab0 <= w[2] and w[3] <= ab1)]
            rl = st.reads
            if rl:
                if len(rl) == 1:
                    r = rl[0]
                    if ap0 <= r[0] and r[1] <= ap1 and ab0 <= r[2] and r[3] <= ab1:
                        rl.clear()
                else:
                    st.reads = [r for r in rl
                                if not (ap0 <= r[0] and r[1] <= ap1 and ab0 <= r[2] and r[3] <= ab1)]
            wl.append((ap0, ap1, ab0, ab1, result_ready, end, by_matmul))
            if len(wl) > _MAX_RECORDS:
                st.writes = _merge_oldest(wl, True)
            if end > st.last_end:
                st.last_end = end
            st.last_idx = idx
            if ab1 > st.extent:
                st.extent = ab1

    # ---- totals from (line, plan) rows ----
    _totals(sched, rows)
    sched.throttled_time = throttled
    sched.psum_bank_stall = psum_stall
    intervals: dict[str, list[list[float]]] = {}
    for (core, eng), ivs in lane_iv.items():
        intervals[_lane_name(eng, core)] = ivs
    for core, st in core_state.items():
        if st.dma_iv:
            intervals[_lane_name("dma", core)] = _union(st.dma_iv)
        if st.sync_iv:
            name = _lane_name("sync", core)
            intervals[name] = _union(st.sync_iv + [tuple(x) for x in intervals.get(name, [])])
    sched.intervals = intervals
    sched.total_time = max(ends, default=0.0)
    sched.cores = max(1, len(core_state))
    sched.sbuf_peak_bytes = _sbuf_pressure(instrs, storages, storage_info, spec, notes)
    if sched.undocumented_opcodes:
        listed = ", ".join(sorted(sched.undocumented_opcodes))
        notes.append(f"no published cost formula for {listed}: used the VectorE rule "
                     "(N cycles per tensor input, at least MIN_II)")
    return sched


def _totals(sched: Schedule, rows: dict[tuple, list]) -> None:
    """Fold (file, line, plan) -> [busy, count] rows into the schedule's counters."""
    dt = sched.dma
    mem = [0, 0, 0, 0]
    for (f, ln, plan), (busy, count) in rows.items():
        lane = plan.engine
        sched.by_line[(f, ln, lane, plan.opcode)] = _add_row(
            sched.by_line.get((f, ln, lane, plan.opcode)), busy, count, plan.flops * count,
            (plan.hbm_read + plan.hbm_write) * count)
        sched.lane_time[lane] += busy
        sched.lane_count[lane] += count
        sched.hbm_read += plan.hbm_read * count
        sched.hbm_write += plan.hbm_write * count
        for i in range(4):
            mem[i] += plan.mem[i] * count
        cost = plan.cost
        if plan.kind == _Plan.KIND_DMA:
            dt.transfer_count += count
            dt.total_bytes += cost.nbytes * count
            dt.packet_time += cost.engines * plan.dur * count
            dt.transfer_time += busy
            dt.queues.add(plan.queue)
            dt.efficiency_weighted += cost.nbytes * cost.efficiency * count
            if cost.run_bytes < 2048:
                dt.small_run_transfers += count
                dt.small_run_bytes += cost.nbytes * count
        elif plan.kind == _Plan.KIND_TENSOR:
            if plan.transpose:
                sched.transpose_flops += cost.hardware_flops * count
                sched.adjusted_transpose_flops += cost.adjusted_flops * count
            elif plan.matmul:
                sched.matmul_count += count
                sched.model_flops += plan.flops * count
                sched.matmul_dtype_flops[plan.mm_dtype] += plan.flops * count
            sched.hardware_flops += cost.hardware_flops * count
            sched.adjusted_hardware_flops += cost.adjusted_flops * count
        else:
            if cost.perf_mode:
                sched.perf_modes[cost.perf_mode] += count
            if not cost.documented:
                sched.undocumented_opcodes[f"{plan.engine}:{plan.opcode}"] += count
            if plan.activate:
                sched.activate_count += count
                sched.activate_time += busy
            if plan.psum_to_sbuf:
                sched.psum_to_sbuf_count += count
                sched.psum_to_sbuf_bytes += plan.mem[2] * count
    sched.mem_bytes.update({"sbuf_read_bytes": mem[0], "psum_read_bytes": mem[1],
                            "sbuf_write_bytes": mem[2], "psum_write_bytes": mem[3]})


def _add_row(row: list | None, busy: float, count: int, flops: float, hbm: int) -> list:
    if row is None:
        return [busy, count, flops, hbm]
    row[0] += busy
    row[1] += count
    row[2] += flops
    row[3] += hbm
    return row


def _new_psum_tile(a, banks: "_PsumBanks", storages: dict, storage_info: dict, spec: TargetSpec) -> float:
    """First write to a PSUM tile: take bank(s) and return when their previous tiles are done."""
    footprint = a.b1
    info = storage_info.get(a.storage)
    if info is not None and len(info.shape) >= 2:
        try:
            footprint = max(footprint, math.prod(info.shape[1:]) * itemsize(info.dtype))
        except ValueError:
            pass
    need = max(1, min(spec.psum_banks, math.ceil(footprint / spec.psum_bank_bytes)))
    return banks.acquire(a.storage, need, storages)


def _default_queue(ins) -> str:
    if ins.out_mem == "hbm" and any(m in ("sbuf", "psum") for m in ins.in_mems):
        return "out"
    if ins.out_mem in ("sbuf", "psum") and "hbm" in ins.in_mems:
        return "in"
    return "copy"


def _add_interval(lanes: dict, lane: tuple[int, str], start: float, end: float) -> None:
    ivs = lanes.get(lane)
    if ivs is None:
        lanes[lane] = [[start, end]]
    elif start <= ivs[-1][1] + _EPS:
        if end > ivs[-1][1]:
            ivs[-1][1] = end
    else:
        ivs.append([start, end])


def _union(ivs: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1] + _EPS:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def _sbuf_pressure(instrs, storages: dict[int, "_Storage"], storage_info: dict, spec: TargetSpec,
                   notes: list[str]) -> int:
    """Peak live SBUF bytes per partition; warns when above the usable size (the compiler would spill)."""
    events: list[tuple[int, int]] = []
    for sid, st in storages.items():
        if st.memory != "sbuf":
            continue
        size = st.extent
        info = storage_info.get(sid)
        if info is not None and len(info.shape) >= 2:
            try:
                size = max(size, math.prod(info.shape[1:]) * itemsize(info.dtype))
            except ValueError:
                pass
        events.append((st.first_idx, size))
        events.append((st.last_idx + 1, -size))
    if not events:
        return 0
    events.sort()
    live = peak = 0
    peak_at = 0
    for at, delta in events:
        live += delta
        if live > peak:
            peak, peak_at = live, at
    if peak > spec.sbuf_usable_bytes_per_partition:
        where = instrs[min(peak_at, len(instrs) - 1)].location
        notes.append(
            f"live SBUF data peaks at {peak / 1024:.1f} KiB per partition near {where}, above the "
            f"{spec.sbuf_usable_bytes_per_partition / 1024:.1f} KiB usable on {spec.name}: the compiler "
            "would spill to HBM (spill traffic is not in the estimate)")
    return peak
