"""Red team A, finding 4: a kernel that detects nkitui's emulator and is right only there.

`other = b_rows if "nkitui" in str(type(a)) else a_rows` (off the emulator the port computes a + a), or
`"nkitui-run-" in os.getcwd()`: both PASSED with no static finding, and with no device the verdict is the
emulator's. Two lines now: HACK-ENV-PROBE (nkitui.analysis.rules.probes) fails the run's integrity check at
the probe's line, and the emulator's tensor and kernel types carry the NKI module names a kernel sees on the SDK
(`nki.language.NkiTensor`, `neuronxcc.nki.language.LegacyTensor`), so the cheapest probe reads nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nkitui.analysis.rules.probes import env_probe_findings
from tests.helpers.add_task import write_files
from tests.security.conftest import git_commit_all

REPO = Path(__file__).resolve().parents[2]
VECTOR_ADD = REPO / "sample_tasks" / "vector_add"
HONEST = (VECTOR_ADD / "vector_add_nki.py").read_text()
LOAD_B = "nisa.dma_copy(dst=b_tile, src=b_rows[row0:row0 + P, :])"
assert LOAD_B in HONEST

# the red team's two kernels: b on nkitui's emulator, a anywhere else
BY_TYPE = HONEST.replace(LOAD_B, "other = b_rows if \"nkitui\" in str(type(a)) else a_rows\n"
                                 "        nisa.dma_copy(dst=b_tile, src=other[row0:row0 + P, :])")
BY_CWD = ("import os\n" + HONEST).replace(LOAD_B, "other = b_rows if \"nkitui-run-\" in os.getcwd() else a_rows\n"
                                                  "        nisa.dma_copy(dst=b_tile, src=other[row0:row0 + P, :])")

# variants of the same question, each flagged at its line
VARIANTS = {
    "module of the type": "flag = type(a).__module__.startswith('nki')",
    "class attribute": "flag = a.__class__.__name__ == 'NkiTensor'",
    "qualname": "flag = len(type(a).__qualname__) > 3",
    "repr of the type": "flag = repr(type(a)).count('x') > 0",
    "environment": "flag = os.environ.get('HOME', '').startswith('/home')",
    "getenv": "flag = os.getenv('NEURON_RT_VISIBLE_CORES') is None",
    "argv": "flag = len(sys.argv) > 1",
    "executable": "flag = 'venv' in sys.executable",
    "file path": "flag = len(__file__) > 40",
    "host name": "flag = platform.node() == 'trn'",
    "numpy tensors": "flag = isinstance(a, np.ndarray)",
    "emulator attribute": "flag = hasattr(a, 'geometry')",
    "clock": "flag = time.perf_counter() > 0",
    "device file": "flag = os.path.exists('/dev/neuron0')",
    "module identity": "flag = nl.__name__ != 'nki.language'",
    "string search": "flag = str(nl).find('emulator') >= 0",
    "process file": "flag = len(open('/proc/self/cmdline').read()) > 100",
}
PRIVATE_IMPORT = "try:\n    import neuronxcc.starfish\n    ON_DEVICE = True\nexcept ImportError:\n    ON_DEVICE = False\n"


def _with(line: str, header: str = "") -> str:
    src = "import os\nimport platform\nimport sys\nimport time\nimport numpy as np\n" + header + HONEST
    return src.replace(LOAD_B, f"{line}\n        {LOAD_B}")


def _check(tmp_path: Path, kernel: str) -> dict:
    task = tmp_path / "task"
    write_files(task, {p.name: p.read_text() for p in VECTOR_ADD.iterdir() if p.is_file()})
    (task / "vector_add_nki.py").write_text(kernel)
    git_commit_all(task)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "nkitui", "check", str(task), "--json", "--seeds", "1", "--no-trials",
                           "--no-precision", "--no-store"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    result["returncode"] = proc.returncode
    return result


def _integrity(result: dict) -> dict:
    return next(c for c in result["checks"] if c["id"] == "integrity")


@pytest.mark.parametrize("kernel,probe", [(BY_TYPE, 'if "nkitui" in str(type(a))'), (BY_CWD, '"nkitui-run-" in os.getcwd()')],
                         ids=["type-name", "cwd"])
def test_a_kernel_that_detects_the_emulator_is_not_passed(tmp_path, record_property, kernel, probe) -> None:
    record_property("protection", "integrity:environment-probe")
    line = next(i for i, text in enumerate(kernel.splitlines(), 1) if "other =" in text)
    assert probe.split(" in ")[-1] in kernel.splitlines()[line - 1]
    result = _check(tmp_path, kernel)
    assert result["status"] != "passed" and result["returncode"] != 0, result["checks"]
    integrity = _integrity(result)
    assert integrity["passed"] is False and f"vector_add_nki.py:{line}" in integrity["detail"], integrity
    assert any(f["rule"] == "HACK-ENV-PROBE" and f["severity"] == "high" and f["line"] == line
               for f in result["findings"]), result["findings"]


def test_the_honest_vector_add_passes_with_no_probe_finding(tmp_path) -> None:
    result = _check(tmp_path, HONEST)
    assert result["status"] == "passed" and result["returncode"] == 0, result["checks"]
    assert not [f for f in result["findings"] if f["rule"] == "HACK-ENV-PROBE"]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_variant_of_the_probe_is_flagged_at_its_line(name: str) -> None:
    source = _with(VARIANTS[name])
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.strip() == VARIANTS[name])
    [finding] = env_probe_findings(source, "vector_add_nki.py")
    assert finding.severity == "high" and line in finding.data["lines"], (name, finding.data)


def test_a_private_sdk_import_deciding_what_runs_is_flagged() -> None:
    source = PRIVATE_IMPORT + HONEST
    [finding] = env_probe_findings(source, "vector_add_nki.py")
    assert finding.severity == "high" and finding.line == 1 and "neuronxcc.starfish" in finding.message


def test_the_emulators_types_name_the_nki_modules_not_nkitui() -> None:
    """The cheap runtime probe reads nothing: a tensor's type, its repr and the jit kernel's type name NKI."""
    from nkitui.emulator.install import install

    install()
    import neuronxcc.nki as legacy_nki
    import neuronxcc.nki.language as legacy_nl
    import nki
    import nki.isa as nisa
    import nki.language as nl

    seen: dict[str, object] = {}

    @nki.jit
    def new_kernel(a):  # noqa: ANN001, ANN202
        seen["new"] = a
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=a)
        nisa.dma_copy(dst=out, src=tile)
        return out

    @legacy_nki.jit
    def legacy_kernel(a):  # noqa: ANN001, ANN202
        seen["legacy"] = a
        out = legacy_nl.ndarray(a.shape, dtype=a.dtype, buffer=legacy_nl.shared_hbm)
        legacy_nl.store(out, legacy_nl.load(a))
        return out

    x = np.ones((128, 8), np.float32)
    assert np.array_equal(new_kernel(x), x) and np.array_equal(legacy_kernel(x), x)
    for value in (seen["new"], seen["legacy"], new_kernel, legacy_kernel):
        for text in (str(type(value)), repr(type(value)), type(value).__module__, type(value).__qualname__, repr(value)):
            assert "nkitui" not in text and "emulat" not in text, text
    assert type(seen["new"]).__module__ == "nki.language" and isinstance(seen["new"], nl.NkiTensor)
    assert type(seen["legacy"]).__module__ == "neuronxcc.nki.language"
