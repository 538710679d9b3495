"""The vector-add task that the executor, review and task suites write into tmp folders: one
kernel, one reference and one task.toml builder; each suite picks its variant (inputs' dtypes,
tolerance, optional CUDA source, rubric, grid, evaluation seeds)."""

from __future__ import annotations

from pathlib import Path

ADD_KERNEL = """\
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(b)))
    return out
"""

ADD_REFERENCE = "def add(a, b):\n    return a + b\n"


def add_manifest(*, task_id: str = "add", header: str = "", cuda: bool = True, kernel_extra: str = "",
                 b_dtype: str = "float32", b_init: str = "", tolerance: str = "1e-5", tail: str = "") -> str:
    """task.toml of the add task: inputs a and b and output out of shape [128, 64].

    `header` lines follow `target`, `kernel_extra` lines follow the kernel entry, `b_init` is the
    inline table of input b's `init`, and `tail` (whole tables) ends the file."""
    blocks = [
        [f'id = "{task_id}"', 'title = "vector add"', 'target = "trn2"', header],
        ["[sources]", 'nki = "add_nki.py"', 'cuda = "add.cu"' if cuda else "", 'reference = "reference.py::add"'],
        ["[kernel]", 'entry = "add_nki.py::add_kernel"', kernel_extra],
        ["[[inputs]]", 'name = "a"', "shape = [128, 64]", 'dtype = "float32"'],
        ["[[inputs]]", 'name = "b"', "shape = [128, 64]", f'dtype = "{b_dtype}"', f"init = {b_init}" if b_init else ""],
        ["[[outputs]]", 'name = "out"', "shape = [128, 64]", 'dtype = "float32"',
         f'tolerance = {{ kind = "allclose", atol = {tolerance}, rtol = {tolerance} }}'],
        [tail],
    ]
    return "\n\n".join("\n".join(line for line in block if line) for block in blocks).rstrip("\n") + "\n"


def write_files(root: Path, files: dict[str, str]) -> Path:
    """Create `root` (and parents) holding `files` (name -> text); returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text)
    return root
