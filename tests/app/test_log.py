"""The live log: a million lines, follow mode with the new-lines indicator, coalesced repaints,
search and the level filter. Driven through the real widget in a small app."""

from __future__ import annotations

from textual.app import App, ComposeResult

from nkitui.app.widgets.run.log_view import LogView
from nkitui.app.widgets.run.logstore import LEVEL_INDEX
from tests.app.helpers import screen_text

INFO, WARN, ERR = LEVEL_INDEX["info"], LEVEL_INDEX["warning"], LEVEL_INDEX["error"]


class LogApp(App):
    """The log view alone; `notices` keeps every message it was asked to show."""

    def __init__(self) -> None:
        super().__init__()
        self.notices: list[str] = []

    def notify(self, message: str, **kwargs) -> None:
        self.notices.append(message)
        super().notify(message, **kwargs)

    def get_css_variables(self) -> dict[str, str]:
        from nkitui.app.themes import fill_nkitui_variables

        return fill_nkitui_variables(super().get_css_variables())

    def compose(self) -> ComposeResult:
        yield LogView(id="log")

    def on_mount(self) -> None:
        self.query_one(LogView).focus()


def lines(n: int, start: int = 0):
    for i in range(start, start + n):
        level = ERR if i % 1000 == 999 else (WARN if i % 100 == 7 else INFO)
        yield level, f"line {i} {'mismatch' if level == ERR else 'ok'}"


async def test_a_million_lines_render_only_what_is_visible_and_follow_the_end():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.append_lines(lines(1_000_000))
        assert log.store.total == 0  # nothing is drawn until the next repaint tick
        log.flush_now()
        await pilot.pause()
        assert log.store.total == 1_000_000
        assert log.following and log.cursor == 999_999
        assert log.scroll_offset.y == 1_000_000 - log.scrollable_content_region.height
        assert "line 999999" in screen_text(app)
        # only the rows on screen were drawn (the row cache holds a screenful, not a million)
        assert log.cached_row_count <= 2 * log.scrollable_content_region.height


async def test_moving_up_pauses_following_and_counts_new_lines_below():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.append_lines(lines(500))
        log.flush_now()
        await pilot.pause()
        await pilot.press("up", "up")
        assert not log.following
        log.append_lines(lines(120, start=500))
        log.flush_now()
        await pilot.pause()
        assert log.new_below == 120
        assert log.cursor == 497  # the view did not jump
        assert "120 new lines below" in screen_text(app)
        await pilot.press("end")
        await pilot.pause()
        assert log.following and log.new_below == 0 and log.cursor == 619
        assert "new lines below" not in screen_text(app)


async def test_repaints_are_coalesced_by_the_timer():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        flushes = 0
        original = log.store.extend

        def counting_extend(batch):
            nonlocal flushes
            flushes += 1
            return original(batch)

        log.store.extend = counting_extend  # each repaint tick appends everything queued in one call
        for i in range(200):  # 200 batches arriving back to back
            log.append_lines(lines(50, start=i * 50))
        await pilot.pause(0.3)
        assert log.store.total == 10_000
        assert 1 <= flushes <= 10  # a handful of repaints, not 200


async def test_search_smartcase_next_and_previous_match():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.append_lines(lines(5000))
        log.flush_now()
        await pilot.pause()
        await pilot.press("home")
        assert log.search("mismatch")
        assert log.store.line(log.cursor)[2] == "line 999 mismatch"
        await pilot.press("n")
        assert log.store.line(log.cursor)[2] == "line 1999 mismatch"
        await pilot.press("N", "N")
        assert log.store.line(log.cursor)[2] == "line 4999 mismatch"  # wraps to the last match
        assert not log.search("MISMATCH")  # a capital letter makes the search case-sensitive


async def test_level_filter_keeps_the_line_under_the_cursor():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.append_lines(lines(3000))
        log.flush_now()
        await pilot.pause()
        log.search("line 1999 ")
        await pilot.press("l", "l")  # info+ then warnings+
        assert log.level_filter == 2
        assert len(log.store) == 30 + 3  # 30 warnings (i % 100 == 7) and 3 errors
        assert log.store.line(log.cursor)[2] == "line 1999 mismatch"
        await pilot.press("l")
        assert [log.store.line(r)[2] for r in range(len(log.store))] == [
            "line 999 mismatch", "line 1999 mismatch", "line 2999 mismatch"]
        log.append_lines([(INFO, "quiet"), (ERR, "new failure")])
        log.flush_now()
        assert log.store.line(len(log.store) - 1)[2] == "new failure"
        await pilot.press("l")
        assert log.level_filter == 0 and len(log.store) == 3002


async def test_log_line_under_the_cursor_is_evidence():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.clear("20260101T000000Z-abc123")
        log.append_lines(lines(10))
        log.flush_now()
        await pilot.pause()
        await pilot.press("up")
        ev = log.evidence_at_cursor()
        assert ev.kind == "log" and ev.line == 9 and ev.run_id == "20260101T000000Z-abc123"
        assert ev.value == "line 8 ok"


async def test_n_says_when_the_search_wraps_around_the_end():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.append_lines(lines(300))
        log.flush_now()
        await pilot.pause()
        assert log.search("mismatch") is False  # no error line in 300: nothing found, nothing moved
        assert log.search("line 5 ok")  # the first search from the end wraps quietly: that is where it starts
        assert not [n for n in app.notices if "wrapped" in n]
        await pilot.press("n")  # the only match: n comes back to it, across the end
        await pilot.pause()
        assert log.cursor == 5
        assert [n for n in app.notices if "wrapped" in n] == ["Search wrapped to the top"]
        log.search("line 2", from_row=0)  # line 2, then 20..29, 200..299
        await pilot.press("N")
        await pilot.pause()
        assert log.cursor == 299
        assert "Search wrapped to the bottom" in app.notices


def test_match_rows_grow_with_the_log_and_follow_the_filter():
    from nkitui.app.widgets.run.logstore import LogStore

    store = LogStore()
    store.extend(list(lines(2000)))
    assert list(store.match_rows("mismatch")) == [999, 1999]
    store.extend(list(lines(1000, start=2000)))  # only the new rows are scanned
    assert list(store.match_rows("mismatch")) == [999, 1999, 2999]
    assert store.match_position("mismatch", 1999) == (2, 3) and store.match_position("mismatch", 5) == (None, 3)
    store.set_min_level(ERR)  # view rows of the filtered log
    assert list(store.match_rows("mismatch")) == [0, 1, 2]
    assert len(store.match_rows("MISMATCH")) == 0  # smartcase, as find
    store.clear()
    assert len(store.match_rows("mismatch")) == 0
