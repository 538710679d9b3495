"""install(): module aliasing, idempotence, uninstall, and refusing to shadow a real Neuron SDK."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from nkitui import emulator

REPO = Path(__file__).resolve().parents[2]


def test_modules_are_importable_under_the_real_names():
    import neuronxcc
    import neuronxcc.nki as nki
    from neuronxcc import nki as nki2
    from neuronxcc.nki import isa, language

    assert nki is nki2 is neuronxcc.nki
    assert nki.language is language and nki.isa is isa
    assert emulator.installed()
    emulator.install()  # idempotent


def _child(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    env_path = [str(REPO)] + ([str(extra_path)] if extra_path else [])
    prog = "import sys; sys.path[:0] = %r\n" % env_path + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)


def test_uninstall_restores_sys_modules():
    r = _child("""
        import sys
        from nkitui import emulator
        emulator.install()
        import neuronxcc.nki.language
        emulator.uninstall()
        assert "neuronxcc" not in sys.modules and "neuronxcc.nki.language" not in sys.modules
        try:
            import neuronxcc
        except ImportError:
            print("gone")
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "gone"


def test_refuses_to_shadow_a_real_neuronxcc(tmp_path):
    pkg = tmp_path / "neuronxcc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    r = _child("""
        from nkitui import emulator
        try:
            emulator.install()
        except emulator.InstallError as e:
            print("refused:", e)
        emulator.install(force=True)
        import neuronxcc.nki.language as nl
        print("forced:", hasattr(nl, "load"))
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "refused: a real Neuron package 'neuronxcc' is importable" in r.stdout
    assert "install(force=True)" in r.stdout
    assert "forced: True" in r.stdout


def test_pypi_placeholder_nki_counts_as_absent(tmp_path):
    pkg = tmp_path / "nki"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('placeholder: install from the AWS Neuron index')\n")
    r = _child("""
        from nkitui import emulator
        emulator.install()
        import neuronxcc.nki
        print("ok")
    """, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
