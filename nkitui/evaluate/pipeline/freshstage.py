"""Stage 2 of the replay, and the `replay` check it completes: the first seed's instruction log, replayed by
the evaluator on an input set the kernel's process never saw (a seed drawn here at random, after that process
started), must still meet the task's tolerance there.

Stage 1 (the session's run phase) replays each seed's log on its own inputs and requires the reported outputs
bit for bit (`replay_check` words that check). A log that carries values computed on the host from the seed's
inputs (constants, immediates) passes stage 1 and fails here: HACK-REPLAY-FRESH. A task whose policy draws
inputs the same for every seed (arange, constants) has them varied first (`_variant`, `_fixed_variant`), and a
mismatch on a variant is "not proven", never a finding (the variant may break a promise of the task's inputs).

The session drives it in four calls, one per phase:

    stage = FreshStage(task, seeds, outputs, verdicts, precise)
    stage.ask_reference(reference, inputs, references)   # reference phase, before the reference ends
    stage.submit(replayer, pending, target)               # run phase, behind the first seed's replay
    stage.replay_check(replays)                           # run phase: the `replay` check (stage 1)
    log = stage.judge(advice)                             # compare phase: stage 2's verdict on that check

What it decides lands in `Verdicts`: the session's own checks, findings and notes, and its log.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from nkitui.evaluate.run.result import Check

if TYPE_CHECKING:
    from nkitui.common.findings import Finding


@dataclass
class Verdicts:
    """Where the replay's stages record what they decide: the session's lists (shared, not copied) and its log."""

    checks: list[Check]
    findings: list[Finding]
    notes: list[str]
    log: Callable[..., None]  # WorkerContext.log(message, level=...)

    def amend(self, cid: str, passed: Any, detail: str) -> None:
        """Replace the check `cid`'s verdict and detail (a check is decided again once later evidence is in)."""
        for i, c in enumerate(self.checks):
            if c.id == cid:
                self.checks[i] = replace(c, passed=passed, detail=detail[:700])


