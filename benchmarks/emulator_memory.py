"""Host memory of an emulated launch, as a ratio to the kernel's own HBM footprint.

    .venv/bin/python benchmarks/emulator_memory.py [--quick] [--nki-samples /work/peers/nki-samples]

For each kernel: the peak of Python-tracked allocations (tracemalloc: numpy arrays included) during
the launch, after the inputs exist, divided by the kernel's HBM bytes (its inputs plus the outputs
it returns). The emulator keeps each device tensor in a host array of the same size and each
on-chip tile only while it is live, so the peak should stay within twice the HBM bytes plus twice
the device's on-chip memory (SBUF + PSUM, 26 MiB on trn2: tiles of at most that size are live at
once, and low-precision tiles may keep an fp32 copy): the ratio to HBM tends to 1-2x as problems
grow, and small problems show the fixed on-chip part. With `--nki-samples`, AWS's flash-attention backward kernel is measured
from that checkout (run from outside this repository, never copied) at a size whose numpy reference
the issue found too big: the kernel itself needs little.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import resource
import sys
import tracemalloc
from pathlib import Path

import ml_dtypes
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nkitui import emulator  # noqa: E402

emulator.install()

from tests.emulator import tutorial_kernels as tk  # noqa: E402  (our tutorial-style kernels)

BF16 = ml_dtypes.bfloat16
ON_CHIP = (24 + 2) * 2**20  # trn2 SBUF + PSUM bytes


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    return 0


def measure(launch, inputs) -> tuple[int, int, float]:
    """(peak bytes allocated during the launch, HBM bytes of inputs + outputs, max RSS MiB)."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    out = launch()
    _cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    hbm = _nbytes(inputs) + _nbytes(out)
    return peak, hbm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def row(name: str, peak: int, hbm: int) -> float:
    ratio = peak / hbm
    bound = 2 * hbm + 2 * ON_CHIP
    print(f"{name:<46} {hbm / 2**20:10.1f} {peak / 2**20:10.1f} {ratio:7.2f}x {peak / bound:9.2f}")
    return peak / bound


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller shapes (CI smoke run)")
    ap.add_argument("--nki-samples", type=Path, default=None,
                    help="a checkout of aws-neuron/nki-samples at 8370e11: also measure its flash_attn_bwd")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    small = args.quick
    print(f"{'kernel':<46} {'HBM MiB':>10} {'peak MiB':>10} {'ratio':>8} {'of bound':>9}")
    ratios = []

    n = 512 if small else 2048
    lhsT, rhs = (rng.standard_normal((n, n)).astype(BF16) for _ in range(2))
    ratios.append(row(f"tiled matmul {n}^3 bf16", *measure(lambda: tk.matmul_tiled(lhsT, rhs), (lhsT, rhs))[:2]))

    rows, cols = (512, 1024) if small else (4096, 4096)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    ratios.append(row(f"softmax {rows}x{cols} fp32", *measure(lambda: tk.softmax_rows(x), (x,))[:2]))
    g, b = rng.random((1, cols)).astype(np.float32), rng.random((1, cols)).astype(np.float32)
    ratios.append(row(f"layernorm (bn_stats) {rows}x{cols} fp32",
                      *measure(lambda: tk.layer_norm_bn(x, g, b, 1e-5), (x, g, b))[:2]))

    s = 512 if small else 2048
    q, k, v = (rng.standard_normal((s, 128)).astype(BF16) for _ in range(3))
    ratios.append(row(f"attention d=128 seq={s} bf16 causal",
                      *measure(lambda: tk.attention(q, k, v, causal=True), (q, k, v))[:2]))

    if args.nki_samples is not None:
        ratios.append(_flash_attn_bwd(args.nki_samples, rng, small))

    worst = max(ratios)
    print(f"\n'of bound' = peak / (2 x HBM + 2 x on-chip {ON_CHIP >> 20} MiB); worst {worst:.2f} (goal <= 1)")
    return 0


def _flash_attn_bwd(checkout: Path, rng, small: bool) -> float:
    src = checkout / "src"
    if not (src / "nki_samples" / "reference" / "attention.py").exists():
        raise SystemExit(f"{checkout} has no src/nki_samples/reference (check out 8370e11)")
    sys.path.insert(0, str(src))
    attention = importlib.import_module("nki_samples.reference.attention")
    from neuronxcc.nki import baremetal, simulate_kernel

    seqlen, heads, kv = (1024, 2, 1) if small else (4096, 8, 2)
    f32 = np.float32
    q, dy, o = (rng.random((1, heads, 128, seqlen), dtype=f32) for _ in range(3))
    k, v = (rng.random((1, kv, 128, seqlen), dtype=f32) for _ in range(2))
    lse = rng.random((1, heads, 128, seqlen // 128), dtype=f32)
    inputs = (q, k, v, o, dy, lse)
    peak, hbm, _ = measure(lambda: simulate_kernel(baremetal(attention.flash_attn_bwd)[1, kv], q, k, v, o, dy, lse,
                                                   None, use_causal_mask=True, mixed_precision=True), inputs)
    ratio = row(f"nki-samples flash_attn_bwd {heads}x{seqlen} fp32", peak, hbm)
    ref = 8.2 * heads * seqlen * seqlen * 4  # the test's numpy reference (benchmarks/peer_suites/nki_samples.py)
    print(f"  (the test's numpy reference at this size holds about {ref / 2**30:.1f} GiB; at 8 heads x 8192, "
          f"{8.2 * 8 * 8192 * 8192 * 4 / 2**30:.1f} GiB)")
    return ratio


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    raise SystemExit(main())
