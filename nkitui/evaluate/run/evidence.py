"""The starter's own check of a run result: a status is believed only with the evidence behind it.

The evaluator is nkitui's code and never runs task code; still, the starter derives the status from
the checks again and asks, for a pass, for every piece of evidence the run must have produced:

  phases     load, reference, compile, run and compare ended "ok"; profile ended (ok or skipped)
  seeds      the requested seeds, each with a result that passed and no error
  outputs    every declared output on every seed, with the declared shape and element count
  checks     integrity, kernel-runs, output:<name> and tolerance:<name> for every output, sandbox, and
             device-outputs and replay (emulator: stage 1 on every seed and stage 2 on a fresh input set),
             trials and precision when they were asked for; all passed

    problems = missing_evidence(result, task, options)   # [] when a pass is supported

Anything missing turns the pass into `internal-error`, naming what was missing — never a pass.
"""

from __future__ import annotations

import math
from typing import Any

from nkitui.evaluate.options import EvaluationOptions
from nkitui.evaluate.run.result import RunError, RunResult

REQUIRED_OK_PHASES = ("load", "reference", "compile", "run", "compare")
# what the `replay` check's detail ends with once stage 2 (the first seed's log on a fresh input set) passed
REPLAY_FRESH_PASSED = "and on a fresh input set the kernel's process never saw, within tolerance"


def missing_evidence(result: RunResult, task: Any, options: EvaluationOptions) -> list[str]:
    """What a passed result lacks (empty when its evidence is complete)."""
    problems: list[str] = []
    phases = {p.name: p.status for p in result.phases}
    for name in REQUIRED_OK_PHASES:
        if phases.get(name) != "ok":
            problems.append(f"phase {name} " + (f"ended {phases[name]!r}" if name in phases else "is missing"))
    if phases.get("profile") not in ("ok", "skipped"):
        problems.append("phase profile " + ("is missing" if "profile" not in phases else f"ended {phases['profile']!r}"))
    if result.backend not in ("emulator", "simulator", "neuron"):
        problems.append(f"no backend ran the kernel (backend {result.backend!r})")
    seeds = options.resolve_seeds(task.seeds)
    if list(result.seeds) != seeds:
        problems.append(f"the result is for seeds {list(result.seeds)}, the run asked for {seeds}")
    by_seed = {s.seed: s for s in result.seed_results}
    for seed in seeds:
        sr = by_seed.get(seed)
        if sr is None:
            problems.append(f"seed {seed} has no result")
            continue
        if sr.passed is not True or sr.error is not None:
            problems.append(f"seed {seed} did not pass")
        for spec in task.outputs:
            got = [o for o in sr.outputs if o.name == spec.name]
            if len(got) != 1:
                problems.append(f"seed {seed} has {len(got)} metric records for output `{spec.name}` (expected 1)")
                continue
            o = got[0]
            if list(o.shape) != list(spec.shape):
                problems.append(f"seed {seed}: output `{spec.name}` was compared at shape {list(o.shape)}, declared {list(spec.shape)}")
            if o.count != math.prod(spec.shape):
                problems.append(f"seed {seed}: output `{spec.name}` covers {o.count} elements, declared {math.prod(spec.shape)}")
            if o.passed is not True:
                problems.append(f"seed {seed}: output `{spec.name}` did not pass")
    checks = {c.id: c for c in result.checks}
    required = ["integrity", "kernel-runs", *(f"output:{s.name}" for s in task.outputs),
                *(f"tolerance:{s.name}" for s in task.outputs), "sandbox"]
    if result.backend == "emulator":
        required.append("device-outputs")
        if options.precision:
            required.append("precision")
    if options.trials:
        required.append("trials")
    if result.backend == "emulator":  # both stages of the replay, passed: a kernel not replayed is not proven
        required.append("replay")
        replay = checks.get("replay")
        if replay is not None and replay.passed is True and REPLAY_FRESH_PASSED not in replay.detail:
            problems.append("check replay passed without its stage 2 (the log replayed on a fresh input set)")
    for cid in required:
        if cid not in checks:
            problems.append(f"check {cid} is missing")
        elif checks[cid].passed is not True:
            problems.append(f"check {cid} did not pass")
    failed = [c.id for c in result.checks if c.passed is False]
    if failed:
        problems.append(f"failed checks: {', '.join(failed)}")
    return problems


def settle_status(result: RunResult, task: Any, options: EvaluationOptions) -> None:
    """Make `result.status` what its checks and evidence support (in place)."""
    if result.status != "passed":
        return
    problems = missing_evidence(result, task, options)
    if not problems:
        return
    shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
    result.status = "internal-error"
    result.error = RunError("internal", f"the run reported a pass without its evidence: {shown}")
    result.notes.append("the starter did not accept the evaluator's pass: " + shown)
