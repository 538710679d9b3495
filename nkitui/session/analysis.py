"""The session's static facts about the task: the analysis of the port and the speed of light.

    session.analysis.run()              # blocking: findings and the CUDA<->NKI alignment
    session.analysis.speed_of_light()   # blocking: the bound before any run (perf.taskwork)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nkitui.session.events import AnalysisDone, SpeedOfLightKnown
from nkitui.session.imports import WORKER_IMPORTS

if TYPE_CHECKING:
    from nkitui.analysis import AlignmentPair, AnalysisReport
    from nkitui.common.findings import Finding
    from nkitui.perf.roofline import SpeedOfLight
    from nkitui.session.session import AuditSession


class Analysis:
    def __init__(self, session: AuditSession) -> None:
        self._session = session
        self.report: AnalysisReport | None = None
        self.findings: tuple[Finding, ...] = ()
        self.alignment: tuple[AlignmentPair, ...] = ()
        self.sol: SpeedOfLight | None = None
        self.sol_reason = ""

    @property
    def done(self) -> bool:
        return self.report is not None

    def run(self) -> AnalysisReport:
        """Analyse the CUDA source and the NKI port (nothing is executed). Blocking."""
        with WORKER_IMPORTS:
            from nkitui.analysis import analyze_task
        report = analyze_task(self._session.task)
        self.report = report
        self.findings = tuple(report.findings)
        self.alignment = tuple(report.alignment)
        self._session.emit(AnalysisDone(self.findings, self.alignment))
        self._session.findings_changed()
        return report

    def speed_of_light(self) -> SpeedOfLight | None:
        """The task's speed of light on the session's target, from its op, shapes and dtypes. Blocking
        (the cost model's imports take a moment)."""
        with WORKER_IMPORTS:
            from nkitui.perf.taskwork import task_speed_of_light
        self.sol, self.sol_reason = task_speed_of_light(self._session.task, self._session.target)
        self._session.emit(SpeedOfLightKnown(self.sol, self.sol_reason))
        return self.sol
