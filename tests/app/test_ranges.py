"""Line comments over a range, from the keyboard: V selects from the cursor, moving extends, c comments
the range, a attaches it, Escape drops it; in the aligned code view and in the diff (unified, split)."""

from __future__ import annotations

from nkitui.app.screens.comment import LineCommentScreen
from nkitui.app.widgets.source.diff_view import DiffView
from tests.app.helpers import new_app, screen_text, settle


def _strip(app) -> str:
    return str(app.source_area.query_one("#finding-strip").shown)


def _marked_nki_lines(app) -> list[int]:
    """NKI line numbers drawn with the selection mark ┃ after their gutter (what the auditor sees)."""
    import re

    marked = []
    for row in screen_text(app).splitlines()[3:-4]:  # the code rows
        right = re.split("[│⇄]", row, maxsplit=1)[-1]
        if m := re.match(r"\s*(\d+).┃", right):  # number, severity glyph, then the mark
            marked.append(int(m.group(1)))
    return marked


async def test_a_range_of_nki_lines_is_selected_highlighted_and_commented(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        code = app.source_area.code
        assert code.show_line("scale_rows_nki.py", 13)
        await settle(pilot)
        await pilot.press("V", "j", "j", "j")
        await settle(pilot)
        assert code.selected_lines()[1:] == (13, 16)
        assert _marked_nki_lines(app) == [13, 14, 15, 16]  # highlighted and marked, on the NKI side only
        assert "Selected scale_rows_nki.py:13-16 (4 lines)" in _strip(app)
        assert "Unselect" in screen_text(app)  # the footer offers Escape while selecting
        await pilot.press("k")  # moving back shrinks it
        await settle(pilot)
        assert code.selected_lines()[1:] == (13, 15)
        await pilot.press("c")
        await settle(pilot)
        assert isinstance(app.screen, LineCommentScreen) and "scale_rows_nki.py:13-15" in app.screen.where
        await pilot.press(*"once", "enter")
        await settle(pilot)
        comment = app.draft.comments[-1]
        assert (comment.file, comment.start, comment.end, comment.text) == (
            "scale_rows_nki.py", 13, 15, "once")
        assert code.selection() is None and _marked_nki_lines(app) == []  # saved: the selection ends
        assert "Unselect" not in screen_text(app)
        # a attaches a range; a cancelled comment keeps the selection; Escape drops it
        code.show_line("scale_rows_nki.py", 24)
        await settle(pilot)
        await pilot.press("V", "j", "j")
        await settle(pilot)
        await pilot.press("a")
        await settle(pilot)
        link = app.draft.evidence[-1]
        assert link.kind == "source" and link.ref == "scale_rows_nki.py:24-26"
        await pilot.press("c", "escape")  # a cancelled comment keeps the selection
        await settle(pilot)
        assert code.selection() is not None and len(app.draft.comments) == 1
        await pilot.press("escape")
        await settle(pilot)
        assert code.selection() is None and "Selected" not in _strip(app)
        await pilot.press("escape")  # nothing selected: Escape is not the view's, nothing breaks
        await pilot.press("V", "V")  # V again ends a selection too
        await settle(pilot)
        assert code.selection() is None and app.is_running
        # a selection that starts on a CUDA-only row covers CUDA lines (side by side: o from NKI alone,
        # the default at 80 columns, shows CUDA alone, then both)
        await pilot.press("o", "o")
        await settle(pilot)
        assert code.pane == "both"
        row = next(i for i, r in enumerate(code.rows) if r.right is None and r.left is not None)
        code.move_cursor(row)
        await pilot.press("V", "k")
        await settle(pilot)
        source, start, end = code.selected_lines()
        assert source.path == "scale_rows.cu" and start <= end
        # zoomed in, Escape drops the selection first, then restores the layout
        await pilot.press("z")
        await settle(pilot)
        assert app.workstation.zoomed is not None and code.selection() is not None
        await pilot.press("escape")
        await settle(pilot)
        assert code.selection() is None and app.workstation.zoomed is not None
        await pilot.press("escape")
        await settle(pilot)
        assert app.workstation.zoomed is None


async def test_a_range_in_the_diff_comments_on_the_new_revisions_lines(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("d", "n")  # the first change: three deleted lines, then four added
        await settle(pilot)
        diff = app.source_area.diff
        assert isinstance(app.focused, DiffView) and diff.line_at_cursor().kind == "delete"
        await pilot.press("V", "j", "j")  # deleted lines only
        await settle(pilot)
        assert "not in the task any more" in _strip(app)
        await pilot.press("c")
        await settle(pilot)
        assert not isinstance(app.screen, LineCommentScreen)
        assert any("not in the task any more" in n.message for n in app.notices)
        await pilot.press("j", "j")  # now over two added lines too
        await settle(pilot)
        assert diff.selected_span() == ("scale_rows_nki.py", 26, 27)
        rows = [line for line in screen_text(app).splitlines() if "┃" in line[:12] and "Selected" not in line]
        assert len(rows) == 5  # three deleted, two added lines are tinted and marked
        await pilot.press("c")
        await settle(pilot)
        await pilot.press(*"ok", "enter")
        await settle(pilot)
        comment = app.draft.comments[-1]
        assert (comment.file, comment.start, comment.end) == ("scale_rows_nki.py", 26, 27)
        assert diff.selection() is None
        # split: the selection covers the new side; a range there is evidence with its revisions
        await pilot.press("s", "V", "k", "k")
        await settle(pilot)
        path, start, end = diff.selected_span()
        assert path == "scale_rows_nki.py" and end - start == 2
        await pilot.press("a")
        await settle(pilot)
        link = app.draft.evidence[-1]
        old, new = app.source_area.diff_pair
        assert link.kind == "diff" and link.ref == f"{old.ref}..{new.ref}:scale_rows_nki.py:{start}-{end}"


async def test_a_diff_selection_over_two_files_is_refused_with_a_reason(task_dir):
    (task_dir / "reference.py").write_text((task_dir / "reference.py").read_text() + "\n# checked\n")
    port = task_dir / "scale_rows_nki.py"
    port.write_text(port.read_text() + "\n# reviewed\n")
    app = new_app(task_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("d")  # HEAD -> working tree: both files changed
        await settle(pilot)
        diff = app.source_area.diff
        assert len(app.source_area.diff_files) == 2
        await pilot.press("n", "V", "G")
        await settle(pilot)
        reason = diff.selected_span()
        assert isinstance(reason, str) and "reference.py" in reason and "scale_rows_nki.py" in reason
        await pilot.press("c")
        await settle(pilot)
        assert not isinstance(app.screen, LineCommentScreen) and app.draft is not None
        assert app.draft.comments == []
