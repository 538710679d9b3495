"""SessionView: one audit session on the workstation's areas.

The session (nkitui.session) holds the audit's state and tells every change as an event; this class
is where each event becomes what the areas draw (`show_event`, one `match` over the event types), and
where a newly opened session's slow calls start, each in a worker owned by the area that shows its
result (`open`). `repaint` draws a session's whole state at once: the app switches between the
sessions of several tasks, and each comes back as it was.

Nothing here decides anything about the audit: that is the session's job.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nkitui.app.adapters import role_pairs
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.widgets.header import AuditHeader, AreaBar, HeaderState
from nkitui.app.widgets.run.area import run_notice, short_run_id
from nkitui.session import events as ev

if TYPE_CHECKING:
    from nkitui.app.gitview import FileDiff, Revision
    from nkitui.app.screens.workstation import WorkstationScreen
    from nkitui.app.widgets.engines.area import EnginesArea
    from nkitui.app.widgets.rubric.area import RubricArea
    from nkitui.app.widgets.run.area import RunArea
    from nkitui.app.widgets.source.area import SourceArea
    from nkitui.app.widgets.source.code_view import SourceFile
    from nkitui.evaluate.run.result import RunResult
    from nkitui.session import AuditSession

RUN_STATE = {"passed": "passed", "failed": "failed", "invalid": "error", "cancelled": "cancelled"}
SHOWN_DETAIL = {"finished": "", "reopened": "reopened ", "latest": "reopened ", "cited": "reopened ", "kept": ""}


def header_for(session: AuditSession, backend_label: str) -> HeaderState:
    """The header's state for a session before any run is shown (the auditor once it is known)."""
    identity = session.identity_known
    return HeaderState(task=session.task.id, title=session.task.title, target=session.target, backend=backend_label,
                       auditor=identity.name if identity else "", auditor_warning=bool(identity and identity.needs_asking))


