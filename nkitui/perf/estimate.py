"""`estimate(trace)`: the cost model's public entry, from an instruction trace to a `PerfRecord`."""

from __future__ import annotations

from itertools import starmap
from operator import sub

from nkitui.emulator.trace import Trace
from nkitui.perf.hardware import TargetSpec, get_target
from nkitui.perf.hotspots import hot_lines
from nkitui.perf.roofline import Work, roofline_point, speed_of_light_for
from nkitui.common.gcpause import collector_paused
from nkitui.perf.schedule import Schedule, simulate
from nkitui.perf.summary import LANES, SUMMARY_ENGINES, EngineStats, PerfRecord, coarsen, union_length_sorted
from nkitui.perf.uncertainty import CALIBRATED

MODEL_NAME = "nkitui cost model"
MODEL_VERSION = 2
TIMELINE_RESOLUTION = 4000  # merge gaps shorter than total_time / this, per lane


def estimate(trace: Trace, target: str | TargetSpec | None = None, *, work: Work | None = None,
             hotspots: int | None = 20) -> PerfRecord:
    """Estimate how `trace` runs on `target` (default: the trace's own target).

    `work`, the task's minimal work (see `roofline.minimal_work`), adds the speed of light and the
    achieved percentage of it. The result is labelled `source="estimated"`.
    """
    spec = get_target(target if target is not None else (trace.target or "trn2"))
    with collector_paused():  # the record is built from the schedule's many temporaries too
        sched = simulate(trace, spec)
        record = record_from_schedule(trace, sched, work=work, hotspots=hotspots)
        del sched  # freed while the collector is still paused
    return record


