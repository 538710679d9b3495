"""Key bindings as data: one registry of bindings with stable ids, user overrides, the key reference.

Every binding in the app comes from `REGISTRY`, so the F1/`?` help, the command palette and
docs/keymap.md all read the same source. Users rebind by id in `<XDG config>/nkitui/keymap.toml`:

    "app.run" = "f5"                # one key
    "app.submit" = "ctrl+s,f8"      # several keys, comma separated (or a list of strings)
    [log]                           # a table groups ids: this is "log.search"
    search = "ctrl+f,slash"

Every default binding that needs a modifier chord also has a plain key (a letter, a symbol or an F-key),
because tmux and SSH clients swallow some chords.

Regenerate docs/keymap.md with `python -m nkitui.app.keymap > docs/keymap.md`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual.binding import Binding
from textual.keys import REPLACED_KEYS, Keys, _character_to_key, format_key, key_to_character

from nkitui.common.fields import FieldReader
from nkitui.common.paths import config_dir

KEYMAP_FILE_NAME = "keymap.toml"
MODIFIERS = ("ctrl", "shift", "alt", "meta", "super", "hyper")


@dataclass(frozen=True)
class KeySpec:
    id: str  # stable: users rebind by it
    keys: str  # default keys, comma separated, Textual key names
    action: str
    description: str  # short, for the footer
    scope: str  # which part of the app the binding belongs to (a key of SCOPES)
    show: bool = True  # shown in the footer
    priority: bool = False  # fires even while a text editor has focus
    help: str = ""  # longer explanation for the key reference

    def binding(self) -> Binding:
        return Binding(
            self.keys, self.action, self.description, show=self.show, priority=self.priority,
            tooltip=self.help or self.description, id=self.id,
        )


SCOPES: dict[str, str] = {
    "app": "Everywhere",
    "code": "Source: code and diff views",
    "source": "Source area",
    "findings": "Source: findings list",
    "log": "Run: live log",
    "run": "Run area",
    "runs": "Run history",
    "engines": "Engines area",
    "rubric": "Rubric area",
    "score": "Rubric: score selector",
    "comment": "Rubric: comment editor",
    "evidence": "Rubric: evidence list",
    "picker": "Revision picker",
    "finding": "Finding in full",
    "levels": "What each score means",
    "queue": "Queue of tasks",
    "queue_list": "Queue: the list of tasks",
    "queue_filter": "Queue: the text filter",
    "choice": "Queue: filter and sort menus",
}

REGISTRY: tuple[KeySpec, ...] = (
    # Everywhere.
    KeySpec("app.help", "f1", "app.help", "Help", "app", help="Help for the focused area and its keys"),
    KeySpec("app.keys", "question_mark", "app.keys", "Keys", "app", help="List of every key, filterable"),
    KeySpec("app.palette", "ctrl+p,colon", "app.command_palette", "Commands", "app",
            help="Command palette: commands that fit the current state"),
    KeySpec("app.quit", "q,ctrl+q", "app.quit", "Quit", "app", show=False, help="Quit (the draft is autosaved)"),
    KeySpec("app.area_source", "1", "app.show_area('source')", "Source", "app", show=False,
            help="Go to the Source area"),
    KeySpec("app.area_run", "2", "app.show_area('run')", "Run", "app", show=False, help="Go to the Run area"),
    KeySpec("app.area_engines", "3", "app.show_area('engines')", "Engines", "app", show=False,
            help="Go to the Engines area"),
    KeySpec("app.area_rubric", "4", "app.show_area('rubric')", "Rubric", "app", show=False,
            help="Go to the Rubric area"),
    KeySpec("app.next_area", "right_square_bracket", "app.cycle_area(1)", "Next area", "app", show=False,
            help="Go to the next area"),
    KeySpec("app.prev_area", "left_square_bracket", "app.cycle_area(-1)", "Previous area", "app", show=False,
            help="Go to the previous area"),
    KeySpec("app.layout", "w", "app.toggle_layout", "Layout", "app", show=False,
            help="Switch between tabs and the wide split layout"),
    KeySpec("app.zoom", "z", "app.zoom", "Zoom", "app", show=False,
            help="Maximise the focused area, or restore the layout"),
    KeySpec("app.theme", "t", "app.next_theme", "Theme", "app", show=False,
            help="Read the theme files again (a broken one is reported, naming the file and field) and switch "
                 "to the next theme"),
    KeySpec("app.run", "r,f5", "app.start_run", "Run", "app", help="Start a run of the task on the chosen backend"),
    KeySpec("app.cancel", "x,f6", "app.cancel_run", "Cancel run", "app", show=False,
            help="Cancel the run in progress"),
    KeySpec("app.runs", "h", "app.run_history", "Runs", "app", show=False,
            help="Earlier runs: reopen one, or compare two"),
    KeySpec("app.attach", "a", "app.attach_evidence", "Attach", "app",
            help="Attach the focused finding, log line, diff line or metric as evidence to the rubric criterion"),
    KeySpec("app.submit", "ctrl+s,f8", "app.submit_review", "Submit", "app", priority=True, show=False,
            help="Validate the review and commit it to the task repository"),
    KeySpec("app.notices", "exclamation_mark", "app.notices", "Notices", "app", show=False,
            help="Every notice of this session in full (the footer shows each one for a few seconds)"),
    KeySpec("app.queue", "escape,Q", "app.back_to_queue", "Queue", "app",
            help="Back to the queue of tasks (when nkitui was opened on a folder of tasks); the task stays as it "
                 "is, a run in progress goes on"),
    # Code views (aligned source and diff).
    KeySpec("code.down", "down,j", "cursor_down", "Down", "code", show=False, help="Next line"),
    KeySpec("code.up", "up,k", "cursor_up", "Up", "code", show=False, help="Previous line"),
    KeySpec("code.page_down", "pagedown,space", "page_down", "Page down", "code", show=False, help="Next page"),
    KeySpec("code.page_up", "pageup,b", "page_up", "Page up", "code", show=False, help="Previous page"),
    KeySpec("code.top", "home,g", "cursor_top", "Top", "code", show=False, help="First line"),
    KeySpec("code.bottom", "end,G", "cursor_bottom", "Bottom", "code", show=False, help="Last line"),
    KeySpec("code.left", "left", "scroll_left", "Left", "code", show=False, help="Scroll left"),
    KeySpec("code.right", "right", "scroll_right", "Right", "code", show=False, help="Scroll right"),
    KeySpec("code.next_finding", "n", "next_finding", "Next", "code",
            help="Move to the next line with a finding (or the next change in a diff)"),
    KeySpec("code.prev_finding", "p", "prev_finding", "Prev finding", "code", show=False,
            help="Move to the previous line with a finding (or the previous change in a diff)"),
    KeySpec("code.comment", "c", "comment_line", "Comment", "code",
            help="Write a review comment anchored to the line under the cursor, or to the selected lines "
                 "(for the current criterion)"),
    KeySpec("code.select", "V", "toggle_selection", "Select", "code",
            help="Start selecting lines at the cursor (moving extends the selection; c comments it, a attaches "
                 "it as evidence); V again ends it"),
    KeySpec("code.cancel_selection", "escape", "cancel_selection", "Unselect", "code",
            help="Drop the selected lines (only while selecting)"),
    # Source area.
    KeySpec("source.pane", "o", "cycle_pane", "Panes", "source",
            help="Show the NKI port alone, the CUDA source alone, or both side by side aligned by role (at "
                 "first: both where each side gets 48 columns of code, else the NKI port alone)"),
    KeySpec("source.wrap", "W", "toggle_wrap", "Wrap", "source", show=False,
            help="Soft-wrap long lines (the default), or cut them at the edge (marked ›) and scroll sideways "
                 "with ← →"),
    KeySpec("source.mode", "d", "toggle_mode", "Code/diff", "source",
            help="Switch between the code (NKI, CUDA or both side by side) and the git diff"),
    KeySpec("source.diff_layout", "s", "toggle_diff_layout", "Unified/split", "source",
            help="Show the diff unified or split"),
    KeySpec("source.revisions", "v", "pick_revisions", "Revisions", "source",
            help="Pick the two revisions of the task's history to compare"),
    KeySpec("source.findings", "f", "toggle_findings", "Findings", "source",
            help="Go to the findings list; from the list, hide it"),
    KeySpec("source.explain", "e", "explain_finding", "Explain", "source",
            help="Read the finding on the cursor's line (or the one highlighted in the list) in full"),
    # Findings list.
    KeySpec("findings.open", "enter", "open_finding", "Go to line", "findings",
            help="Show the finding's line in the code view"),
    # Live log.
    KeySpec("log.down", "down,j", "cursor_down", "Down", "log", show=False, help="Next line"),
    KeySpec("log.up", "up,k", "cursor_up", "Up", "log", show=False, help="Previous line"),
    KeySpec("log.page_down", "pagedown,space", "page_down", "Page down", "log", show=False, help="Next page"),
    KeySpec("log.page_up", "pageup,b", "page_up", "Page up", "log", show=False, help="Previous page"),
    KeySpec("log.top", "home,g", "cursor_top", "Top", "log", show=False, help="First line (stops following)"),
    KeySpec("log.follow", "end,G,F", "follow", "Follow", "log",
            help="Jump to the last line and follow new lines"),
    KeySpec("log.search", "slash,ctrl+f", "search", "Search", "log", help="Search the log"),
    KeySpec("log.next_match", "n", "next_match", "Next match", "log", show=False, help="Next search match"),
    KeySpec("log.prev_match", "N", "prev_match", "Prev match", "log", show=False, help="Previous search match"),
    KeySpec("log.level", "l", "cycle_level", "Level", "log",
            help="Cycle the level filter: all, info and above, warnings and errors, errors"),
    KeySpec("log.open", "enter", "open_location", "Go to source", "log", show=False,
            help="Open the Source area at the file:line the line names (an error, a traceback frame, a finding)"),
    # Run area.
    KeySpec("run.view", "m", "toggle_view", "Log/results", "run",
            help="Switch between the live log and the run's results (metrics, heat map, advice)"),
    # Run history.
    KeySpec("runs.open", "enter", "open_run", "Open", "runs", help="Reopen the highlighted run"),
    KeySpec("runs.mark", "space", "mark_run", "Mark", "runs", help="Mark a run for comparison (mark two)"),
    KeySpec("runs.compare", "c", "compare_runs", "Compare", "runs", help="Compare the two marked runs"),
    KeySpec("runs.close", "escape", "close", "Close", "runs", help="Close"),
    # Engines area.
    KeySpec("engines.jump", "enter", "jump_to_line", "Go to source", "engines",
            help="Show the highlighted hot line in the Source area"),
    # Rubric.
    KeySpec("rubric.editor", "ctrl+o,f7", "external_editor", "$EDITOR", "rubric", priority=True,
            help="Edit the comment in your $VISUAL/$EDITOR"),
    KeySpec("rubric.override", "O", "override_rule", "Override", "rubric", show=False,
            help="On the verdict page: override the verdict rule the verdict breaks, with a reason (it goes "
                 "into the review record); an empty reason withdraws the override"),
    KeySpec("rubric.levels", "e", "show_levels", "Levels", "rubric",
            help="Read what every score of the criterion means (every verdict's guidance on the verdict "
                 "page) in full"),
    KeySpec("score.up", "right,plus", "score_up", "Score +", "score", help="Raise the score"),
    KeySpec("score.down", "left,minus", "score_down", "Score -", "score", help="Lower the score"),
    KeySpec("score.clear", "backspace,delete", "score_clear", "Clear", "score", show=False,
            help="Clear the score (digits score directly: 3 is 3 on a 1..5 scale, 1 the first label or "
                 "verdict; on the score, digits do not switch areas)"),
    KeySpec("comment.done", "escape", "done", "Done", "comment",
            help="Leave the comment (it is already saved) and go back to the criteria list"),
    KeySpec("evidence.remove", "delete,backspace,d", "remove_evidence", "Remove", "evidence",
            help="Remove the highlighted evidence link or line comment"),
    KeySpec("evidence.open", "enter", "open_evidence", "Show", "evidence",
            help="Show where the highlighted evidence comes from"),
    # Revision picker.
    KeySpec("picker.choose", "enter", "choose", "Choose", "picker", help="Choose the highlighted revision"),
    KeySpec("picker.close", "escape", "close", "Cancel", "picker", help="Close without changing"),
    # Finding in full.
    KeySpec("finding.close", "escape,e", "close", "Close", "finding", help="Close the finding"),
    # Levels in full.
    KeySpec("levels.close", "escape,e", "close", "Close", "levels", help="Close the meanings"),
    # The queue of tasks.
    KeySpec("queue.open", "enter", "screen.open_task", "Open", "queue_list",
            help="Open the highlighted task in the workstation (as it was left, if it was open before)"),
    KeySpec("queue.down", "down,j", "cursor_down", "Down", "queue_list", show=False, help="Next task"),
    KeySpec("queue.up", "up,k", "cursor_up", "Up", "queue_list", show=False, help="Previous task"),
    KeySpec("queue.page_down", "pagedown,space", "page_down", "Page down", "queue_list", show=False,
            help="Next page"),
    KeySpec("queue.page_up", "pageup,b", "page_up", "Page up", "queue_list", show=False, help="Previous page"),
    KeySpec("queue.top", "home,g", "cursor_top", "Top", "queue_list", show=False, help="First task"),
    KeySpec("queue.bottom", "end,G", "cursor_bottom", "Bottom", "queue_list", show=False, help="Last task"),
    KeySpec("queue.next", "n", "next_to_review", "Next to review", "queue",
            help="Move to the next task that needs my review (no current review of mine), wrapping round"),
    KeySpec("queue.search", "slash", "search", "Filter", "queue",
            help="Filter the tasks by text (id, title, op, namespace, target, state; every word must match)"),
    KeySpec("queue.state", "f", "pick_state", "State", "queue",
            help="Show only the tasks in one state: to review, my drafts, outdated, failing, not run, ..."),
    KeySpec("queue.sort", "s", "pick_sort", "Sort", "queue",
            help="Sort by folder, task id, last run (failing first), findings, review state or age of the last run"),
    KeySpec("queue.reverse", "S", "reverse_sort", "Reverse", "queue", show=False, help="Reverse the sort order"),
    KeySpec("queue.clear", "escape", "clear_filters", "All tasks", "queue", show=False,
            help="Drop the text and state filters (only while filtering)"),
    KeySpec("queue.batch", "B", "start_batch", "Batch", "queue",
            help="Evaluate the tasks in the background, as `nkitui batch --resume` does (tasks with a result for "
                 "their current commit are skipped): rows fill in as tasks finish"),
    KeySpec("queue.cancel_batch", "x", "cancel_batch", "Cancel batch", "queue",
            help="Cancel the background batch (finished results are kept; x again is not needed)"),
    KeySpec("queue.export", "E", "export_table", "Export", "queue",
            help="Export the lab's table (verdicts, findings, latency, review scores) to a CSV or JSONL file"),
    KeySpec("queue.reload", "R", "reload", "Reload", "queue", show=False,
            help="Look for tasks again and read every row again (tasks added, runs made elsewhere)"),
    KeySpec("queue.filter_drop", "escape", "drop", "Drop the filter", "queue_filter", show=False,
            help="Empty the text filter and go back to the list (Enter keeps the filter)"),
    # Menus of the queue.
    KeySpec("choice.pick", "enter", "pick", "Choose", "choice", help="Choose the highlighted entry"),
    KeySpec("choice.close", "escape", "close", "Cancel", "choice", help="Close without changing"),
)

BY_ID: dict[str, KeySpec] = {spec.id: spec for spec in REGISTRY}


def bindings(scope: str) -> list[Binding]:
    """Textual bindings of one scope, for a widget's BINDINGS."""
    if scope not in SCOPES:
        raise KeyError(f"unknown key scope {scope!r}")
    return [spec.binding() for spec in REGISTRY if spec.scope == scope]


