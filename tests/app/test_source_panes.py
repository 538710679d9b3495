"""The code at 80x24: the NKI port alone across the width, soft-wrapped, so every line of every bundled
port can be read from the keyboard; `o` switches to CUDA alone or both side by side, `W` turns wrap
off (lines cut with ›, ← → scroll sideways, the bar says so). Side by side is the default where each
side gets enough columns (200x50)."""

from __future__ import annotations

import pytest

from nkitui.app.widgets.source.code_view import CONTINUATION, CUT, SourceFile
from nkitui.app.widgets.source.highlight import highlight_lines, language_for
from nkitui.task import load_task
from tests.app.helpers import SAMPLE_TASKS, new_app, screen_text, settle


def _bar(app) -> str:
    return str(app.source_area.query_one("#source-bar").shown)


def _source(task_root, path) -> SourceFile:
    rel = path.relative_to(task_root).as_posix()
    return SourceFile(rel, highlight_lines(path.read_text(encoding="utf-8"), language_for(rel)))


def _screen_rows(app) -> tuple[list[str], int, int]:
    """The code view's rows as the terminal shows them, and where its content starts (x, first row)."""
    code = app.source_area.code
    region = code.scrollable_content_region
    rows = screen_text(app).splitlines()[region.y: region.y + region.height]
    return [row[region.x: region.x + region.width] for row in rows], region.x, region.height


async def _read_whole_file(pilot, source: SourceFile) -> dict[int, str]:
    """Page through the code view from the first row to the last, with keys only, and rebuild every
    NKI line from what the screen showed (its first row and its ↪ continuations)."""
    app = pilot.app
    code = app.source_area.code
    digits = len(str(len(source.lines)))
    seen: dict[tuple[int, int], str] = {}
    await pilot.press("g")
    for _ in range(400):
        await pilot.pause()
        rows, _, height = _screen_rows(app)
        top = code.scroll_offset.y
        for y, text in enumerate(rows):
            index = top + y
            if index >= len(code.rows):
                break
            row = code.rows[index]
            gutter, body = text[:digits + 2], text[digits + 2:]
            if row.part == 0:
                assert gutter[:digits].strip() == str(row.right), (gutter, row)
            else:
                assert gutter.strip() in (CONTINUATION, ""), (gutter, row)
            seen[(row.right, row.part)] = body
        if code.cursor >= len(code.rows) - 1:
            break
        await pilot.press("pagedown")
    lines: dict[int, str] = {}
    for (line, part), body in sorted(seen.items()):
        lines[line] = lines.get(line, "") + body
    return lines


@pytest.mark.slow
async def test_every_bundled_nki_port_reads_in_full_at_80x24(sample_task):
    app = new_app(sample_task("attention_fwd"))  # the longest NKI lines of the bundled tasks
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        area = app.source_area
        code = area.code
        # at 80 columns the port is shown alone, soft-wrapped, and the bar says why and how to get CUDA
        assert code.pane == "nki" and code.wrap
        bar = _bar(app)
        assert bar.startswith("NKI attention_fwd_nki.py") and "narrow" in bar and "o: CUDA, both" in bar
        assert len(code.rows) > len(code.right.lines), "long lines continue on wrapped rows"
        for folder in sorted(p for p in SAMPLE_TASKS.iterdir() if (p / "task.toml").is_file()):
            task = load_task(folder)
            cuda = _source(task.root, task.sources.cuda) if task.sources.cuda else None
            nki = _source(task.root, task.sources.nki)
            area.set_sources(cuda, nki)
            code.focus()
            await pilot.pause()
            assert code.pane == "nki", folder.name
            shown = await _read_whole_file(pilot, nki)
            assert sorted(shown) == list(range(1, len(nki.lines) + 1)), folder.name
            for number, line in enumerate(nki.lines, 1):
                # every character of the line is on screen, in order (wrapping only moves spaces)
                assert "".join(shown[number].split()) == "".join(line.plain.split()), (folder.name, number)
            assert not any(CUT in body for body in shown.values())


