"""The shell, driven by Pilot: layout, areas, help, keys, palette, themes, keymap overrides."""

from __future__ import annotations

from textual.widgets import DataTable, Input

from nkitui.app.screens.help import HelpScreen, KeysScreen
from nkitui.app.screens.workstation import WorkstationScreen
from tests.app.helpers import new_app, screen_text, settle


async def test_narrow_terminal_shows_one_area_at_a_time_and_digits_switch(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        ws = app.workstation
        assert ws.layout_name == "tabs"
        assert [a for a in ("source", "run", "engines", "rubric") if ws.area(a).display] == ["source"]
        text = screen_text(app)
        assert "scale_rows" in text and "target trn2" in text and "backend emulator (auto)" in text
        await pilot.press("2")
        await settle(pilot)
        assert ws.current_area == "run" and ws.area("run").display and not ws.area("source").display
        assert app.focused is ws.area("run").log
        await pilot.press("4")
        await pilot.press("right_square_bracket")  # next area wraps around to Source
        await settle(pilot)
        assert ws.current_area == "source"
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert ws.current_area == "rubric"


async def test_wide_terminal_shows_the_four_areas_split_and_w_toggles(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        ws = app.workstation
        assert ws.layout_name == "split"
        assert all(ws.area(a).display for a in ("source", "run", "engines", "rubric"))
        src, rub = ws.area("source").region, ws.area("rubric").region
        assert src.x < rub.x and src.y == rub.y  # Source beside Rubric on top
        await pilot.press("3")
        await settle(pilot)
        assert ws.current_area == "engines"
        await pilot.press("w")
        await settle(pilot)
        assert ws.layout_name == "tabs" and ws.area("engines").display and not ws.area("source").display
        await pilot.press("z")  # zoom the current area; z again restores
        await settle(pilot)
        assert ws.zoomed == "engines"
        await pilot.press("z")
        await settle(pilot)
        assert ws.zoomed is None


async def test_f1_shows_help_for_the_focused_area_with_its_live_keys(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        await pilot.press("f1")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        assert "Run: live log" in app.screen.markdown and "Run area" in app.screen.markdown
        ids = [row[2] for row in app.screen.keys]
        assert "log.search" in ids and "app.run" in ids
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, WorkstationScreen)


async def test_question_mark_lists_every_key_and_filters(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, KeysScreen)
        table = app.screen.query_one(DataTable)
        everything = table.row_count
        await pilot.press(*"submit")
        await settle(pilot)
        assert 0 < table.row_count < everything
        assert any(table.get_row_at(i)[-1] == "app.submit" for i in range(table.row_count))


async def test_palette_offers_only_commands_that_fit_the_state(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        titles = [c.title for c in app.palette_commands()]
        assert "Source: show git diff" in titles and "Source: show CUDA beside NKI" not in titles
        assert "Go to Source" not in titles and "Go to Run" in titles
        assert "Run: cancel" not in titles
        assert "Theme: light" in titles and "Theme: dark" not in titles
        await pilot.press("d")
        await settle(pilot)
        titles = [c.title for c in app.palette_commands()]
        assert "Source: show CUDA beside NKI" in titles and "Source: split diff" in titles
        # the palette opens from its plain key and runs a command
        await pilot.press("colon")
        await settle(pilot)
        await pilot.press(*"rubric")
        await settle(pilot, 0.2)
        await pilot.press("enter")
        await settle(pilot)
        assert app.workstation.current_area == "rubric"
        {c.title: c for c in app.palette_commands()}["Log: search"].run()  # a typed call, no action name
        await settle(pilot)
        assert app.workstation.current_area == "run" and isinstance(app.focused, Input)


async def test_themes_switch_live_and_user_themes_join_them(task_dir, isolated_xdg):
    themes = isolated_xdg / "config" / "nkitui" / "themes"
    themes.mkdir(parents=True)
    (themes / "dusk.toml").write_text('name = "dusk"\nprimary = "#268bd2"\nbackground = "#002b36"\n')
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.theme == "dark" and app.theme_names == ["dark", "light", "high-contrast", "dusk"]
        before = app.theme_variables["nk-sev-high"]
        await pilot.press("t")
        await settle(pilot)
        assert app.theme == "light" and app.theme_variables["nk-sev-high"] != before
        app.set_theme("dusk")
        await settle(pilot)
        assert app.theme_variables["background"].upper() == "#002B36"
        assert app.theme_variables["nk-sev-high"]  # derived for a theme that does not set it


async def test_user_keymap_rebinds_by_id_and_reports_mistakes(task_dir, isolated_xdg):
    cfg = isolated_xdg / "config" / "nkitui"
    cfg.mkdir(parents=True)
    (cfg / "keymap.toml").write_text('"app.area_rubric" = "f4"\n"app.rnu" = "f9"\n')
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f4")
        await settle(pilot)
        assert app.workstation.current_area == "rubric"
        messages = [n.message for n in app.notices]
        assert any(str(cfg / "keymap.toml") in m and "'app.rnu'" in m and "'app.run'" in m for m in messages)


async def test_bad_settings_and_an_unknown_theme_are_reported_not_fatal(task_dir, isolated_xdg):
    cfg = isolated_xdg / "config" / "nkitui"
    cfg.mkdir(parents=True)
    (cfg / "config.toml").write_text('theme = "solarised"\nlayout = "huge"\n')
    (cfg / "themes").mkdir()
    (cfg / "themes" / "broken.toml").write_text('name = "broken"\nprimary = "#12345"\n')
    app = new_app(task_dir, config=__import__("nkitui.app.config", fromlist=["load_config"]).load_config())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        messages = "\n".join(n.message for n in app.notices)
        assert "theme 'solarised' not found" in messages
        assert f"{cfg / 'config.toml'}:2 [layout]: error: unknown layout 'huge'" in messages
        assert f"{cfg / 'themes' / 'broken.toml'}\n• field 'primary' (line 2): '#12345' is not a colour" in messages
        assert app.theme == "dark"


async def test_worker_errors_become_notifications_not_crashes(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)

        def explode() -> None:
            raise RuntimeError("disk on fire")

        app.run_worker(explode, name="flaky job", thread=True, exit_on_error=False)
        await settle(pilot)
        assert app.is_running
        notes = [(n.title, n.message) for n in app.notices]
        assert ("flaky job failed", "RuntimeError: disk on fire") in notes


async def test_search_box_is_a_text_input_so_area_keys_type_letters(task_dir):
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2", "slash")
        await settle(pilot)
        assert isinstance(app.focused, Input)
        await pilot.press("1", "q")
        await settle(pilot)
        assert app.focused.value == "1q" and app.workstation.current_area == "run" and app.is_running


async def test_a_task_folder_loads_after_the_first_frame(task_dir):
    from nkitui.app.app import NkituiApp

    app = NkituiApp(task_dir)  # a folder, as `nkitui TASK_DIR` passes it
    assert app.audit_task is None and app.header_state.task == "scale_rows"  # from task.toml, unvalidated
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.audit_task is not None and app.audit_task.id == "scale_rows"
        assert app.header_state.title.startswith("Scale each row")
        assert app.source_area.code.right.path == "scale_rows_nki.py"


async def test_a_broken_task_lists_every_problem_and_quits_with_status_2(tmp_path):
    from nkitui.app.app import NkituiApp
    from nkitui.app.screens.problems import TaskProblemsScreen

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "task.toml").write_text('schema = 1\ntitle = "no id"\n[sources]\nnki = "missing.py"\n')
    app = NkituiApp(folder)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, TaskProblemsScreen)
        text = screen_text(app)
        assert "Task problems" in text and "required field is missing" in text
        assert len(app.task_problems) >= 2 and all("task.toml" in str(p) for p in app.task_problems)
        await pilot.press("q")
    assert app.task_problems  # run_app turns these into exit status 2


def test_open_a_missing_folder_exits_2_without_a_ui(tmp_path, capsys):
    from nkitui.cli import main

    assert main([str(tmp_path / "nowhere")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


async def test_t_reads_the_theme_folder_again_and_reports_a_broken_file_once(task_dir, isolated_xdg):
    themes = isolated_xdg / "config" / "nkitui" / "themes"
    themes.mkdir(parents=True)
    app = new_app(task_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.theme_names == ["dark", "light", "high-contrast"]
        # saved while nkitui runs: t picks it up
        (themes / "ocean.toml").write_text('name = "ocean"\nprimary = "#0077be"\nbackground = "#001a33"\n')
        await pilot.press("t")
        await settle(pilot)
        assert app.theme_names[-1] == "ocean" and app.theme == "light"
        bad = themes / "bad.toml"
        bad.write_text('name = "bad"\nprimary = "blu"\n[variables]\nnk-sev-high = 7\n')
        await pilot.press("t")
        await settle(pilot)
        assert app.is_running and app.theme == "high-contrast" and "bad" not in app.theme_names
        problems = [n for n in app.notices if n.title == "Theme file problem"]
        assert len(problems) == 1
        assert str(bad) in problems[0].message
        assert "field 'primary' (line 2): 'blu' is not a colour" in problems[0].message
        assert "field 'variables.nk-sev-high'" in problems[0].message
        await pilot.press("t")  # the same problem is not reported on every key press
        await settle(pilot)
        assert app.theme == "ocean"
        assert len([n for n in app.notices if n.title == "Theme file problem"]) == 1
        # the palette command reports everything again
        from nkitui.app.commands import palette_commands

        reload = next(c for c in palette_commands(app) if c.title == "Reload themes")
        reload.run()
        await settle(pilot)
        assert len([n for n in app.notices if n.title == "Theme file problem"]) == 2
        assert any(n.title == "Themes reloaded" and "1 file with problems" in n.message for n in app.notices)
        bad.write_bytes(b'name = "bad"\nprimary = "\xff"\n')  # not even text: still a clear problem
        await pilot.press("t")
        await settle(pilot)
        latest = [n for n in app.notices if n.title == "Theme file problem"][-1]
        assert str(bad) in latest.message and "not UTF-8" in latest.message and app.is_running


async def test_editing_the_current_user_theme_applies_breaking_keeps_removing_falls_back(task_dir, isolated_xdg):
    themes = isolated_xdg / "config" / "nkitui" / "themes"
    themes.mkdir(parents=True)
    dusk = themes / "dusk.toml"
    dusk.write_text('name = "dusk"\nprimary = "#268bd2"\nbackground = "#002b36"\n')
    app = new_app(task_dir, theme="dusk")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.theme == "dusk" and app.theme_variables["background"].upper() == "#002B36"
        dusk.write_text('name = "dusk"\nprimary = "#268bd2"\nbackground = "#101010"\n')
        app.action_reload_themes()
        await settle(pilot)
        assert app.theme == "dusk" and app.theme_variables["background"].upper() == "#101010"
        dusk.write_text('name = "dusk"\nprimary = "#268bd2"\nbackground = 5\n')  # broken mid-edit
        app.action_reload_themes()
        await settle(pilot)
        assert app.theme == "dusk" and "dusk" in app.theme_names  # the last good colours stay
        assert app.theme_variables["background"].upper() == "#101010"
        assert any(str(dusk) in n.message and "field 'background'" in n.message for n in app.notices)
        dusk.unlink()
        await pilot.press("t")
        await settle(pilot)
        assert "dusk" not in app.theme_names and app.theme in app.theme_names
        assert any("'dusk' is no longer in the theme folder" in n.message for n in app.notices)
