"""aws-neuron/nki-samples' unit tests (the legacy `neuronxcc.nki` namespace) on the emulator.

    git clone <aws-neuron/nki-samples> /work/peers/nki-samples          # outside this repository
    git -C /work/peers/nki-samples checkout 8370e11                      # see below
    .venv/bin/pip install scipy                                           # two tests import scipy.special
    .venv/bin/python -m benchmarks.peer_suites nki_samples [-n 2] [--json out.json] [-- -k flash]

A test whose numpy reference needs more than half of the host's available memory fails at once
with a MemoryError that says how much ("too big for the host"; this module is also loaded as a
pytest plugin for that) instead of pushing a shared machine into swap or the OOM killer.

The suite runs unchanged in its own simulation mode (`test/unit --simulation-only`: the tests marked
`simulation`, each calling `nki.simulate_kernel`). 8370e11 is the last commit that has both the
kernels (`src/nki_samples/reference`) and `test/unit`; at HEAD the reference kernels are gone and
the unit tests no longer collect. The suite needs only numpy, pytest and scipy, so it runs with this
project's interpreter (or `--python`).

The shim installs the emulator with its default capacity mode (SBUF live data over capacity is a
"spill" diagnostic, as the legacy compiler spills what does not fit; what no allocation can hold is an
error), and one harness fact: three double-row matmul tests read the
instance type from `/sys/devices/virtual/dmi/id/product_name` and silently return unless it says
`trn2` (on any other host the read fails and the test dies on an undefined name). The shim answers
that read with the emulated target's instance type (`trn2.48xlarge` for the default target), so the
tests run the kernel on the emulator instead of skipping their own check. Nothing of the suite is
changed or copied.

Known exclusions (docs/emulator.md has the latest counts):
* `test_flash_attn_bwd_numerical[...-8192-...]`: the test's numpy reference (not the kernel, whose
  emulation needs about twice its HBM footprint: benchmarks/emulator_memory.py) holds about 8.2
  fp32 score matrices of (heads, seqlen, seqlen) at once: 16.4 GiB for 8 heads at 8192, more than
  half of what a 24 GiB machine shared by a team has available.
"""

from __future__ import annotations

import builtins
import io
import os
import sys

import pytest

from benchmarks.peer_suites.common import PeerSuite
from benchmarks.peer_suites.common import main as common_main

PRODUCT_NAME = "/sys/devices/virtual/dmi/id/product_name"

# the reference's peak (tracemalloc, measured at seqlen 512..2048 with 8 heads and scaled by seqlen^2):
# about 8.2 fp32 (heads, seqlen, seqlen) matrices at once
_REFERENCE_SCORE_MATRICES = 8.2


def reference_bytes(heads: int, seqlen: int) -> int:
    return int(_REFERENCE_SCORE_MATRICES * heads * seqlen * seqlen * 4)


def install_shims() -> None:
    """Called by the plugin in the suite's pytest process before its conftest loads."""
    from nkitui import emulator

    emulator.install()
    # the default capacity mode: the legacy compiler spills SBUF data that does not fit (docs: "spills to
    # HBM automatically, not an error"), which the emulator records as a "spill" diagnostic; only what no
    # allocation can hold (one instruction's operands over SBUF, PSUM banks exhausted) fails
    here = os.getcwd()  # the runner starts pytest in the checkout's root
    src = os.path.join(here, "src")
    if os.path.isdir(src) and src not in sys.path:
        sys.path.insert(0, src)
    _answer_product_name()


def _answer_product_name() -> None:
    """Reads of the DMI product name see the emulated target's instance type."""
    from nkitui.emulator.config import current_options

    real_open = builtins.open

    def open_(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and os.fspath(file) == PRODUCT_NAME and "r" in mode:
            text = f"{current_options().target}.48xlarge\n"
            return io.BytesIO(text.encode()) if "b" in mode else io.StringIO(text)
        return real_open(file, mode, *args, **kwargs)

    open_.__wrapped__ = real_open  # type: ignore[attr-defined]  # (the real open, for debugging)
    builtins.open = open_


SUITE = PeerSuite(
    name="nki-samples",
    repo="aws-neuron/nki-samples",
    marker="src/nki_samples/reference",
    pytest_args=("test/unit", "--simulation-only", "-p", "benchmarks.peer_suites.nki_samples"),
    python_path=("src",),
    shim="benchmarks.peer_suites.nki_samples:install_shims",
)

# -- host memory: tests whose numpy reference the host cannot hold fail before they start --------
HOST_SHARE = 0.5  # a test may take at most this share of the host's available memory


def reference_need(item) -> int:
    """Bytes the test's own numpy reference needs (0: small), from its parameters."""
    if "test_flash_attn_bwd_numerical" not in item.nodeid:
        return 0
    params = getattr(getattr(item, "callspec", None), "params", {})
    heads, seqlen = params.get("nheads"), params.get("seqlen")
    return reference_bytes(int(heads), int(seqlen)) if heads and seqlen else 0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """A pytest hook (this module is also loaded as a plugin of the suite's pytest): a test whose
    reference needs more than HOST_SHARE of the available memory fails at once with MemoryError
    saying how much, instead of swapping the machine (other tests run on a shared host)."""
    need = reference_need(item)
    if not need:
        return
    from nkitui.emulator.memory import host_available_bytes

    avail = host_available_bytes()
    if avail is not None and need > HOST_SHARE * avail:
        raise MemoryError(f"too big for this host: the test's numpy reference holds about {need / 2**30:.1f} GiB at "
                          f"once (~{_REFERENCE_SCORE_MATRICES} fp32 (heads, seqlen, seqlen) score matrices), more than "
                          f"{HOST_SHARE:.0%} of the {avail / 2**30:.1f} GiB this host has available; the kernel's own "
                          "emulation needs about twice its HBM bytes (benchmarks/emulator_memory.py)")


def main(argv=None) -> int:
    return common_main(SUITE, list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
