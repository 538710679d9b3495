"""The spare kernel process (nkitui.evaluate.pipeline.spare): launches it runs ahead give the verdict
the first kernel process alone gives, on a task whose trials include a failing adversarial case and
whose precision isolation runs a launch of its own. Real confined processes; the spare is forced on
(SPARE_MIN_LAUNCH_S = 0) and, in one run, made to finish every planned launch before the judging
phases ask, so that every one of them comes from the spare."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nkitui.evaluate.pipeline import session as session_module
from nkitui.evaluate.pipeline import spare as spare_module
from tests.helpers.pipeline import evaluate_in_process

TASK = Path(__file__).resolve().parents[3] / "sample_tasks" / "flawed_bf16_accum"


def _verdict(run):
    r = run.result
    trials = r.numerics.trials.trials if r.numerics and r.numerics.trials else ()
    precision = r.numerics.precision.outputs if r.numerics and r.numerics.precision else ()
    return {
        "status": r.status,
        "checks": [(c.id, c.passed, c.detail) for c in r.checks],
        "trials": [(t.name, t.status, [(o.name, o.max_abs, o.mismatches) for o in t.outputs]) for t in trials],
        "precision": [(o.name, o.verdict) for o in precision],
        "findings": sorted((f.rule, f.severity, f.title) for f in r.findings),
    }


@pytest.fixture
def task(tmp_path):
    shutil.copytree(TASK, tmp_path / "task")
    return tmp_path / "task"


def test_launches_run_ahead_by_the_spare_give_the_same_verdict(task, monkeypatch):
    options = dict(seeds=1, trials=True, precision=True, timeout_s=240.0)
    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", float("inf"))
    alone = evaluate_in_process(task, **options)
    assert alone.session.kernel.spare is None

    taken = []
    original = spare_module.SpareLaunches.take

    def take_when_done(self, key):  # the spare finishes its plan first: every launch asked is its own
        self._thread.join(timeout=120)
        run = original(self, key)
        taken.append(run is not None)
        return run

    monkeypatch.setattr(session_module, "SPARE_MIN_LAUNCH_S", 0.0)
    monkeypatch.setattr(session_module, "SPARE_MIN_CPU_SHARE", 0.0)  # whatever the machine's load
    monkeypatch.setattr(spare_module.SpareLaunches, "take", take_when_done)
    ahead = evaluate_in_process(task, **options)
    spare = ahead.session.kernel.spare
    assert spare is not None and spare.ran >= 5 and taken and all(taken)  # 4 adversarial cases + fp32
    assert _verdict(ahead) == _verdict(alone)
    assert any(t[1] == "fail" for t in _verdict(ahead)["trials"])  # the failing case came from the spare too
    roles = [c.role for c in ahead.session.children]
    assert roles.count("kernel") == 2 and all(not c.handle.running for c in ahead.session.children)


def test_a_spare_starts_only_when_the_first_launch_computed_rather_than_waited_for_a_core():
    """A first launch that took 3 s of wall time with 2.8 s of CPU: slow, on a machine with a core for it (a
    spare pays). The same 3 s with 0.4 s of CPU: the machine's cores were busy, and a spare's interpreter
    and launches would only take CPU from the rest of the check."""
    assert session_module.spare_pays(3.0, 2.8)
    assert not session_module.spare_pays(3.0, 0.4)
    assert not session_module.spare_pays(0.8, 0.2)
    assert session_module.spare_pays(3.0, None)  # a kernel process that reports no CPU time: as before
