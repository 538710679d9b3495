"""The Source area: CUDA beside NKI aligned by role, findings in the gutter and the list, the git
diff unified and split between revisions picked from the history, evidence from lines."""

from __future__ import annotations

from nkitui.app.screens.revisions import RevisionPicker
from nkitui.app.widgets.source.area import FindingsList
from nkitui.app.widgets.source.code_view import CodePairView
from nkitui.app.widgets.source.diff_view import DiffView
from tests.app.helpers import new_app, screen_text, settle


async def test_cuda_and_nki_side_by_side_with_role_pairs_on_one_row(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        code = app.source_area.code
        assert code.left.path == "scale_rows.cu" and code.right.path == "scale_rows_nki.py"
        assert code.anchors, "the analysis' role pairs anchor lines side by side"
        # the CUDA kernel signature and the @nki.jit kernel share a row (the launch role)
        launch = next(p for p in code.pairs if p.role == "launch")
        row = code.rows[next(i for i, r in enumerate(code.rows) if r.left == launch.cuda[0][0])]
        assert row.anchor and row.right == launch.nki[0][0]
        # the strip names the role of the line under the cursor; the pair is tinted on both sides
        assert code.show_line("scale_rows_nki.py", launch.nki[0][0])
        await settle(pilot)
        assert code.focus_pair is not None
        strip = app.source_area.query_one("#finding-strip").render()
        assert "⇄" in str(strip)
        text = screen_text(app)
        assert "__global__ void scale_rows_kernel" in text and "def scale_rows_kernel(x, g):" in text


async def test_findings_are_marked_listed_and_jumped_to(sample_task):
    app = new_app(sample_task("flawed_transliteration"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        area = app.source_area
        findings = area.query_one(FindingsList).findings
        assert len(findings) >= 3 and findings[0].severity == "high"
        code = area.query_one(CodePairView)
        assert code.right_marks.worst, "gutter marks on the NKI side"
        await pilot.press("home", "n")  # next finding
        await settle(pilot)
        assert code.findings_at_cursor()
        first = code.findings_at_cursor()[0]
        assert first.rule in str(area.query_one("#finding-strip").render())
        # the list: Enter shows the highlighted finding's line
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.focused, FindingsList)
        await pilot.press("f")  # from the list: hide it, back to the code
        await settle(pilot)
        assert not area.query_one(FindingsList).display and isinstance(app.focused, CodePairView)
        await pilot.press("f")
        await settle(pilot)
        assert isinstance(app.focused, FindingsList) and area.query_one(FindingsList).display
        await pilot.press("down", "enter")
        await settle(pilot)
        target = app.focused_evidence()
        chosen = findings[1]
        assert isinstance(app.focused, CodePairView)
        assert code.row_at_cursor().right == chosen.line
        assert target.kind in ("finding", "source")


async def test_git_diff_unified_then_split_between_picked_revisions(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        diff = app.source_area.query_one(DiffView)
        assert app.focused is diff
        text = screen_text(app)
        assert "Mask the last partial tile" not in text  # the bar shows shas, not summaries
        assert "+valid = t * P + i_p < n_rows".replace("+", "+ ") in text or "valid = t * P + i_p < n_rows" in text
        assert "scale_rows_nki.py (modified, +4 -3)" in text
        await pilot.press("n")  # to the first change
        await settle(pilot)
        line = diff.line_at_cursor()
        assert line.kind in ("add", "delete")
        await pilot.press("s")
        await settle(pilot)
        assert diff.split
        paired = [r for r in diff.split_rows if r.left is not None and r.right is not None and r.kind == "change"]
        assert any("mask=valid" in r.right.text and "mask" not in r.left.text for r in paired)
        # pick the same revision twice: no differences
        await pilot.press("v")
        await settle(pilot)
        assert isinstance(app.screen, RevisionPicker)
        await pilot.press("enter", "down", "enter")  # old: the first commit; new: the first commit too
        await settle(pilot)
        assert app.source_area.diff_pair[0] == app.source_area.diff_pair[1]
        assert app.source_area.diff_files == []
        assert "No differences" in screen_text(app)


async def test_a_diff_line_is_evidence_with_its_revisions(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("d", "n")
        await settle(pilot)
        ev = app.focused_evidence()
        assert ev.kind == "diff" and ev.file == "scale_rows_nki.py"
        old, new = app.source_area.diff_pair
        assert ev.revision == f"{old.ref}..{new.ref}"


async def test_a_discovered_task_without_cuda_shows_the_port_alone_and_cannot_run(tmp_path):
    import shutil

    from tests.app.helpers import FIXTURES, make_task_repo

    source = tmp_path / "src"
    shutil.copytree(FIXTURES / "scale_rows", source)
    (source / "task.toml").unlink()
    (source / "scale_rows.cu").unlink()
    task_dir = make_task_repo(tmp_path / "bare", source)
    app = new_app(task_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.audit_task.discovered
        code = app.source_area.code
        assert code.left is None and code.right.path == "scale_rows_nki.py"
        assert all(row.left is None for row in code.rows)
        await pilot.press("r")
        await settle(pilot)
        assert not app.session.runs.running
        assert any("cannot run" in n.message for n in app.notices)
