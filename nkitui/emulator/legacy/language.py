"""`neuronxcc.nki.language` (nl) on the emulator: return-style calls, masks, index grids.

Every function adapts the legacy call style to the engine's destination-first instructions: it
allocates the result tile, narrows operands to the mask box (or passes a boolean mask), and calls
the engine. Element-wise math follows the legacy engine mapping: transcendental / activation
functions run on ScalarE (`activation`), arithmetic, comparisons and bit operations on VectorE
(`tensor_tensor` / `tensor_scalar`), reductions on VectorE (`tensor_reduce`), loads and stores on
the DMA queues, matmul and transpose on TensorE.
"""

from __future__ import annotations

import ast
import builtins
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Protocol, Self, SupportsIndex, SupportsInt, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from nkitui.emulator import devmem
from nkitui.emulator import alu, engine
from nkitui.emulator import dtypes as _dt
from nkitui.emulator import frontend_common as _common
from nkitui.emulator import lowering as _lowering
from nkitui.emulator.api_types import Axis, DTypeLike, Op, Operand, Scalar, Shape
from nkitui.emulator.config import current_options
from nkitui.emulator import replaylog as _replaylog
from nkitui.emulator.engine.common import write as _write
from nkitui.emulator.engine.tensor_engine import check_matmul
from nkitui.emulator.engine.vector import reduced_shape as _reduced_shape, _axes as _norm_axes
from nkitui.emulator.frontend_common import finfo, fp32, static_cast  # noqa: F401  (nl names)
from nkitui.emulator.errors import (
    CapacityError,
    EngineMemoryError,
    IndexingError,
    KernelArgumentError,
    OperandShapeError,
    PartitionDimError,
    UnsupportedError,
    assigned_target,
    evaluate_target,
    kernel_frame,
    kernel_location,
)
from nkitui.emulator.legacy import spmd as _spmd
from nkitui.emulator.legacy import tile as _tile_mod
from nkitui.emulator.legacy._support import align, as_tile, dtype_or, fresh, mark
from nkitui.emulator.legacy.indexing import NO_MASK, Mask, MaskPlan, arange, mgrid, narrow, plan_mask  # noqa: F401
from nkitui.emulator.legacy.tile import LegacyTensor
from nkitui.emulator.lowering import NewTile, SumReduce
from nkitui.emulator.runtime import Run, current, current_or_none
from nkitui.emulator.memory import Storage
from nkitui.emulator.targets import PMAX, resolve_target
from nkitui.emulator.tensor import DynSlice, Tensor
from nkitui.emulator.trace import Instruction

# -- data types ---------------------------------------------------------------------------------
float32 = _dt.float32.public
float16 = _dt.float16.public
tfloat32 = _dt.tfloat32.public
# bf16/fp8 and nl.bfp16: made the first time a kernel asks for one (ml_dtypes costs ~0.65 s of CPU to import)
bfloat16: object
float8_e4m3: object
float8_e5m2: object
float8_e4m3fn: object
bfp16: _common.FloatConstants
_LAZY = ("bfloat16", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "bfp16")


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _common.bfp16 if name == "bfp16" else _dt.dtype_of(name).public
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


int8 = _dt.int8.public
int16 = _dt.int16.public
int32 = _dt.int32.public
uint8 = _dt.uint8.public
uint16 = _dt.uint16.public
uint32 = _dt.uint32.public
bool_ = _dt.bool_.public


# -- buffers --------------------------------------------------------------------------------------
class Buffer:
    """A memory to allocate in: nl.sbuf, nl.psum, nl.hbm / private_hbm, nl.shared_hbm."""

    def __init__(self, name: str, memory: str, kind: str = "", options: dict[str, object] | None = None) -> None:
        self.name = name
        self.memory = memory
        self.kind = kind
        self.options = options or {}

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other in (self.name, self.memory)
        return isinstance(other, Buffer) and (self.memory, self.kind) == (other.memory, other.kind)

    def __hash__(self) -> int:
        return hash((self.memory, self.kind))


sbuf = Buffer("sbuf", "sbuf")
psum = Buffer("psum", "psum")
private_hbm = Buffer("private_hbm", "hbm", "private")
hbm = Buffer("hbm", "hbm", "private")
shared_hbm = Buffer("shared_hbm", "hbm", "shared")

_BUFFER_NAMES = {"sbuf": sbuf, "psum": psum, "hbm": hbm, "private_hbm": private_hbm, "shared_hbm": shared_hbm}


def _buffer(buffer: object) -> Buffer:
    if buffer is None:
        return sbuf
    if isinstance(buffer, Buffer):
        return buffer
    if isinstance(buffer, str) and buffer in _BUFFER_NAMES:
        return _BUFFER_NAMES[buffer]
    mem: Buffer | None = getattr(buffer, "nki_buffer", None)  # objects that stand for a buffer
    if mem is not None:
        return mem
    raise KernelArgumentError(f"unknown buffer {buffer!r}: use nl.sbuf, nl.psum, nl.hbm, nl.private_hbm or "
                              "nl.shared_hbm")


class par_dim(int):
    """Marks the partition dimension in a shape (dimensions left of it are block dimensions)."""

    def __new__(cls, size: SupportsInt) -> Self:
        return super().__new__(cls, int(size))

    def __repr__(self) -> str:
        return f"par_dim({int(self)})"


def _shape_pax(shape: Shape) -> tuple[tuple[int, ...], int]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(shape)
    pax = 0
    for i, s in enumerate(shape):
        if isinstance(s, par_dim):
            pax = i
    return tuple(int(s) for s in shape), pax


class _TileSize(_common.TileSizeLimits):
    """`nl.tile_size`: hardware tile limits (the usable SBUF size depends on the target)."""

    psum_num_banks = 8

    @property
    def total_available_sbuf_size(self) -> int:
        return resolve_target(current_options().target).sbuf_usable_bytes_per_partition

    sbuf_fmax_bytes = total_available_sbuf_size


tile_size = _TileSize()


