"""The command palette: commands that fit the current state (only what can be done now)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Callable

from textual.command import DiscoveryHit, Hit, Hits, Provider

if TYPE_CHECKING:
    from nkitui.app.app import NkituiApp


@dataclass(frozen=True)
class PaletteCommand:
    title: str
    help: str
    run: Callable[[], object]


def palette_commands(app: "NkituiApp") -> list[PaletteCommand]:
    """Commands valid now. Each checks the state it needs, so the palette never offers a dead end."""
    c: list[PaletteCommand] = []
    add = lambda title, help, fn: c.append(PaletteCommand(title, help, fn))  # noqa: E731
    ws = app.workstation
    running = app.run_in_progress
    if not running and app.audit_task is not None and app.audit_task.runnable:
        add("Run: start", f"Run the task on {app.backend_label}", app.action_start_run)
    if running:
        add("Run: cancel", "Cancel the run in progress", app.action_cancel_run)
    if app.runs_known:
        add("Runs: history", "Reopen an earlier run, or compare two", app.action_run_history)
    for area, title in (("source", "Source"), ("run", "Run"), ("engines", "Engines"), ("rubric", "Rubric")):
        if ws is not None and ws.current_area != area:
            add(f"Go to {title}", f"Show the {title} area", partial(app.action_show_area, area))
    if ws is not None:
        source = ws.area("source")
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
        add(f"Layout: {other}", f"Switch to the {other} layout", app.action_toggle_layout)
        run_area = ws.area("run")
        add("Log: search", "Search the run log", partial(app.run_area_log_action, "search"))
        add("Log: cycle level filter", "All, info+, warnings+, errors", partial(app.run_area_log_action, "cycle_level"))
        add("Run: show results" if run_area.query_one("#run-switcher").current == "log-pane" else "Run: show log",
            "Switch the Run area between log and results", run_area.action_toggle_view)
    if app.review_ready:
        add("Review: submit", "Validate the review and commit it to the task repository", app.action_submit_review)
        add("Review: edit comment in $EDITOR", "Open the current criterion's comment in your editor",
            app.action_edit_in_editor)
    if app.can_attach():
        add("Evidence: attach focused item", "Attach what is under the cursor to the current criterion",
            app.action_attach_evidence)
    for name in app.theme_names:
        if name != app.theme:
            add(f"Theme: {name}", f"Switch to the {name} theme", partial(app.set_theme, name))
    add("Reload themes", f"Read the theme files again (yours: {app.user_themes_dir})", app.action_reload_themes)
    add("Help for the focused area", "F1", app.action_help)
    add("Keys", "Every key, filterable (?)", app.action_keys)
    add("Quit", "Leave nkitui (the draft is autosaved)", app.action_quit)
    return c


class NkituiCommands(Provider):
    async def discover(self) -> Hits:
        for command in palette_commands(self.app):  # type: ignore[arg-type]
            yield DiscoveryHit(command.title, command.run, help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in palette_commands(self.app):  # type: ignore[arg-type]
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(score, matcher.highlight(command.title), command.run, help=command.help)