class FreshStage:
    """Stage 2 of the replay for one evaluation (see the module docstring)."""

    def __init__(self, task: Any, seeds: list[int], outputs: dict[int, Any], verdicts: Verdicts, precise: bool) -> None:
        self.task = task
        self.seeds = seeds
        self.seed_outputs = outputs  # the session's seeds' outputs (natural layout), filled as they run
        self.verdicts = verdicts
        self.precise = precise
        self.first_reference: dict[str, Any] | None = None  # the reference's answer on the first seed
        self.replay_outcomes: list[tuple[int, Any]] = []  # stage 1: (seed, ReplayOutcome)
        self.fresh: tuple[int, Any, Any] | None = None  # (seed, inputs, reference outputs)
        self.fresh_skip: str | None = None  # why stage 2 does not run
        self.fresh_replay: Any = None  # Future of the replayed outputs on the fresh inputs (natural layout)
        self.fresh_variant: str | None = None  # how the task's deterministic inputs were varied for stage 2
        # the second set on a task with random and fixed inputs: (inputs, reference outputs, how it was made)
        self.fresh_extra: tuple[Any, Any, str] | None = None
        self.fresh_extra_skip: str | None = None  # why that set has no reference answer (judged "not proven")
        self.fresh_extra_replay: Any = None  # Future of the replayed outputs on it
        self.fresh_first_seed: int | None = None  # the seed whose log stage 2 replays

    def replay_check(self, replays: list[tuple[int, Any]]) -> None:
        """The `replay` check: each seed's instruction log replayed here gives the reported outputs bit for bit
        (nkitui.emulator.replay). A mismatch or a log that does not replay fails it (HACK-REPLAY-MISMATCH,
        HACK-REPLAY-INVALID). A log its own process declares unreplayable fails it too (HACK-REPLAY-OPTOUT):
        every instruction kind the emulator has is replayable, the declaration is the kernel process's word
        (raw memory can write it), and a kernel nkitui cannot replay is not proven correct. A seed whose outputs
        were used must have replayed exactly; stage 2 (judge) then decides whether the check passes."""
        failed = [(s, o) for s, o in replays if o.failed]
        exact = [s for s, o in replays if o.status == "exact"]
        optout = [(s, o) for s, o in replays if o.status == "unavailable"]
        self.replay_outcomes = replays
        title = "the kernel process's outputs are what its recorded instructions compute (replayed by nkitui, bit for bit)"
        missing = [s for s in self.seed_outputs if s not in exact and all(s != f for f, _ in [*failed, *optout])]
        if failed:
            seed, o = failed[0]
            self.verdicts.findings.append(_replay_finding(seed, o))
            self.verdicts.checks.append(Check("replay", title, False, f"seed {seed}: {o.detail}"[:600]))
        elif optout:
            seed, o = optout[0]
            self.verdicts.findings.append(_optout_finding(seed, o))
            detail = (f"seed {seed}: the kernel's process declared its instruction log unreplayable ({o.detail}); a kernel "
                      "nkitui cannot replay is not proven correct, and every instruction the emulator has is "
                      "replayable, so the run fails")
            self.verdicts.log(detail, level="error")
            self.verdicts.checks.append(Check("replay", title, False, detail[:600]))
        elif missing:
            self.verdicts.checks.append(Check("replay", title, None, f"seed(s) {missing[:4]} ran without a replayed "
                                                            "instruction log: not proven correct"))
        elif exact:
            self.verdicts.checks.append(Check("replay", title, True, f"{len(exact)} seed(s) replayed exactly"[:600]))
        else:
            self.verdicts.checks.append(Check("replay", title, None, "no seed produced outputs to replay"))

    def ask_reference(self, reference: Any, seed_inputs: dict[int, dict[str, Any]],
                      references: dict[int, dict[str, Any]]) -> None:
        """Stage 2 of the replay: one more input set, from a seed drawn here at random (the kernel's process never
        sees it, and cannot predict it), and the reference's answer on it, asked before the reference ends."""
        import secrets

        import numpy as np

        from nkitui.evaluate.numerics.audit import _named
        from nkitui.evaluate.numerics.inputs import make_inputs, predictable_inputs

        self.first_reference = references.get(self.seeds[0])
        seed = 1_000_000 + secrets.randbelow(1 << 30)
        seen = [seed_inputs[s] for s in self.seeds if s in seed_inputs]
        inputs = make_inputs(self.task, seed)
        fixed = predictable_inputs(self.task, inputs, seen)

        def answer(candidate: dict[str, Any]) -> Any:
            with np.errstate(all="ignore"):
                return _named(reference(dict(candidate)), self.task.outputs, "the reference")

        def ask(candidate: dict[str, Any], what: str) -> Any:
            try:
                return answer(candidate)
            except Exception as exc:  # noqa: BLE001 - stage 2 is then skipped, with the reason
                self.fresh_skip = f"the reference failed on {what}: {type(exc).__name__}: {str(exc)[:200]}"
                return None

        if not fixed:
            expected = ask(inputs, "the fresh input set")
            if expected is not None:
                self.fresh = (seed, inputs, expected)
            return
        self._variant(seed, inputs, fixed, seen, ask, answer)

    def _variant(self, seed: int, inputs: dict[str, Any], fixed: list[str], seen: list[dict[str, Any]],
                       ask: Any, answer: Any) -> None:
        """Stage 2 on a task whose policy draws some inputs the same for every seed (arange, constant, ones,
        zeros): the kernel's process knows those without seeing them, so a log carrying the answer on them as
        constants would pass on the policy's own fresh set. Such inputs are varied (inputs.input_variant:
        arange's values permuted, constants jittered; every element jittered when that leaves the reference's
        answer within tolerance of its answer on the seed's set). Every input fixed: always. Some fixed: only
        when the others leave an output of the reference's answer bit for bit unchanged (they do not reach it).
        A variant may break what the task's inputs promise (an order, a constant), so a mismatch on it is "not
        proven", never a finding (judge)."""
        import secrets

        import numpy as np

        from nkitui.evaluate.numerics.audit import compare_seed
        from nkitui.evaluate.numerics.inputs import same_bits

        task, first = self.task, self.first_reference
        names = [spec.name for spec in task.inputs]

        def untouched(expected: dict[str, Any], exact: bool) -> list[str]:
            """Outputs where `expected` does not tell the seed's answer apart (bit for bit, or within the declared
            tolerance): a log returning the seed's answer as constants would pass there."""
            if first is None:
                return []
            if exact:
                return [o.name for o in task.outputs if same_bits(expected[o.name], first[o.name])]
            try:
                metrics, _ = compare_seed(task.outputs, first, expected, [])
            except Exception:  # noqa: BLE001 - shapes differ: the answers differ
                return []
            return [m.name for m in metrics if m.passed]

        if len(fixed) < len(names):
            expected = ask(inputs, "the fresh input set")
            if expected is None:
                return
            if not untouched(expected, exact=True):  # the random inputs reach every output: the policy's set judges
                self.fresh = (seed, inputs, expected)  # them (a mismatch there is a finding), and a second set with the
                self._fixed_variant(inputs, expected, fixed, answer)  # fixed inputs varied judges the rest
                return
        rng = np.random.default_rng(secrets.randbits(128))
        specs = {spec.name: spec for spec in task.inputs}
        kinds = {name: specs[name].init.dist for name in fixed}
        policy = ", ".join(f"`{n}` ({kinds[n]})" for n in fixed)
        still: list[str] = []
        for strong in (False, True):
            variant, hows, cannot = _vary(specs, inputs, fixed, rng, strong)
            if not hows or any(all(same_bits(variant[n], s[n]) for n in names if n in s) for s in seen):
                self.fresh_skip = (f"stage 2 is void: the task's policy draws {policy} the same for every seed, so the "
                                   f"kernel's process knows them, and no other values can be drawn ({'; '.join(cannot)})")
                return
            expected = ask(variant, "a variant of the task's deterministic inputs (" + "; ".join(hows) + ")")
            if expected is None:
                return
            still = untouched(expected, exact=len(fixed) < len(names))
            if not still:
                break
        else:
            if len(fixed) == len(names):
                self.fresh_skip = (f"stage 2 is void: the task's policy draws every input the same for every seed "
                                   f"({policy}), and even with each element varied the reference's answer on "
                                   + ", ".join(f"`{n}`" for n in still) + " stays within tolerance of its answer on the "
                                   "seed's inputs, so the kernel's answer there proves nothing about host-computed "
                                   "constants")
                return
        self.fresh = (seed, variant, expected)
        self.fresh_variant = (f"the task's policy draws {policy} the same for every seed, so they were varied: "
                              + "; ".join(hows))

    def _fixed_variant(self, inputs: dict[str, Any], expected: dict[str, Any], fixed: list[str],
                             answer: Any) -> None:
        """Stage 2's second set on a task whose policy draws some inputs at random and some the same for every seed:
        the fresh set varies only the random ones, so a log that computes from them on the device and bakes in
        what depends on the fixed ones (a table of cos(pos) for an arange `pos`, computed on the host) met the
        reference there (red team, round 9). The fixed inputs are varied as in _variant, the random ones kept;
        when that changes the reference's answer, the first seed's log must meet it there too. A mismatch, a
        divergence or a reference that fails on it is "not proven" (the variant may break a promise of the task's
        inputs), never a finding. When no variant changes the answer, the fixed inputs do not reach the outputs
        and there is nothing to bake."""
        import secrets

        import numpy as np

        from nkitui.evaluate.numerics.inputs import same_bits

        specs = {spec.name: spec for spec in self.task.inputs}
        rng = np.random.default_rng(secrets.randbits(128))
        for strong in (False, True):
            variant, hows, _cannot = _vary(specs, inputs, fixed, rng, strong)
            if not hows:
                return
            described = ("the task's policy draws " + ", ".join(f"`{n}`" for n in fixed) + " the same for every "
                         "seed, so a second fresh set varies them: " + "; ".join(hows))
            try:
                got = answer(variant)
            except Exception as exc:  # noqa: BLE001 - judged (not proven) in the compare phase, with the reason
                self.fresh_extra_skip = f"{described}; the reference failed on it: {type(exc).__name__}: {str(exc)[:200]}"
                return
            if not all(same_bits(got[o.name], expected[o.name]) for o in self.task.outputs):
                self.fresh_extra = (variant, got, described)
                return

    def submit(self, replayer: Any, pending: list[tuple[int, Any]], target: str) -> None:
        """Stage 2: the first seed's log, once it replayed exactly, replayed on the fresh inputs (on the replay
        thread, right after the first seed's replay: the worker runs its jobs in order)."""
        if self.fresh is None or not pending:
            return
        import numpy as np

        from nkitui.emulator import replay
        from nkitui.evaluate.numerics.inputs import from_kernel_layout, to_kernel_layout

        task, first = self.task, pending[0][1]
        self.fresh_first_seed = pending[0][0]

        def job_on(natural: dict[str, Any]) -> Any:
            def job() -> Any:
                outcome = first.result()
                if outcome.status != "exact" or outcome.log is None:
                    return None
                # a log marked data-dependent is replayed on the fresh inputs all the same: the mark is the kernel
                # process's word (it can write it from inside), so it never skips stage 2 (see judge)
                inputs = [to_kernel_layout(spec, np.asarray(natural[spec.name])) for spec in task.inputs]
                try:
                    raw = replay.replay(outcome.log, inputs, target=target, precise=self.precise)
                except replay.Diverged as exc:  # the kernel's stream would differ on these inputs: stage 2 cannot judge
                    return {"diverged": f"the kernel's process observed device values and branched on them; on the "
                                        f"fresh input set they differ ({str(exc)[:200]})"}
                except Exception as exc:  # noqa: BLE001 - judged in the compare phase (a log that replays only on the seed)
                    return {"error": f"the log does not replay on other inputs ({type(exc).__name__}: {str(exc)[:200]})"}
                return {spec.name: from_kernel_layout(spec, raw[spec.name]) for spec in task.outputs}
            return job

        self.fresh_replay = replayer.submit(job_on(self.fresh[1]))
        if self.fresh_extra is not None:
            self.fresh_extra_replay = replayer.submit(job_on(self.fresh_extra[0]))

    def judge(self, advice: Sequence[Any]) -> Any:
        """Stage 2's verdict, in the compare phase (under the tolerance advice the seeds were judged by): the seed's
        instruction log, replayed on inputs the kernel's process never saw, still meets the task's tolerance.
        A log that carries host-computed values (constants, immediates derived from the seed's inputs) does not.
        `advice`: the tolerance advice the seeds were judged by. Returns the log both stages verified (the judging
        phases' launches are held to it), or None."""
        from nkitui.evaluate.numerics.audit import compare_seed

        check = next((c for c in self.verdicts.checks if c.id == "replay"), None)
        if check is None or check.passed is not True:
            return None
        if any(c.passed is False for c in self.verdicts.checks if c.id.startswith("output:")):
            self.verdicts.notes.append("replay on fresh inputs not judged: the kernel already fails on the seeds")
            return None
        if self.fresh is None or self.fresh_replay is None:
            why = self.fresh_skip or "no seed's log replayed exactly"
            self._not_proven(check.detail, why)
            return None
        got = self.fresh_replay.result()
        seed, _, expected = self.fresh
        if isinstance(got, dict) and set(got) == {"diverged"} and not any(s.name == "diverged" for s in self.task.outputs):
            self._not_proven(check.detail, got["diverged"])
            return None
        variant = self.fresh_variant
        if isinstance(got, dict) and set(got) == {"error"} and not any(s.name == "error" for s in self.task.outputs):
            if variant:  # the variant may break what the task's inputs promise (an index in range, an order)
                self._not_proven(check.detail, f"{variant}; on that input set (seed {seed}) {got['error']}")
                return None
            detail = f"the first seed's instructions, replayed on a fresh input set (seed {seed}): {got['error']}"
            self.verdicts.findings.append(_fresh_finding(detail, self.task))
            self.verdicts.amend("replay", False, detail)
            return None
        if got is None or isinstance(got, str):
            self._not_proven(check.detail, got or "no seed's log replayed exactly")
            return None
        try:
            metrics, _ = compare_seed(self.task.outputs, got, expected, advice)
        except Exception as exc:  # noqa: BLE001 - a shape the reference does not have: the log is not the kernel's
            metrics, failing = [], f"the replayed outputs cannot be compared: {str(exc)[:200]}"
        else:
            failing = _failing(metrics)
        dependent = self._data_dependent()
        if failing and dependent:  # the seed's values may legitimately not be the fresh inputs' ones: unproven
            self._not_proven(check.detail, f"the log carries values that depend on the seed ({dependent[:200]}), and "
                                           f"the first seed's instructions, replayed on a fresh input set (seed {seed}), "
                                           f"do not match the reference there: {failing}")
            return None
        if failing and variant:  # not a finding: the variant may break a promise of the task's inputs
            self._not_proven(check.detail, f"{variant}; on that input set (seed {seed}) the first seed's instructions "
                                           f"do not match the reference: {failing}")
            return None
        if failing:
            detail = (f"the first seed's instructions, replayed on a fresh input set (seed {seed}, drawn by the "
                      f"evaluator), do not match the reference there: {failing}")
            self.verdicts.findings.append(_fresh_finding(detail, self.task))
            self.verdicts.amend("replay", False, detail)
            self.verdicts.log(detail, level="error")
            return None
        from nkitui.evaluate.run.evidence import REPLAY_FRESH_PASSED

        if variant:
            constant = self._seed_answer_passes(expected, advice)
            if constant:  # the seed's own answer, returned as constants, would meet the reference here too
                self._not_proven(check.detail, f"{variant}; yet the seed's answer is within tolerance of the reference's "
                                               f"answer on that input set too ({constant}): the set cannot tell "
                                               "instructions from host-computed constants, so stage 2 is void")
                return None
        extra = self._extra_check(advice)
        if extra is not None:
            self._not_proven(check.detail, extra)
            return None
        said = f" ({variant})" if variant else ""
        if self.fresh_extra is not None:
            said += f"; and on a second set ({self.fresh_extra[2]})"
        self.verdicts.amend("replay", True, f"{check.detail}; {REPLAY_FRESH_PASSED}{said}")  # (its seed is random: not in a detail runs compare)
        first = self._first_exact_replay()
        return first.log if first is not None else None  # the log both stages verified

    def _extra_check(self, advice: Sequence[Any]) -> str | None:
        """Why stage 2's second set (the fixed inputs varied, _fixed_variant) does not prove the kernel; None when
        it does or there is none. Never a finding: the variant may break a promise of the task's inputs."""
        from nkitui.evaluate.numerics.audit import compare_seed

        if self.fresh_extra_skip is not None:
            return self.fresh_extra_skip
        if self.fresh_extra is None:
            return None
        _, expected, described = self.fresh_extra
        got = self.fresh_extra_replay.result() if self.fresh_extra_replay is not None else None
        if got is None or isinstance(got, str):
            return f"{described}; the first seed's log was not replayed on it"
        if isinstance(got, dict) and set(got) & {"diverged", "error"} and not set(got) & {s.name for s in self.task.outputs}:
            return f"{described}; on it {next(iter(got.values()))}"
        try:
            metrics, _ = compare_seed(self.task.outputs, got, expected, advice)
        except Exception as exc:  # noqa: BLE001 - a shape the reference does not have
            return f"{described}; the replayed outputs cannot be compared: {str(exc)[:200]}"
        failing = _failing(metrics)
        if not failing:
            return None
        return (f"{described}; on it the first seed's instructions do not match the reference: {failing}"
                + " (values the kernel computed on the host from the fixed inputs would, as would a kernel that "
                  "relies on a promise the variant breaks)")

    def _seed_answer_passes(self, expected: Any, advice: Sequence[Any]) -> str:
        """The outputs where the first replayed seed's reported outputs (what a log of host constants gives on any
        input) meet the reference's answer on the stage-2 set under the advice the seeds were judged by."""
        from nkitui.evaluate.numerics.audit import compare_seed

        seed_outputs = self.seed_outputs.get(self.fresh_first_seed) if self.fresh_first_seed is not None else None
        if seed_outputs is None:
            seed_outputs = next(iter(self.seed_outputs.values()), None)
        if seed_outputs is None:
            return "no seed's outputs to compare"
        try:
            metrics, _ = compare_seed(self.task.outputs, seed_outputs, expected, advice)
        except Exception:  # noqa: BLE001 - shapes differ: the answers differ
            return ""
        return ", ".join(f"`{m.name}`" for m in metrics if m.passed)

    def _first_exact_replay(self) -> Any:
        """The first seed's replay outcome that was exact and carries its parsed log, or None."""
        return next((o for _s, o in self.replay_outcomes if o.status == "exact" and o.log is not None),
                    None)

    def _data_dependent(self) -> str | None:
        """Values the first replayed seed's log carries from the seed: front-end writes of input-dependent values
        (a collective's result across SPMD programs), or the header's own data-dependence mark (the kernel
        process's word: it can only turn a HACK-REPLAY-FRESH into "not proven", never into a pass)."""
        from nkitui.emulator import replay

        outcome = self._first_exact_replay()
        if outcome is None:
            return None
        carried = replay.carried_sources(outcome.log)
        if carried:
            return "front-end writes of " + ", ".join(carried[:4])
        return outcome.data_dependent or None

    def _not_proven(self, stage1: str, why: str) -> None:
        """Stage 2 could not judge the kernel: the `replay` check is not passed (a pass needs both stages), so
        the evidence rule makes a run that passed everything else an internal-error naming why."""
        text = f"replay on fresh inputs not judged: {why}; a kernel whose instructions nkitui cannot replay on " \
               "inputs its process never saw is not proven correct"
        self.verdicts.notes.append(text[:700])
        self.verdicts.log(text[:700], level="warning")
        self.verdicts.amend("replay", None, f"{stage1}; {text}")