def help_bindings() -> list[Binding]:
    """F1 and ? for a modal screen: the app's own bindings do not reach into modals. Same ids, so a
    user's rebinding of app.help / app.keys applies there too."""
    return [BY_ID["app.help"].binding(), BY_ID["app.keys"].binding()]


# --- user overrides ---------------------------------------------------------------------------------

_NAMED_KEYS: frozenset[str] = frozenset(
    {k.value.rpartition("+")[2] for k in Keys}
    | {"enter", "space", "tab", "backspace", "escape", "delete", "insert", "home", "end"}
    | {f"f{n}" for n in range(1, 25)}
)


def key_problem(key: str) -> str | None:
    """Why `key` is not a valid Textual key string, or None when it is."""
    key = key.strip()
    if not key:
        return "empty key"
    if len(key) == 1:
        return None
    *mods, base = key.split("+") if not key.endswith("++") else [*key[:-2].split("+"), "+"]
    for mod in mods:
        if mod not in MODIFIERS:
            return f"unknown modifier {mod!r} (use {', '.join(MODIFIERS)})"
    if not base:
        return "missing the key after the modifiers"
    if len(base) == 1 or base in _NAMED_KEYS or key_to_character(REPLACED_KEYS.get(base, base)) is not None:
        return None
    return f"unknown key {base!r} (use a character, an F-key, or a name like enter, escape, pageup, slash)"


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in table.items():
        full = f"{prefix}{name}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def default_keymap_path() -> Path:
    return config_dir() / KEYMAP_FILE_NAME


