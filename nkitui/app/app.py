"""NkituiApp: the workstation. Owns the task, starts the named workers, routes their messages.

Slow work (highlighting, analysis, git, runs, review submission) runs in named thread workers that
post typed messages (messages.py); `on_worker_state_changed` turns any worker failure into a
notification, never a crash.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App, SuspendNotSupported
from textual.binding import Binding
from textual.content import Content
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from nkitui.app import keymap
from nkitui.app.adapters import task_preview
from nkitui.app.config import AppConfig
from nkitui.app.controllers.review import ReviewController
from nkitui.app.controllers.runs import RunController
from nkitui.app.evidence import Evidence
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.messages import (
    AnalysisReady, DiffReady, RevisionsReady, RevisionsWanted, ShowSource, SourcesReady, SpeedOfLightReady,
)
from nkitui.app.screens.workstation import WorkstationScreen
from nkitui.app.themes import DEFAULT_THEME, fill_nkitui_variables, load_themes, problem_notice, user_themes_dir
from nkitui.app.widgets.header import AREAS, HeaderState

if TYPE_CHECKING:
    from nkitui.app.widgets.source.area import SourceArea
    from nkitui.task import Task


_BACKEND_PROBES: list = []  # the one probe of this process (see backend_probe)


def backend_probe():
    """What a run's environment offers (executor.backends.detect.Probe), probed in a child process
    once per process: it cannot change while nkitui runs, and the child takes a few tenths of a
    second (on every start of the app in the tests). A failed probe is not kept."""
    if not _BACKEND_PROBES:
        with WORKER_IMPORTS:
            from nkitui.executor.backends.detect import probe_isolated
        _BACKEND_PROBES.append(probe_isolated())
    return _BACKEND_PROBES[0]


def _palette_provider():
    """The command palette's provider, imported when the palette first opens (start-up cost)."""
    from nkitui.app.commands import NkituiCommands

    return NkituiCommands