def _vary(specs: dict[str, Any], inputs: dict[str, Any], fixed: list[str], rng: Any,
          strong: bool) -> tuple[dict[str, Any], list[str], list[str]]:
    """`inputs` with each input in `fixed` varied (inputs.input_variant): the new set, how each was varied, and
    why those that could not be were not."""
    from nkitui.evaluate.numerics.inputs import input_variant

    variant, hows, cannot = dict(inputs), [], []
    for name in fixed:
        values, how = input_variant(specs[name], inputs[name], rng, strong=strong)
        if values is None:
            cannot.append(how)
            continue
        variant[name] = values
        hows.append(f"`{name}` ({specs[name].init.dist}): {how}")
    return variant, hows, cannot


def _failing(metrics: list[Any]) -> str:
    """The metrics outside their tolerance, in words ("" when none is)."""
    return "; ".join(f"`{m.name}`: {m.mismatches}/{m.count} elements outside {m.policy.describe()}"
                     for m in metrics if not m.passed)


def _fresh_finding(detail: str, task: Any) -> Finding:
    from nkitui.common.findings import Finding

    nki_file = task.rel(task.kernel.path) if task.kernel is not None else None
    return Finding(
        rule="HACK-REPLAY-FRESH", severity="high",
        title="The kernel's instructions do not compute the answer on inputs it never saw",
        message=(f"{detail}. nkitui replays the instructions the kernel executed on the first seed on another input "
                 "set, drawn at random by the evaluator after the kernel's process started, and compares them with "
                 "the reference there. Correct instructions give the right answer on any input; these gave it only on "
                 "the inputs the kernel saw, which is what values computed on the host and embedded as constants "
                 "(nl.shared_constant) or immediates do. The run fails."),
        category="integrity", source="executor", file=nki_file, data={"detail": detail[:600]})