async def test_panes_cycle_and_wrap_off_cuts_lines_and_says_sideways(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        code = app.source_area.code
        assert code.pane == "nki"
        code.show_line("scale_rows_nki.py", 20)
        await pilot.press("o")  # CUDA alone; the cursor goes to the CUDA line the alignment pairs
        await settle(pilot)
        assert code.pane == "cuda" and _bar(app).startswith("CUDA scale_rows.cu")
        row = code.row_at_cursor()
        assert row.left is not None and row.right is None
        await pilot.press("o")  # both, side by side, even though narrow: the auditor chose it
        await settle(pilot)
        assert code.pane == "both" and _bar(app).startswith("Aligned scale_rows.cu ⇄ scale_rows_nki.py")
        assert "⇄" in screen_text(app) or "│" in screen_text(app)
        await pilot.press("o")
        await settle(pilot)
        assert code.pane == "nki"
        # wrap off: long lines end in ›, the bar names the sideways keys, → scrolls, ← comes back
        await pilot.press("g", "W")  # the docstring at the top has lines of 92 and 94 characters
        await settle(pilot)
        assert not code.wrap and code.cut_lines()
        assert "← → scroll sideways" in _bar(app)
        rows, _, _ = _screen_rows(app)
        assert any(r.rstrip().endswith(CUT) for r in rows)
        await pilot.press("right")
        await settle(pilot)
        assert code.scroll_offset.x > 0
        await pilot.press("left")
        await settle(pilot)
        assert code.scroll_offset.x == 0
        await pilot.press("W")
        await settle(pilot)
        assert code.wrap and "sideways" not in _bar(app)


async def test_the_cursor_keeps_its_line_across_panes_and_jumps_show_the_file(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        area = app.source_area
        code = area.code
        assert code.show_line("scale_rows_nki.py", 24)
        await pilot.press("o", "o")  # CUDA, then both: back on NKI line 24
        await settle(pilot)
        assert code.pane == "both" and code.row_at_cursor().right == 24
        await pilot.press("o")
        await settle(pilot)
        assert code.pane == "nki" and code.row_at_cursor().right == 24
        # a finding or evidence in the CUDA file shows the CUDA file even while the NKI port is alone
        assert area.show_line("scale_rows.cu", 5)
        await settle(pilot)
        assert code.pane in ("cuda", "both") and code.row_at_cursor().left == 5


async def test_side_by_side_where_it_fits_200x50(sample_task):
    app = new_app(sample_task("flawed_bf16_accum"))
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        await pilot.press("w")  # tabs layout: the Source area has the whole width
        await settle(pilot)
        code = app.source_area.code
        assert code.pane == "both" and code.wrap
        assert _bar(app).startswith("Aligned matmul_bf16_f32out.cu ⇄ matmul_bf16_f32out_nki.py")
        text = screen_text(app)
        assert "__global__ void matmul_bf16_f32out_kernel" in text and "def matmul_bf16_f32out_kernel" in text


async def test_the_bar_names_the_pane_shown_after_the_area_was_hidden(task_dir):
    # findings that arrive while another area is shown (a run ending) must not flip the bar to
    # "Aligned" while the NKI port alone is drawn
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        area = app.source_area
        assert area.code.pane == "nki" and _bar(app).startswith("NKI ")
        await pilot.press("2")
        await settle(pilot)
        area.set_findings(list(area.findings))
        await pilot.press("1")
        await settle(pilot)
        assert area.code.pane == "nki" and _bar(app).startswith("NKI ")
        assert "│" not in screen_text(app).splitlines()[4]  # drawn alone, no CUDA column


async def test_the_diff_says_when_lines_go_on_past_the_edge(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("d", "s")  # the split diff at 80 columns: each side far narrower than its lines
        await settle(pilot)
        assert app.source_area.diff.split and "← → scroll sideways" in _bar(app)