class NkituiApp(ReviewController, RunController, App[int]):
    TITLE = "nkitui"
    CSS_PATH = "app.tcss"
    COMMANDS = {_palette_provider}
    INHERIT_BINDINGS = False
    BINDINGS = keymap.bindings("app")
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        task: Task | Path,
        *,
        backend: str | None = None,
        target: str | None = None,
        theme: str | None = None,
        config: AppConfig | None = None,
        keymap_path: Path | None = None,
        user_themes: Path | None = None,
    ) -> None:
        super().__init__()
        from nkitui.executor.confine import harden_parent

        harden_parent()  # not dumpable (also when the app is started without the command line)
        # A task folder is loaded after the first frame (loading imports numpy); a Task is used as is.
        self.audit_task: Task | None = None if isinstance(task, Path) else task
        self.task_dir = task if isinstance(task, Path) else task.root  # a folder, or its task.toml
        preview = task_preview(self.task_dir) if self.audit_task is None else None
        self.config = config or AppConfig()
        self.backend_choice = backend or self.config.backend or "auto"
        self.target_override = target or self.config.target
        self.target = self.target_override or (self.audit_task.target if self.audit_task else preview["target"])
        self.startup_problems: list[str] = list(self.config.problems)
        # Themes: bundled + user, registered before the first frame (and read again by reload_themes).
        self.user_themes_dir = user_themes or user_themes_dir()
        self.theme_names: list[str] = []
        self.theme_origins: dict[str, Path] = {}
        self._theme_problems: dict[Path, tuple[str, ...]] = {}  # reported already: not again on every t
        loaded = load_themes(user=self.user_themes_dir)
        self.startup_problems += [problem_notice(path, lines) for path, lines in loaded.file_problems.items()]
        self._register_themes(loaded)
        wanted = theme or self.config.theme or DEFAULT_THEME
        if wanted not in self.theme_names:
            self.startup_problems.append(
                f"theme {wanted!r} not found (available: {', '.join(self.theme_names)}); using {DEFAULT_THEME!r}")
            wanted = DEFAULT_THEME
        self.theme = wanted
        # Keymap: user overrides by binding id.
        self.keymap_overrides, problems = keymap.load_user_keymap(keymap_path)
        self.startup_problems += problems
        self.set_keymap(self.keymap_overrides)
        shown = self.audit_task or None
        self.header_state = HeaderState(
            task=shown.id if shown else preview["id"], title=shown.title if shown else preview["title"],
            target=self.target, backend=self.backend_choice,
        )
        self.task_problems: list = []  # why the task folder could not be loaded (exit code 2)
        self.run_in_progress = False
        self.runs_known = False
        self.review_ready = False
        self.backend_label = self.backend_choice
        self.backend_reason = ""
        self.session_started = False  # set once the start-up workers are launched (tests wait for it)

    # --- themes ----------------------------------------------------------------------------------

    def get_css_variables(self) -> dict[str, str]:
        return fill_nkitui_variables(super().get_css_variables())

    def _register_themes(self, loaded) -> None:
        """Register what `loaded` (a themes.ThemeLoad) holds; drop user themes whose file is gone.

        A theme whose file is now broken keeps its last good colours (the auditor may be editing it);
        a theme whose file was removed goes.
        """
        broken = set(loaded.file_problems)
        names = list(loaded.themes)
        for index, name in enumerate(self.theme_names):
            if name in loaded.themes:
                continue
            if self.theme_origins.get(name) in broken:
                names.insert(min(index, len(names)), name)  # keep the last good version, in its place
            else:
                self.unregister_theme(name)
        for theme in loaded.themes.values():
            self.register_theme(theme)
        self.theme_origins = {n: p for n, p in self.theme_origins.items() if n in names} | loaded.origins
        self.theme_names = names
        self._theme_problems = {path: tuple(lines) for path, lines in loaded.file_problems.items()}

    def reload_themes(self, *, report_all: bool = False) -> None:
        """Read the bundled and user theme files again (`t` does this before switching, so a theme
        saved while nkitui runs joins the cycle). A broken file is reported, naming the file and the
        field, once per version of its problems (every time with report_all), never fatally."""
        before = dict(self._theme_problems)
        current = self.available_themes.get(self.theme)
        loaded = load_themes(user=self.user_themes_dir)
        self._register_themes(loaded)
        for path, lines in loaded.file_problems.items():
            if report_all or before.get(path) != tuple(lines):
                self.notify(problem_notice(path, lines), title="Theme file problem", severity="error", timeout=15)
        if self.theme not in self.theme_names:
            gone = self.theme
            self.theme = DEFAULT_THEME
            self.notify(f"Theme {gone!r} is no longer in the theme folder; using {DEFAULT_THEME!r}.",
                        severity="warning", timeout=6)
        elif self.available_themes.get(self.theme) != current:
            # Same name, new colours (its file was edited): apply them now, also to the rows the
            # line views have drawn and cached.
            self._invalidate_css()
            self.call_next(self.refresh_css, animate=False)
            self.call_next(self._restyle_line_views)
        if report_all:
            users = sum(1 for p in self.theme_origins.values() if p.parent == self.user_themes_dir)
            broken = len(loaded.file_problems)
            self.notify(f"{len(self.theme_names)} themes, {users} from {self.user_themes_dir}"
                        + (f"; {broken} file{'s' if broken != 1 else ''} with problems" if broken else ""),
                        title="Themes reloaded", timeout=4)

    def _restyle_line_views(self) -> None:
        from nkitui.app.widgets.lineview import LineView

        for screen in self.screen_stack:
            for view in screen.query(LineView):
                view.restyle()

    def set_theme(self, name: str) -> None:
        self.theme = name
        origin = self.theme_origins.get(name)
        where = f" ({origin})" if origin is not None and origin.parent == self.user_themes_dir else ""
        self.notify(f"Theme: {name}{where}", timeout=2)

    def action_next_theme(self) -> None:
        self.reload_themes()
        names = self.theme_names
        index = names.index(self.theme) if self.theme in names else -1
        self.set_theme(names[(index + 1) % len(names)])

    def action_reload_themes(self) -> None:
        self.reload_themes(report_all=True)

    # --- screens and start-up --------------------------------------------------------------------

    def get_default_screen(self) -> WorkstationScreen:
        screen = WorkstationScreen()
        screen.layout_preference = self.config.layout
        return screen

    @property
    def workstation(self) -> WorkstationScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, WorkstationScreen):
                return screen
        return None

    @on(WorkstationScreen.Ready)
    def _workstation_ready(self) -> None:
        for problem in self.startup_problems:
            self.notify(problem, title="Configuration problem", severity="error", timeout=20)
        ws = self.workstation
        assert ws is not None
        ws.query_one("#header").state = self.header_state
        ws.show_area("source")
        # The slow work starts once the first frame is on screen: its imports (numpy, git,
        # tree-sitter) would otherwise hold the interpreter while the shell is being drawn.
        self.call_after_refresh(self._start_session)

    def _start_session(self) -> None:
        ws = self.workstation
        if ws is None or not ws.areas_mounted:  # the lazily mounted areas are not there yet
            self.call_after_refresh(self._start_session)
            return
        if self.audit_task is None:
            self.load_task_worker()
            return
        for warning in self.audit_task.warnings:
            self.notify(str(warning), title="task.toml", severity="warning", timeout=10)
        ws.show_area(ws.current_area)
        for placeholder in ws.query("#areas-loading"):
            placeholder.remove()
        self.load_sources()
        self.analyze()
        self.estimate_speed_of_light()
        self.load_history()
        self.load_review()
        self.list_runs()
        self.probe_backend()
        self.session_started = True

    @work(thread=True, name="load task", group="task", exclusive=True, exit_on_error=False)
    def load_task_worker(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.task import TaskError, load_task
        try:
            task = load_task(self.task_dir)
        except TaskError as exc:
            self.call_from_thread(self._task_failed, list(exc.problems) + list(exc.warnings))
            return
        self.call_from_thread(self._task_loaded, task)

    def _task_loaded(self, task: Task) -> None:
        self.audit_task = task
        self.target = self.target_override or task.target
        self.update_header(task=task.id, title=task.title, target=self.target)
        self._start_session()

    def _task_failed(self, problems: list) -> None:
        from nkitui.app.screens.problems import TaskProblemsScreen

        self.task_problems = problems
        self.session_started = True  # nothing more will start
        self.update_header(run="error", run_detail="task cannot be opened")
        self.push_screen(TaskProblemsScreen(str(self.task_dir), problems))

    def update_header(self, **changes: str) -> None:
        self.header_state = self.header_state.with_(**changes)
        ws = self.workstation
        if ws is not None:
            ws.query_one("#header").state = self.header_state

    # --- central worker error handling -----------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state not in (WorkerState.ERROR, WorkerState.CANCELLED):
            return
        if event.worker.group == "run" and self.run_in_progress:
            # the run worker died on our side: the UI must not wait for a run that will never end
            self.run_in_progress = False
            self.run_handle = None
            self.update_header(run="error", run_detail="")
        if event.worker.group == "review-submit":
            self.submitting = False
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title=f"{event.worker.name} failed",
                        severity="error", timeout=15)

    @work(thread=True, name="backend probe", group="probe", exclusive=True, exit_on_error=False)
    def probe_backend(self) -> None:
        """Which backend `auto` (or the requested one) will use, and why: shown before the first run."""
        with WORKER_IMPORTS:
            from nkitui.executor.backends.base import BackendUnavailable
            from nkitui.executor.backends.select import choose_backend

        namespace = self.audit_task.kernel.namespace if self.audit_task.kernel else None
        try:
            # In a child process with a run's environment: what a run will see, and the Neuron SDK
            # (if any) is never imported into the UI.
            probe = backend_probe()
        except (RuntimeError, OSError, ValueError) as exc:
            self.call_from_thread(self.notify, f"Could not tell which backend a run will use: {exc}",
                                  title="Backend probe", severity="warning", timeout=8)
            return
        try:
            choice = choose_backend(self.backend_choice, probe, namespace)
        except (BackendUnavailable, ValueError) as exc:
            self.call_from_thread(self._backend_known, self.backend_choice, str(exc), False)
            return
        self.call_from_thread(self._backend_known, choice.name, choice.reason, True)

    def _backend_known(self, name: str, reason: str, ok: bool) -> None:
        label = f"{name} (auto)" if self.backend_choice == "auto" else name
        self.backend_label = label
        self.backend_reason = reason
        if not self.run_in_progress and getattr(self, "shown_result", None) is None:
            self.update_header(backend=label if ok else f"{name} unavailable")
            hint = f"No run yet: press {keymap.app_key(self, 'app.run')} to run the task"
            self.run_area.set_status(
                Content.assemble((hint, "$text-muted"), (f"  ·  {reason}", "$text-muted")),
                Content.styled(hint, "$text-muted"))
        if not ok:
            self.notify(reason, title=f"Backend {name} unavailable", severity="error", timeout=15)

    # --- Source: files, analysis, history --------------------------------------------------------

    @work(thread=True, name="highlight sources", group="sources", exclusive=True, exit_on_error=False)
    def load_sources(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.app.widgets.source.code_view import SourceFile
            from nkitui.app.widgets.source.highlight import highlight_lines, language_for

        def read(path: Path | None) -> SourceFile | None:
            if path is None or not path.is_file():
                return None
            rel = self.audit_task.rel(path) or path.name
            text = path.read_text(encoding="utf-8", errors="replace")
            return SourceFile(rel, highlight_lines(text, language_for(rel)))

        self.post_message(SourcesReady(read(self.audit_task.sources.cuda), read(self.audit_task.sources.nki)))

    @on(SourcesReady)
    def _sources_ready(self, message: SourcesReady) -> None:
        self.source_area.set_sources(message.left, message.right)

    @work(thread=True, name="static analysis", group="analysis", exclusive=True, exit_on_error=False)
    def analyze(self) -> None:
        from nkitui.app.adapters import analysis_view

        with WORKER_IMPORTS:
            import nkitui.analysis  # noqa: F401  (analysis_view imports it)
        self.post_message(AnalysisReady(*analysis_view(self.audit_task)))

    @on(AnalysisReady)
    def _analysis_ready(self, message: AnalysisReady) -> None:
        self.analysis_findings = message.findings
        self.source_area.set_analysis(self.all_findings(), message.pairs, message.state)
        self._update_badges()

    def all_findings(self) -> list:
        return list(getattr(self, "analysis_findings", [])) + list(getattr(self, "run_findings", []))

    @work(thread=True, name="speed of light", group="sol", exclusive=True, exit_on_error=False)
    def estimate_speed_of_light(self) -> None:
        """The task's speed of light on the target, for the Engines area before any run (the cost
        model's imports take a moment, so not on the UI thread)."""
        from nkitui.app.adapters import task_speed_of_light

        with WORKER_IMPORTS:
            import nkitui.executor.backends.costmodel  # noqa: F401  (task_speed_of_light imports them)
            import nkitui.perf.roofline  # noqa: F401
        self.post_message(SpeedOfLightReady(*task_speed_of_light(self.audit_task, self.target)))

    @on(SpeedOfLightReady)
    def _speed_of_light_ready(self, message: SpeedOfLightReady) -> None:
        self.area("engines").set_speed_of_light(message.sol, message.reason)

    @work(thread=True, name="git history", group="history", exclusive=True, exit_on_error=False)
    def load_history(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.app.gitview import GitViewError, default_revisions, diff_revisions, list_revisions

        try:
            revisions = list_revisions(self.audit_task.root)
        except GitViewError as exc:
            self.post_message(RevisionsReady([], None, str(exc)))
            return
        pair = default_revisions(revisions)
        self.post_message(RevisionsReady(revisions, pair))
        if pair is not None:
            self.post_message(DiffReady(pair, diff_revisions(self.audit_task.root, pair[0].sha, pair[1].sha)))

    @work(thread=True, name="git diff", group="diff", exclusive=True, exit_on_error=False)
    def load_diff(self, pair: tuple) -> None:
        with WORKER_IMPORTS:
            from nkitui.app.gitview import diff_revisions
        self.post_message(DiffReady(pair, diff_revisions(self.audit_task.root, pair[0].sha, pair[1].sha)))

    @on(RevisionsReady)
    def _revisions_ready(self, message: RevisionsReady) -> None:
        self.source_area.set_revisions(message.revisions, message.pair)

    @on(DiffReady)
    def _diff_ready(self, message: DiffReady) -> None:
        self.source_area.set_diff(message.pair, message.files)

    @on(RevisionsWanted)
    def _pick_revisions(self) -> None:
        from nkitui.app.screens.revisions import RevisionPicker

        area = self.source_area
        if not area.revisions:
            self.notify("The task has no git history to compare.", timeout=4)
            return

        def chosen(pair) -> None:
            if pair is not None:
                area.set_revisions(area.revisions, pair)
                self.load_diff(pair)

        self.push_screen(RevisionPicker(area.revisions, area.diff_pair), chosen)

    @on(ShowSource)
    def _show_source(self, message: ShowSource) -> None:
        self.action_show_area("source")
        if not self.source_area.show_line(message.file, message.line):
            self.notify(f"{message.file}:{message.line} is not one of the files shown", timeout=4)

    # --- areas -----------------------------------------------------------------------------------

    @property
    def source_area(self) -> SourceArea:
        return self.workstation.area("source")  # type: ignore[union-attr, return-value]

    def area(self, name: str) -> Widget:
        return self.workstation.area(name)  # type: ignore[union-attr]

    def action_show_area(self, name: str) -> None:
        ws = self.workstation
        if ws is not None and self.screen is ws:
            ws.show_area(name)

    def action_cycle_area(self, step: int) -> None:
        ws = self.workstation
        if ws is None:
            return
        index = AREAS.index(ws.current_area)
        ws.show_area(AREAS[(index + int(step)) % len(AREAS)])

    def action_toggle_layout(self) -> None:
        ws = self.workstation
        if ws is None:
            return
        ws.apply_layout("split" if ws.layout_name == "tabs" else "tabs")
        ws.show_area(ws.current_area)

    @property
    def escape_to_minimize(self) -> bool:
        # In a zoomed area, Escape first drops a selection of lines; the next one restores the layout.
        if getattr(self.focused, "selection_anchor", None) is not None:
            return False
        return super().escape_to_minimize

    def action_zoom(self) -> None:
        ws = self.workstation
        if ws is None or self.screen is not ws:
            return
        if ws.maximized is not None:
            ws.minimize()
        else:
            ws.maximize(ws.area(ws.current_area), container=False)

    def _update_badges(self) -> None:
        ws = self.workstation
        if ws is None:
            return
        badges: dict[str, str] = {}
        findings = self.all_findings()
        if findings:
            badges["source"] = f"({len(findings)})"
        ws.query_one("#area-bar").badges = badges

    def run_area_log_action(self, action: str) -> None:
        self.action_show_area("run")
        log = self.area("run").log
        log.focus()
        getattr(log, f"action_{action}")()

    async def action_quit(self) -> None:
        self.close_review()
        self.exit(0)

    def on_unmount(self) -> None:
        self.close_review()

    # --- help ------------------------------------------------------------------------------------

    def action_help(self) -> None:
        from nkitui.app.screens.help import HelpScreen, KeysScreen, help_for

        if isinstance(self.screen, (HelpScreen, KeysScreen)):
            return
        focused = self.screen.focused
        keys: dict[str, list[str]] = {}
        descriptions: dict[str, str] = {}
        for active in self.screen.active_bindings.values():
            binding: Binding = active.binding
            if not binding.description or binding.system:
                continue
            ident = binding.id or binding.action
            keys.setdefault(ident, []).append(self.get_key_display(binding))
            descriptions[ident] = binding.tooltip or binding.description
        rows = [(" / ".join(dict.fromkeys(k)), descriptions[i], i) for i, k in keys.items()]
        self.push_screen(HelpScreen(help_for(focused), rows))

    def action_keys(self) -> None:
        from nkitui.app.screens.help import KeysScreen

        if not isinstance(self.screen, KeysScreen):
            self.push_screen(KeysScreen(self.keymap_overrides))

    # --- evidence and review ---------------------------------------------------------------------

    def focused_evidence(self) -> Evidence | None:
        node = self.screen.focused
        while node is not None:
            getter = getattr(node, "evidence_at_cursor", None)
            if callable(getter):
                return getter()
            node = node.parent if isinstance(node.parent, Widget) else None
        return None

    def can_attach(self) -> bool:
        return self.review_ready and self.focused_evidence() is not None

    def edit_text_externally(self, text: str, suffix: str = ".md") -> str | None:
        """Suspend the app, edit `text` in the auditor's editor, return the new text (None if unchanged)."""
        command = self.config.editor_command()
        fd, name = tempfile.mkstemp(prefix="nkitui-comment-", suffix=suffix)
        path = Path(name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            try:
                try:
                    with self.suspend():
                        completed = subprocess.run([*command, str(path)], check=False)
                except SuspendNotSupported:
                    # No terminal to hand over (headless, a web driver): the editor runs without one.
                    completed = subprocess.run([*command, str(path)], check=False, stdin=subprocess.DEVNULL)
            except OSError as exc:
                self.notify(f"Cannot start the editor {command[0]!r}: {exc.strerror or exc}. Set `editor` in "
                            "config.toml, or $VISUAL/$EDITOR.", title="Editor", severity="error", timeout=10)
                return None
            if completed.returncode != 0:
                self.notify(f"{command[0]} exited with status {completed.returncode}; comment unchanged",
                            severity="warning")
                return None
            new = path.read_text(encoding="utf-8")
            return None if new == text else new
        finally:
            path.unlink(missing_ok=True)
