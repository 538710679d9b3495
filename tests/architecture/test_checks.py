"""The architecture checks run as part of the suite, so the README's test command (and CI) keeps them green.

Each check is the project's own tool run as a child process on the checkout; its output is the failure message.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; it comes with the test extra: pip install -e '.[test]'")
    return found


# .ci/run runs ruff, lint-imports and mypy before the tests and says so; they are not run twice.
already_checked = pytest.mark.skipif(os.environ.get("NKITUI_ARCHITECTURE_CHECKED") == "1",
                                     reason=".ci/run ran this check before the tests")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


@already_checked
def test_ruff_finds_nothing() -> None:
    done = _run([_tool("ruff"), "check", "--no-cache", "nkitui", "tests", "benchmarks"])
    assert done.returncode == 0, done.stdout + done.stderr


@already_checked
def test_import_contracts_are_kept() -> None:
    # lint-imports reads [tool.importlinter] from pyproject.toml: layers point down, only nkitui.app imports Textual
    done = _run([_tool("lint-imports"), "--no-cache"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout


@pytest.mark.slow
@already_checked
def test_typed_layers_pass_mypy() -> None:
    # mypy reads [tool.mypy] from pyproject.toml: the packages listed in `files`, checked with --strict.
    # Its cache is the checkout's .mypy_cache (git-ignored), so a second run only reads what changed.
    done = _run([_tool("mypy")])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success" in done.stdout, done.stdout




def test_every_module_is_type_checked_or_named_as_not_yet() -> None:
    # [tool.mypy] `files` lists what passes --strict; an override with follow_imports = "silent" names what is not
    # typed yet. Every module is in exactly one of the two, so a new module (say one more emulator module, the
    # emulator being listed file by file) is checked from its first line instead of escaping mypy unnoticed.
    import tomllib

    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    files = mypy["files"]
    not_yet = [module.removesuffix(".*").replace(".", "/") + ("" if module.endswith(".*") else ".py")
               for override in mypy.get("overrides", []) if override.get("follow_imports") == "silent"
               for module in override["module"]]

    def under(rel: str, entries: list[str]) -> bool:
        return any(rel == entry or rel.startswith(entry + "/") for entry in entries)

    modules = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "nkitui").rglob("*.py"))]
    unchecked = [rel for rel in modules if not under(rel, files) and not under(rel, not_yet)]
    assert not unchecked, ("modules neither in [tool.mypy] files nor in its not-yet-typed override (type them and "
                           "list them):\n" + "\n".join(unchecked))
    both = sorted(entry for entry in not_yet if under(entry, files))
    assert not both, f"in [tool.mypy] files and in the not-yet-typed override (take them off the override): {both}"
    stale = sorted(entry for entry in not_yet if not any(under(rel, [entry]) for rel in modules))
    assert not stale, f"the not-yet-typed override names modules that do not exist: {stale}"


def test_every_type_ignore_says_why() -> None:
    # `# type: ignore[code]  # reason`: an ignore without a reason is checked by nothing and explains nothing
    import re

    bare = re.compile(r"#\s*type:\s*ignore(?!\[[\w,\s-]+\]\s+#\s*\S)")
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / "nkitui").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if bare.search(line)]
    assert not found, "type: ignore without a code and a reason:\n" + "\n".join(found)


def test_tests_use_public_interfaces_of_textual_and_pytest() -> None:
    # private attributes (the notifications list of an App, the fixture info of a test item) change under us
    import re

    private = re.compile(r"\b(?:app|screen|pilot|pyfuncitem|item|widget|driver)\._[a-z]\w*")
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / "tests").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if private.search(line)]
    assert not found, "tests reading private attributes of Textual or pytest objects:\n" + "\n".join(found)


def test_settings_files_are_read_by_the_one_reader() -> None:
    # task manifests, review files, config, keymap and themes: common/fields.py parses TOML, with its
    # problems naming file, field and line; a second tomllib.loads would grow its own error wording
    found = [str(path.relative_to(ROOT)) for path in sorted((ROOT / "nkitui").rglob("*.py"))
             if "tomllib" in path.read_text(encoding="utf-8") and path.name != "fields.py"]
    assert found == [], found
