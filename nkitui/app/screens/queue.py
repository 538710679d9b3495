"""The queue screen: every task under a folder, one row each, and a batch evaluating them in the background.

    header   nkitui │ queue demo │ 3 of 12 reviewed, 2 failing, 1 outdated │ Ada
    bar      all tasks · sort: folder · 12 tasks         (or the text filter being typed)
    list     task · last run · findings · review         (QueueList; more columns when wide)
    detail   the highlighted task: title, op, target; its run's checks, who reviewed it
    batch    ▶2 ✓3 ✗1 · 6 of 12 · 0:42 · ETA 0:55 · x cancels   (while and after a batch)
    footer   the keys

The queue's state lives in nkitui.session.queue.TaskQueue (headless); this screen runs its blocking
calls in workers and draws it. Rows appear as soon as the tasks are found, their facts fill in as
they are read (verdicts and reviews first, then the static findings, cached by the files' hashes),
so the first frame never waits. Opening a task asks the app (TaskWanted); the app keeps one audit
session per task, so coming back and opening it again shows it as it was left.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on
from textual.app import ComposeResult
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input
from textual.worker import get_current_worker

from nkitui.app import keymap
from nkitui.app.imports import WORKER_IMPORTS
from nkitui.app.screens.queue_list import QueueList, columns_for
from nkitui.app.widgets.footer import KeyFooter
from nkitui.app.widgets.status import StatusLine
from nkitui.session.queue import REVIEW_LABELS, SORTS, STATE_FILTERS, QueueRow, TaskQueue, clock
from nkitui.session.queue_facts import FindingsCache

if TYPE_CHECKING:
    from nkitui.batch.events import BatchEvent
    from nkitui.session import AuditorIdentity, SessionOptions
    from nkitui.task import Task

REFRESH_S = 0.25  # rows that changed are re-sorted and re-filtered at most this often


class FilterInput(Input):
    BINDINGS = keymap.bindings("queue_filter")

    class Dropped(Message):
        """Escape in the filter: the text filter goes."""

    def action_drop(self) -> None:
        self.post_message(self.Dropped())


class QueueScreen(Screen):
    AUTO_FOCUS = "#queue-list"
    BINDINGS = keymap.bindings("queue")

    DEFAULT_CSS = """
    QueueScreen #queue-header { background: $panel; padding: 0; }
    QueueScreen #queue-columns { color: $text-muted; background: $surface; text-style: bold; }
    QueueScreen #queue-filter { height: 1; border: none; padding: 0 1; background: $boost; display: none; }
    QueueScreen #queue-filter.-shown { display: block; }
    QueueScreen .detail { background: $panel; color: $foreground; }
    QueueScreen #queue-batch { display: none; background: $boost; }
    QueueScreen #queue-batch.-shown { display: block; }
    """

    class TaskWanted(Message):
        """Open this task in the workstation (Enter on a row)."""

        def __init__(self, task: Task, key: str) -> None:
            super().__init__()
            self.task = task
            self.key = key

    class Ready(Message):
        """The tasks are found and listed (their facts may still be coming)."""

    class NotAQueue(Message):
        """The folder is one task itself (or holds none): the app opens it as a task, as before."""

    class Discovered(Message):
        def __init__(self, identity: AuditorIdentity | None, error: str = "") -> None:
            super().__init__()
            self.identity = identity
            self.error = error

    class RowsChanged(Message):
        def __init__(self, keys: set[str] | None = None, done: bool = False) -> None:
            super().__init__()
            self.keys = keys
            self.done = done  # every row has been read

    class BatchUpdate(Message):
        """A batch event, already applied to the queue's rows; `keys`: the rows it changed."""

        def __init__(self, event: BatchEvent, keys: set[str]) -> None:
            super().__init__()
            self.event = event
            self.keys = keys

    def __init__(self, root: Path, options: SessionOptions, *, auto: bool = False,
                 findings_cache: FindingsCache | None = None) -> None:
        super().__init__(id="queue")
        self.options = options
        self.auto = auto  # the folder may turn out to be one task (then NotAQueue)
        self.queue = TaskQueue(root, store_root=options.run_store, draft_store=options.draft_store,
                               findings_cache=findings_cache or FindingsCache())
        self.identity: AuditorIdentity | None = None
        self.state_filter = "all"
        self.text_filter = ""
        self.sort = "folder"
        self.reverse = False
        self.filled = False  # every row read once (tests wait for it)
        self._first_discovery = True
        self._dirty = False
        self.error = ""
        self.exported: Path | None = None  # where the last export went

    # --- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusLine(id="queue-header")
        yield StatusLine(id="queue-bar", classes="strip")
        yield FilterInput(placeholder="filter: words that must all appear (id, title, op, state…)", id="queue-filter")
        yield StatusLine(id="queue-columns")
        yield QueueList(id="queue-list")
        yield StatusLine(id="queue-detail", classes="strip detail")
        yield StatusLine(id="queue-detail-2", classes="strip detail")
        yield StatusLine(id="queue-batch", classes="strip")
        yield KeyFooter()

    @property
    def list(self) -> QueueList:
        return self.query_one(QueueList)

    def on_mount(self) -> None:
        self.draw_header()
        self.draw_bar()
        self.query_one("#queue-detail", StatusLine).update(f"Looking for tasks under {self.queue.root}…")
        self.set_interval(REFRESH_S, self._refresh_if_dirty, name="queue-refresh")
        self.set_interval(1.0, self.draw_batch, name="queue-batch-clock")
        # The tasks are looked for once the first frame is on screen: the imports of that work (git,
        # the task loader, numpy) would otherwise hold the interpreter while the screen is drawn.
        self.call_after_refresh(self.discover)

    def on_resize(self) -> None:
        self.draw_columns()
        self.draw_detail()

    # --- finding the tasks and reading them --------------------------------------------------------

    def discover(self, reread: bool = True) -> None:
        self.run_worker(lambda: self._discover(reread), name="find the tasks", group="queue-discover", thread=True,
                        exclusive=True, exit_on_error=False)

    def _discover(self, reread: bool) -> None:
        with WORKER_IMPORTS:
            from nkitui.session.identity import resolve_identity
        try:
            rows = self.queue.discover()
        except OSError as exc:
            identity = resolve_identity(self.queue.root, self.options.auditor)
            self.post_message(self.Discovered(identity, f"{self.queue.root}: {exc.strerror or exc}"))
            return
        # "Me" as the tasks' sessions will see it: git's identity as a task repository answers it
        # (its own user.name wins over the global one), unless nkitui's config names the auditor.
        where = next((r.root for r in rows if r.loadable), self.queue.root)
        identity = resolve_identity(where, self.options.auditor)
        self.queue.set_me(identity.slug)
        first, self._first_discovery = self._first_discovery, False
        if self.auto and first and (
                not rows or (len(rows) == 1 and rows[0].root == self.queue.root)):
            self.post_message(self.NotAQueue())
            return
        self.post_message(self.Discovered(identity))
        if reread:
            self._read_rows(list(self.queue.tasks))

    def read_rows(self, keys: list[str]) -> None:
        """Read these rows again (a task came back from the workstation, a run ended)."""
        keys = [k for k in keys if k in self.queue.tasks]
        if keys:
            self.run_worker(lambda: self._read_rows(keys, single=True), name="read queue rows",
                            group=f"queue-read-{'-'.join(keys)[:60]}", thread=True, exit_on_error=False)

    def _read_rows(self, keys: list[str], single: bool = False) -> None:
        worker = get_current_worker()
        if single:  # a few rows, each whole (its findings from the cache unless a file changed)
            for key in keys:
                self.queue.update(self.queue.read(key))
                self.post_message(self.RowsChanged({key}))
            return
        pending: set[str] = set()
        for row in self.queue.read_all(keys):
            if worker.is_cancelled:
                return
            self.queue.update(row)
            pending.add(row.key)
            if row.findings is not None or len(pending) >= 8:
                self.post_message(self.RowsChanged(pending))
                pending = set()
        self.post_message(self.RowsChanged(pending, done=True))

    def session_running(self, key: str, running: bool) -> None:
        """A run of the task's open session started or ended (its verdict is read again when it ends)."""
        self.queue.set_session_running(key, running)
        self.list.replace_row(self.queue.row(key))
        self._dirty = True
        if not running:
            self.read_rows([key])

    def set_auditor(self, text: str) -> None:
        """The auditor was named in the app: review states are read for that name from now on."""
        from nkitui.session.identity import IdentityError, parse_auditor

        try:
            self.identity = parse_auditor(text)
        except IdentityError:
            return
        self.queue.set_me(self.identity.slug)
        self.rebuild()

    @on(Discovered)
    def _discovered(self, message: Discovered) -> None:
        self.identity = message.identity
        self.error = message.error
        if message.error:
            self.query_one("#queue-detail", StatusLine).update(message.error)
            self.list.empty_message = message.error
        elif not len(self.queue):
            self.list.empty_message = (f"No tasks under {self.queue.root}: a task is a folder with a task.toml, "
                                       "or one holding an NKI port")
        self.rebuild()
        self.draw_header()
        self.app.post_message(self.Ready())

    @on(RowsChanged)
    def _rows_changed(self, message: RowsChanged) -> None:
        for key in message.keys or ():
            try:
                self.list.replace_row(self.queue.row(key))
            except KeyError:
                continue
        if message.done:
            self.filled = True
        self._dirty = True

    def _refresh_if_dirty(self) -> None:
        if self._dirty:
            self._dirty = False
            self.rebuild()

    def rebuild(self, keep: str | None = None) -> None:
        """The rows as the filters and the sort show them now; the cursor stays on its task."""
        rows = self.queue.view(state=self.state_filter, text=self.text_filter, sort=self.sort, reverse=self.reverse)
        lst = self.list
        lst.me = self.queue.me
        lst.set_rows(rows, keep=keep)
        self.draw_header()
        self.draw_bar()
        self.draw_columns()
        self.draw_detail()

    # --- drawing ----------------------------------------------------------------------------------

    def draw_header(self) -> None:
        sep = (" │ ", "$text-muted")
        name = Content.assemble((" nkitui", "bold $text-accent"), sep, ("queue ", "$text-muted"),
                                (self.queue.root.name or str(self.queue.root), "bold"))
        summary = self.queue.summary()
        if not self.queue.discovered:
            text = "looking for tasks…"
        else:
            text = summary.text() + (f" (reading {summary.unread})" if summary.unread else "")
        who = self.identity.name if self.identity is not None else ""
        warn = self.identity is not None and self.identity.needs_asking
        who_part = (f"⚠ {who}" if warn else who, "bold $text-warning" if warn else "")
        first = who.split()[0] if who.split() else who
        short_who = (f"⚠ {first}" if warn else first, who_part[1])
        variants = [Content.assemble(name, sep, (text, ""), sep, ("auditor ", "$text-muted"), who_part, " "),
                    Content.assemble(name, sep, (text, ""), sep, who_part, " "),
                    Content.assemble(name, sep, (text, ""), sep, short_who, " "),
                    Content.assemble(name, sep, (text, "")),
                    Content.assemble((" ", ""), (text, ""))]
        self.query_one("#queue-header", StatusLine).update(*variants)

    def draw_bar(self) -> None:
        label = STATE_FILTERS[self.state_filter][0]
        shown = len(self.list.rows)
        total = len(self.queue)
        text = f" “{self.text_filter}”" if self.text_filter else ""
        order = SORTS[self.sort][0] + (", reversed" if self.reverse else "")
        count = f"{shown} of {total} tasks" if shown != total else f"{total} tasks"
        filtered = self.state_filter != "all" or bool(self.text_filter)
        style = "bold $text-warning" if filtered else ""
        clear = f"  ({keymap.app_key(self, 'queue.clear')}: all tasks)" if filtered else ""
        full = Content.assemble((f"{label}{text}", style), ("  ·  ", "$text-muted"), f"sort: {order}",
                                ("  ·  ", "$text-muted"), count, (clear, "$text-muted"))
        short = Content.assemble((f"{label}{text}", style), ("  ·  ", "$text-muted"), f"sort: {SORTS[self.sort][0]}",
                                 ("  ·  ", "$text-muted"), count)
        self.query_one("#queue-bar", StatusLine).update(full, short, Content.assemble((f"{label}{text}", style),
                                                                                       " · ", count))

    def draw_columns(self) -> None:
        lst = self.list
        width = lst.scrollable_content_region.width or max(1, self.size.width - 1)
        self.query_one("#queue-columns", StatusLine).update(lst.header(width, self.sort, self.reverse))

    def draw_detail(self) -> None:
        first, second = self.detail_lines(self.list.current)
        self.query_one("#queue-detail", StatusLine).update(*first)
        self.query_one("#queue-detail-2", StatusLine).update(*second)

    def detail_lines(self, row: QueueRow | None) -> tuple[tuple[Content, ...], tuple[Content, ...]]:
        """Two lines on the highlighted task, each as variants, longest first."""
        if row is None:
            if not self.queue.discovered:
                return (Content(f"Looking for tasks under {self.queue.root}…"),), (Content(""),)
            hint = f"{keymap.app_key(self, 'queue.clear')} shows every task" if len(self.queue) else ""
            return (Content("No task matches the filter." if len(self.queue) else ""),), (Content(hint),)
        facts = [x for x in (row.op, row.namespace, row.target) if x]
        where = row.key if row.key != row.task_id else ""
        head = Content.assemble((row.task_id, "bold"), (f" ({where})" if where else "", "$text-muted"),
                                (f" — {row.title}" if row.title else "", ""),
                                (f"  · {' · '.join(facts)}" if facts else "", "$text-muted"))
        return (head,), (self._run_detail(row),)

    def _run_detail(self, row: QueueRow) -> Content:
        v = row.verdict
        parts: list[str] = []
        if row.session_running:
            parts.append("a run of the open task is going")
        elif row.batch == "running":
            parts.append(f"running in the batch{': ' + row.phase if row.phase else ''}")
        elif row.batch == "queued":
            parts.append("queued in the batch")
        if v is None:
            parts.append("reading…")
        elif v.status in ("not run", "invalid"):
            # a problem names its file from the task's folder: the row already says which task
            parts.append((v.note or v.status).replace(f"{row.root}{os.sep}", ""))
        else:
            when = f" {row.age(self.list.now)} ago" if v.at is not None else ""
            checks = f", {v.checks_passed}/{v.checks_total} checks" if v.checks_total else ""
            failed = f" (failed: {', '.join(v.failed_checks[:3])})" if v.failed_checks else ""
            parts.append(f"{v.status}{when}{checks}{failed}")
            if v.run_id:
                parts.append(f"run {v.run_id}" + (f" on {v.backend}" if v.backend else ""))
            if v.note:
                parts.append(v.note)
        if v is not None and v.commit:
            parts.append(f"commit {v.commit[:7]}" + (" + uncommitted changes" if v.dirty else ""))
        review = self._review_detail(row)
        if review:
            parts.insert(1 if len(parts) > 1 else len(parts), review)
        if row.findings is not None and row.findings.error:
            parts.append(f"analysis: {row.findings.error}")
        return Content(" · ".join(p for p in parts if p))

    def _review_detail(self, row: QueueRow) -> str:
        facts = row.review
        if facts is None:
            return ""
        state = facts.state(self.queue.me)
        bits: list[str] = []
        current, outdated = facts.auditors(current=True), facts.auditors(current=False)
        if state == "draft":
            bits.append("my draft waits")
        if current:
            bits.append("reviewed by " + ", ".join("me" if a == self.queue.me else a for a in current))
        if outdated:
            bits.append("outdated: " + ", ".join("mine" if a == self.queue.me else a for a in outdated))
        if not bits:
            bits.append("review: " + REVIEW_LABELS[state])
        return "; ".join(bits)

    @on(QueueList.CursorMoved)
    def _cursor_moved(self) -> None:
        self.draw_detail()

    # --- the batch line -------------------------------------------------------------------------------

    def draw_batch(self) -> None:
        progress = self.queue.progress
        line = self.query_one("#queue-batch", StatusLine)
        line.set_class(progress is not None, "-shown")
        if progress is None:
            return
        counts = progress.counts
        marks = [("▶", len(progress.running), "bold $text-primary"), ("✓", counts.get("passed", 0), "$text-success"),
                 ("✗", sum(n for s, n in counts.items() if s not in ("passed", "invalid", "cancelled")),
                  "bold $text-error"), ("!", counts.get("invalid", 0), "$text-warning"),
                 ("■", counts.get("cancelled", 0), "$text-muted")]
        tally: list[tuple[str, str] | str] = []
        for glyph, n, style in marks:
            if n or glyph in ("✓", "✗") or (glyph == "▶" and not progress.done):
                tally += [(f"{glyph}{n}", style), " "]
        done = len(progress.finished)
        total = progress.total or "?"
        resumed = f" ({progress.resumed} resumed)" if progress.resumed else ""
        elapsed = clock(progress.elapsed_s())
        if progress.done:
            summary = progress.summary
            verb = "cancelled" if progress.cancelling or (summary is not None and summary.cancelled) else "done"
            head = (f"batch {verb} in {elapsed}: ", "bold")
            rest = f"· {done} of {total}{resumed}"
            if verb == "cancelled" and progress.total > done:
                rest += f" · {keymap.app_key(self, 'queue.batch')} runs the rest"
            error = summary.error if summary is not None and summary.error else ""
            full = Content.assemble(head, *tally, rest, (f" · {error}" if error else "", "$text-error"))
            line.update(full, Content.assemble(head, *tally, f"· {done} of {total}"))
            return
        eta = progress.eta_s()
        state = "cancelling…" if progress.cancelling else f"ETA {clock(eta)}" if eta is not None else "ETA …"
        head = (f"batch {done}/{total} ", "bold $text-primary")
        cancel = f" · {keymap.app_key(self, 'queue.cancel_batch')} cancels" if not progress.cancelling else ""
        full = Content.assemble(head, *tally, f"· {elapsed} · {state}{resumed}", ("" if not cancel else cancel, "$text-muted"))
        short = Content.assemble(head, *tally, f"· {elapsed} · {state}")
        line.update(full, short)

    @on(BatchUpdate)
    def _batch_update(self, message: BatchUpdate) -> None:
        from nkitui.batch.events import BatchFinished, BatchStarted, TaskFinished

        event = message.event
        match event:
            case BatchStarted(workers=workers, to_run=to_run):
                self.app.notify(f"{len(event.tasks)} tasks, {to_run} to evaluate, {workers} at a time; rows fill in "
                                "as tasks finish (the batch goes on while you review a task)", title="Batch started",
                                timeout=6)
            case TaskFinished(record=record):
                self._dirty = True
                self.app.post_message(QueueTaskFinished(record.path))
            case BatchFinished(summary=summary):
                counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.counts.items()))
                verb = "cancelled" if summary.cancelled else "done"
                where = f" {self.options.run_store}" if self.options.run_store else ""
                self.app.notify(f"{counts or 'nothing ran'} in {clock(summary.wall_s)}; results are in the run "
                                f"store{where} (nkitui runs list)", title=f"Batch {verb}",
                                severity="warning" if summary.error else "information", timeout=8)
                if summary.error:
                    self.app.notify(summary.error, title="Batch", severity="error", timeout=15)
        for key in message.keys:
            try:
                self.list.replace_row(self.queue.row(key))
            except KeyError:
                pass
        self._dirty = True
        self.draw_batch()
        self.draw_header()

    # --- actions ------------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_filters":
            return self.state_filter != "all" or bool(self.text_filter)  # else Escape is not ours
        if action == "cancel_batch":
            return self.queue.batch_running
        return True

    def action_open_task(self) -> None:
        row = self.list.current
        if row is None:
            return
        task = self.queue.tasks[row.key].task
        if task is None:
            problem = row.problems[0] if row.problems else "the task cannot be loaded"
            self.app.notify(f"{problem}", title=f"{row.task_id} cannot be opened", severity="error", timeout=12)
            return
        self.post_message(self.TaskWanted(task, row.key))

    def action_next_to_review(self) -> None:
        order = [r.key for r in self.list.rows]
        key = self.queue.next_needing_review(order, self.list.current_key)
        current = self.list.current
        if key is None:
            if current is not None and current.needs_review(self.queue.me):
                self.app.notify("This is the only task shown that needs your review.", timeout=4)
            else:
                hidden = self.queue.counts()["to-review"]
                more = (f" ({hidden} more hidden by the filter)" if hidden and self.state_filter != "all"
                        or self.text_filter else "")
                self.app.notify(f"No task shown needs your review{more}.", timeout=4)
            return
        self.list.move_to(key)

    def action_search(self) -> None:
        field = self.query_one(FilterInput)
        field.add_class("-shown")
        field.value = self.text_filter
        field.focus()

    @on(Input.Changed, "#queue-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        self.text_filter = event.value.strip()
        self.rebuild()

    @on(Input.Submitted, "#queue-filter")
    def _filter_done(self) -> None:
        field = self.query_one(FilterInput)
        field.remove_class("-shown")
        self.list.focus()

    @on(FilterInput.Dropped)
    def _filter_dropped(self) -> None:
        field = self.query_one(FilterInput)
        field.value = ""
        self.text_filter = ""
        field.remove_class("-shown")
        self.list.focus()
        self.rebuild()

    def action_clear_filters(self) -> None:
        self.state_filter, self.text_filter = "all", ""
        self.query_one(FilterInput).value = ""
        self.rebuild()

    def set_state_filter(self, name: str) -> None:
        self.state_filter = name
        self.rebuild()

    def set_sort(self, name: str, reverse: bool | None = None) -> None:
        self.sort = name
        if reverse is not None:
            self.reverse = reverse
        self.rebuild()

    def action_pick_state(self) -> None:
        from nkitui.app.screens.choice import ChoiceScreen

        counts = self.queue.counts()
        options = [(name, label, str(counts.get(name, 0))) for name, (label, _) in STATE_FILTERS.items()]
        self.app.push_screen(ChoiceScreen("Show the tasks", options, self.state_filter),
                             lambda name: self.set_state_filter(name) if name else None)

    def action_pick_sort(self) -> None:
        from nkitui.app.screens.choice import ChoiceScreen

        options = [(name, label, "") for name, (label, _) in SORTS.items()]
        self.app.push_screen(ChoiceScreen("Sort the tasks by", options, self.sort),
                             lambda name: self.set_sort(name) if name else None)

    def action_reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self.rebuild()

    def action_reload(self) -> None:
        self.filled = False
        self.app.notify(f"Looking for tasks under {self.queue.root} again", timeout=3)
        self.discover()

    # --- the batch --------------------------------------------------------------------------------------

    def batch_description(self, keys: list[str] | None, resume: bool) -> str:
        from nkitui.batch.sizing import pool_size

        n = len(keys) if keys is not None else len(self.queue)
        size = pool_size(None)
        backend = self.options.backend
        target = f", target {self.options.target}" if self.options.target else ""
        skip = ("tasks with a finished result for their current commit (same nkitui and options) are skipped, "
                "as `nkitui batch --resume` does" if resume else "every task is evaluated again")
        return (f"Evaluate {n} task{'s' if n != 1 else ''} under {self.queue.root.name} in the background, "
                f"{size.workers} at a time (this machine: {size.reason}), backend {backend}{target}; {skip}. "
                "Results go to the run store, as the command line's do. You can open and review tasks meanwhile.")

    def action_start_batch(self, resume: bool = True, only_shown: bool = False) -> None:
        from nkitui.app.screens.prompts import ConfirmScreen

        if self.queue.batch_running:
            self.app.notify(f"A batch is running ({keymap.app_key(self, 'queue.cancel_batch')} cancels it).",
                            timeout=4)
            return
        if not len(self.queue):
            self.app.notify("No tasks to evaluate.", timeout=3)
            return
        keys = [r.key for r in self.list.rows] if only_shown else None
        if keys is not None and not keys:
            self.app.notify("No task is shown.", timeout=3)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.start_batch(keys, resume)

        self.app.push_screen(ConfirmScreen("Batch evaluation", self.batch_description(keys, resume),
                                           yes="start it", no="not now"), answered)

    def start_batch(self, keys: list[str] | None = None, resume: bool = True) -> None:
        """Start the batch now (no question): the tasks are looked for again first, then evaluated."""
        self.run_worker(lambda: self._start_batch(keys, resume), name="start the batch", group="queue-batch",
                        thread=True, exclusive=True, exit_on_error=False)

    def _start_batch(self, keys: list[str] | None, resume: bool) -> None:
        with WORKER_IMPORTS:
            from nkitui.batch import BatchOptions
        self.queue.discover()  # a task added or fixed since the queue opened is evaluated as it is now
        self.post_message(self.RowsChanged(set(self.queue.tasks)))
        options = BatchOptions(backend=self.options.backend, target=self.options.target,
                               store_root=self.options.run_store)

        def on_event(event: BatchEvent, changed: set[str]) -> None:  # in the batch's threads
            self.post_message(self.BatchUpdate(event, changed))

        try:
            self.queue.start_batch(options, keys=keys, resume=resume, on_event=on_event)
        except (RuntimeError, ValueError) as exc:
            self.app.notify(str(exc), title="Batch not started", severity="warning", timeout=6)

    def action_cancel_batch(self) -> None:
        if self.queue.cancel_batch():
            self.app.notify("Cancelling the batch: running evaluations are stopped, finished results are kept.",
                            title="Batch", timeout=5)
            self.draw_batch()
        else:
            self.app.notify("No batch is running.", timeout=3)

    # --- export -------------------------------------------------------------------------------------------

    def default_export_path(self) -> Path:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M")
        return Path.cwd() / f"nkitui-{self.queue.root.name or 'queue'}-{stamp}.csv"

    def action_export_table(self) -> None:
        from nkitui.app.screens.choice import ExportScreen

        if not len(self.queue):
            self.app.notify("No tasks to export.", timeout=3)
            return
        self.app.push_screen(ExportScreen(self.default_export_path(), len(self.queue)),
                             lambda path: self.export(path) if path is not None else None)

    def export(self, path: Path) -> None:
        self.run_worker(lambda: self._export(path), name="export the table", group="queue-export", thread=True,
                        exclusive=True, exit_on_error=False)

    def _export(self, path: Path) -> None:
        with WORKER_IMPORTS:
            from nkitui.batch.aggregate import aggregate, write_csv, write_jsonl
            from nkitui.common.atomic import atomic_write_text
        import io

        fmt = "jsonl" if path.suffix.lower() in (".jsonl", ".json", ".ndjson") else "csv"
        table = aggregate(self.queue.root, tasks=list(self.queue.tasks.values()), store_root=self.options.run_store)
        out = io.StringIO()
        rows = (write_jsonl if fmt == "jsonl" else write_csv)(table, out)
        try:
            atomic_write_text(path, out.getvalue())
        except OSError as exc:
            self.app.notify(f"{path}: {exc.strerror or exc}. Choose another file.", title="Not exported",
                            severity="error", timeout=12)
            return
        self.exported = path
        self.app.notify(f"{rows} task{'s' if rows != 1 else ''} ({fmt.upper()}, one row per task) to {path}",
                        title="Table exported", timeout=10)
        for problem in table.problems[:3]:
            self.app.notify(problem, title="Left out of the table", severity="warning", timeout=10)

    # --- the palette ----------------------------------------------------------------------------------

    def palette_entries(self) -> list[tuple[str, str, object]]:
        """(title, help, callable) for the command palette while the queue is shown."""
        from functools import partial

        entries: list[tuple[str, str, object]] = []
        row = self.list.current
        if row is not None:
            entries.append((f"Open {row.task_id}", "Open the highlighted task in the workstation", self.action_open_task))
        entries.append(("Next task that needs my review", "Move to the next task with no current review of mine",
                        self.action_next_to_review))
        if self.queue.batch_running:
            entries.append(("Batch: cancel", "Stop the background batch; finished results are kept",
                            self.action_cancel_batch))
        else:
            entries.append(("Batch: evaluate the tasks (resume)", "As nkitui batch --resume: tasks with a result for "
                            "their current commit are skipped", self.action_start_batch))
            entries.append(("Batch: evaluate every task again", "As nkitui batch: every task is evaluated",
                             partial(self.action_start_batch, False)))
            if self.state_filter != "all" or self.text_filter:
                entries.append((f"Batch: evaluate the {len(self.list.rows)} shown tasks",
                                "Only the tasks the filter shows, evaluated again",
                                partial(self.action_start_batch, False, True)))
        entries.append(("Export the table (CSV or JSONL)", "Verdicts, findings, latency and review scores, one row per "
                        "task", self.action_export_table))
        for name, (label, _) in STATE_FILTERS.items():
            if name != self.state_filter:
                entries.append((f"Show: {label}", "Filter the queue by state", partial(self.set_state_filter, name)))
        for name, (label, _) in SORTS.items():
            if name != self.sort:
                entries.append((f"Sort by {label}", "Sort the queue", partial(self.set_sort, name)))
        entries.append(("Filter by text", "Words that must all appear in a row", self.action_search))
        entries.append(("Reload the queue", "Look for tasks again and read every row again", self.action_reload))
        return entries

    def columns(self) -> list[str]:
        """The column names the list shows at its width now (tests)."""
        return [c.name for c in columns_for(self.list.scrollable_content_region.width)]


class QueueTaskFinished(Message):
    """A batch finished a task (the app tells the task's open session, if any, to show its newest run)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path