# -- creation -------------------------------------------------------------------------------------
def ndarray(shape: Shape, dtype: DTypeLike, *, buffer: Buffer | str | None = None, name: str = "",
            **kwargs: object) -> LegacyTensor:
    run = current()
    shape, pax = _shape_pax(shape)
    buf = _buffer(buffer)
    kind = buf.kind or ("private" if buf.memory == "hbm" else "")
    what = f"tensor '{name}'" if name else "tensor"
    # ncc.sbuf/psum.alloc / mod_alloc buffers are placed by the kernel (which may alias them on
    # purpose): like nki `address=` tensors they are not counted against SBUF/PSUM capacity
    placed = buf.options.get("allocator") in ("alloc", "mod_alloc")
    st = run.allocate(shape, dtype, buf.memory, name=name, pax=pax, kind=kind, what=what, track=not placed)
    if buf.memory == "sbuf" and buf.options.get("allocator") == "mod_alloc":
        _check_mod_alloc(run, st, buf.options)
    return LegacyTensor.whole(st)


def _check_mod_alloc(run: Run, st: Storage, options: dict[str, object]) -> None:
    """A `ncc.sbuf.mod_alloc` buffer is placed by the kernel: nothing spills it, and its physical tiles
    (`num_free_tiles` of one block's bytes each, from `base_addr`) must stay below the usable bytes per
    partition (NKI Direct Allocation guide: byte offsets below the partition size minus the 16 KiB the
    compiler reserves).

    The compiler traces an affine_range / sequential_range body once, so it sees the addresses of the
    first iteration only; the emulator runs the body once per iteration, and a kernel that advances
    a Python `cur_addr` after each placement (nki-samples' allocated attention) reaches ever higher
    addresses that the compiler never sees. So placements are checked in the first iteration, and
    once such an address has moved, later ones that do not fit are a diagnostic, not an error."""
    base = int(cast(SupportsInt, options.get("base_addr") or 0))
    site = kernel_location()
    if any(f.count and f.kind != "static" for f in run.loops):  # a repeat of a body traced once
        first = run.placements.get(site)
        if first is not None and first != base and not run.placement_drift:
            run.placement_drift = True
            run.warn_once(("mod_alloc-drift", site), f"ncc.sbuf.mod_alloc(base_addr=...) at "
                          f"{os.path.basename(site[0])}:{site[1]} gets another address in a later iteration of a "
                          "loop the compiler traces once (the kernel's Python address moved with each iteration); "
                          "the emulator checks the first iteration's placement only")
        return
    run.placements.setdefault(site, base)
    tiles = math.prod(int(n) for n in cast(tuple[int, ...], options.get("num_free_tiles") or ()))
    per_block = st.bytes_per_partition // builtins.max(st.blocks, 1)  # (max is nl.max here)
    end = base + per_block * builtins.max(tiles, 1)
    target = run.target
    usable = target.sbuf_usable_bytes_per_partition
    if base >= 0 and end > usable and run.placement_drift:
        run.warn_once(("mod_alloc-past", site), f"ncc.sbuf.mod_alloc(base_addr={base}) at "
                      f"{os.path.basename(site[0])}:{site[1]} reaches byte {end}, past the {usable} B usable on "
                      f"{target.name}, after a loop moved the kernel's Python addresses (see the note above): "
                      "not refused, since the compiler would have placed it lower")
        return
    if base < 0 or end > usable:
        raise CapacityError(
            f"direct allocation of {st!r} with ncc.sbuf.mod_alloc(base_addr={base}, num_free_tiles="
            f"{options.get('num_free_tiles') or ()}) reaches byte {end} of each partition, past the {usable} B "
            f"({usable // 1024} KiB) usable on {target.name}: directly allocated SBUF byte offsets must stay below "
            "the partition size minus the 16 KiB the compiler reserves (NKI Direct Allocation guide); the compiler "
            "does not spill a buffer the kernel placed. Lower base_addr or use fewer / smaller tiles",
            location=kernel_location())


def _filled(shape: Shape, value: Scalar, dtype: DTypeLike, buffer: object, name: str, api: str) -> LegacyTensor:
    buf = _buffer(buffer)
    if buf.memory == "hbm":
        raise KernelArgumentError(f"err_hbm_tensor_with_init_value_not_supported: {api} cannot create an HBM "
                                  "tensor with an initial value; use nl.ndarray and store into it")
    t = ndarray(shape, dtype, buffer=buf, name=name)
    view = t if t.partition_axis() == 0 else None
    run = current()
    if view is not None:
        engine.memset(view, value, api=api)
    else:  # block dimensions: one memset per block
        blocks = t.storage.shape[: t.storage.partition_dim]
        for idx in np.ndindex(*blocks):
            engine.memset(t.basic_index(idx), value, api=api)
    return mark(run, t)


def zeros(shape: Shape, dtype: DTypeLike, *, buffer: Buffer | str | None = None, name: str = "",
          **kwargs: object) -> LegacyTensor:
    return _filled(shape, 0, dtype, buffer, name, "nl.zeros")


def ones(shape: Shape, dtype: DTypeLike, *, buffer: Buffer | str | None = None, name: str = "",
         **kwargs: object) -> LegacyTensor:
    return _filled(shape, 1, dtype, buffer, name, "nl.ones")


def full(shape: Shape, fill_value: Scalar, dtype: DTypeLike, *, buffer: Buffer | str | None = None,
         name: str = "", **kwargs: object) -> LegacyTensor:
    return _filled(shape, fill_value, dtype, buffer, name, "nl.full")


def zeros_like(a: Tensor, dtype: DTypeLike = None, *, buffer: Buffer | str | None = None, name: str = "",
               **kwargs: object) -> LegacyTensor:
    return zeros(a.shape, a.dtype if dtype is None else dtype, buffer=buffer or _like_buffer(a), name=name)


def ones_like(a: Tensor, dtype: DTypeLike = None, *, buffer: Buffer | str | None = None, name: str = "",
              **kwargs: object) -> LegacyTensor:
    return ones(a.shape, a.dtype if dtype is None else dtype, buffer=buffer or _like_buffer(a), name=name)


def full_like(a: Tensor, fill_value: Scalar, dtype: DTypeLike = None, *,
              buffer: Buffer | str | None = None, name: str = "", **kwargs: object) -> LegacyTensor:
    return full(a.shape, fill_value, a.dtype if dtype is None else dtype, buffer=buffer or _like_buffer(a), name=name)


