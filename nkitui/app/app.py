"""NkituiApp: the workstation. Holds the audit sessions (one per task), shows one, and wires keys to it.

How a key reaches the audit, by reading code:

    key "r"  -> keymap "app.run" -> NkituiApp.action_start_run
             -> RunArea.start_run(session): a worker running session.runs.run()   (nkitui.session.runs)
             -> the session emits RunStarting, RunStarted, RunLogged..., RunEnded, RunShown
             -> NkituiApp._from_session posts each as a SessionUpdate message
             -> NkituiApp._session_update -> SessionView.show_event -> the Run area, header, Engines
    a run's evidence (a, in the log)   -> action_attach_evidence -> session.review.attach(link, run_id):
             the draft cites the run; session.review.submit() commits the run's result beside the review.

The session (nkitui.session) is headless and holds the audit's state; SessionView (session_view.py)
draws its events; the areas own the workers of the slow calls. `on_worker_state_changed` turns a
worker's failure into a notification, never a crash. Every notification is kept in `notices`.
"""

from __future__ import annotations

import os
import subprocess
from collections import deque
import tempfile
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, on
from textual.app import App, SuspendNotSupported
from textual.binding import Binding
from textual.content import Content
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from nkitui.app import keymap
from nkitui.app.adapters import review_evidence, task_preview
from nkitui.app.commands import NkituiCommands, PaletteCommand
from nkitui.app.config import AppConfig, save_setting
from nkitui.app.evidence import Evidence
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.messages import CommentWanted, NoticePosted, RevisionsWanted, SessionUpdate, ShowSource
from nkitui.app.screens.notices import Notice
from nkitui.app.screens.queue import QueueScreen, QueueTaskFinished
from nkitui.app.screens.workstation import WorkstationScreen
from nkitui.app.session_view import SessionView
from nkitui.app.themes import DEFAULT_THEME, fill_nkitui_variables, load_themes, problem_notice, user_themes_dir
from nkitui.common.problems import Problem
from nkitui.app.widgets.footer import KeyFooter
from nkitui.app.widgets.header import AREAS, AuditHeader, HeaderState
from nkitui.app.widgets.run.log_view import LogView
from nkitui.session import AuditSession, SessionOptions, SessionRegistry
from nkitui.session import events as ev

if TYPE_CHECKING:
    from nkitui.app.gitview import Revision
    from nkitui.app.screens.runs import RunChoice
    from nkitui.app.widgets.engines.area import EnginesArea
    from nkitui.app.widgets.rubric.area import RubricArea
    from nkitui.app.widgets.run.area import RunArea
    from nkitui.app.widgets.source.area import SourceArea
    from nkitui.review import Draft
    from nkitui.session.queue import TaskQueue
    from nkitui.session.repository import RepositoryState
    from nkitui.task import Task

UNHELD_KEYS = ("ctrl+q", "ctrl+c")  # never held back while the task opens: the way out stays open
# What the app's keys do to the task on screen: nothing while the queue is shown instead.
TASK_ACTIONS = frozenset({"start_run", "cancel_run", "run_history", "attach_evidence", "submit_review", "show_area",
                          "cycle_area", "toggle_layout", "zoom"})