def parse_keymap(text: str, source: str) -> tuple[dict[str, str], list[str]]:
    """Parse a keymap file's text: (binding id -> keys, problems). Valid entries survive bad ones; each
    problem names the file, the binding id (and its line) and the fix."""
    reader = FieldReader(source, "docs/keymap.md", locate=True)
    data = reader.parse_text(text)
    if data is None:
        return {}, reader.messages()
    keymap: dict[str, str] = {}
    for binding_id, value in _flatten(data).items():
        if binding_id not in BY_ID:
            close = difflib.get_close_matches(binding_id, list(BY_ID), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see docs/keymap.md for the ids"
            reader.error(binding_id, f"unknown binding id {binding_id!r}", hint)
            continue
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            keys = [v.strip() for v in value]
        elif isinstance(value, str):
            keys = [v.strip() for v in value.split(",")]
        else:
            reader.error(binding_id, f"expected a string or a list of strings, got {type(value).__name__}",
                         f'write e.g. "{binding_id}" = "ctrl+s,f8" or ["ctrl+s", "f8"]')
            continue
        bad = [(k, why) for k in keys if (why := key_problem(k))]
        if bad:
            k, why = bad[0]
            reader.error(binding_id, f"{k!r} is not a key: {why}", "see docs/keymap.md for key names")
            continue
        keymap[binding_id] = ",".join(_character_to_key(k) if len(k) == 1 else k for k in keys)
    return keymap, reader.messages()


def load_user_keymap(path: Path | None = None) -> tuple[dict[str, str], list[str]]:
    """Read the user's keymap overrides. A missing file is no overrides and no problems."""
    path = path or default_keymap_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        return {}, [f"{path}: cannot be read ({exc.strerror})"]
    return parse_keymap(text, str(path))


def display_keys(keys: str) -> str:
    return " / ".join(format_key(k.strip()) for k in keys.split(","))


def effective_keys(spec: KeySpec, overrides: dict[str, str] | None = None) -> str:
    return (overrides or {}).get(spec.id, spec.keys)


def key_label(binding_id: str, overrides: dict[str, str] | None = None) -> str:
    """The first key of a binding as the footer shows it ("V", "esc"), after the user's overrides:
    for hints in status lines, which must name the key the auditor actually has."""
    return format_key(effective_keys(BY_ID[binding_id], overrides).split(",")[0].strip())


def app_key(node: Any, binding_id: str) -> str:
    """key_label with the running app's user overrides (`node` is any widget or the app): hints such
    as "press r to run" must name the key the user rebound it to."""
    return key_label(binding_id, getattr(node.app, "keymap_overrides", None))


def keymap_markdown() -> str:
    """The key reference (docs/keymap.md), generated from REGISTRY so it never drifts."""
    lines = [
        "# Keys",
        "",
        "Generated from `nkitui/app/keymap.py` by `python -m nkitui.app.keymap > docs/keymap.md`; do not edit by hand.",
        "",
        "Every binding has a stable id. Rebind keys in `<XDG config>/nkitui/keymap.toml` (on Linux",
        "`~/.config/nkitui/keymap.toml`), one line per id; several keys are comma separated:",
        "",
        "```toml",
        '"app.run" = "f5"',
        '"app.submit" = "ctrl+s,f8"',
        "[log]",
        'search = "ctrl+f,slash"      # the id log.search',
        "```",
        "",
        "Key names are Textual's: a character (`a`, `G`), `slash`, `question_mark`, `enter`, `escape`, `space`,",
        "`pageup`, `f1`..`f24`, optionally with `ctrl+`, `alt+`, `shift+`. A mistake is reported when the app starts,",
        "naming the file and the id, and that line is ignored. Every chord has a plain fallback key because tmux and",
        "SSH clients swallow some chords. In the app, `?` lists every key and F1 explains the focused area.",
        "",
    ]
    for scope, title in SCOPES.items():
        specs = [s for s in REGISTRY if s.scope == scope]
        if not specs:
            continue
        lines += [f"## {title}", "", "| id | keys | does |", "|---|---|---|"]
        for s in specs:
            keys = ", ".join(f"`{k}`" for k in s.keys.split(","))
            lines.append(f"| `{s.id}` | {keys} | {s.help or s.description} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(keymap_markdown(), end="")