def empty_like(a: Tensor, dtype: DTypeLike = None, *, buffer: Buffer | str | None = None, name: str = "",
               **kwargs: object) -> LegacyTensor:
    return ndarray(a.shape, a.dtype if dtype is None else dtype, buffer=buffer or _like_buffer(a), name=name)


def _like_buffer(a: object) -> Buffer:
    mem = getattr(getattr(a, "storage", None), "memory", "sbuf")
    return sbuf if mem == "sbuf" else psum if mem == "psum" else shared_hbm


def shared_constant(constant: ArrayLike | str, dtype: DTypeLike = None,
                    **kwargs: object) -> LegacyTensor:
    """A constant tensor in shared HBM (embedded in the binary on hardware: no instruction)."""
    run = current()
    arr = np.asarray(constant)
    if isinstance(constant, str):
        arr = np.load(constant)
    d = _dt.dtype_of(dtype) if dtype is not None else _dt.dtype_of(arr.dtype)
    st = run.allocate(arr.shape, d, "hbm", name="shared_constant", kind="constant", fill=False)
    if st.data is not None:  # executing (shape-only runs allocate no cells)
        with devmem.writing(st.data):  # the constant's bytes, before any instruction (write-protected after)
            st.data[...] = _dt.convert(arr.astype(np.float32) if d.is_float else arr, st.data.dtype, None)
    return LegacyTensor.whole(st)


def shared_identity_matrix(n: SupportsInt, dtype: DTypeLike = np.uint8, **kwargs: object) -> LegacyTensor:
    return shared_constant(np.eye(int(n)), dtype=dtype)


def rand(shape: Shape, dtype: DTypeLike = np.float32, **kwargs: object) -> LegacyTensor:
    run = current()
    shape, _ = _shape_pax(shape)
    out = fresh(run, shape, _dt.dtype_of(dtype), NO_MASK)
    run.record("gpsimd", "rand", (), (out,), partitions=shape[0], free=math.prod(shape[1:]), meta={"api": "nl.rand"})
    if run.execute:  # an engine function: the replayable log replays the draws in order
        from nkitui.emulator.engine import prng as _prng

        _prng.uniform(out)
    else:
        _write(run, out, None)
    return mark(run, out)


def random_seed(seed: SupportsInt | Tensor, *, mask: Mask = None, **kwargs: object) -> None:
    run = current()
    value = int(seed) if not isinstance(seed, Tensor) else int(seed.array().reshape(-1)[0])
    run.rng = np.random.default_rng(value)
    if _replaylog._rec is not None:  # the host-side reseed, an event of the replayable log (the next draws follow it)
        _replaylog._rec.now("replaylog.seed", (value,), {})


# -- index helpers & loops -----------------------------------------------------------------------
def ds(start: int, size: int) -> DynSlice:
    return DynSlice(start, size)


def _loop(kind: str, args: tuple[SupportsIndex, ...]) -> Iterator[int]:
    run = current_or_none()
    rng = range(*args)
    if run is None:
        return iter(rng)
    return run.loop(kind, rng)


def affine_range(*args: SupportsIndex, **kwargs: object) -> Iterator[int]:
    """Parallel loop: iterations run in order here; writes carried between iterations are diagnosed (C15)."""
    return _loop("affine", args)


def sequential_range(*args: SupportsIndex, **kwargs: object) -> Iterator[int]:
    return _loop("sequential", args)


def static_range(*args: SupportsIndex, **kwargs: object) -> Iterator[int]:
    return _loop("static", args)


def program_id(axis: SupportsInt = 0) -> int:
    run = current()
    axis = int(axis)
    if not run.grid:
        if axis == 0:
            return 0
    if axis < 0 or axis >= len(run.grid):
        raise IndexingError(f"program_id({axis}): the launch grid has {len(run.grid)} dimension(s)")
    return run.program[axis]


def num_programs(axes: int | tuple[int, ...] | list[int] | None = None) -> int:
    run = current()
    if axes is None:
        return math.prod(run.grid) if run.grid else 1
    if isinstance(axes, (tuple, list)):
        return math.prod(run.grid[a] for a in axes)
    if not run.grid and int(axes) == 0:
        return 1
    return run.grid[int(axes)]


def program_ndim() -> int:
    return len(current().grid)


class spmd_dim:
    """`nl.spmd_dim(...)`: a launch-grid dimension built from sub-dimensions (their product);
    `nl.nc(2) * 2` is the same. Programs run serially here, whichever core they map to."""

    def __init__(self, *sizes: int | spmd_dim) -> None:
        self.grid_size = math.prod(int(cast(SupportsInt, getattr(s, "grid_size", s))) for s in sizes)

    def __mul__(self, other: int | spmd_dim) -> "spmd_dim":
        return spmd_dim(self, other)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return f"nl.spmd_dim({self.grid_size})"


class nc(spmd_dim):
    """`nl.nc(n)`: a launch-grid dimension spread over n physical NeuronCores."""

    def __init__(self, n: int) -> None:
        super().__init__(n)

    def __repr__(self) -> str:
        return f"nl.nc({self.grid_size})"


