"""Red team: the replay cannot be opted out of.

The kernel's process records its instruction log itself, so a kernel with access to its own process's
objects can rewrite the log before it is sent: mark it `unavailable` or `data_dependent`, empty it, or drop
instructions. Each attack below is a wrong kernel (a * b for a + b) that hands the device the host-computed
answer (numpy's a + b on the inputs it reads from its scratch, as an `nl.shared_constant`: every output has
device provenance and matches the reference on the seeds) and then escapes the replay that would expose it.
On 735b294 the log's word was taken: "replay unavailable" made the check not applicable and a data-dependent
log skipped stage 2, so the four attacks that mark the log PASSED (a log truncated or rewritten without a mark
was caught then too: it does not replay to the reported outputs). Now an emulator run passes only when every seed's log
replayed exactly and the first seed's log met the reference on a fresh input set (docs/executor.md, Replay).

The recorder is reached through nki.language's own attribute chain (`nl.engine.common._replaylog`): no import
and no introspection name; the static integrity check passed it on 735b294. It stands for any way task code
gets at its process's objects (raw memory through numpy included): the replay's verdict must not depend on the
static check seeing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.conftest import wrong_task
from tests.security.test_redteam_replay import _check, _evaluate  # the same evaluation, one place

READ_INPUTS = '''
def _drop(rec, keep):  # the recorder's instructions cut to the first `keep` (either layout of the log)
    if hasattr(rec, "events"):
        del rec.events[keep:]
    else:
        rec.count = min(rec.count, keep)
        if keep == 0:
            del rec.stream[:]


def _forget_storages(rec):
    getattr(rec, "storages", None).clear() if hasattr(rec, "storages") else rec.table.clear()


def _host_inputs():
    folders = sorted(glob.glob(os.path.join(os.path.dirname(os.getcwd()), "io", "*", "in")),
                     key=lambda f: int(f.split(os.sep)[-2]))
    names = sorted(os.listdir(folders[-1]))
    return [np.load(os.path.join(folders[-1], n)) for n in names]
'''

FORGE = """
    x, y = _host_inputs()
    answer = nl.load(nl.shared_constant(x + y))  # numpy's a + b: right on every seed, carried as a constant
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, answer)
    rec = nl.engine.common._replaylog._rec  # the process's own recorder
    {escape}
    return out
"""

ESCAPES = {
    "marked unavailable": 'rec.unavailable = "a tile placed at an explicit address (allocations that may overlap)"',
    "marked data-dependent": 'rec.data_dependent = "the front end read device values on the host"',
    "marked both": 'rec.unavailable = "more than 2000000 instructions"; rec.data_dependent = "a register"',
    "events dropped, marked unavailable": '_drop(rec, 0); rec.unavailable = "a front-end write"',
    "log truncated": "_drop(rec, 1)",
    "the constant's storage rewritten in the log": "_forget_storages(rec)",
}


def _shown(result) -> list:  # noqa: ANN001
    return [(result.status, result.error)] + [(c.id, c.passed, c.detail[:200]) for c in result.checks]


@pytest.mark.parametrize("escape", sorted(ESCAPES))
def test_a_kernel_escaping_its_replay_is_not_passed(escape: str, tmp_path: Path) -> None:
    task = wrong_task(tmp_path / "task", module="import glob\n" + READ_INPUTS,
                      prelude=FORGE.format(escape=ESCAPES[escape]))
    result = _evaluate(task)
    assert result.status != "passed" and result.exit_code != 0, _shown(result)
    replay = _check(result, "replay")
    assert replay is not None and replay.passed is not True, _shown(result)
    rules = {f.rule for f in result.findings}
    if escape in ("log truncated", "the constant's storage rewritten in the log"):  # caught on 735b294 too
        assert replay.passed is False and rules & {"HACK-REPLAY-INVALID", "HACK-REPLAY-MISMATCH"}, _shown(result)
        return
    assert _check(result, "output:out").passed is True, "the forged answer matches the reference on the seeds"
    if "unavailable" in ESCAPES[escape]:
        assert "HACK-REPLAY-OPTOUT" in rules and replay.passed is False, _shown(result)
        assert result.status == "failed"
        assert "not proven correct" in replay.detail


def test_a_wrong_kernel_marking_its_log_unavailable_names_the_finding_at_its_line(tmp_path: Path) -> None:
    """The plain wrong kernel (no forged answer) that only opts out: failed by the numbers, and the opt-out
    is a finding of its own (an auditor sees the attempt, not only the wrong answer)."""
    task = wrong_task(tmp_path / "task", prelude="""
        nl.engine.common._replaylog._rec.unavailable = "a register operand at add_nki.py:15"
    """)
    result = _evaluate(task)
    assert result.status == "failed", _shown(result)
    optout = [f for f in result.findings if f.rule == "HACK-REPLAY-OPTOUT"]
    assert optout and optout[0].severity == "high" and optout[0].line == 15, optout


def test_the_right_kernel_still_passes_both_stages(tmp_path: Path) -> None:
    """The control: the same task with a right kernel passes, stage 1 and stage 2 in its replay check."""
    task = wrong_task(tmp_path / "task", prelude="""
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out
    """)
    result = _evaluate(task)
    assert result.status == "passed", _shown(result)
    replay = _check(result, "replay")
    assert replay.passed is True and "replayed exactly" in replay.detail and "fresh input set" in replay.detail
