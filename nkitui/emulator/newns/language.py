"""`nki.language` (NKI 0.3 to 0.6) on the emulator.

* dtypes (numpy dtypes, see newns/dtypes.py), buffers (`nl.sbuf`, `nl.psum`, `nl.hbm`,
  `nl.private_hbm`, `nl.shared_hbm`), `nl.ndarray(shape, dtype, buffer=, name=, address=)` and the
  creation helpers;
* loops are plain Python: `affine_range`, `sequential_range`, `static_range` are `range`; run-time
  loops `nl.fori_loop`, `nl.while_loop`, `nl.dynamic_range` iterate with registers;
* `program_id` / `num_programs` / `program_ndim` describe `kernel[lnc]`;
* `nl.tile_size` per target;
* the 0.3+ convenience wrappers over `nki.isa` (`load`, `store`, `copy`, `matmul`, `transpose`,
  element-wise math, reductions, `softmax`, `rms_norm`, ...) allocate their result tile and call
  the engine; their function objects are also the operators passed as `op=` to ISA calls.
"""

from __future__ import annotations

import builtins
import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn, SupportsInt
from typing import cast as _cast  # nl.cast is an NKI function of this module

import numpy as np
from numpy.typing import ArrayLike

from nkitui.emulator import devmem
from nkitui.emulator import alu, engine
from nkitui.emulator import dtypes as _dt
from nkitui.emulator import frontend_common as _common
from nkitui.emulator import lowering as _lowering
from nkitui.emulator.api_types import Axis, DTypeLike, Operand, Scalar, Shape
from nkitui.emulator.config import current_options
from nkitui.emulator.engine.vector import _axes as _norm_axes
from nkitui.emulator.engine.vector import reduced_shape as _reduced_shape
from nkitui.emulator.frontend_common import finfo, fp32, static_cast  # noqa: F401  (nl names)
from nkitui.emulator.errors import (
    CapacityError,
    EngineMemoryError,
    IndexingError,
    KernelArgumentError,
    OperandShapeError,
    PartitionDimError,
    PsumBankError,
)
from nkitui.emulator.newns import buffers as _buf
from nkitui.emulator.newns import dtypes as _ndt
from nkitui.emulator.newns import ops as _ops  # noqa: F401  (registers abs / bypass / gelu_apprx_sigmoid_dx)
from nkitui.emulator.newns.buffers import MemoryRegion, hbm, private_hbm, psum, sbuf, shared_hbm  # noqa: F401
from nkitui.emulator.newns.dtypes import (  # noqa: F401  (public dtype constants; bf16, fp8 and MX: __getattr__)
    bool_,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from nkitui.emulator.newns.dtypes import resolve as _resolve_dtype
from nkitui.emulator.memory import Storage
from nkitui.emulator.newns.registers import IntLike, VirtualRegister, scalar_value
from nkitui.emulator.newns.tensor import NKIObject, NkiTensor  # noqa: F401  (nl.NKIObject)
from nkitui.emulator.runtime import current
from nkitui.emulator.targets import PMAX, Target, resolve_target
from nkitui.emulator.tensor import DynSlice, Tensor

if TYPE_CHECKING:
    from nkitui.emulator.newns.cores import CoreRun

ndarray_type = NkiTensor
NkiTensor = NkiTensor  # noqa: PLW0127  (the tensor class, for isinstance checks and annotations)

# bf16, fp8, the MX types and nl.bfp16: made the first time a kernel asks for one (nki.language's own
# constants, from newns.dtypes; ml_dtypes costs ~0.65 s of CPU to import, for nothing in a float32 kernel)
_LAZY = (*_ndt.LAZY_PUBLIC, "bfp16")


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = _common.bfp16 if name == "bfp16" else getattr(_ndt, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


# -- constants -------------------------------------------------------------------------------------
class _TileSize(_common.TileSizeLimits):
    """`nl.tile_size`: hardware tile limits of the current target (NEURON_PLATFORM_TARGET_OVERRIDE).

    psum_num_banks is 7 when NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE=true on trn2/trn3 (bank 7 is then
    reserved for transposes). Undocumented values are ours: sbuf_min_align 1 B, psum_min_align
    4 B, sbuf_fmax_bytes = the usable bytes per partition (physical minus the compiler's 16 KiB),
    sbuf_fmax = sbuf_fmax_bytes / 4 (fp32 elements), sbuf_size_bytes = the physical bytes per
    partition.
    """

    @staticmethod
    def _target() -> Target:
        from nkitui.emulator.runtime import current_or_none

        run = current_or_none()
        return run.target if run is not None else resolve_target(current_options().target)

    @property
    def psum_num_banks(self) -> int:
        import os

        t = self._target()
        flag = os.environ.get("NKI_DMA_TRANSPOSE_AS_PE_TRANSPOSE", "").strip().lower() in ("1", "true", "yes")
        return t.psum_banks - 1 if (flag and t.nc_version >= 3) else t.psum_banks

    @property
    def sbuf_size_bytes(self) -> int:
        return self._target().sbuf_bytes_per_partition

    @property
    def sbuf_fmax_bytes(self) -> int:
        return self._target().sbuf_usable_bytes_per_partition

    @property
    def sbuf_fmax(self) -> int:
        return self.sbuf_fmax_bytes // 4

    @property
    def total_available_sbuf_size(self) -> int:
        return self.sbuf_fmax_bytes

    def __repr__(self) -> str:
        return f"<nl.tile_size for {self._target().name}>"


tile_size = _TileSize()


# -- buffers and creation ------------------------------------------------------------------------------
def is_hbm(x: object) -> bool:
    return _region(x).memory == "hbm"


def is_on_chip(x: object) -> bool:
    return _region(x).memory != "hbm"


def is_psum(x: object) -> bool:
    return _region(x).memory == "psum"


def is_sbuf(x: object) -> bool:
    return _region(x).memory == "sbuf"


def _region(x: object) -> MemoryRegion:
    return x.buffer if isinstance(x, NkiTensor) else _buf.resolve(x)


def ndarray(shape: Shape, dtype: DTypeLike, buffer: MemoryRegion | None = None, name: str = "",
            address: tuple[int, int] | None = None, **kwargs: object) -> NkiTensor:
    """A new (uninitialised) tensor; fresh memory reads as NaN (floats) / 4 (integers)."""
    run = current()
    buf = _buf.resolve(buffer)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    shape = tuple(int(s) for s in shape)
    d = _resolve_dtype(dtype)
    name = name or ""
    if buf.memory != "hbm":
        if len(shape) < 2:
            raise PartitionDimError(f"an {buf.memory} tensor must have at least 2 dimensions (partition, free); "
                                    f"got shape {shape}")
        if address is not None:
            # nki launches run a CoreRun (launcher.NkiFrontend.make_run), which places tensors at addresses
            return NkiTensor.whole(_placed(_cast("CoreRun", run), shape, d, buf.memory, address, name))
        if buf.memory == "psum":
            nbytes = math.prod(shape[1:]) * d.itemsize
            if nbytes > run.target.psum_bank_bytes:  # a multi-bank PSUM tensor (indexed bank by bank)
                if nbytes > run.target.psum_bytes_per_partition:
                    raise PsumBankError(f"PSUM tensor {name or shape} needs {nbytes} B per partition, over the "
                                        f"{run.target.psum_bytes_per_partition} B of PSUM")
                st = run.allocate(shape, d, "psum", name=name, what=f"tensor '{name}'" if name else "tensor",
                                  track=False)
                return NkiTensor.whole(st)
        st = run.allocate(shape, d, buf.memory, name=name, what=f"tensor '{name}'" if name else "tensor")
        return NkiTensor.whole(st)
    st = run.allocate(shape, d, "hbm", name=name, kind=buf.kind or "private")
    return NkiTensor.whole(st)


def _placed(run: CoreRun, shape: tuple[int, ...], d: _dt.DType, memory: str, address: Iterable[SupportsInt],
            name: str) -> Storage:
    try:
        partition, byte = (int(a) for a in address)
    except (TypeError, ValueError):
        raise KernelArgumentError(f"address must be (partition_offset, free_offset_bytes), got {address!r}") from None
    P = shape[0]
    nbytes = math.prod(shape[1:]) * d.itemsize
    width = run.target.sbuf_bytes_per_partition if memory == "sbuf" else run.target.psum_bytes_per_partition
    if partition < 0 or partition + P > PMAX:
        raise PartitionDimError(f"address partition offset {partition} with {P} partitions exceeds {PMAX} "
                                f"partitions ('{name}')")
    if byte < 0 or byte + nbytes > width:
        raise PsumBankError(f"address byte offset {byte} + {nbytes} B per partition exceeds the {width} B of "
                            f"{memory} per partition on {run.target.name} ('{name}')") if memory == "psum" else \
            _capacity(f"address byte offset {byte} + {nbytes} B per partition exceeds the {width} B of SBUF per "
                      f"partition on {run.target.name} ('{name}')")
    if memory == "psum" and byte % run.target.psum_bank_bytes:
        raise PsumBankError(f"a PSUM address must start at a bank boundary (multiple of "
                            f"{run.target.psum_bank_bytes} B), got {byte} ('{name}')")
    if not run.precise:  # precise=False keeps low-precision floats as fp32 cells: no byte-exact placement
        return run.allocate(shape, d, memory, name=name, track=False)
    return run.place(shape, d, memory, partition, byte, name)


def _capacity(msg: str) -> CapacityError:
    from nkitui.emulator.errors import CapacityError

    return CapacityError(msg)


def _fill(shape: Shape, value: Scalar, dtype: DTypeLike, buffer: MemoryRegion | None, name: str,
          api: str) -> NkiTensor:
    buf = _buf.resolve(buffer)
    if buf.memory == "hbm":
        raise KernelArgumentError(f"{api} cannot create an HBM tensor with an initial value; use nl.ndarray and "
                                  "write it with nisa.dma_copy")
    t = ndarray(shape, dtype, buffer=buf, name=name)
    engine.memset(t, value, api=api)
    return t


def zeros(shape: Shape, dtype: DTypeLike, buffer: MemoryRegion | None = None, name: str = "",
          **kwargs: object) -> NkiTensor:
    return _fill(shape, 0, dtype, buffer, name, "nl.zeros")


def ones(shape: Shape, dtype: DTypeLike, buffer: MemoryRegion | None = None, name: str = "",
         **kwargs: object) -> NkiTensor:
    return _fill(shape, 1, dtype, buffer, name, "nl.ones")


def full(shape: Shape, fill_value: Scalar, dtype: DTypeLike, buffer: MemoryRegion | None = None, name: str = "",
         **kwargs: object) -> NkiTensor:
    return _fill(shape, fill_value, dtype, buffer, name, "nl.full")


def zeros_like(a: Tensor, dtype: DTypeLike = None, buffer: MemoryRegion | None = None, name: str = "",
               **kwargs: object) -> NkiTensor:
    return zeros(a.shape, dtype or a.dtype, buffer=buffer or _like(a), name=name)


def ones_like(a: Tensor, dtype: DTypeLike = None, buffer: MemoryRegion | None = None, name: str = "",
              **kwargs: object) -> NkiTensor:
    return ones(a.shape, dtype or a.dtype, buffer=buffer or _like(a), name=name)


def full_like(a: Tensor, fill_value: Scalar, dtype: DTypeLike = None, buffer: MemoryRegion | None = None,
              name: str = "", **kwargs: object) -> NkiTensor:
    return full(a.shape, fill_value, dtype or a.dtype, buffer=buffer or _like(a), name=name)


def empty_like(a: Tensor, dtype: DTypeLike = None, buffer: MemoryRegion | None = None, name: str = "",
               **kwargs: object) -> NkiTensor:
    return ndarray(a.shape, dtype or a.dtype, buffer=buffer or _like(a), name=name)


def _like(a: object) -> MemoryRegion:
    b = getattr(a, "buffer", sbuf)
    return b if isinstance(b, MemoryRegion) else sbuf


def shared_constant(constant: ArrayLike | str, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """A constant tensor in shared HBM (embedded in the binary on hardware: no instruction). Takes a
    numpy array, an `nki.tensor` trace-time tensor, or a path to a .npy file."""
    run = current()
    arr = np.load(constant) if isinstance(constant, str) else np.asarray(constant)
    d = _resolve_dtype(dtype) if dtype is not None else _dt.dtype_of(arr.dtype)
    st = run.allocate(arr.shape, d, "hbm", name="shared_constant", kind="constant", fill=False)
    if st.data is not None:  # executing (shape-only runs allocate no cells)
        with devmem.writing(st.data):  # the constant's bytes, before any instruction (write-protected after)
            st.data[...] = _dt.convert(arr.astype(np.float32) if d.is_float else arr, st.data.dtype, d)
    return NkiTensor.whole(st)


def shared_identity_matrix(n: int, dtype: DTypeLike = uint8, dst: NkiTensor | None = None,
                           **kwargs: object) -> NkiTensor:
    """An (n, n) identity matrix in SBUF (NKI 0.4+ docs: "Create an identity matrix in SBUF";
    kernels use it directly as an on-chip operand), written into `dst` when given. Modelled as
    the compiler's constant in HBM and one DMA into the tile."""
    n = int(n)
    if dst is None:
        dst = ndarray((n, n), dtype=dtype, buffer=sbuf, name="identity")
    elif tuple(dst.shape) != (n, n):
        raise OperandShapeError(f"shared_identity_matrix(n={n}): dst has shape {tuple(dst.shape)}, not ({n}, {n})")
    engine.dma_copy(dst, shared_constant(np.eye(n), dtype=dst.dtype), api="nl.shared_identity_matrix")
    return dst


# -- indexing and loops ---------------------------------------------------------------------------------
def par_dim(size: SupportsInt) -> int:
    """Legacy partition-dimension marker; in NKI 0.3+ the partition dim is always dim 0, so this is
    just the size (kept so that kernels still using it in a leading position run)."""
    return int(size)


def ds(start: IntLike, size: IntLike) -> DynSlice:
    """`t[nl.ds(start, size)]`: `size` elements from `start` (start may be a register)."""
    return DynSlice(start, size)


def _range(*args: IntLike | Tensor, **kwargs: object) -> builtins.range:
    return builtins.range(*(scalar_value(a, "range bound") if isinstance(a, (VirtualRegister, Tensor)) else int(a)
                   for a in args))


def affine_range(*args: IntLike | Tensor, **kwargs: object) -> builtins.range:
    """A deprecated alias of `range` (every loop is unrolled in NKI 0.3+)."""
    return _range(*args)


def sequential_range(*args: IntLike | Tensor, **kwargs: object) -> builtins.range:
    """A deprecated alias of `range`."""
    return _range(*args)


def static_range(*args: IntLike | Tensor, **kwargs: object) -> builtins.range:
    """A deprecated alias of `range`."""
    return _range(*args)


def dynamic_range(*args: IntLike | Tensor, **kwargs: object) -> Iterator[VirtualRegister]:
    """A run-time loop (deprecated in 0.6): the loop variable is a register."""
    current()
    for i in _range(*args):
        yield VirtualRegister(i, frozen=True)


def fori_loop(lower: IntLike | Tensor, upper: IntLike | Tensor, body_fun: Callable[[VirtualRegister], object],
              step: int = 1) -> None:
    """for i in range(lower, upper, step): body_fun(i), with i a register (bounds may be registers)."""
    current()
    step = int(step)
    if step <= 0:
        raise KernelArgumentError(f"nl.fori_loop: step must be a positive compile-time integer, got {step}")
    lo = scalar_value(lower, "fori_loop lower")
    hi = scalar_value(upper, "fori_loop upper")
    for i in builtins.range(lo, hi, step):
        body_fun(VirtualRegister(i, frozen=True))


def while_loop(init: IntLike | Tensor, body_fun: Callable[[VirtualRegister], IntLike | Tensor | None]) -> None:
    """r = init; while r != 0: r = body_fun(r) (the condition is checked before each iteration)."""
    current()
    r: IntLike | Tensor | None = init
    while scalar_value(r, "while_loop condition") != 0:
        r = body_fun(VirtualRegister(scalar_value(r, "while_loop condition"), frozen=True))
        if r is None:
            raise KernelArgumentError("nl.while_loop: the body must return the next condition register")


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Keep instruction order (the emulator always runs in program order)."""
    yield


def program_id(axis: SupportsInt = 0) -> int:
    """The index of this logical core's physical core in `kernel[lnc]` (0 without a launch degree)."""
    run = current()
    if int(axis) != 0:
        raise IndexingError(f"nl.program_id({axis}): kernel[lnc] launches have one axis (0)")
    return getattr(run, "core", 0)


def num_programs(axes: object = 0) -> int:
    run = current()
    if axes not in (0, None, (0,), [0]):
        raise IndexingError(f"nl.num_programs({axes}): kernel[lnc] launches have one axis (0)")
    return run.grid[0] if run.grid else 1


def program_ndim() -> int:
    return len(current().grid)


def device_print(prefix: str, x: object, **kwargs: object) -> None:
    run = current()
    value = (x.array() if run.execute else f"<{x.shape} {x.storage.dtype.name}>") if isinstance(x, Tensor) else x
    core = getattr(run, "core", 0)
    print(f"[core {core}] {prefix}" if run.grid and run.grid[0] > 1 else prefix, value)


# -- data movement wrappers --------------------------------------------------------------------------------
def _new(shape: Sequence[SupportsInt], dtype: DTypeLike, memory: str = "sbuf") -> NkiTensor:
    run = current()
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        shape = (shape[0] if shape else 1, 1)
    st = run.allocate(shape, _resolve_dtype(dtype), memory, fill=False, what="result tile",
                      track=memory != "psum")
    return NkiTensor.whole(st)


def _dtype_or(dtype: DTypeLike, like: Tensor) -> _dt.DType:
    return _resolve_dtype(dtype) if dtype is not None else like.storage.dtype


def _tile_of(x: object, api: str, role: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise OperandShapeError(f"{api}: {role} must be a tile, got {type(x).__name__}")
    if x.storage.memory == "hbm":
        raise _common.hbm_operand_error(api, role)
    return x


def _new_psum(shape: Sequence[SupportsInt], dtype: DTypeLike) -> NkiTensor:
    return _new(shape, dtype, "psum")


def load(src: NkiTensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """HBM -> a new SBUF tile (DMA; casts through fp32 when dtype differs)."""
    api = "nl.load"
    if not isinstance(src, Tensor) or src.storage.memory != "hbm":
        raise EngineMemoryError(f"Expected operand 'src' of '{api}' to be in address space 'hbm'")
    out = _new(src.shape, dtype if dtype is not None else src.dtype)
    s = src if len(src.shape) >= 2 else src.reshape(out.shape)
    engine.dma_copy(out, s, api=api)
    return out


def store(dst: Tensor, value: Tensor, **kwargs: object) -> None:
    """A tile -> HBM (a PSUM tile is first copied to SBUF, as the compiler does)."""
    api = "nl.store"
    if not isinstance(dst, Tensor) or dst.storage.memory != "hbm":
        raise EngineMemoryError(f"Expected operand 'dst' of '{api}' to be in address space 'hbm'")
    engine.dma_copy(dst, _lowering.store_source(value, dst, _new, api), api=api)


def copy(x: object, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """A copy of a tile in a new SBUF tile (VectorE tensor_copy; bit exact for the same dtype)."""
    x = _tile_of(x, "nl.copy", "x")
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.tensor_copy(out, x, api="nl.copy")
    return out


alu.register(copy, "copy")


def load_transpose2d(src: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    api = "nl.load_transpose2d"
    if not isinstance(src, Tensor) or src.storage.memory != "hbm" or len(src.shape) != 2:
        raise EngineMemoryError(f"{api}: src must be a 2-D HBM tensor")
    out = _new((src.shape[1], src.shape[0]), dtype if dtype is not None else src.dtype)
    engine.dma_transpose(out, src, (1, 0), api=api)
    return out


def broadcast_to(src: Tensor, shape: Sequence[SupportsInt], **kwargs: object) -> NkiTensor:
    api = "nl.broadcast_to"
    src = _tile_of(src, api, "src")
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(src.shape):
        raise OperandShapeError(f"{api}: shape {shape} must have the rank of src {src.shape}")
    out = _new(shape, src.dtype)
    if src.shape[0] == 1 and shape[0] != 1:
        engine.partition_broadcast(out, src, api=api)
    else:
        engine.tensor_copy(out, src, api=api)
    return out


def matmul(x: Tensor, y: Tensor, transpose_x: bool = False, **kwargs: object) -> NkiTensor:
    """x @ y (or x.T @ y with transpose_x=True) into a new fp32 PSUM tile."""
    api = "nl.matmul"
    # the high-level API places its operands (PSUM inputs copied to SBUF) and transposes x
    x, y = _lowering.matmul_operands(_tile_of(x, api, "x"), _tile_of(y, api, "y"), transpose_x, _new, _new_psum, api)
    out = _new((x.shape[1] if len(x.shape) == 2 else math.prod(x.shape[1:]), math.prod(y.shape[1:])), float32, "psum")
    engine.nc_matmul(out, x, y, api=api)
    return out


def transpose(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    """The 2-D transpose of a tile (TensorE, into a new PSUM tile; `lowering.transpose`)."""
    api = "nl.transpose"
    x = _tile_of(x, api, "x")
    return _lowering.transpose(x, _dtype_or(dtype, x), _new, _new_psum, api)


def gather_flattened(data: Tensor, indices: Tensor, axis: Axis = 0, dtype: DTypeLike = None,
                     **kwargs: object) -> NkiTensor:
    """Per-partition gather over the flattened free dims (GpSimd nc_n_gather)."""
    from nkitui.emulator.engine.gather import nc_n_gather

    data = _tile_of(data, "nl.gather_flattened", "data")
    out = _new(indices.shape, data.dtype)
    nc_n_gather(out, data, _tile_of(indices, "nl.gather_flattened", "indices"), api="nl.gather_flattened")
    if dtype is not None and _resolve_dtype(dtype) is not out.storage.dtype:
        return copy(out, dtype=dtype)
    return out


# -- element-wise math -----------------------------------------------------------------------------------
def _binary(name: str, x: Operand, y: Operand, dtype: DTypeLike, api: str) -> NkiTensor:
    xt, yt = isinstance(x, Tensor), isinstance(y, Tensor)
    op = alu.BINARY[name]
    if not xt and not yt:
        raise OperandShapeError(f"{api}: at least one operand must be a tile")
    if xt:
        _tile_of(x, api, "x")
    if yt:
        _tile_of(y, api, "y")
    d = _common.binary_result_dtype(name, x, y, dtype)
    shape = _common.binary_result_shape(api, x, y)
    out = _new(shape, d)
    _lowering.binary(out, x, y, op.name, _new, api)
    return out


def _make_binary(name: str, default_dtype: DTypeLike = None) -> Callable[..., NkiTensor]:
    def fn(x: Operand, y: Operand, dtype: DTypeLike = default_dtype, **kwargs: object) -> NkiTensor:
        return _binary(name, x, y, dtype, f"nl.{name}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} into a new SBUF tile (VectorE tensor_tensor / tensor_scalar)."
    alu.register(fn, name)
    return fn


# nl.add, nl.subtract, ...; the nki namespace adds abs_max and abs_min
_common.define_ops(globals(), _common.BINARY_OPS + ("abs_max", "abs_min"), _make_binary)


def _bypass(x: object, y: object = None, **kwargs: object) -> NoReturn:
    raise OperandShapeError("nl.bypass is an operator for ISA calls (op0=/op1=), not a function to call")


bypass = _bypass
bypass.__name__ = "bypass"
alu.register(bypass, "bypass")


def _activation(name: str, x: object, dtype: DTypeLike, api: str, bias: Tensor | None = None,
                scale: Operand = 1.0) -> NkiTensor:
    x = _tile_of(x, api, "x")
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.activation(out, name, x, bias=bias, scale=scale, api=api)
    return out


def _make_unary(name: str) -> Callable[..., NkiTensor]:
    def fn(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
        return _activation(name, x, dtype, f"nl.{name}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"Element-wise {name} into a new SBUF tile (ScalarE activation)."
    alu.register(fn, name)
    return fn


# nl.exp, ...; the nki namespace also lowers gelu_apprx_sigmoid_dx and negative to one activation
_common.define_ops(globals(), _common.ACTIVATION_OPS + ("gelu_apprx_sigmoid_dx", "negative"), _make_unary)


def sin(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """sin with range reduction to [-pi, pi] before the ScalarE activation (which has none)."""
    api = "nl.sin"
    x = _tile_of(x, api, "x")
    r = _new(x.shape, float32)
    engine.tensor_scalar(r, x, "add", float(np.pi), op1="mod", operand1=float(2 * np.pi), api=api)
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.activation(out, "sin", r, bias=-float(np.pi), api=api)
    return out


alu.register(sin, "sin")


def rsqrt(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """1/sqrt(x) on GpSimd (tensor_scalar rsqrt; no PSUM input, NKI 0.5+)."""
    api = "nl.rsqrt"
    x = _tile_of(x, api, "x")
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.tensor_scalar(out, x, "rsqrt", 0.0, engine="gpsimd", api=api)
    return out


alu.register(rsqrt, "rsqrt")


def reciprocal(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    x = _tile_of(x, "nl.reciprocal", "x")
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.reciprocal(out, x, engine="vector", api="nl.reciprocal")
    return out


alu.register(reciprocal, "reciprocal")


def invert(x: Tensor, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    """Bitwise NOT (XOR with all ones) of an integer tile."""
    x = _tile_of(x, "nl.invert", "x")
    ones = _common.invert_operand(x)
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.tensor_scalar(out, x, "bitwise_xor", ones, api="nl.invert")
    return out


def logical_not(x: Tensor, dtype: DTypeLike = bool_, **kwargs: object) -> NkiTensor:
    x = _tile_of(x, "nl.logical_not", "x")
    out = _new(x.shape, dtype)
    engine.tensor_scalar(out, x, "equal", 0.0, api="nl.logical_not")
    return out


def where(condition: Tensor, x: Operand, y: Operand, dtype: DTypeLike = None,
          **kwargs: object) -> NkiTensor:
    """condition != 0 ? x : y (tiles or scalars)."""
    condition = _tile_of(condition, "nl.where", "condition")
    shape = condition.shape
    for v in (x, y):
        if isinstance(v, Tensor):
            shape = tuple(np.broadcast_shapes(shape, v.shape))
    out = _new(shape, dtype if dtype is not None else _dt.promote(_common.operand_dtype(x), _common.operand_dtype(y)))
    engine.select(out, condition, x, y, api="nl.where")
    return out


def dropout(x: Tensor, rate: Operand, dtype: DTypeLike = None, **kwargs: object) -> NkiTensor:
    x = _tile_of(x, "nl.dropout", "x")
    out = _new(x.shape, dtype if dtype is not None else x.dtype)
    engine.dropout(out, x, rate, api="nl.dropout")
    return out


# -- reductions ------------------------------------------------------------------------------------------
def _reduce(opname: str, x: object, axis: Axis, dtype: DTypeLike, keepdims: bool, api: str,
            negate: bool = False) -> NkiTensor:
    x = _tile_of(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    out = _new(_reduced_shape(x.shape, axes, keepdims), dtype if dtype is not None else x.dtype)
    engine.tensor_reduce(out, opname, x, axes, negate=negate, keepdims=keepdims, api=api)
    return out


def sum(x: Tensor, axis: Axis, dtype: DTypeLike = None, keepdims: bool = False,
        **kwargs: object) -> NkiTensor:  # noqa: A001
    return _reduce("add", x, axis, dtype, keepdims, "nl.sum")


def max(x: Tensor, axis: Axis, dtype: DTypeLike = None, keepdims: bool = False,
        **kwargs: object) -> NkiTensor:  # noqa: A001
    return _reduce("maximum", x, axis, dtype, keepdims, "nl.max")


def min(x: Tensor, axis: Axis, dtype: DTypeLike = None, keepdims: bool = False,
        **kwargs: object) -> NkiTensor:  # noqa: A001
    return _reduce("minimum", x, axis, dtype, keepdims, "nl.min")


def prod(x: Tensor, axis: Axis, dtype: DTypeLike = None, keepdims: bool = False,
         **kwargs: object) -> NkiTensor:
    return _reduce("multiply", x, axis, dtype, keepdims, "nl.prod")


def all(x: Tensor, axis: Axis, dtype: DTypeLike = bool_, keepdims: bool = False, **kwargs: object) -> NkiTensor:  # noqa: A001
    return _reduce("logical_and", x, axis, dtype, keepdims, "nl.all")


alu.register(sum, "add")
alu.register(max, "maximum")
alu.register(min, "minimum")
alu.register(prod, "multiply")


def mean(x: Tensor, axis: Axis, dtype: DTypeLike = None, keepdims: bool = False,
         **kwargs: object) -> Tensor:
    """Mean over free axes with fp32 intermediates."""
    api = "nl.mean"
    x = _tile_of(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    return _lowering.mean(x, axes, keepdims, _resolve_dtype(dtype) if dtype is not None else _lowering.mean_dtype(x),
                          _new, api)


def var(x: Tensor, axis: Axis, dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    """Population variance over free axes (keeps the reduced dims, as NKI's nl.var does)."""
    api = "nl.var"
    x = _tile_of(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    return _lowering.var(x, axes, _resolve_dtype(dtype) if dtype is not None else x.storage.dtype, _new, api)


# -- composites ----------------------------------------------------------------------------------------
def softmax(x: Tensor, axis: Axis = -1, dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    """exp(x - max) / sum over the free axis: reduce max (VectorE), exp with the negated max as bias
    and the row sum in one ScalarE activation, reciprocal, scale."""
    api = "nl.softmax"
    x = _tile_of(x, api, "x")
    axes = _norm_axes(axis, len(x.shape), api)
    if axes != tuple(builtins.range(1, len(x.shape))):
        raise OperandShapeError(f"{api}: softmax over all free axes only (got axis={axis})")
    return _lowering.softmax(x, axes, _dtype_or(dtype, x), _new, api)


def rms_norm(x: Tensor, w: Tensor, axis: Axis, n: int, epsilon: float = 1e-6, dtype: DTypeLike = None,
             compute_dtype: DTypeLike = None, **kwargs: object) -> Tensor:
    """x / sqrt(mean(x^2) + epsilon) * w over the free axis (mean over n elements)."""
    api = "nl.rms_norm"
    x, w = _tile_of(x, api, "x"), _tile_of(w, api, "w")
    _norm_axes(axis, len(x.shape), api)
    return _lowering.rms_norm(x, w, n, epsilon, _dtype_or(dtype, x), _new, api)


def cast(x: Tensor, dtype: DTypeLike, **kwargs: object) -> NkiTensor:
    """A copy of x converted to dtype (VectorE, through fp32)."""
    return copy(x, dtype=dtype)


def _nl_range(*args: IntLike | Tensor, **kwargs: object) -> builtins.range:
    """`nl.range` (seen in corpus kernels): Python's range."""
    return _range(*args)


range = _nl_range  # noqa: A001 (the NKI name; this module uses builtins.range internally)