class NkituiApp(App[int]):
    TITLE = "nkitui"
    CSS_PATH = "app.tcss"
    COMMANDS = {NkituiCommands}
    INHERIT_BINDINGS = False
    BINDINGS = keymap.bindings("app")
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        task: Task | Path,
        *,
        mode: str = "task",
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
        self.config = config or AppConfig()
        self.sessions = SessionRegistry(SessionOptions(
            backend=backend or self.config.backend or "auto", target=target or self.config.target,
            blind=self.config.blind, auditor=self.config.auditor))
        self.session: AuditSession | None = None  # the session on screen
        self.view: SessionView | None = None  # draws it, once the areas are mounted
        # A task folder is loaded after the first frame (loading imports numpy); a Task is used as is.
        # mode "queue": `task` is a folder of tasks, shown as a queue (QueueScreen); "auto": a folder
        # that is a queue unless it turns out to be one task itself (or holds none).
        if mode not in ("task", "queue", "auto"):
            raise ValueError(f"unknown mode {mode!r}")
        self.queue_mode = mode != "task" and isinstance(task, Path)
        self._auto_queue = mode == "auto"
        self._first_task: Task | Path | None = None if self.queue_mode else task
        self.task_dir = task if isinstance(task, Path) else task.root  # a folder, or its task.toml
        self.task_problems: list = []  # why the task folder could not be loaded (exit code 2)
        self.session_started = False  # the shown session's start-up workers are launched (tests wait for it)
        self.notices: list[Notice] = []  # every notification, in order (public: tests read it too)
        # Keys pressed while a task opens (or while a folder is found to be a queue or one task): None
        # once replayed. An explicit queue is usable at once.
        self._held_keys: list[events.Key] | None = None if self.queue_mode and not self._auto_queue else []
        self._replayed: set[int] = set()  # ids of the held keys' replays, let through on_event
        self._replaying = False
        self._startup_reported = False
        self._queue_screen: QueueScreen | None = None  # the queue (queue mode), under the workstation
        self._workstation_screen: WorkstationScreen | None = None  # kept while the queue is shown
        self._asked_auditor = False
        self._offered_repository: set[Path] = set()
        self._questions: deque[Callable[[Callable[[], None]], None]] = deque()  # asked one after another
        self._asking = False
        self.startup_problems: list[str] = list(self.config.problems)
        self._preview = self._header_preview(task, backend or self.config.backend or "auto")
        # Themes: bundled + user, registered before the first frame (and read again by reload_themes).
        self.user_themes_dir = user_themes or user_themes_dir()
        self.theme_names: list[str] = []
        self.theme_origins: dict[str, Path] = {}
        self._theme_problems: dict[Path, tuple[Problem, ...]] = {}  # reported already: not again on every t
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

    def _header_preview(self, task: Task | Path, backend: str) -> HeaderState:
        """The header before the task is loaded: id, title and target read from task.toml unvalidated."""
        if isinstance(task, Path):
            preview = task_preview(task)
            return HeaderState(task=preview["id"], title=preview["title"],
                               target=self.sessions.options.target or preview["target"], backend=backend)
        return HeaderState(task=task.id, title=task.title, target=self.sessions.options.target or task.target,
                           backend=backend)

    # --- what the tests and the palette read --------------------------------------------------------

    @property
    def audit_task(self) -> Task | None:
        return self.session.task if self.session is not None else None

    @property
    def draft(self) -> Draft | None:
        return self.session.review.draft if self.session is not None else None

    @property
    def header_state(self) -> HeaderState:
        ws = self.workstation
        if ws is None or not ws.is_mounted:
            return self._preview
        return ws.query_one(AuditHeader).state

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

    # --- notifications: kept, shown in the footer's message line (errors also as a toast) ----------

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notification is kept in `notices` (the `!` screen lists them). Information and warnings
        show in the footer for `timeout` seconds, covering no log line and no finding; an error is also a
        toast, as it must not be missed. Thread-safe, like Textual's."""
        notice = Notice(message, title, severity, datetime.now())
        self.notices.append(notice)
        if severity == "error":
            super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        else:
            self.post_message(NoticePosted(notice, timeout if timeout is not None else 5.0))

    @on(NoticePosted)
    def _flash_notice(self, message: NoticePosted) -> None:
        # The footer of the screen on top (the workstation's or the queue's; under a modal, the one below it).
        footer = next((f for screen in reversed(self.screen_stack) if screen.is_mounted
                       for f in screen.query(KeyFooter)), None)
        if footer is None:
            return
        notice = message.notice
        style = "bold $text-warning" if notice.severity == "warning" else "bold $text-primary"
        text = Content.assemble((f"{notice.title}: " if notice.title else "", style),
                                (" ".join(notice.message.split()), "$text-warning" if notice.severity == "warning" else ""))
        footer.flash(text, message.seconds, more=f"{keymap.app_key(self, 'app.notices')} all notices")

    def action_notices(self) -> None:
        from nkitui.app.screens.notices import NoticesScreen

        if not isinstance(self.screen, NoticesScreen):
            self.push_screen(NoticesScreen(self.notices))

    # --- screens and start-up --------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        if self.queue_mode:
            self._queue_screen = QueueScreen(self.task_dir, self.sessions.options, auto=self._auto_queue)
            return self._queue_screen
        return self._new_workstation()

    def _new_workstation(self) -> WorkstationScreen:
        screen = WorkstationScreen()
        screen.layout_preference = self.config.layout
        return screen

    @property
    def workstation(self) -> WorkstationScreen | None:
        """The workstation while it is on screen (under a modal, too); None while the queue is shown."""
        for screen in self.screen_stack:
            if isinstance(screen, WorkstationScreen):
                return screen
        return None

    def _report_startup_problems(self) -> None:
        if self._startup_reported:
            return
        self._startup_reported = True
        for problem in self.startup_problems:
            self.notify(problem, title="Configuration problem", severity="error", timeout=20)

    async def on_event(self, event: events.Event) -> None:
        # Keys pressed while the task opens wait for it (they would find no area, or no task, yet)
        # and are replayed in order once it is open: nothing typed in the first second is lost.
        if isinstance(event, events.Key) and id(event) in self._replayed:
            self._replayed.discard(id(event))
        elif (isinstance(event, events.Key) and self._held_keys is not None and not event.is_forwarded
                and event.key not in UNHELD_KEYS):
            self._held_keys.append(event)
            return
        await super().on_event(event)

    @property
    def holding_keys(self) -> bool:
        """Are keys typed now held back, to be replayed once the task or queue is shown?"""
        return self._held_keys is not None

    def _release_keys(self) -> None:
        """Replay the held keys, one at a time, each once the one before has had its effect."""
        # One at a time, as if typed: a key's effects are often queued (a digit moves the focus to
        # its area through a queued call), and the next key must find them done ("2" then "m" must
        # reach the run area). Keys typed during the replay are held behind it, so order is kept.
        if not self._replaying:
            self._replaying = True
            self._replay_next_key()

    def _replay_next_key(self) -> None:
        held = self._held_keys
        if not held:
            self._held_keys, self._replaying = None, False
            return
        key = held.pop(0)
        replay = events.Key(key.key, key.character)
        self._replayed.add(id(replay))
        self.post_message(replay)
        self.call_after_refresh(self._replay_next_key)

    @on(WorkstationScreen.Ready)
    def _workstation_ready(self) -> None:
        self._report_startup_problems()
        ws = self.workstation
        assert ws is not None
        if self._first_task is not None and not isinstance(self._first_task, Path):
            self._preview = self._header_preview(self._first_task, self.sessions.options.backend)
        ws.query_one(AuditHeader).state = self._preview
        ws.show_area("source")
        # The slow work starts once the first frame is on screen: its imports (numpy, git,
        # tree-sitter) would otherwise hold the interpreter while the shell is being drawn.
        self.call_after_refresh(self._start)

    def _start(self) -> None:
        ws = self.workstation
        if ws is None or not ws.areas_mounted:  # the lazily mounted areas are not there yet
            self.call_after_refresh(self._start)
            return
        self.view = SessionView(ws)
        if isinstance(self._first_task, Path):
            self.run_worker(self._load_task, name="load task", group="task", thread=True, exclusive=True,
                            exit_on_error=False)
        elif self._first_task is not None:
            self.open_task(self._first_task)

    def _load_task(self) -> None:
        with WORKER_IMPORTS:
            from nkitui.task import TaskError, load_task
        try:
            task = load_task(self.task_dir)
        except TaskError as exc:
            self.call_from_thread(self._task_failed, list(exc.problems) + list(exc.warnings))
            return
        self.call_from_thread(self.open_task, task)

    def _task_failed(self, problems: list) -> None:
        from nkitui.app.screens.problems import TaskProblemsScreen

        self.task_problems = problems
        self.session_started = True  # nothing more will start
        ws = self.workstation
        if ws is not None:
            header = ws.query_one(AuditHeader)
            header.state = header.state.with_(run="error", run_detail="task cannot be opened")
        self.push_screen(TaskProblemsScreen(str(self.task_dir), problems))
        self._release_keys()

    def open_task(self, task: Task) -> AuditSession:
        """Show the task's session: made and started on first open, shown as it was left afterwards
        (a queue of tasks opens each with this)."""
        session, new = self.sessions.open(task)
        if new:
            session.subscribe(partial(self._from_session, session))
        self.show_session(session, start=new)
        return session

    def show_session(self, session: AuditSession, *, start: bool = False) -> None:
        ws, view = self.workstation, self.view
        assert ws is not None and view is not None
        self.session = session
        for placeholder in ws.query("#areas-loading"):
            placeholder.remove()
        ws.show_area(ws.current_area)
        if start:
            view.open(session)
        else:
            view.switch_to(session)
        self.session_started = True
        self._release_keys()

    # --- the queue of tasks ----------------------------------------------------------------------------

    @property
    def queue_screen(self) -> QueueScreen | None:
        return self._queue_screen if self.queue_mode else None

    @property
    def queue(self) -> TaskQueue | None:
        """The queue's state (nkitui.session.queue) when nkitui was opened on a folder of tasks."""
        qs = self.queue_screen
        return qs.queue if qs is not None else None

    @on(QueueScreen.Ready)
    def _queue_ready(self) -> None:
        self._report_startup_problems()
        if self._workstation_screen is None and self._held_keys is not None:
            self._release_keys()  # the folder is a queue: keys typed while it was read go to it
        if self._workstation_screen is None:
            self.session_started = True  # nothing else starts until a task is opened

    @on(QueueScreen.NotAQueue)
    def _not_a_queue(self) -> None:
        """The folder is one task itself (or holds none): open it as `nkitui TASK_DIR` always did."""
        self.queue_mode = False
        self._queue_screen = None
        self._first_task = self.task_dir
        if self._held_keys is None:  # keys typed while the folder was read are held already
            self._held_keys = []
        # On top of the (empty) queue screen: the base screen of the stack cannot be switched away.
        self.push_screen(self._new_workstation())

    @on(QueueScreen.TaskWanted)
    def _task_wanted(self, message: QueueScreen.TaskWanted) -> None:
        self.open_from_queue(message.task)

    def open_from_queue(self, task: Task) -> None:
        """Show the workstation on `task` (made the first time, kept afterwards with every session)."""
        ws = self._workstation_screen
        if ws is None:
            ws = self._workstation_screen = self._new_workstation()
            self.install_screen(ws, name="workstation")
            self._first_task = task
            self._held_keys = []  # keys typed while it builds are replayed once the task is shown
            self.session_started = False
            self.push_screen(ws)  # Ready -> _start -> open_task
            return
        if self.screen is not ws:
            self.push_screen(ws)
        if self.view is None:  # still building: _start opens the newest wish
            self._first_task = task
            return
        self.open_task(task)

    def action_back_to_queue(self) -> None:
        """Back to the queue: the task's session stays as it is (a run goes on); its row is read again."""
        ws, qs = self.workstation, self.queue_screen
        if ws is None or qs is None or self.screen is not ws:
            return
        session = self.session
        if session is not None and session.review.ready:
            session.review.save_now()  # the queue reads "my draft" from the draft store
        self.pop_screen()
        if session is not None and (key := qs.queue.key_for(session.task.root)) is not None:
            qs.list.move_to(key)
            qs.read_rows([key])

    def action_next_task(self) -> None:
        """Open the next task of the queue (in its order on screen) that needs my review."""
        qs, session = self.queue_screen, self.session
        if qs is None:
            return
        current = qs.queue.key_for(session.task.root) if session is not None else None
        key = qs.queue.next_needing_review([r.key for r in qs.list.rows], current)
        task = qs.queue.tasks[key].task if key is not None else None
        if key is None or task is None:
            self.notify("No other task shown in the queue needs your review.", timeout=4)
            return
        if session is not None and session.review.ready:
            session.review.save_now()
        if current is not None:
            qs.read_rows([current])
        qs.list.move_to(key)
        self.open_task(task)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("back_to_queue", "next_task"):
            # Only from the workstation of a queue; otherwise Escape is someone else's (and not in the footer).
            ws = self.workstation
            return self.queue_mode and ws is not None and self.screen is ws
        if action in TASK_ACTIONS and self.workstation is None:
            return False  # the queue is shown: r, x, 1-4 ... mean nothing there
        return True

    @on(QueueTaskFinished)
    def _batch_finished_task(self, message: QueueTaskFinished) -> None:
        """A batch evaluated a task that has an open session: the session lists the new run and shows it
        if it shows none (a run it shows, or one going, is left alone)."""
        session = self.sessions.get(Path(message.path))
        if session is not None and not session.runs.running:
            self.run_worker(session.runs.restore, name="show the batch's run", group=f"restore-{session.task.id}",
                            thread=True, exit_on_error=False)

    def _queue_follows(self, session: AuditSession, event: ev.SessionEvent) -> None:
        """The queue's row of a session's task follows its runs and submissions (shown or not)."""
        qs = self.queue_screen
        if qs is None:
            return
        key = qs.queue.key_for(session.task.root)
        if key is None:
            return
        match event:
            case ev.RunStarting():
                qs.session_running(key, True)
            case ev.RunEnded():
                qs.session_running(key, False)
            case ev.ReviewSubmitted():
                qs.read_rows([key])

    def _from_session(self, session: AuditSession, event: ev.SessionEvent) -> None:
        """The observer of every session (called from any thread): to the UI thread as a message."""
        self.post_message(SessionUpdate(session, event))

    @on(SessionUpdate)
    def _session_update(self, message: SessionUpdate) -> None:
        """A session changed. The shown one is drawn (SessionView); others keep their state until shown."""
        self._queue_follows(message.session, message.event)
        if message.session is not self.session or self.view is None:
            return
        event = message.event
        self.view.show_event(event)
        match event:
            case ev.RunShown(how="reopened"):
                self.action_show_area("run")
            case ev.ReviewSubmitted(result=result):
                self._review_committed(result)
            case ev.AuditorResolved(identity=identity) if identity.needs_asking and not self._asked_auditor:
                self._asked_auditor = True
                self.ask_auditor(identity.warning)
            case ev.RepositoryChecked(state=state) if state.can_prepare:
                self.offer_repository(state)

    # --- central worker error handling -----------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"{type(error).__name__}: {error}", title=f"{event.worker.name} failed",
                        severity="error", timeout=15)

    # --- the areas -------------------------------------------------------------------------------

    def area(self, name: str) -> Widget:
        return self._ws().area(name)

    def _ws(self) -> WorkstationScreen:
        ws = self.workstation
        assert ws is not None, "the workstation is not on screen"
        return ws

    @property
    def source_area(self) -> SourceArea:
        return self._ws().source_area

    @property
    def run_area(self) -> RunArea:
        return self._ws().run_area

    @property
    def engines_area(self) -> EnginesArea:
        return self._ws().engines_area

    @property
    def rubric_area(self) -> RubricArea:
        return self._ws().rubric_area

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

    def action_zoom(self) -> None:
        ws = self.workstation
        if ws is not None and self.screen is ws:
            ws.toggle_zoom()

    def with_run_log(self, act: Callable[[LogView], None]) -> None:
        """Show the Run area's log, focus it and act on it (the palette's log commands)."""
        self.action_show_area("run")
        log = self.run_area.log
        log.focus()
        act(log)

    # --- Source: revisions and lines ------------------------------------------------------------------

    @on(RevisionsWanted)
    def _pick_revisions(self) -> None:
        from nkitui.app.screens.revisions import RevisionPicker

        area, session, view = self.source_area, self.session, self.view
        if not area.revisions or session is None or view is None:
            self.notify("The task has no git history to compare.", timeout=4)
            return

        def chosen(pair: tuple[Revision, Revision] | None) -> None:
            if pair is not None:
                area.set_revisions(area.revisions, pair)
                view.load_diff(session, pair)

        self.push_screen(RevisionPicker(area.revisions, area.diff_pair), chosen)

    @on(ShowSource)
    def _show_source(self, message: ShowSource) -> None:
        self.action_show_area("source")
        if not self.source_area.show_line(message.file, message.line):
            self.notify(f"{message.file}:{message.line} is not one of the files shown", timeout=4)

    @on(LogView.LocationWanted)
    def _log_location(self, message: LogView.LocationWanted) -> None:
        """Enter on a log line: the Source area at the file:line it names (an error, a frame, a finding)."""
        from nkitui.session.runlog import line_location

        if self.session is None:
            return
        where = line_location(message.text, self.session.task_files())
        if where is None:
            self.notify("This line names no line of the task's files.", timeout=3)
            return
        self.post_message(ShowSource(*where))

    # --- runs ------------------------------------------------------------------------------------

    def action_start_run(self) -> None:
        session = self.session
        if session is None:
            self.notify("The task is still loading.", timeout=3)
            return
        if session.runs.running:
            self.notify(f"A run is already in progress ({keymap.app_key(self, 'app.cancel')} cancels it).", timeout=3)
            return
        if not session.task.runnable:
            self.notify("This task declares no kernel entry, reference or tensors, so it cannot run. "
                        f"Write a task.toml (nkitui task init {session.task.root.name}).",
                        title="Cannot run", severity="error", timeout=10)
            return
        self.run_area.start_run(session)

    def action_cancel_run(self) -> None:
        if self.session is None or not self.session.runs.cancel():
            self.notify("No run in progress.", timeout=3)

    def action_run_history(self) -> None:
        from nkitui.app.screens.runs import CompareRuns, OpenRun, RunsScreen

        session = self.session
        if session is None or not session.runs.summaries:
            self.notify(f"No earlier runs of this task: press {keymap.app_key(self, 'app.run')} to run it.", timeout=3)
            return

        def chosen(choice: RunChoice | None) -> None:
            match choice:
                case OpenRun(run_id=run_id):
                    self.run_area.reopen(session, run_id)
                case CompareRuns(run_a=run_a, run_b=run_b):
                    self.run_area.compare(session, run_a, run_b)

        self.push_screen(RunsScreen(list(session.runs.summaries)), chosen)

    # --- quitting ----------------------------------------------------------------------------------

    async def action_quit(self) -> None:
        running = [s for s in self.sessions if s.runs.running]
        queue = self.queue
        batch = queue is not None and queue.batch_running
        if not running and not batch:
            self._close_and_exit()
            return
        from nkitui.app.screens.prompts import ConfirmScreen

        def answered(quit_now: bool | None) -> None:
            if quit_now:
                self._close_and_exit()

        if running:
            live = running[0].runs.live
            what = f"run {live.run_id}" if live is not None and live.run_id else "a run"
            where = f" of {running[0].task.id}" if len(self.sessions) > 1 else ""
            going = f"{what[0].upper()}{what[1:]}{where} is still going"
            if batch:
                going += ", and so is a batch"
            title, yes = "Quit during a run?", "cancel the run and quit"
            if batch:
                yes = "cancel them and quit"
            text = (f"{going}. Quitting cancels {'them' if batch else 'it'} (results finished so far are kept in the "
                    "run store). Your draft is saved either way.")
        else:
            assert queue is not None and queue.progress is not None
            done = len(queue.progress.finished)
            title, yes = "Quit during a batch?", "cancel the batch and quit"
            text = (f"The batch is still going ({done} of {queue.progress.total or '?'} tasks done). Quitting cancels "
                    "the evaluations running now; finished results are kept in the run store, and `nkitui batch "
                    f"{queue.root} --resume` (or B in the queue) runs the rest later.")
        self.push_screen(ConfirmScreen(title, text, yes=yes, no="keep working"), answered)

    def _cancel_batch(self, wait_s: float = 5.0) -> None:
        """Cancel the queue's batch and give its evaluations a moment to stop (their process groups get
        SIGTERM, then SIGKILL), so none outlives nkitui."""
        queue = self.queue
        if queue is not None and queue.cancel_batch() and queue.batch is not None:
            queue.batch.wait(timeout=wait_s)

    def _close_and_exit(self) -> None:
        self._cancel_batch()
        self.sessions.close_all()
        self.exit(0)

    def on_unmount(self) -> None:
        self._cancel_batch()
        self.sessions.close_all()

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

    # --- the auditor and the repository ---------------------------------------------------------------

    def ask(self, show: Callable[[Callable[[], None]], None]) -> None:
        """Ask a question when the one before it is answered: `show(done)` pushes its screen and calls
        `done` once answered (the auditor first, then the repository: its first commit needs the name)."""
        self._questions.append(show)
        if not self._asking:
            self._next_question()

    def _next_question(self) -> None:
        self._asking = bool(self._questions)
        if self._questions:
            self._questions.popleft()(self._next_question)

    def ask_auditor(self, why: str, then: Callable[[], None] | None = None) -> None:
        """Ask who the auditor is; remember the answer in the config file and use it in every session."""
        from nkitui.app.screens.prompts import AuditorScreen

        def show(done: Callable[[], None]) -> None:
            path = self.config.path
            session = self.session
            current = session.identity.display if session is not None and not session.identity.needs_asking else ""

            def answered(text: str | None) -> None:
                if text:
                    self.set_auditor(text)
                if then is not None:
                    then()
                done()

            self.push_screen(AuditorScreen(why, current, str(path) if path else ""), answered)

        self.ask(show)

    def set_auditor(self, text: str) -> None:
        """Use `text` ("Name <e-mail>") as the auditor from now on, and remember it in the config."""
        self.config = replace(self.config, auditor=text)
        self.sessions.options = replace(self.sessions.options, auditor=text)
        for session in self.sessions:
            session.set_auditor(text)
        if (qs := self.queue_screen) is not None:
            qs.set_auditor(text)
        path = self.config.path
        if path is None:
            return
        try:
            save_setting(path, "auditor", text)
        except OSError as exc:
            self.notify(f"Could not remember it in {path}: {exc}. It holds until nkitui quits.",
                        title="Auditor", severity="error", timeout=10)
            return
        self.notify(f"Reviews are submitted as {text} (remembered in {path}).", title="Auditor", timeout=5)

    def action_set_auditor(self) -> None:
        self.ask_auditor("Who submits reviews from this workstation? Your name, and an e-mail if you like.")

    def offer_repository(self, state: RepositoryState) -> None:
        """Say that reviews cannot be committed from the task folder yet, and offer to make it ready."""
        from nkitui.app.screens.prompts import ConfirmScreen

        if self.session is None or state.root in self._offered_repository:
            return
        self._offered_repository.add(state.root)

        def show(done: Callable[[], None]) -> None:
            def answered(yes: bool | None) -> None:
                if yes:
                    self.prepare_repository()
                else:
                    self.notify(f"{state.message}. The palette (:) can still make it one.", severity="warning",
                                title="Not a repository", timeout=8)
                done()

            self.push_screen(ConfirmScreen("Reviews need a git repository", f"{state.message}.\n\nnkitui can "
                                           f"{state.offer}.", yes="do it now", no="not now"), answered)

        self.ask(show)

    def prepare_repository(self) -> None:
        session, view = self.session, self.view
        if session is None or view is None:
            return

        def work() -> None:
            from nkitui.review import ReviewError

            try:
                state = session.prepare_repository()
            except ReviewError as exc:
                problem = exc.problems[0] if exc.problems else None
                text = f"{problem.message} — {problem.fix}" if problem else str(exc)
                self.notify(text, title="The repository was not made", severity="error", timeout=15)
                return
            if state.ready:
                self.notify(f"{state.root} is a git repository now, with the task's files as its first commit.",
                            title="Repository", timeout=6)
                self.call_from_thread(view.load_history, session)

        self.run_worker(work, name="make the repository", group="repository", thread=True, exclusive=True,
                        exit_on_error=False)

    # --- evidence and review ---------------------------------------------------------------------

    def focused_evidence(self) -> Evidence | None:
        node = self.screen.focused
        while node is not None:
            getter = getattr(node, "evidence_at_cursor", None)
            if callable(getter):
                return getter()
            node = node.parent if isinstance(node.parent, Widget) else None
        return None

    def _review_ready(self) -> bool:
        """True once the rubric and draft are loaded; otherwise says so."""
        if self.session is not None and self.session.review.ready:
            return True
        self.notify("The rubric is still loading.", severity="warning", timeout=4)
        return False

    def can_attach(self) -> bool:
        return self.session is not None and self.session.review.ready and self.focused_evidence() is not None

    def action_attach_evidence(self) -> None:
        evidence = self.focused_evidence()
        if evidence is None:
            self.notify("Nothing to attach here: focus a finding, a source or diff line, a log line or a metric.",
                        timeout=4)
            return
        if not self._review_ready():
            return
        assert self.session is not None
        area = self.rubric_area
        crit = area.current_criterion
        link = review_evidence(evidence, crit.id if crit is not None else None)
        if not self.session.review.attach(link, evidence.run_id):
            self.notify(f"Already attached: {link.ref}", timeout=3)
            return
        area.refresh_lists()
        target = crit.title if crit is not None else "the review"
        self.notify(f"{link.kind} {link.ref}", title=f"Evidence attached to {target}", timeout=4)

    def on_rubric_area_draft_edited(self) -> None:
        if self.session is not None:
            self.session.review.edited()

    @on(CommentWanted)
    def _comment_wanted(self, message: CommentWanted) -> None:
        from nkitui.app.screens.comment import LineCommentScreen

        if not self._review_ready():
            return
        session = self.session
        assert session is not None
        crit = self.rubric_area.current_criterion
        where = message.location

        def save(text: str | None) -> None:
            if not text:
                return  # a cancelled comment keeps the selection, to try again
            session.review.comment(message.file, message.line, message.end, text, crit.id if crit is not None else None)
            if message.view is not None:
                message.view.clear_selection()
            self.rubric_area.refresh_lists()
            self.notify(f"{where}: {text}", title="Comment added to the draft", timeout=4)

        self.push_screen(LineCommentScreen(where, crit.title if crit is not None else "the review as a whole"), save)

    def open_evidence(self, kind: str, index: int) -> None:
        """Show where an evidence link or a line comment points: the line, the log line or the metric."""
        from nkitui.app.adapters import parse_location

        draft = self.draft
        if draft is None or self.session is None:
            return
        if kind == "comment":
            c = draft.comments[index]
            self.post_message(ShowSource(c.file, c.start))
            return
        e = draft.evidence[index]
        if e.kind in ("finding", "source", "diff"):
            where = parse_location(e.ref)
            if where is None:
                self.notify(f"{e.ref} names no line to show.", timeout=3)
            else:
                self.post_message(ShowSource(*where))
        elif e.kind == "log":
            run_id, _, span = e.ref.partition("#L")
            shown = self.session.runs.shown
            self.action_show_area("run")
            if shown is None or shown.run_id != run_id or self.session.runs.running:
                self.notify(f"The log line is from run {run_id}: reopen that run "
                            f"({keymap.app_key(self, 'app.runs')}) to see it.", timeout=5)
            elif span.split("-")[0].isdigit():
                log = self.run_area.log
                log.following = False
                log.move_cursor(log.store.row_of(int(span.split("-")[0]) - 1) or 0, center=True)
        else:
            self.action_show_area("engines" if e.kind == "metric" else "run")

    def action_edit_in_editor(self) -> None:
        if not self._review_ready():
            return
        area = self.rubric_area
        new = self.edit_text_externally(area.current_comment())
        if new is not None:
            area.set_comment_text(new.rstrip("\n"))

    def action_submit_review(self) -> None:
        """ctrl+s: validate, say who submits (asking first when nobody said), confirm, commit."""
        session = self.session
        if session is None or not session.review.ready or session.review.submitting:
            return
        errors = [p for p in session.review.check() if p.severity == "error"]
        if errors:
            self.action_show_area("rubric")
            self.rubric_area.show_verdict_page()
            first = errors[0]
            more = f" (and {len(errors) - 1} more, listed on the verdict page)" if len(errors) > 1 else ""
            self.notify(f"{first.message} — {first.fix}{more}", title="Not ready to submit", severity="error",
                        timeout=8)
            return
        if session.repository is not None and session.repository.can_prepare:
            self._offered_repository.discard(session.repository.root)
            self.offer_repository(session.repository)
            return
        if session.identity.needs_asking:
            self.ask_auditor(f"Before the review is committed: {session.identity.warning}.", then=self._confirm_submit)
            return
        self._confirm_submit()

    def _confirm_submit(self) -> None:
        from nkitui.app.screens.review import ConfirmSubmit, submit_summary

        session = self.session
        if session is None:
            return

        def confirmed(ok: bool | None) -> None:
            if ok:
                self.rubric_area.run_worker(session.review.submit, name="submit review", group="review-submit",
                                            thread=True, exclusive=True, exit_on_error=False)

        self.push_screen(ConfirmSubmit(submit_summary(session)), confirmed)

    def _review_committed(self, result) -> None:
        from nkitui.app.screens.review import SubmittedScreen
        from nkitui.review import render_markdown

        record = result.record
        commit_line = f"commit {result.short_commit}  {record.relpath}  ({record.verdict}, by {record.auditor})"
        self.notify(commit_line, title="Review committed", timeout=10)
        assert self.session is not None and self.session.review.rubric is not None
        self.push_screen(SubmittedScreen(commit_line, render_markdown(record, self.session.review.rubric)))

    # --- the command palette ---------------------------------------------------------------------------

    def palette_commands(self) -> list[PaletteCommand]:
        """Commands valid now. Each checks the state it needs, so the palette never offers a dead end."""
        c: list[PaletteCommand] = []

        def add(title: str, help: str, run: Callable[[], object]) -> None:
            c.append(PaletteCommand(title, help, run))

        ws, session = self.workstation, self.session
        qs = self.queue_screen
        if qs is not None and ws is None:  # the queue is shown: its commands, then the general ones
            for title, help_text, run in qs.palette_entries():
                add(title, help_text, run)
            who = qs.identity
            if who is not None:
                add("Auditor: set your name", f"Reviews are submitted as {who.display} (from {who.source})",
                    self.action_set_auditor)
            self._general_commands(add)
            return c
        if qs is not None:
            add("Back to the queue", f"The queue of tasks ({keymap.app_key(self, 'app.queue')}); this task stays as it is",
                self.action_back_to_queue)
            add("Next task that needs my review", "Open the next task of the queue with no current review of mine",
                self.action_next_task)
        running = session is not None and session.runs.running
        if session is not None and not running and session.task.runnable:
            backend = session.runs.backend.label if session.runs.backend else session.options.backend
            add("Run: start", f"Run the task on {backend}", self.action_start_run)
        if running:
            add("Run: cancel", "Cancel the run in progress", self.action_cancel_run)
        if session is not None and session.runs.summaries:
            add("Runs: history", "Reopen an earlier run, or compare two", self.action_run_history)
        for area, title in (("source", "Source"), ("run", "Run"), ("engines", "Engines"), ("rubric", "Rubric")):
            if ws is not None and ws.current_area != area:
                add(f"Go to {title}", f"Show the {title} area", partial(self.action_show_area, area))
        if ws is not None and self.view is not None:
            source = self.source_area
            if source.mode == "aligned":
                add("Source: show git diff", "Diff between two revisions of the task", source.action_toggle_mode)
            else:
                add("Source: show CUDA beside NKI", "Aligned side-by-side view", source.action_toggle_mode)
                layout = "unified" if source.diff.split else "split"
                add(f"Source: {layout} diff", f"Show the diff {layout}", source.action_toggle_diff_layout)
            if source.mode == "aligned" and source.code.findings_at_cursor():
                add("Source: explain the finding here", "The whole explanation of the finding on the cursor's line",
                    source.action_explain_finding)
            if source.revisions:
                add("Source: pick revisions", "Choose the two revisions to compare", source.action_pick_revisions)
            other = "split" if ws.layout_name == "tabs" else "tabs"
            add(f"Layout: {other}", f"Switch to the {other} layout", self.action_toggle_layout)
            run_area = self.run_area
            add("Log: search", "Search the run log", partial(self.with_run_log, LogView.action_search))
            add("Log: cycle level filter", "All, info+, warnings+, errors",
                partial(self.with_run_log, LogView.action_cycle_level))
            add("Run: show log" if run_area.showing_results else "Run: show results",
                "Switch the Run area between log and results", run_area.action_toggle_view)
        if session is not None and session.review.ready:
            add("Review: submit", "Validate the review and commit it to the task repository", self.action_submit_review)
            add("Review: edit comment in $EDITOR", "Open the current criterion's comment in your editor",
                self.action_edit_in_editor)
        if self.can_attach():
            add("Evidence: attach focused item", "Attach what is under the cursor to the current criterion",
                self.action_attach_evidence)
        if session is not None:
            who = session.identity
            add("Auditor: set your name", f"Reviews are submitted as {who.display} (from {who.source})",
                self.action_set_auditor)
            if session.repository is not None and session.repository.can_prepare:
                add("Git: make the task folder a repository", session.repository.offer, self.prepare_repository)
        self._general_commands(add)
        return c

    def _general_commands(self, add: Callable[[str, str, Callable[[], object]], None]) -> None:
        """Themes, notices, help, keys, quit: valid on every screen."""
        for name in self.theme_names:
            if name != self.theme:
                add(f"Theme: {name}", f"Switch to the {name} theme", partial(self.set_theme, name))
        add("Reload themes", f"Read the theme files again (yours: {self.user_themes_dir})", self.action_reload_themes)
        add("Notices", f"Every notice in full ({keymap.app_key(self, 'app.notices')})", self.action_notices)
        add("Help for the focused area", "F1", self.action_help)
        add("Keys", "Every key, filterable (?)", self.action_keys)
        add("Quit", "Leave nkitui (the draft is autosaved)", self.action_quit)

    # --- the auditor's editor ----------------------------------------------------------------------

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