# -- data movement --------------------------------------------------------------------------------
def load(src: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
         **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.load"
    if not isinstance(src, Tensor):
        raise OperandShapeError(f"{api}: src must be an HBM tensor, got {type(src).__name__}")
    if src.storage.memory != "hbm":
        raise EngineMemoryError(f"Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in "
                                f"'{src.storage.memory}'")
    shape = src.shape
    if len(shape) < 2:
        shape = (shape[0] if shape else 1, 1)
    d = src.storage.dtype if dtype is None else dtype_or(dtype, src.storage.dtype)
    # (no plan_mask / narrow calls for the common unmasked load: every tile a kernel works on comes through here)
    plan = NO_MASK if mask is None else plan_mask(mask, src if src.shape == shape else shape)
    out = fresh(run, shape, d, plan)
    if plan.skip:
        return out
    s = src if src.shape == shape else _reshape_view(src, shape)
    if plan.box is None:
        engine.dma_copy(out, s, where=plan.where, api=api)
    else:
        engine.dma_copy(narrow(out, plan.box), narrow(s, plan.box), where=plan.where, api=api)
    return mark(run, out, src)


def _reshape_view(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A 1-D HBM view seen as (n, 1) so that it can be moved as a tile."""
    if t.gather_indices is None and len(t.shape) == 1:
        return t.compose([("r", 0, 1, t.shape[0], 0)], (t.shape[0], 1))
    return t


def store(dst: Tensor, value: Operand, *, mask: Mask = None, **kwargs: object) -> None:
    run = current()
    api = "nl.store"
    if not isinstance(dst, Tensor):
        raise OperandShapeError(f"{api}: dst must be an HBM tensor, got {type(dst).__name__}")
    if dst.storage.memory != "hbm":
        raise EngineMemoryError(f"Expected operand 'dst' of 'store' to be in address space 'hbm', but got a tile in "
                                f"'{dst.storage.memory}'")
    plan = plan_mask(mask, dst)
    if plan.skip:
        return None
    src = _lowering.store_source(value, dst, _new_tile(run), api)
    if src.storage.memory == "hbm":
        raise EngineMemoryError("Expected operand 'value' of 'store' to be in address space 'sbuf', got 'hbm'")
    src, dst = align(src, dst)
    d = dst if dst.shape == src.shape or len(dst.shape) >= 2 else _reshape_view(dst, src.shape)
    if len(src.shape) > len(d.shape) and src.size == d.size:
        d = _reshape_view(d, src.shape)
    engine.dma_copy(narrow(d, plan.box), narrow(src, plan.box), where=plan.where, api=api)
    return None


def load_transpose2d(src: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                     **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.load_transpose2d"
    if not isinstance(src, Tensor) or src.storage.memory != "hbm":
        raise EngineMemoryError("Expected operand 'src' of 'load_transpose2d' to be in address space 'hbm'")
    if src.gather_indices is not None:
        raise IndexingError("err_indirect_indices_are_not_supported_with_nki_api: load_transpose2d does not take "
                            "indirect indices")
    if len(src.shape) != 2:
        raise OperandShapeError(f"{api}: source must be 2-D, got {src.shape}")
    shape = (src.shape[1], src.shape[0])
    if shape[0] > PMAX:
        raise PartitionDimError(f"partition dimension {shape[0]} exceeds {PMAX} in the result of {api} "
                                f"(source shape {src.shape})")
    d = dtype_or(dtype, src.storage.dtype)
    plan = plan_mask(mask, shape)
    out = fresh(run, shape, d, plan)
    if plan.skip:
        return out
    if plan.box is not None:
        o = out.narrow(plan.box)
        s = src.narrow((plan.box[1], plan.box[0]))
    else:
        o, s = out, src
    engine.dma_transpose(o, s, (1, 0), where=plan.where, api=api)
    return mark(run, out)


def copy(src: object, *, mask: Mask = None, dtype: DTypeLike = None,
         **kwargs: object) -> LegacyTensor:
    run = current()
    src = as_tile(src, "nl.copy", "src")
    d = dtype_or(dtype, src.storage.dtype)
    plan = plan_mask(mask, src)
    out = fresh(run, src.shape, d, plan)
    if not plan.skip:
        engine.tensor_copy(narrow(out, plan.box), narrow(src, plan.box), where=plan.where, api="nl.copy")
    return mark(run, out, src)


alu.register(copy, "copy")


def broadcast_to(src: Tensor, *, shape: Sequence[SupportsInt], **kwargs: object) -> Tensor:
    run = current()
    src = as_tile(src, "nl.broadcast_to", "src")
    target = tuple(int(s) for s in shape)
    if src.shape == target:
        return src
    out = fresh(run, target, src.storage.dtype, NO_MASK)
    if src.shape[0] == 1 and target[0] != 1:
        engine.partition_broadcast(out, src, api="nl.broadcast_to")
    else:
        engine.tensor_copy(out, src, api="nl.broadcast_to")
    return mark(run, out)


def atomic_rmw(dst: Tensor, value: Tensor, op: Op, *, mask: Mask = None, **kwargs: object) -> None:
    current()
    if not isinstance(value, Tensor):
        raise OperandShapeError("nl.atomic_rmw: value must be a tile")
    plan = plan_mask(mask, dst)
    if plan.skip:
        return None
    engine.dma_copy(narrow(dst, plan.box), narrow(value, plan.box), where=plan.where, dst_rmw_op=op,
                    api="nl.atomic_rmw")
    return None


def gather_flattened(data: Tensor, indices: Tensor, *, mask: Mask = None, dtype: DTypeLike = None,
                     **kwargs: object) -> LegacyTensor:
    run = current()
    data = as_tile(data, "nl.gather_flattened", "data")
    indices = as_tile(indices, "nl.gather_flattened", "indices")
    d = dtype_or(dtype, data.storage.dtype)
    out = fresh(run, indices.shape, d, NO_MASK)
    P = data.shape[0]
    run.record("gpsimd", "nc_n_gather", (data, indices), (out,), partitions=P, free=indices.size // builtins.max(P, 1),
               meta={"api": "nl.gather_flattened"})
    if run.execute:  # an engine function: the replayable log replays the gather from its operands
        from nkitui.emulator.engine import gather as _gather

        _gather.gather_flattened(out, data, indices)
    else:
        _write(run, out, None)
    return mark(run, out)


def device_print(prefix: str, x: object, *, mask: Mask = None, **kwargs: object) -> None:
    run = current()
    value: object
    if isinstance(x, Tensor):
        value = x.array() if run.execute else f"<{x.shape} {x.storage.dtype.name}>"
    else:
        value = x
    print(prefix, value)


# -- element-wise math ----------------------------------------------------------------------------
@overload
def _binary(name: str, x: Tensor, y: Operand, dtype: DTypeLike, mask: Mask, api: str,
            out: LegacyTensor | None = None, operator: bool = False) -> LegacyTensor: ...


@overload
def _binary(name: str, x: Operand, y: Tensor, dtype: DTypeLike, mask: Mask, api: str,
            out: LegacyTensor | None = None, operator: bool = False) -> LegacyTensor: ...


@overload
def _binary(name: str, x: Scalar, y: Scalar, dtype: DTypeLike, mask: Mask, api: str,
            out: LegacyTensor | None = None, operator: bool = False) -> Scalar: ...


@overload
def _binary(name: str, x: Operand, y: Operand, dtype: DTypeLike, mask: Mask, api: str,
            out: LegacyTensor | None = None, operator: bool = False) -> LegacyTensor | Scalar: ...


def _binary(name: str, x: Operand, y: Operand, dtype: DTypeLike, mask: Mask, api: str,
            out: LegacyTensor | None = None, operator: bool = False) -> LegacyTensor | Scalar:
    run = current()
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    op = alu.BINARY[name]
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):  # two scalars fold on the host
        folded = op.fn(np.float32(x), np.float32(y)).item() if op.kind != "bitvec" else op.fn(x, y)
        return cast(Scalar, folded)  # numpy folds two scalars to a scalar (BinaryOp.fn is typed for arrays)
    if xt:
        as_tile(x, api, "x")
    if yt:
        as_tile(y, api, "y")
    d = _common.binary_result_dtype(name, x, y, dtype)
    shape = _common.binary_result_shape(api, x, y)
    if out is None:
        ref = x if (isinstance(x, Tensor) and x.shape == shape) else (
            y if (isinstance(y, Tensor) and y.shape == shape) else shape)
        plan = plan_mask(mask, ref)
        out = fresh(run, shape, d, plan)
    else:
        plan = plan_mask(mask, out)
    if plan.skip:
        return out
    if operator and isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape[0] != y.shape[0]:
        raise OperandShapeError(f"{api}: partition-dimension broadcast ({x.shape} with {y.shape}) is not "
                                f"supported by operator overloads; call nl.{name}(...) instead")
    _lowering.binary(narrow(out, plan.box), narrow(x, plan.box), narrow(y, plan.box), name, _new_tile(run), api,
                     where=plan.where)
    grid_ref = x if (isinstance(x, Tensor) and getattr(x, "_grid_axes", None) is not None and x.shape == out.shape) else y
    return mark(run, out, grid_ref)


def _new_tile(run: Run) -> NewTile:
    """The allocator the shared lowerings use: a fresh unmasked SBUF result tile."""
    return lambda shape, dtype: fresh(run, shape, dtype, NO_MASK)


def _new_psum_tile(run: Run) -> NewTile:
    """A fresh PSUM tile for a lowering's intermediate (not counted: the compiler places it)."""
    return lambda shape, dtype: fresh(run, shape, dtype, NO_MASK, memory="psum", track=False)


class _BinaryFn(Protocol):
    """An element-wise binary nl function (nl.add, ...): a tile when an operand is one; two scalars fold on
    the host to a number."""

    @overload
    def __call__(self, x: Tensor, y: Operand, *, dtype: DTypeLike = None, mask: Mask = None,
                 **kwargs: object) -> LegacyTensor: ...

    @overload
    def __call__(self, x: Scalar, y: Tensor, *, dtype: DTypeLike = None, mask: Mask = None,
                 **kwargs: object) -> LegacyTensor: ...

    @overload
    def __call__(self, x: Scalar, y: Scalar, *, dtype: DTypeLike = None, mask: Mask = None,
                 **kwargs: object) -> Scalar: ...


class _UnaryFn(Protocol):
    """An element-wise activation nl function (nl.exp, ...)."""

    def __call__(self, x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> LegacyTensor: ...


def _make_binary(name: str) -> _BinaryFn:
    def fn(x: Operand, y: Operand, *, dtype: DTypeLike = None, mask: Mask = None,
           **kwargs: object) -> LegacyTensor | Scalar:
        return _binary(name, x, y, dtype, mask, f"nl.{name}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} (VectorE tensor_tensor / tensor_scalar)."
    alu.register(fn, name)
    return cast(_BinaryFn, fn)  # the overloads of _BinaryFn say when the result is a tile


_common.define_ops(globals(), _common.BINARY_OPS, _make_binary)  # nl.add, nl.subtract, ...
# the functions define_ops binds, declared for the type checker (tensor operators in tile.py call them);
# tests/emulator/test_legacy_declarations.py checks these declarations against what define_ops binds
add: _BinaryFn
subtract: _BinaryFn
multiply: _BinaryFn
divide: _BinaryFn
power: _BinaryFn
maximum: _BinaryFn
minimum: _BinaryFn
fmod: _BinaryFn
mod: _BinaryFn
equal: _BinaryFn
not_equal: _BinaryFn
less: _BinaryFn
less_equal: _BinaryFn
greater: _BinaryFn
greater_equal: _BinaryFn
logical_and: _BinaryFn
logical_or: _BinaryFn
logical_xor: _BinaryFn
bitwise_and: _BinaryFn
bitwise_or: _BinaryFn
bitwise_xor: _BinaryFn
left_shift: _BinaryFn
right_shift: _BinaryFn


def _unary_activation(name: str) -> _UnaryFn:
    def fn(x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> LegacyTensor:
        run = current()
        api = f"nl.{name}"
        x = as_tile(x, api, "x")
        d = dtype_or(dtype, x.storage.dtype)
        plan = plan_mask(mask, x)
        out = fresh(run, x.shape, d, plan)
        if not plan.skip:
            engine.activation(narrow(out, plan.box), name, narrow(x, plan.box), where=plan.where, api=api)
        return mark(run, out, x)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} (ScalarE activation)."
    alu.register(fn, name)
    return fn


# nl.exp, ...; legacy also lowers rsqrt and sin to one activation and has nl.identity
_common.define_ops(globals(), _common.ACTIVATION_OPS + ("rsqrt", "sin", "identity"), _unary_activation)
exp: _UnaryFn
log: _UnaryFn
tanh: _UnaryFn
sigmoid: _UnaryFn
relu: _UnaryFn
gelu: _UnaryFn
gelu_apprx_tanh: _UnaryFn
gelu_apprx_sigmoid: _UnaryFn
gelu_dx: _UnaryFn
silu: _UnaryFn
silu_dx: _UnaryFn
softplus: _UnaryFn
mish: _UnaryFn
erf: _UnaryFn
erf_dx: _UnaryFn
square: _UnaryFn
sqrt: _UnaryFn
cos: _UnaryFn
tan: _UnaryFn
arctan: _UnaryFn
sign: _UnaryFn
abs: _UnaryFn
ceil: _UnaryFn
floor: _UnaryFn
trunc: _UnaryFn
rsqrt: _UnaryFn
sin: _UnaryFn
identity: _UnaryFn


@overload
def negative(x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> LegacyTensor: ...


@overload
def negative(x: Scalar, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> Scalar: ...


def negative(x: Operand, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> LegacyTensor | Scalar:
    return _binary("multiply", x, -1.0 if not (isinstance(x, Tensor) and x.storage.dtype.is_int) else -1,
                   dtype if dtype is not None else (x.storage.dtype if isinstance(x, Tensor) else None), mask,
                   "nl.negative")


alu.register(negative, "negative")


def reciprocal(x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None,
               **kwargs: object) -> LegacyTensor:
    run = current()
    x = as_tile(x, "nl.reciprocal", "x")
    plan = plan_mask(mask, x)
    out = fresh(run, x.shape, dtype_or(dtype, x.storage.dtype), plan)
    if not plan.skip:
        engine.reciprocal(narrow(out, plan.box), narrow(x, plan.box), where=plan.where, api="nl.reciprocal")
    return mark(run, out)


alu.register(reciprocal, "reciprocal")


def invert(x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None, **kwargs: object) -> LegacyTensor:
    x = as_tile(x, "nl.invert", "x")
    return _binary("bitwise_xor", x, _common.invert_operand(x), dtype if dtype is not None else x.storage.dtype, mask,
                   "nl.invert")


def logical_not(x: Tensor, *, dtype: DTypeLike = bool, mask: Mask = None, **kwargs: object) -> LegacyTensor:
    return _binary("equal", x, 0, dtype, mask, "nl.logical_not")


def where(condition: Tensor, x: Operand, y: Operand, *, dtype: DTypeLike = None,
          mask: Mask = None, **kwargs: object) -> LegacyTensor:
    run = current()
    condition = as_tile(condition, "nl.where", "condition")
    shape = condition.shape
    for v in (x, y):
        if isinstance(v, Tensor):
            try:
                shape = tuple(np.broadcast_shapes(shape, v.shape))
            except ValueError:
                raise OperandShapeError(f"nl.where: operand shapes {condition.shape}, "
                                        f"{tuple(v.shape)} do not broadcast together") from None
    d = dtype_or(dtype, _dt.promote(_common.operand_dtype(x), _common.operand_dtype(y)))
    plan = plan_mask(mask, shape)
    out = fresh(run, shape, d, plan)
    if not plan.skip:
        engine.select(narrow(out, plan.box), narrow(condition, plan.box), narrow(x, plan.box),
                      narrow(y, plan.box), where=plan.where, api="nl.where")
    return mark(run, out)


def dropout(x: Tensor, rate: Operand, *, dtype: DTypeLike = None, mask: Mask = None,
            **kwargs: object) -> LegacyTensor:
    run = current()
    x = as_tile(x, "nl.dropout", "x")
    plan = plan_mask(mask, x)
    out = fresh(run, x.shape, dtype_or(dtype, x.storage.dtype), plan)
    if not plan.skip:
        engine.dropout(narrow(out, plan.box), narrow(x, plan.box), rate, where=plan.where, api="nl.dropout")
    return mark(run, out)


# -- reductions -----------------------------------------------------------------------------------
def _reduce(opname: str, x: object, axis: Axis, dtype: DTypeLike, mask: Mask, keepdims: bool, api: str,
            negate: bool = False) -> tuple[LegacyTensor, Tensor, tuple[int, ...], MaskPlan]:
    run = current()
    x = as_tile(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    out_shape = _reduced_shape(x.shape, axes, keepdims)
    d = dtype_or(dtype, x.storage.dtype)
    plan = plan_mask(mask, x)
    out = fresh(run, out_shape, d, plan)
    if plan.skip:
        return out, x, axes, plan
    xs = narrow(x, plan.box)
    o = out
    if plan.box is not None:
        kept = [plan.box[i] for i in range(len(x.shape)) if i not in axes or keepdims]
        kept = [(0, 1) if (i in axes) else b for i, b in zip(
            [i for i in range(len(x.shape)) if i not in axes or keepdims], kept)]
        while len(kept) < len(out_shape):
            kept.append((0, 1))
        o = out.narrow(tuple(kept))
    engine.tensor_reduce(o, opname, xs, axes, negate=negate, keepdims=keepdims, where=plan.where, api=api)
    return mark(run, out), xs, axes, plan


def sum(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
        keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    return _reduce("add", x, axis, dtype, mask, keepdims, "nl.sum")[0]


def max(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
        keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    return _reduce("maximum", x, axis, dtype, mask, keepdims, "nl.max")[0]


def min(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
        keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    return _reduce("minimum", x, axis, dtype, mask, keepdims, "nl.min")[0]


def prod(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
         keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    return _reduce("multiply", x, axis, dtype, mask, keepdims, "nl.prod")[0]


def all(x: Tensor, axis: Axis, *, dtype: DTypeLike = bool, mask: Mask = None, keepdims: bool = False,
        **kwargs: object) -> LegacyTensor:
    return _reduce("logical_and", x, axis, dtype, mask, keepdims, "nl.all")[0]


alu.register(sum, "add")
alu.register(max, "maximum")
alu.register(min, "minimum")
alu.register(prod, "multiply")


def _masked_sum(mask: Mask, api: str) -> SumReduce:
    """The sum of `nl.mean` / `nl.var` under a legacy mask: the elements inside the mask's box."""
    def reduce(x: Tensor, axes: Sequence[int], keepdims: bool) -> tuple[Tensor, int]:
        total, xs, axes, _ = _reduce("add", x, list(axes), _dt.float32, mask, keepdims, api)
        return total, math.prod(xs.shape[a] for a in axes)
    return reduce


def mean(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
         keepdims: bool = False, **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.mean"
    x = as_tile(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    out = _lowering.mean(x, axes, keepdims, dtype_or(dtype, _lowering.mean_dtype(x)), _new_tile(run), api,
                         _masked_sum(mask, api))
    return mark(run, out)


def var(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, mask: Mask = None,
        **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.var"
    x = as_tile(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    out = _lowering.var(x, axes, dtype_or(dtype, x.storage.dtype), _new_tile(run), api, _masked_sum(mask, "nl.mean"))
    return mark(run, out)


def loop_reduce(x: Tensor, op: Op, loop_indices: object, *, dtype: DTypeLike = None,
                mask: Mask = None, **kwargs: object) -> Tensor:
    """`b = nl.loop_reduce(a, op, loop_indices)` means `b = op(b, a)` across loop iterations: the
    previous value of the assigned name is the accumulator (the first time, `a` is copied)."""
    run = current()
    x = as_tile(x, "nl.loop_reduce", "x")
    frame = kernel_frame()
    acc = None
    if frame is not None:
        target = assigned_target(frame)
        if isinstance(target, ast.Name):
            acc = frame.f_locals.get(target.id)
        elif isinstance(target, ast.Subscript):
            # `acc[i, :] = nl.loop_reduce(x, ...)`: the destination view is the accumulator (the
            # docs: "the destination tile is also the rhs input to op"); nki-samples' flash
            # attention backward reduces dq over K tiles this way
            acc = evaluate_target(frame, target)
    if isinstance(acc, Tensor) and acc.shape == x.shape and acc.storage.memory != "hbm":
        prev, run.accumulating = run.accumulating, True
        try:
            _binary(alu.resolve_binary(op, "op").name, acc, x, acc.dtype if dtype is None else dtype, mask,
                    "nl.loop_reduce", out=cast(LegacyTensor, acc))  # a legacy kernel's tiles are LegacyTensors
        finally:
            run.accumulating = prev
        return acc
    return copy(x, dtype=dtype, mask=mask)


# -- matmul / transpose / composites -------------------------------------------------------------
def matmul(x: Tensor, y: Tensor, *, transpose_x: bool = False, mask: Mask = None,
           **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.matmul"
    # the high-level API places its operands (PSUM inputs copied to SBUF) and transposes x
    x, y = _lowering.matmul_operands(as_tile(x, api, "x"), as_tile(y, api, "y"), transpose_x, _new_tile(run),
                                     _new_psum_tile(run), api)
    _, M, N, _ = check_matmul(x, y, api=api)
    shape = (M,) + (y.shape[1:] if len(y.shape) > 2 else (N,))
    plan = plan_mask(mask, shape)
    out = fresh(run, shape, _dt.float32, plan, memory="psum", track=False)
    run.alloc.matmul_result(out.storage)
    if plan.skip:
        return out
    engine.nc_matmul(out, x, y, where=plan.where, api=api)
    out._matmul_instruction = run.trace.instructions[-1] if run.trace is not None else True  # (recording)
    return mark(run, out)


def transpose(x: Tensor, *, dtype: DTypeLike = None, mask: Mask = None,
              **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.transpose"
    x = as_tile(x, api, "x")
    out = _lowering.transpose(x, dtype_or(dtype, x.storage.dtype), _new_tile(run),
                              lambda shape, d: fresh(run, shape, d, NO_MASK, memory="psum"), api)
    return mark(run, out)


def expand_dims(data: Tensor, axis: int | Sequence[int]) -> Tensor:
    data = as_tile(data, "nl.expand_dims", "data")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    nd = len(data.shape) + len(axes)
    axes = tuple(a + nd if a < 0 else a for a in axes)
    if any(a < len(data.shape) for a in axes):
        raise IndexingError("nl.expand_dims only supports new axes after the last dimension")
    specs = [("r", 0, 1, n, i) for i, n in enumerate(data.shape)]
    shape = data.shape + (1,) * len(axes)
    return data.compose(specs, shape)


def softmax(x: Tensor, axis: Axis, *, dtype: DTypeLike = None, compute_dtype: DTypeLike = None,
            mask: Mask = None, **kwargs: object) -> LegacyTensor:
    """exp(x - max) / sum: reduce max (VectorE), exp with bias and sum (ScalarE), reciprocal, scale."""
    run = current()
    api = "nl.softmax"
    x = as_tile(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    if axes != tuple(range(1, len(x.shape))):
        raise UnsupportedError(f"{api}: the emulator supports softmax over all free axes only (got axis={axis})")
    return mark(run, _lowering.softmax(x, axes, dtype_or(dtype, x.storage.dtype), _new_tile(run), api))


def rms_norm(x: Tensor, w: Tensor, axis: Axis, n: int, epsilon: float = 1e-6, *, dtype: DTypeLike = None,
             compute_dtype: DTypeLike = None, mask: Mask = None,
             **kwargs: object) -> LegacyTensor:
    run = current()
    api = "nl.rms_norm"
    x = as_tile(x, api, "x")
    w = as_tile(w, api, "w")
    _norm_axes(axis, len(x.shape), api)
    return mark(run, _lowering.rms_norm(x, w, n, epsilon, dtype_or(dtype, x.storage.dtype), _new_tile(run), api))


def all_reduce(x: Tensor, op: Op, program_axes: int | Sequence[int], *, dtype: DTypeLike = None,
               mask: Mask = None, parallel_reduce: bool = True, asynchronous: bool = False,
               **kwargs: object) -> LegacyTensor:
    """Reduce `x` over the SPMD programs along `program_axes`; every program gets the result. The
    programs of such a launch take turns (legacy/spmd.py); the reduction runs in fp32 in program
    order and is rounded once to `dtype` (default: x's)."""
    run = current()
    api = "nl.all_reduce"
    x = as_tile(x, api, "x")
    axes = (program_axes,) if isinstance(program_axes, (int, np.integer)) else tuple(program_axes)
    axes = tuple(int(a) for a in axes)
    if not axes or any(not 0 <= a < len(run.grid) for a in axes) or len(set(axes)) != len(axes):
        raise IndexingError(f"{api}: program_axes {program_axes!r} must name distinct axes of the launch grid "
                            f"{run.grid or '()'} (a kernel launched without a grid has none)")
    o = alu.resolve_binary(op, "op")
    n = math.prod(run.grid[a] for a in axes)
    out = fresh(run, x.shape, dtype_or(dtype, x.storage.dtype), NO_MASK)
    run.record("dma", "all_reduce", (x,), (out,), partitions=x.shape[0], free=math.prod(x.shape[1:]),
               meta={"api": api, "collective": "all_reduce", "op": o.name, "program_axes": list(axes), "programs": n})
    values = np.array(x.read_f32(), dtype=np.float32, copy=True) if run.execute else None
    if n > 1:
        scheduler = _spmd.require_scheduler(api, n)
        assert scheduler is not None  # n > 1: require_scheduler raised otherwise
        values = scheduler.all_reduce(values, o, axes, x.shape, api)
    _write(run, out, values.reshape(out.shape) if values is not None else None)
    return mark(run, out, x)


# -- assignment / in-place support used by LegacyTensor ----------------------------------------------
def _assign(dst: Tensor, value: Tensor, temp: bool) -> None:
    run = current()
    if dst.storage.memory == "hbm":
        store(dst, value)
        return
    if temp and isinstance(value, LegacyTensor) and value._written is not None and value._written.skip:
        # `t[...] = op(..., mask=False)`: the compiler aims the masked-off instruction at `t`, so
        # nothing is written (flash attention relies on this to leave other tiles' results alone)
        return
    value, dst = align(value, dst)
    ins = run.trace.instructions[-1] if run.trace is not None else None  # (recording)
    if (temp and value._producer == run.instructions and value.storage.memory != "hbm"
            and isinstance(value, LegacyTensor) and _fits_view(value.shape, dst.shape)
            and _can_write(run, value, dst, ins)):
        # retarget: the instruction that produced `value` writes `dst` directly
        written = value._written  # a masked instruction wrote only part of its result
        if written is not None and written.skip:
            return
        if written is not None and written.box is not None and value.shape == dst.shape:
            value, dst = narrow(value, written.box), narrow(dst, written.box)
        where = written.where if (written is not None and value.shape == dst.shape) else None
        dst.check_bounds("tensor assignment")
        engine.assign_values(dst, value, where)
        run.retargeted(value.storage, dst.storage, dst)
        if ins is not None:
            ins.writes = (dst.access(),)
            ins.out_mem = dst.storage.memory
            ins.out_dtype = dst.storage.dtype.name
            ins.bytes_written = dst.size * dst.storage.dtype.itemsize
            ins.meta["retargeted"] = True
        return
    engine.tensor_copy(dst, as_tile(value, "tensor assignment", "value"), api="tensor assignment")


def _can_write(run: Run, value: LegacyTensor, dst: Tensor, ins: Instruction | None) -> bool:
    """Could the engine that produced `value` have written `dst` directly?"""
    engine_name = ins.engine if ins is not None else _last_engine(value)
    if engine_name == "tensor":
        return dst.storage.memory == "psum"  # TensorE writes PSUM only
    if engine_name == "gpsimd":
        return dst.storage.memory == "sbuf"  # GpSimd cannot access PSUM
    return True


def _last_engine(value: LegacyTensor) -> str:
    return "tensor" if (value._matmul_instruction is not None or value.storage.memory == "psum") else "vector"


def _fits_view(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    if src == dst:
        return True
    if len(src) == len(dst) and builtins.all(s == d or s == 1 for s, d in zip(src, dst)):
        return True
    return src[:1] == dst[:1] and math.prod(src) == math.prod(dst)


def _assign_scalar(dst: Tensor, value: object) -> None:
    if isinstance(value, np.ndarray):
        raise OperandShapeError("cannot assign a numpy array to a tile inside a kernel: load it from HBM, or "
                                "use nl.shared_constant")
    if dst.storage.memory == "hbm":
        raise EngineMemoryError("cannot assign a scalar to an HBM tensor; memset an SBUF tile and nl.store it")
    engine.memset(dst, cast(Scalar, value), api="tensor assignment")  # a number: the engine converts it


def _inplace(target: LegacyTensor, other: Operand, opname: str) -> None:
    run = current()
    if (opname == "add" and target.storage.memory == "psum" and isinstance(other, LegacyTensor)
            and other.storage.memory == "psum" and other._written is not None and other._written.skip):
        # `psum += nc_matmul(..., mask=False)`: the masked-off matmul is not issued, so nothing
        # accumulates (AWS's allocated RMSNorm-QKV masks whole tiles past the sequence end this way)
        return
    if (opname == "add" and isinstance(other, LegacyTensor) and other._matmul_instruction is not None
            and other._producer == run.instructions and target.storage.memory == "psum"
            and _fits_view(other.shape, target.shape)):
        # `psum += nc_matmul(...)`: the matmul accumulates into the PSUM tile (fp32)
        target.check_bounds("psum accumulation")
        run.alloc.matmul_fused(other.storage)
        run.retargeted(other.storage, target.storage, target)  # the matmul wrote the accumulator
        ins = other._matmul_instruction if run.recording else None
        engine.psum_accumulate(target, other)  # fresh cells open the accumulation group (the compiler's)
        if isinstance(ins, Instruction):  # (True: a matmul recorded outside a trace)
            ins.writes = (target.access(),)
            ins.out_mem = target.storage.memory
            ins.out_dtype = target.storage.dtype.name
            ins.meta["accumulate"] = True
            ins.meta["retargeted"] = True
        return
    if target.storage.memory == "hbm":
        raise EngineMemoryError(f"in-place {opname} on an HBM tensor is not supported; load, compute, store")
    # `acc += x` is an associative accumulation, not a loop-carried dependency (C15)
    prev, run.accumulating = run.accumulating, opname == "add"
    try:
        _binary(opname, target, other, target.storage.dtype, None, f"in-place {opname}", out=target)
    finally:
        run.accumulating = prev


# tensor operators dispatch to these functions (tile._nl is this module's import for the checker only)
_tile_mod._nl = sys.modules[__name__]  # type: ignore[attr-defined]  # set here, at run time
