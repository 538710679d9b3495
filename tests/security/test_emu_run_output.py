"""`nkitui emu run` shows what its confined child prints and returns as data (issue #14): the kernel is
untrusted, and its prints went to the auditor's terminal raw. Escape sequences could clear the screen,
print a fake result, set the title or write the clipboard (OSC 52); a flood filled the terminal; a
summary of the wrong shape crashed the command with a traceback.

  attack                                          before                                 now
  ESC/BEL/OSC 52 sequences in the kernel's prints  reached the terminal                   shown as pictures (␛, ␇)
  a secret shape in its prints                    shown                                  [REDACTED:...]
  3 MB of prints                                  3 MB on the terminal                   1 MB shown, the rest counted
  a summary whose fields have the wrong types     AttributeError/TypeError traceback     "malformed summary", exit 1
  an output named with escape sequences           the name's sequences reached stdout    shown as pictures
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

KERNEL = '''
import os
import sys
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    root = os.path.dirname(os.getcwd())
{body}
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a) + nl.load(b))
    return out
'''

FAKE_KEY = "AKIA" + "Q7ZK3M2XRT5BVN8W"


def emu_run(tmp_path: Path, body: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "emu"
    folder.mkdir(exist_ok=True)
    (folder / "kernels.py").write_text(KERNEL.format(body=body))
    a = np.ones((128, 8), np.float32)
    np.savez(folder / "in.npz", a=a, b=a)
    try:
        return subprocess.run([sys.executable, "-m", "nkitui", "emu", "run", "kernels.py::add_kernel", "--inputs",
                               "in.npz", "--out", "out.npz", "--timeout", "60"], cwd=folder, capture_output=True,
                              text=True, timeout=90,
                              env={**os.environ, "PYTHONPATH": str(REPO), **({"HOME": str(home)} if home else {})})
    except subprocess.TimeoutExpired:
        pytest.fail("`nkitui emu run` did not end")


def test_the_kernels_prints_reach_the_terminal_as_data_redacted_and_capped(tmp_path, record_property):
    record_property("protection", "parent:emu-run-output")
    body = ('    print("\\x1b[2J\\x1b[H\\x1b]0;owned\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07PASSED 9/9 " + "' + FAKE_KEY + '")\n'
            '    sys.stderr.write("\\x9b31m half a line without its end")\n'
            '    sys.stderr.flush()\n'
            '    sys.stdout.write(("x" * 1023 + "\\n") * 3072)\n'
            '    sys.stdout.flush()')
    proc = emu_run(tmp_path, body)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "emu" / "out.npz").exists() and "outputs written" in proc.stdout
    err = proc.stderr
    assert "\x1b" not in err and "\x07" not in err and "\x9b" not in err
    assert "␛[2J" in err and "␛]52;c;" in err and "<U+009B>31m half a line" in err
    assert FAKE_KEY not in err and "[REDACTED:aws-access-key-id]" in err
    assert len(err.encode()) < (1 << 20) + 64 * 1024, len(err)
    assert "more bytes of the kernel's output not shown" in err


def test_a_malformed_summary_is_a_failure_in_words_not_a_traceback(tmp_path, record_property):
    record_property("protection", "parent:emu-run-summary")
    body = ('    open(os.path.join(root, "result.json"), "w").write(\'{"files": [], "summary": {"kernel": "k", '
            '"target": "trn2", "grid": [], "instructions": 1, "wall_s": "soon", "engines": ["x"]}}\')\n'
            '    getattr(os, "_ex" + "it")(0)')
    proc = emu_run(tmp_path, body)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "malformed summary" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "emu" / "out.npz").exists()


def test_strings_in_the_childs_summary_are_shown_as_data(tmp_path, record_property):
    record_property("protection", "parent:emu-run-summary")
    body = ('    np = __import__("numpy")\n'
            '    os.mkdir(os.path.join(root, "o"))\n'
            '    np.save(os.path.join(root, "o", "0.npy"), np.zeros((2, 2), np.float32))\n'
            '    open(os.path.join(root, "result.json"), "w").write(__import__("json").dumps({"files": '
            '[["\\x1b[2Jout", "o/0.npy"]], "summary": {"kernel": "k", "target": "trn2\\x1b]0;t\\x07", "grid": [], '
            '"instructions": 1, "wall_s": 0.1, "engines": {"\\x1b[1A": 1}, "outputs": {"\\x1b[2Jout": {"shape": '
            '[2, 2], "dtype": "float32"}}, "diagnostics": [{"message": "\\x1b[32mPASSED"}]}}))\n'
            '    getattr(os, "_ex" + "it")(0)')
    proc = emu_run(tmp_path, body)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "\x1b" not in out and "\x07" not in out, out
    assert "␛[2Jout: (2, 2) float32" in out and "warning: ␛[32mPASSED" in out and "trn2␛]0;t␇" in out


@pytest.mark.parametrize("account", ["all of them", ["seccomp"], {"enter_ms": 10**400, "active": ["seccomp"]},
                                     {"enter_ms": True}])
def test_a_childs_account_of_its_confinement_of_the_wrong_shape_is_read_without_an_exception(account):
    from nkitui.executor.confine import ConfinementReport

    report = ConfinementReport.from_dict(account)
    assert report.enter_ms is None
    assert report.summary().startswith("sandbox")


def test_credential_stores_in_the_kernels_folder_are_not_copied_into_its_run(tmp_path):
    """Red team, round 9: `emu run` copied the kernel's whole folder, `.aws/credentials` and `.env` with it; the
    kernel read them and hid them in its outputs (reversed, past the redaction)."""
    folder = tmp_path / "emu"
    (folder / ".aws").mkdir(parents=True)
    (folder / ".aws" / "credentials").write_text(f"[default]\naws_access_key_id = {FAKE_KEY}\n")
    (folder / ".env").write_text("TOKEN=abc\n")
    (folder / ".env.local").write_text("TOKEN=def\n")
    (folder / "helper.py").write_text("X = 1\n")
    done = emu_run(tmp_path, "    print('LISTED', sorted(os.listdir('.')), file=sys.stderr)")
    assert done.returncode == 0, done.stderr[-2000:]
    listed = next(line for line in done.stderr.splitlines() if "LISTED" in line)
    assert "helper.py" in listed and "kernels.py" in listed
    assert ".aws" not in listed and ".env" not in listed


def test_a_kernel_in_the_home_folder_is_refused_with_how_to_fix_it(tmp_path):
    done = emu_run(tmp_path, "    pass", home=tmp_path / "emu")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "home folder" in done.stderr and "folder of its own" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "emu" / "out.npz").exists()
