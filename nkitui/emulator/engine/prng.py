"""Random numbers of the nki namespace: `rng`, `rand2`, `set_rng_seed`, `rand_set_state`,
`rand_get_state`.

The hardware generators (XORWOW) are not modelled bit for bit: values come from the run's numpy
generator (seeded by the emulator option `seed`, re-seeded by `set_rng_seed` / `rand_set_state`),
so they are reproducible on the emulator but differ from the device. `rand_get_state` returns a
fingerprint of that state which `rand_set_state` accepts back.
"""

from __future__ import annotations

import math

import numpy as np

from nkitui.emulator.engine.common import Operand, Run, current, operand_values, scalar_or_vector, tile, write
from nkitui.emulator.errors import EngineDtypeError, EngineMemoryError, EngineOpError, OperandShapeError
from nkitui.emulator.tensor import Tensor

_INTS = ("int8", "int16", "int32", "uint8", "uint16", "uint32")


def _engine(run: Run, engine: str | None, dst: Tensor, api: str) -> str:
    eng = engine or ("gpsimd" if run.target.nc_version >= 3 and dst.storage.memory == "sbuf" else "vector")
    if eng == "gpsimd":
        if run.target.nc_version < 3:
            raise EngineOpError(f"{api} on GpSimd needs NeuronCore-v3 or newer; use the vector engine")
        if dst.storage.memory != "sbuf":
            raise EngineMemoryError(f"GpSimd engine cannot access PSUM: dst of {api} is in psum")
    elif eng != "vector":
        raise EngineOpError(f"{api} runs on the vector or gpsimd engine, not {eng}")
    return eng


def rng(dst: Tensor, *, engine: str | None = None, api: str = "rng") -> None:
    """32 random bits per element, truncated to dst's integer type (least significant bits)."""
    run = current()
    tile(dst, api, "dst")
    if dst.storage.dtype.name not in _INTS:
        raise EngineDtypeError(f"{api}: dst must be an integer type ({', '.join(_INTS)}), got {dst.storage.dtype.name}")
    eng = _engine(run, engine, dst, api)
    run.record(eng, "rng", (), (dst,), partitions=dst.shape[0], free=math.prod(dst.shape[1:]), meta={"api": api})
    if not run.execute:
        return write(run, dst, None)
    bits = run.rng.integers(0, 1 << 32, size=dst.shape, dtype=np.uint64).astype(np.uint32)
    data = dst.storage.data
    assert data is not None  # an executing run holds every storage's cells
    write(run, dst, bits.view(np.uint32).astype(data.dtype))


def rand2(dst: Tensor, low: Operand, high: Operand, *, api: str = "rand2") -> None:
    """Uniform fp32 values in [low, high] (scalars or (P, 1) vectors), cast to dst's dtype."""
    run = current()
    if run.target.nc_version < 4:
        raise EngineOpError(f"{api} needs NeuronCore-v4 (trn3); the target is {run.target.name}")
    tile(dst, api, "dst")
    P = dst.shape[0]
    lo, tlo = scalar_or_vector(low, api, "min", P, dst.ndim)
    hi, thi = scalar_or_vector(high, api, "max", P, dst.ndim)
    ins = tuple(t for t in (tlo, thi) if t is not None)
    run.record("vector", "rand2", ins, (dst,), partitions=P, free=math.prod(dst.shape[1:]), meta={"api": api})
    if not run.execute:
        return write(run, dst, None)
    a = operand_values(lo, tlo, dst.ndim)
    b = operand_values(hi, thi, dst.ndim)
    u = run.rng.random(dst.shape, dtype=np.float32)
    write(run, dst, (a + (b - a) * u).astype(np.float32))


def _seed_from(t: Tensor) -> int:
    vals = np.asarray(t.array()).astype(np.uint64).reshape(-1)
    return int(np.bitwise_xor.reduce(vals * np.arange(1, vals.size + 1, dtype=np.uint64)))


def set_rng_seed(src_seeds: Tensor, *, api: str = "set_rng_seed") -> None:
    run = current()
    tile(src_seeds, api, "src_seeds")
    if src_seeds.size != 1 or src_seeds.storage.dtype.itemsize != 4:
        raise OperandShapeError(f"{api}: src_seeds must be a [1, 1] tensor of a 32-bit type, got {src_seeds.shape} "
                                f"{src_seeds.storage.dtype.name}")
    run.record("vector", "set_rng_seed", (src_seeds,), (), partitions=1, free=1, meta={"api": api})
    if run.execute:
        run.rng = np.random.default_rng(_seed_from(src_seeds))


def _require_v3(run: Run, api: str) -> None:
    if run.target.nc_version < 3:
        raise EngineOpError(f"{api} needs NeuronCore-v3 or newer; the target is {run.target.name}")


def rand_set_state(src_seeds: Tensor, *, engine: str | None = None, api: str = "rand_set_state") -> None:
    run = current()
    _require_v3(run, api)
    tile(src_seeds, api, "src_seeds")
    if src_seeds.storage.memory != "sbuf" or src_seeds.storage.dtype.name != "uint32":
        raise EngineDtypeError(f"{api}: src_seeds must be a uint32 SBUF tile, got {src_seeds.storage.dtype.name} in "
                               f"{src_seeds.storage.memory}")
    run.record(engine or "gpsimd", "rand_set_state", (src_seeds,), (), partitions=src_seeds.shape[0],
               free=math.prod(src_seeds.shape[1:]), meta={"api": api})
    if run.execute:
        run.rng = np.random.default_rng(_seed_from(src_seeds))


def rand_get_state(dst: Tensor, *, engine: str | None = None, api: str = "rand_get_state") -> None:
    run = current()
    _require_v3(run, api)
    tile(dst, api, "dst")
    if dst.storage.dtype.name != "uint32":
        raise EngineDtypeError(f"{api}: dst must be uint32, got {dst.storage.dtype.name}")
    run.record(engine or "gpsimd", "rand_get_state", (), (dst,), partitions=dst.shape[0],
               free=math.prod(dst.shape[1:]), meta={"api": api})
    if not run.execute:
        return write(run, dst, None)
    # a fingerprint of the generator: feeding it back to rand_set_state gives a fixed, reproducible stream
    state = np.random.default_rng(run.rng.bit_generator.random_raw()).integers(0, 1 << 32, size=dst.shape,
                                                                               dtype=np.uint64)
    write(run, dst, state.astype(np.uint32))


def uniform(dst: Tensor) -> None:
    """The legacy front end's nl.rand values: uniform [0, 1) float32 from the launch's generator (the front end
    records its trace instruction). An engine function so the replayable log replays the draws in order."""
    run = current()
    write(run, dst, run.rng.random(dst.shape, dtype=np.float32))
