import textwrap
from pathlib import Path

import pytest

KERNEL = textwrap.dedent(
    """
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl


    @nki.jit
    def add_kernel(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out
    """
)
REFERENCE = "def add(a, b):\n    return a + b\n"
MANIFEST = textwrap.dedent(
    """
    id = "add"
    title = "vector add"
    target = "trn2"

    [sources]
    nki = "add_nki.py"
    cuda = "add.cu"
    reference = "reference.py::add"

    [kernel]
    entry = "add_nki.py::add_kernel"

    [[inputs]]
    name = "a"
    shape = [128, 64]
    dtype = "float32"

    [[inputs]]
    name = "b"
    shape = [128, 64]
    dtype = "bfloat16"
    init = { dist = "uniform", low = -2.0, high = 2.0 }

    [[outputs]]
    name = "out"
    shape = [128, 64]
    dtype = "float32"
    tolerance = { kind = "allclose", atol = 1e-5, rtol = 1e-5 }
    """
)


def write_task(root: Path, manifest: str = MANIFEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "add_nki.py").write_text(KERNEL)
    (root / "reference.py").write_text(REFERENCE)
    (root / "add.cu").write_text("__global__ void add(const float* a, const float* b, float* c) {}\n")
    (root / "task.toml").write_text(manifest)
    return root


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    return write_task(tmp_path / "add")
