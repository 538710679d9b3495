"""Small builders shared by the numerics tests: output specs and numpy "kernels"."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nkitui.evaluate.numerics.fpformat import round_to
from nkitui.task.model import TensorSpec, Tolerance

BF16 = ml_dtypes.bfloat16


def out_spec(name: str, shape, dtype: str = "float32", kind: str = "allclose", k: int | None = None, **tol) -> TensorSpec:
    return TensorSpec(name=name, shape=tuple(shape), dtype=dtype, tolerance=Tolerance(kind=kind, **tol),
                      reduction_length=k)


def matmul_inputs(m: int, k: int, n: int, dtype=BF16, mean: float = 0.0):
    def make(seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"a": rng.normal(mean, 1.0, (m, k)).astype(dtype), "b": rng.normal(mean, 1.0, (k, n)).astype(dtype)}

    return make


def matmul_reference(out: str = "c", dtype=np.float64):
    def ref(inputs):
        return {out: (inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)).astype(dtype)}

    return ref


def tiled_matmul_kernel(out: str = "c", acc_dtype: str = "float32", out_dtype=np.float32, tile_k: int = 128):
    """A numpy model of a K-tiled matmul: fp32 products per tile, running sum rounded to `acc_dtype`
    when the run is precise (precise off keeps everything fp32, as the emulator does)."""

    def run(inputs, options):
        a = inputs["a"].astype(np.float32)
        b = inputs["b"].astype(np.float32)
        acc = np.zeros((a.shape[0], b.shape[1]), dtype=np.float64)
        for k0 in range(0, a.shape[1], tile_k):
            acc = acc + (a[:, k0:k0 + tile_k] @ b[k0:k0 + tile_k]).astype(np.float64)
            acc = round_to(acc, acc_dtype if options.precise else "float32")
        result = acc.astype(np.float32)
        return {out: result.astype(out_dtype) if options.precise else result}

    return run


# ---- a tiny NKI look-alike for mutation tests that run without the emulator ----------------


class _Lang:
    float32 = np.float32
    bfloat16 = BF16
    psum = "psum"
    sbuf = "sbuf"
    shared_hbm = "shared_hbm"
    add = "add"
    subtract = "subtract"

    @staticmethod
    def affine_range(*args):
        return range(*args)

    sequential_range = affine_range

    @staticmethod
    def zeros(shape, dtype, buffer=None):
        return np.zeros(shape, dtype=dtype)

    @staticmethod
    def ndarray(shape, dtype, buffer=None):
        return np.full(shape, np.nan, dtype=dtype)

    @staticmethod
    def ds(start, size):
        return slice(start, start + size)


class _Isa:
    @staticmethod
    def nc_matmul(*args, accumulate=None):
        if len(args) == 3:  # new namespace: dst first, accumulate into it
            dst, stationary, moving = args
            dst[...] = dst + stationary.astype(np.float32).T @ moving.astype(np.float32)
            return None
        stationary, moving = args
        return stationary.astype(np.float32).T @ moving.astype(np.float32)

    @staticmethod
    def tensor_tensor(data1, data2, op):
        return data1 - data2 if op == "subtract" else data1 + data2


class _Nki:
    @staticmethod
    def jit(fn):
        return fn


def run_fake_nki_source(source: str, inputs, options, entry: str = "kernel", args=("lhsT", "rhs"), out: str = "c"):
    """Exec a kernel written against the look-alike `nl`/`nisa` and run it (a SourceRunner)."""
    # The look-alike stands in for either namespace: blank the NKI imports (keeping line numbers).
    lines = ["" if line.startswith(("import ", "from ")) else line for line in source.splitlines()]
    namespace = {"np": np, "nl": _Lang, "nisa": _Isa, "nki": _Nki, "__name__": "fake_kernel"}
    exec(compile("\n".join(lines), "fake_kernel.py", "exec"), namespace)  # noqa: S102 - our own test kernels
    result = namespace[entry](*[inputs[a] for a in args])
    return {out: np.asarray(result)}