def record_from_schedule(trace: Trace, sched: Schedule, *, work: Work | None = None,
                         hotspots: int | None = 20) -> PerfRecord:
    spec = sched.spec
    core_time = sched.total_time
    overhead = spec.launch_overhead_s if core_time > 0 else 0.0
    total = core_time + overhead  # the profiler's total_time: the kernel plus its launch's fixed costs
    cores = sched.cores

    def lane_length(intervals: dict[str, list[list[float]]], lane: str) -> float:
        # lane intervals are sorted and disjoint already
        length: float = sum(-sum(starmap(sub, ivs)) for name, ivs in intervals.items() if name.split("@", 1)[0] == lane) / cores
        return length

    engines: dict[str, EngineStats] = {}
    for lane in LANES:
        active = lane_length(sched.intervals, lane)
        if lane == "dma":
            executing = lane_length(sched.exec_intervals, lane)
        elif lane == "sync":
            executing = active
        else:
            executing = sched.lane_exec_time[lane] / cores
        if lane == "sync":  # DMA triggers on Sync are its instructions
            itime, icount = active, sched.lane_count["sync"] + sched.dma.transfer_count
        else:
            itime, icount = sched.lane_time[lane] / cores, sched.lane_count[lane]
        engines[lane] = EngineStats(active, _pct(active, core_time), itime, icount, executing,
                                    _pct(executing, core_time))

    peak = spec.tensor_peak_flops
    hbm_total = sched.hbm_read + sched.hbm_write
    total_active = union_length_sorted(list(sched.intervals.values()))
    inputs_bytes = sched.input_bytes
    mm_flops = sched.hardware_flops - sched.transpose_flops
    s: dict[str, float | int] = {
        "total_time": total,
        "neuroncore_cycle_count": int(round(total * spec.base_clock_hz)),
        "model_flops": int(sched.model_flops),
        "hardware_flops": int(sched.hardware_flops),
        "transpose_flops": int(sched.transpose_flops),
        "adjusted_hardware_flops": int(sched.adjusted_hardware_flops),
        "adjusted_transpose_flops": int(sched.adjusted_transpose_flops),
        "mm_arithmetic_intensity": mm_flops / hbm_total if hbm_total else 0.0,
        "peak_flops_bandwidth_ratio": peak / spec.hbm_stack_bytes_per_s,
        "mfu_estimated_percent": _pct(sched.model_flops, peak * total),
        "mfu_max_achievable_estimated_percent":
            _pct(sched.model_flops / hbm_total, peak / spec.hbm_stack_bytes_per_s) if hbm_total else 0.0,
        "hfu_estimated_percent": _pct(sched.hardware_flops, peak * total),
        "mbu_estimated_percent": _pct(hbm_total, total * spec.hbm_stack_bytes_per_s),
        "mbu_min_read_util_percent": _pct(inputs_bytes, total * spec.hbm_stack_bytes_per_s),
    }
    for e in SUMMARY_ENGINES:
        st = engines[e]
        s[f"{e}_engine_instruction_time"] = st.instruction_time
        s[f"{e}_engine_active_time"] = st.active_time
        s[f"{e}_engine_active_time_percent"] = st.active_time_percent
        s[f"{e}_engine_instruction_count"] = st.instruction_count
    d = sched.dma
    mb = sched.mem_bytes
    s.update({
        "matmul_instruction_count": sched.matmul_count,
        "activate_instruction_time": sched.activate_time,
        "activate_instruction_count": sched.activate_count,
        "dma_active_time": engines["dma"].active_time,
        "dma_active_time_percent": engines["dma"].active_time_percent,
        "dma_active_cycles": int(round(engines["dma"].active_time * spec.base_clock_hz)),
        "dma_transfer_count": d.transfer_count,
        "dma_transfer_total_bytes": d.total_bytes,
        "dma_transfer_average_bytes": d.total_bytes / d.transfer_count if d.transfer_count else 0.0,
        "dma_packet_time": d.packet_time,
        "dma_transfer_time": d.transfer_time,
        "dma_queue_count": len(d.queues),
        "hbm_read_bytes": int(sched.hbm_read),
        "hbm_write_bytes": int(sched.hbm_write),
        "sbuf_read_bytes": int(mb["sbuf_read_bytes"]),
        "sbuf_write_bytes": int(mb["sbuf_write_bytes"]),
        "psum_read_bytes": int(mb["psum_read_bytes"]),
        "psum_write_bytes": int(mb["psum_write_bytes"]),
        "psum_read_sbuf_write_bytes": int(sched.psum_to_sbuf_bytes),
        "psum_read_sbuf_write_count": sched.psum_to_sbuf_count,
        "spill_save_bytes": int(d.spill_save_bytes),
        "spill_reload_bytes": int(d.spill_reload_bytes),
        "inputs_and_weights_size_bytes": int(inputs_bytes),
        "total_active_time": total_active,
        "total_active_time_percent": _pct(total_active, core_time),
    })

    # the dtype with the most matmul FLOPs (the first seen on a tie, as Counter.most_common(1) picks it)
    dtype_flops = sched.matmul_dtype_flops
    mm_dtype = max(dtype_flops.items(), key=lambda kv: kv[1])[0] if dtype_flops else "bfloat16"
    roof = roofline_point(sched.model_flops, hbm_total, total, mm_dtype, spec)
    sol = speed_of_light_for(work, spec).against(total) if work is not None else None

    res = core_time / TIMELINE_RESOLUTION
    timeline = {lane: coarsen(ivs, res) for lane, ivs in sorted(sched.intervals.items())}
    notes = list(sched.notes)
    notes.append("estimated by the nkitui cost model from the emulator's instruction trace; "
                 "not a hardware measurement")
    if cores > 1:
        notes.append(f"the trace uses {cores} physical cores: engine times are averages per core")
    if overhead:
        notes.append(f"total time includes a fixed launch overhead of {overhead * 1e6:.0f} us (NEFF start-up and "
                     "tear-down, fitted); engine percentages are of the kernel's core time")
    extras = {
        "model": f"{MODEL_NAME} v{MODEL_VERSION}",
        "instructions": len(trace),
        "matmul_dtype": mm_dtype,
        "mean_dma_efficiency": d.efficiency_weighted / d.total_bytes if d.total_bytes else None,
        "small_run_dma_transfers": d.small_run_transfers,
        "small_run_dma_bytes": d.small_run_bytes,
        "tensor_throttled_time": sched.throttled_time,
        "psum_bank_stall_time": sched.psum_bank_stall,
        "folded_psum_zeroing": sched.folded_psum_zeroing,
        "sbuf_peak_bytes_per_partition": sched.sbuf_peak_bytes,
        "sbuf_demand_bytes_per_partition": sched.sbuf_demand_bytes,
        "sbuf_allocation_stall_time": sched.sbuf_alloc_stall,
        "spill_transfers": d.spill_transfers,
        "core_time": core_time,
        "performance_modes": dict(sched.perf_modes),
        "cores": cores,
    }
    return PerfRecord(
        source="estimated",
        target=spec.name,
        kernel=trace.kernel,
        total_time=total,
        summary=s,
        engines=engines,
        timeline=timeline,
        hotspots=hot_lines(sched.by_line, hotspots),
        roofline=roof,
        speed_of_light=sol,
        notes=notes,
        tool=f"{MODEL_NAME} v{MODEL_VERSION}",
        extras=extras,
        core_time=core_time,
        launch_overhead=overhead,
        uncertainty=CALIBRATED.to_json(),
    )


def _pct(num: float, den: float) -> float:
    return 100.0 * num / den if den > 0 else 0.0


def estimate_latency(trace: Trace) -> float | None:
    """Estimated device time (s) of `trace`, for the emulator's `nki.benchmark` / `set_latency_estimator`
    hook (`NKITUI_LATENCY_ESTIMATOR=nkitui.perf`); None for an empty trace."""
    if not trace.instructions:
        return None
    spec = get_target(trace.target or "trn2")
    return simulate(trace, spec).total_time + spec.launch_overhead_s