class SessionView:
    def __init__(self, ws: WorkstationScreen) -> None:
        self.ws = ws
        self.session: AuditSession | None = None

    # --- the areas ----------------------------------------------------------------------------------

    @property
    def source(self) -> SourceArea:
        return self.ws.source_area

    @property
    def run(self) -> RunArea:
        return self.ws.run_area

    @property
    def engines(self) -> EnginesArea:
        return self.ws.engines_area

    @property
    def rubric(self) -> RubricArea:
        return self.ws.rubric_area

    @property
    def header(self) -> AuditHeader:
        return self.ws.query_one(AuditHeader)

    def update_header(self, **changes: object) -> None:
        header = self.header
        header.state = header.state.with_(**changes)

    # --- opening and switching -----------------------------------------------------------------------

    def open(self, session: AuditSession) -> None:
        """Start everything a newly opened session needs, each in a worker of the area that shows it."""
        self.session = session
        source, run, engines, rubric = self.source, self.run, self.engines, self.rubric
        self.repaint(session)
        for warning in session.task.warnings:
            self.ws.notify(str(warning), title="task.toml", severity="warning", timeout=10)
        self.load_sources(session)
        source.run_worker(session.analysis.run, name="static analysis", group="analysis", thread=True,
                          exclusive=True, exit_on_error=False)
        self.load_history(session)
        engines.run_worker(session.analysis.speed_of_light, name="speed of light", group="sol", thread=True,
                           exclusive=True, exit_on_error=False)
        rubric.run_worker(session.review.load, name="load review", group="review", thread=True, exclusive=True,
                          exit_on_error=False)
        run.restore(session)
        run.probe_backend(session)
        self.ws.run_worker(self._identify_and_check, name="auditor and repository", group="identity", thread=True,
                           exclusive=True, exit_on_error=False)

    def _identify_and_check(self) -> None:
        assert self.session is not None
        self.session.identify()
        self.session.check_repository()

    def switch_to(self, session: AuditSession) -> None:
        """Show a session opened before, as it was left: its state, and its files read again."""
        self.repaint(session)
        self.load_sources(session)
        self.load_history(session)

    def repaint(self, session: AuditSession) -> None:
        """Draw the session's whole state: what it knows now."""
        self.session = session
        runs = session.runs
        label = runs.backend.label if runs.backend is not None else session.options.backend
        self.header.state = header_for(session, label)
        run = self.run
        run.show_nothing()
        self.engines.show_record(None, "")
        if session.analysis.done:
            pairs, state = role_pairs(session.analysis.alignment)
            self.source.set_analysis(list(session.findings), pairs, state)
        else:
            self.source.set_findings(list(session.findings))
        if session.analysis.sol is not None or session.analysis.sol_reason:
            self.engines.set_speed_of_light(session.analysis.sol, session.analysis.sol_reason)
        if runs.shown is not None and runs.shown_how is not None:
            self.show_event(ev.RunShown(runs.shown, runs.shown_how, runs.shown_log))
        if runs.live is not None:
            run.show_live(runs.live)
            self.update_header(run="running", run_detail=runs.live.phase or "starting")
        review = session.review
        if review.rubric is not None and review.draft is not None:
            self.rubric.set_history(list(review.history))
            self.rubric.set_review(review.rubric, review.draft)
            self.rubric.set_problems(list(review.problems))
        self.update_badges()

    # --- the Source area's own workers (the task's files and git history) ------------------------

    def load_sources(self, session: AuditSession) -> None:
        def work() -> None:
            with WORKER_IMPORTS:
                from nkitui.app.widgets.source.code_view import SourceFile
                from nkitui.app.widgets.source.highlight import highlight_lines, language_for
            task = session.task

            def read(path: Path | None) -> SourceFile | None:
                if path is None or not path.is_file():
                    return None
                rel = task.rel(path) or path.name
                text = path.read_text(encoding="utf-8", errors="replace")
                return SourceFile(rel, highlight_lines(text, language_for(rel)))

            left, right = read(task.sources.cuda), read(task.sources.nki)
            self.ws.app.call_from_thread(self._sources_ready, session, left, right)

        self.source.run_worker(work, name="highlight sources", group="sources", thread=True, exclusive=True,
                               exit_on_error=False)

    def _sources_ready(self, session: AuditSession, left: SourceFile | None, right: SourceFile | None) -> None:
        if session is self.session:
            self.source.set_sources(left, right)

    def load_history(self, session: AuditSession) -> None:
        """The task's git revisions and the diff of the default pair."""
        def work() -> None:
            with WORKER_IMPORTS:
                from nkitui.app.gitview import GitViewError, default_revisions, list_revisions
            try:
                revisions = list_revisions(session.task.root)
            except GitViewError:
                revisions = []
            pair = default_revisions(revisions)
            self.ws.app.call_from_thread(self._revisions_ready, session, revisions, pair)
            if pair is not None:
                self._load_diff(session, pair)

        self.source.run_worker(work, name="git history", group="history", thread=True, exclusive=True,
                               exit_on_error=False)

    def load_diff(self, session: AuditSession, pair: tuple[Revision, Revision]) -> None:
        self.source.run_worker(lambda: self._load_diff(session, pair), name="git diff", group="diff", thread=True,
                               exclusive=True, exit_on_error=False)

    def _load_diff(self, session: AuditSession, pair: tuple[Revision, Revision]) -> None:
        with WORKER_IMPORTS:
            from nkitui.app.gitview import diff_revisions
        files = diff_revisions(session.task.root, pair[0].sha, pair[1].sha)
        self.ws.app.call_from_thread(self._diff_ready, session, pair, files)

    def _revisions_ready(self, session: AuditSession, revisions: list[Revision],
                         pair: tuple[Revision, Revision] | None) -> None:
        if session is self.session:
            self.source.set_revisions(revisions, pair)

    def _diff_ready(self, session: AuditSession, pair: tuple[Revision, Revision], files: list[FileDiff]) -> None:
        if session is self.session:
            self.source.set_diff(pair, files)

    # --- events ----------------------------------------------------------------------------------------

    def show_event(self, event: ev.SessionEvent) -> None:
        """Draw one event of the shown session on the areas it concerns."""
        session = self.session
        assert session is not None
        match event:
            case ev.AnalysisDone(alignment=alignment):
                pairs, state = role_pairs(alignment)
                self.source.set_analysis(list(session.findings), pairs, state)
            case ev.FindingsChanged(findings=findings):
                self.source.set_findings(list(findings))
                self.update_badges()
            case ev.SpeedOfLightKnown(sol=sol, reason=reason):
                self.engines.set_speed_of_light(sol, reason)
            case ev.BackendResolved():
                if not session.runs.running and session.runs.shown is None:
                    self.update_header(backend=event.label)
                    self.run.show_backend(event)
                if not event.available:
                    self.ws.notify(event.reason, title=f"Backend {event.name} unavailable", severity="error",
                                   timeout=15)
            case ev.RunStarting():
                self.update_header(run="running", run_detail="starting")
                self.run.show_starting()
            case ev.RunStarted():
                self.update_header(run="running", run_detail="")
                self.run.show_started(event)
            case ev.RunLogged(run_id=run_id, lines=lines):
                live = session.runs.live
                if live is not None and live.run_id == run_id:
                    self.run.log.append_lines(lines)
            case ev.RunProgressed(phase=phase, done=done, total=total):
                if session.runs.running:
                    detail = (phase or "") + (f" {done}/{total}" if total else "")
                    self.update_header(run="running", run_detail=detail.strip())
                    self.run.show_progress(event)
            case ev.RunCancelling():
                self.update_header(run="running", run_detail="cancelling")
                self.ws.notify("Cancelling the run…", timeout=3)
            case ev.RunEnded(result=None, error=error):
                self.run.show_ended(event)
                self.update_header(run="error", run_detail="")
                self.ws.notify(error or "the run ended without a result", title="Run failed to start",
                               severity="error", timeout=10)
            case ev.RunEnded(result=result, kept=kept) if result is not None:
                self.run.show_ended(event)
                if kept is not None:
                    self.ws.notify(f"Run {result.short_id} cancelled; still showing run {kept.short_id} "
                                   f"({kept.status}).", title="Run cancelled", timeout=6)
                else:
                    verdict = "passed" if result.passed else result.status
                    self.ws.notify(run_notice(result), title=f"Run {short_run_id(result.run_id)} {verdict}",
                                   severity="information" if result.passed else "warning", timeout=6)
            case ev.RunShown(result=result, how=how):
                self._show_run(result, how)
                self.run.show_run(event)
            case ev.ReviewLoaded(rubric=rubric, draft=draft, restored=restored):
                self.rubric.set_review(rubric, draft)
                if restored:
                    self.ws.notify(restored, title="Draft", timeout=6)
            case ev.ReviewChecked(problems=problems):
                self.rubric.set_problems(list(problems))
                self.update_badges()
            case ev.ReviewHistoryLoaded(entries=entries):
                self.rubric.set_history(list(entries))
            case ev.ReviewSubmitted(result=result, draft=draft):
                self.rubric.set_last_commit(f"committed {result.short_commit}")
                assert session.review.rubric is not None
                self.rubric.set_review(session.review.rubric, draft)
                self.load_history(session)
            case ev.ReviewRefused(error=error):
                why = "\n".join(f"• {p.message} — {p.fix}" for p in error.problems[:4])
                self.ws.notify(why or str(error), title="The review was not committed", severity="error",
                               timeout=15)
            case ev.AuditorResolved(identity=identity):
                self.update_header(auditor=identity.name, auditor_warning=identity.needs_asking)
            case ev.RepositoryChecked(state=state):
                if not state.ready and not state.can_prepare:
                    self.ws.notify(state.message, title="Reviews cannot be committed", severity="warning",
                                   timeout=10)
            case ev.Notice(message=message, severity=severity, title=title):
                self.ws.notify(message, title=title, severity=severity, timeout=10 if severity == "error" else 6)
            case ev.RunsListed():
                pass  # the Runs screen reads session.runs.summaries when it opens

    def _show_run(self, result: RunResult, how: str) -> None:
        """The shown run in the header and the Engines area."""
        changes: dict[str, object] = {"run": RUN_STATE.get(result.status, "error"),
                                      "run_detail": SHOWN_DETAIL.get(how, "") + result.short_id}
        if result.backend and result.backend != "auto":
            # A run cancelled before its compile phase never resolved `auto`: the header keeps the
            # backend the probe found rather than claiming "auto (auto)".
            changes["backend"] = result.backend + (" (auto)" if result.backend_requested == "auto" else "")
        self.update_header(**changes)
        record = None
        message = ""
        if result.utilisation is not None:  # a typed record (a stored one that could not be read is None)
            record = result.utilisation
        else:
            message = f"Run {result.short_id} has no utilisation data ({result.status})."
        self.engines.show_record(record, result.run_id, message)

    def update_badges(self) -> None:
        if self.session is None:
            return
        findings = self.session.findings
        self.ws.query_one(AreaBar).badges = {"source": f"({len(findings)})"} if findings else {}