def _optout_finding(seed: int, outcome: Any) -> Finding:
    from nkitui.common.findings import Finding

    return Finding(
        rule="HACK-REPLAY-OPTOUT", severity="high", title="The kernel process declared its instructions unreplayable",
        message=(f"Seed {seed}: the instruction log the kernel's process sent says it cannot be replayed ({outcome.detail}). "
                 "nkitui replays every instruction the emulated kernel executed, in a process that never imported the "
                 "task's code; every instruction kind of the emulator is replayable, so a log that declares itself "
                 "unavailable is either the kernel process rewriting its own recorder (raw memory) to escape the "
                 "replay, or a limit of nkitui (a task-defined function as an operator, more than 2 million "
                 "instructions, a launch on several threads). Either way the outputs are not proven to be what the "
                 "kernel's instructions compute, and the run fails. If the reason names a real limit, report it."),
        category="integrity", source="executor", file=outcome.file, line=outcome.line,
        data={"seed": seed, "status": outcome.status, "detail": outcome.detail[:600]})


def _replay_finding(seed: int, outcome: Any) -> Finding:
    from nkitui.common.findings import Finding

    rule = "HACK-REPLAY-MISMATCH" if outcome.status == "mismatch" else "HACK-REPLAY-INVALID"
    title = ("The kernel process reported outputs its instructions do not compute" if outcome.status == "mismatch"
             else "The kernel process's instruction log is malformed or does not replay")
    return Finding(
        rule=rule, severity="high", title=title,
        message=(f"Seed {seed}: {outcome.detail}. nkitui replays every instruction the emulated kernel executed in a "
                 "process that never imported the task's code and requires the outputs the kernel's process reported "
                 "to be exactly what those instructions compute. A difference means the kernel's process changed its "
                 "own report (e.g. rewrote memory through numpy) or the log was forged; the run fails."),
        category="integrity", source="executor", file=outcome.file, line=outcome.line,
        data={"seed": seed, "status": outcome.status, "detail": outcome.detail[:600]})
