"""`nki.isa` (NKI 0.3 to 0.6) on the emulator: destination-passing ISA calls over the shared engine.

Every call takes its destination first (`nisa.op(dst, ...)`, or `dst=`), writes it, and returns an
instruction handle (`register_alloc` returns its register). The output dtype is `dst.dtype`;
`mask=` no longer exists; a `dtype=` that differs from the destination's is an error. Semantics,
validation and the trace record are the engine's (nkitui.emulator.engine), shared with the legacy
front end; this module only adapts the calling convention and the 0.3+ rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator import dtypes as _dt
from nkitui.emulator import engine as _eng
from nkitui.emulator.engine import collectives as _coll
from nkitui.emulator.engine import dma_compute as _dmac
from nkitui.emulator.engine import gather as _gather
from nkitui.emulator.engine import mx as _mx
from nkitui.emulator.engine import prng as _prng
from nkitui.emulator.engine import registers as _regs
from nkitui.emulator.api_types import Axis, Op, Operand, Scalar
from nkitui.emulator.engine import trn3 as _trn3
from nkitui.emulator.errors import (
    EngineDtypeError,
    EngineMemoryError,
    EngineOpError,
    IndexingError,
    MatmulShapeError,
    NKIEmulatorError,
    OperandShapeError,
    UnsupportedError,
)
from nkitui.emulator.newns import dtypes as _ndt
from nkitui.emulator.newns import isa_constants as constants  # noqa: F401  (nisa.constants)
from nkitui.emulator.newns.isa_constants import (  # noqa: F401  (public names)
    dge_mode,
    dma_engine,
    engine,
    engine_name,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from nkitui.emulator.newns.registers import IntLike, VirtualRegister, scalar_value
from nkitui.emulator.runtime import Run, current
from nkitui.emulator.tensor import Tensor

NkiValidationError = NKIEmulatorError  # hardware-rule violations: every emulator error is one


class NkiInstruction:
    """The handle an ISA call returns (`.depends_on(...)` adds scheduling edges, which the
    emulator, running in program order, only records)."""

    __slots__ = ("api", "name", "seq", "deps")

    def __init__(self, api: str, name: str | None, seq: int) -> None:
        self.api = api
        self.name = name
        self.seq = seq
        self.deps: list[NkiInstruction] = []

    def depends_on(self, *producers: "NkiInstruction") -> "NkiInstruction":
        self.deps.extend(producers)
        return self

    def __repr__(self) -> str:
        return f"<nki instruction {self.api}{' ' + repr(self.name) if self.name else ''}>"


def _done(api: str, name: str | None) -> NkiInstruction:
    run = current()
    if name and run.trace is not None and run.trace.instructions:  # recording
        run.trace.instructions[-1].meta["name"] = str(name)
    return NkiInstruction(api, name, run.instructions)


def _tensor(t: object, api: str, role: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise OperandShapeError(f"operand '{role}' of {api} must be a tensor, got {type(t).__name__} {t!r}")
    return t


def _extra(api: str, dst: Tensor | None, kw: dict[str, object]) -> None:
    """0.3+ validation of keyword arguments that no longer exist."""
    if not kw:
        return
    if "mask" in kw and kw["mask"] is not None:
        raise IndexingError(f"{api}: mask= was removed in NKI 0.3; slice the operands instead (e.g. t[0:n, :])")
    if "dtype" in kw and kw["dtype"] is not None and dst is not None:
        d = _ndt.resolve(kw["dtype"])
        if d is not dst.storage.dtype:
            raise EngineDtypeError(f"{api}: the output dtype is dst's ({dst.storage.dtype.name}); dtype={d.name} differs "
                                   "(allocate dst with the dtype you want)")
    unknown = sorted(k for k in kw if k not in ("mask", "dtype"))
    if unknown:
        raise TypeError(f"{api}() got an unexpected keyword argument '{unknown[0]}'")


def _dst(dst: object, api: str, kw: dict[str, object]) -> Tensor:
    """The destination of a destination-first call, after the checks of the removed keywords."""
    t = _tensor(dst, api, "dst")
    _extra(api, t, kw)
    return t


# -- data movement --------------------------------------------------------------------------------
def dma_copy(dst: Tensor, src: Tensor, priority: int | None = None, oob_mode: oob_mode = oob_mode.error,
             dge_mode: dge_mode = dge_mode.unknown, engine: engine = engine.unknown, name: str | None = None,
             dst_rmw_op: Op | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.dma_copy"
    dst, src = _tensor(dst, api, "dst"), _tensor(src, api, "src")
    _extra(api, None, kw)
    run = current()
    dge = getattr(dge_mode, "name", dge_mode)
    ds, ss = dst.storage.dtype, src.storage.dtype
    if ds is not ss and (_ndt.is_packed(ds) or _ndt.is_packed(ss)):
        raise EngineDtypeError(f"{api}: MX packed types are not cast by DMA ({ss.name} -> {ds.name}); reinterpret "
                               "with .view(dtype) / .ap(dtype=...) instead")
    if dge == "hwdge":
        if run.target.nc_version < 3:
            raise EngineOpError(f"{api}: dge_mode=hwdge needs NeuronCore-v3 or newer; the target is {run.target.name}")
        if ds is not ss:
            raise EngineDtypeError(f"{api}: dge_mode=hwdge copies without casting: src {ss.name} and dst {ds.name} "
                                   "must have the same dtype")
    meta = {}
    if dge not in (None, "unknown"):
        meta["dge_mode"] = dge
    if priority is not None:
        meta["priority"] = int(priority)
    queue = engine_name(engine) or "sync"
    _eng.dma_copy(dst, src, dst_rmw_op=dst_rmw_op, oob_mode=oob_mode, queue=queue, api=api, meta=meta or None)
    return _done(api, name)


def dma_transpose(dst: Tensor, src: Tensor, axes: Sequence[int] | None = None, priority: int | None = None,
                  dge_mode: dge_mode = dge_mode.unknown, oob_mode: oob_mode = oob_mode.error,
                  name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.dma_transpose"
    dst, src = _tensor(dst, api, "dst"), _tensor(src, api, "src")
    _extra(api, None, kw)
    if dst.storage.memory != "sbuf":
        raise EngineMemoryError(f"{api}: dst must be an SBUF tile, got {dst.storage.memory}")
    if src.storage.dtype is not dst.storage.dtype:
        raise EngineDtypeError(f"{api}: src ({src.storage.dtype.name}) and dst ({dst.storage.dtype.name}) must have the same "
                               "dtype (DMA transposes do not cast)")
    nd = len(src.shape)
    perm = tuple(int(a) for a in axes) if axes is not None else {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}.get(nd)
    if perm not in ((1, 0), (2, 1, 0), (3, 1, 2, 0)):
        raise OperandShapeError(f"{api}: supported axes are (1, 0), (2, 1, 0) and (3, 1, 2, 0); got {axes} for a "
                                f"{nd}-D source")
    want = tuple(src.shape[a] for a in perm)
    if dst.shape != want:
        raise OperandShapeError(f"{api}: dst shape {dst.shape} must be exactly the transposed source shape {want}")
    dge = getattr(dge_mode, "name", dge_mode)
    if dge == "hwdge":
        if src.shape[0] != 16 or src.shape[-1] % 128 or src.storage.dtype.itemsize != 2:
            raise OperandShapeError(f"{api}: dge_mode=hwdge needs src.shape[0] == 16, src.shape[-1] a multiple of "
                                    f"128 and a 2-byte dtype; got {src.shape} {src.storage.dtype.name}")
    if src.gather_indices is not None and src.storage.dtype.itemsize != 2:
        raise EngineDtypeError(f"{api}: an indirect DMA transpose needs a 2-byte dtype, got {src.storage.dtype.name}")
    _eng.dma_transpose(dst, src, perm, api=api)
    return _done(api, name)


def dma_compute(dst: Tensor, srcs: Sequence[Tensor], reduce_op: Op, scales: Sequence[float] | None = None,
                unique_indices: bool = True, oob_mode: oob_mode = oob_mode.error, name: str | None = None,
                **kw: object) -> NkiInstruction:
    api = "nisa.dma_compute"
    _extra(api, None, kw)
    if not unique_indices:
        raise UnsupportedError(f"{api}: unique_indices=False (repeated scatter indices) is not supported by NKI yet")
    _dmac.dma_compute(_tensor(dst, api, "dst"), [_tensor(s, api, "srcs") for s in srcs], reduce_op, scales,
                      oob_mode=oob_mode, api=api)
    return _done(api, name)


def tensor_copy(dst: Tensor, src: Tensor, engine: engine = engine.unknown, name: str | None = None,
                **kw: object) -> NkiInstruction:
    api = "nisa.tensor_copy"
    dst, src = _tensor(dst, api, "dst"), _tensor(src, api, "src")
    _extra(api, dst, kw)
    eng = engine_name(engine)
    if eng == "scalar" and current().target.nc_version < 3:
        raise EngineOpError(f"{api}: tensor_copy is not supported on the Scalar Engine of NeuronCore-v2 (trn1); use "
                            "nisa.activation(op=nl.copy) instead")
    _eng.tensor_copy(dst, src, engine=eng, api=api)  # unknown engine: VectorE
    return _done(api, name)


def memset(dst: Tensor, value: Scalar, engine: engine = engine.unknown, name: str | None = None,
           **kw: object) -> NkiInstruction:
    api = "nisa.memset"
    dst = _dst(dst, api, kw)
    d = dst.storage.dtype
    if _ndt.is_packed(d):
        if value != 0:
            raise OperandShapeError(f"{api}: MX packed tiles ({d.name}) can only be set to 0, got {value!r}")
        value = 0
    elif d.is_int:
        if isinstance(value, (float, np.floating)) and (not np.isfinite(value) or float(value) != int(value)):
            raise EngineDtypeError(f"{api}: the value type must match dst's dtype: {value!r} is not an integer and "
                                   f"dst is {d.name}")
        if isinstance(value, (float, np.floating)):
            value = int(value)
    _eng.memset(dst, value, engine=engine_name(engine), api=api)
    return _done(api, name)


def tensor_copy_predicated(dst: Tensor, src: Operand, predicate: Tensor, reverse_pred: bool = False,
                           name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.tensor_copy_predicated"
    dst = _dst(dst, api, kw)
    if isinstance(src, Tensor) and src.storage.dtype is not dst.storage.dtype:
        raise EngineDtypeError(f"{api}: src ({src.storage.dtype.name}) and dst ({dst.storage.dtype.name}) must share a dtype")
    _eng.tensor_copy_predicated(dst, src, _tensor(predicate, api, "predicate"), bool(reverse_pred), api=api)
    return _done(api, name)


# -- TensorE --------------------------------------------------------------------------------------
def _tiling(api: str, run: Run, K: int, M: int, tile_position: Sequence[int] | None,
            tile_size: Sequence[int] | None) -> dict[str, tuple[int, ...]]:
    tp = tuple(int(x) for x in tile_position) if tile_position else ()
    ts = tuple(int(x) for x in tile_size) if tile_size else ()
    if not tp and not ts:
        return {}
    if len(tp) != 2 or len(ts) != 2:
        raise MatmulShapeError(f"{api}: tiling mode needs both tile_position=(row, column) and "
                               "tile_size=(rows, columns)")
    sizes = (32, 64, 128) if run.target.nc_version >= 3 else (64, 128)
    if ts[0] not in sizes or ts[1] not in sizes:
        raise MatmulShapeError(f"{api}: tile sizes must be one of {sizes} on {run.target.name}, got {ts}")
    if run.target.nc_version < 3 and ts == (32, 32):
        raise MatmulShapeError(f"{api}: NeuronCore-v2 cannot use 32 for both row and column tiles")
    if tp[0] % ts[0] or tp[1] % ts[1] or tp[0] + ts[0] > 128 or tp[1] + ts[1] > 128:
        raise MatmulShapeError(f"{api}: tile_position {tp} must be multiples of tile_size {ts} inside the 128x128 array")
    if K > ts[0] or M > ts[1]:
        raise MatmulShapeError(f"{api}: the stationary tile [{K}, {M}] does not fit the {ts} PE tile")
    return {"tile_position": tp, "tile_size": ts}


def nc_matmul(dst: Tensor, stationary: Tensor, moving: Tensor, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, is_transpose: bool = False, accumulate: bool | None = None,
              tile_position: Sequence[int] | None = (), tile_size: Sequence[int] | None = (),
              perf_mode: matmul_perf_mode | str | None = matmul_perf_mode.none, name: str | None = None,
              **kw: object) -> NkiInstruction:
    api = "nisa.nc_matmul"
    dst = _tensor(dst, api, "dst")
    stationary, moving = _tensor(stationary, api, "stationary"), _tensor(moving, api, "moving")
    _extra(api, dst, kw)
    run = current()
    perf = getattr(perf_mode, "value", perf_mode)
    if perf in ("none", None):
        perf = None
    K, M, _, double = _eng.tensor_engine.check_matmul(stationary, moving, perf_mode=perf, api=api)
    tiling = _tiling(api, run, stationary.shape[0], M, tile_position, tile_size)
    if double and tiling.get("tile_size", (128, 128))[1] != 128:
        raise MatmulShapeError(f"{api}: perf_mode=double_row cannot be combined with column tiling")
    if is_transpose and run.target.nc_version >= 3 and dst.storage.dtype is not stationary.storage.dtype:
        raise EngineDtypeError(f"{api}: a transpose (is_transpose=True) writes the input dtype "
                               f"({stationary.storage.dtype.name}) to PSUM, dst is {dst.storage.dtype.name}")
    meta: dict[str, object] = dict(tiling)
    for k, v in (("is_stationary_onezero", is_stationary_onezero), ("is_moving_onezero", is_moving_onezero)):
        if v:
            meta[k] = True
    acc = None if accumulate is None else bool(accumulate)
    _eng.nc_matmul(dst, stationary, moving, accumulate=acc, is_transpose=bool(is_transpose), perf_mode=perf, api=api,
                   meta=meta or None)
    return _done(api, name)


def nc_matmul_mx(dst: Tensor, stationary: Tensor, moving: Tensor, stationary_scale: Tensor,
                 moving_scale: Tensor, tile_position: Sequence[int] | None = None,
                 tile_size: Sequence[int] | None = None, accumulate: bool | None = None,
                 name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.nc_matmul_mx"
    dst = _dst(dst, api, kw)
    run = current()
    meta: dict[str, tuple[int, ...]] = {}
    if tile_position or tile_size:
        meta = _tiling(api, run, stationary.shape[0], 128, tile_position, tile_size)
        if meta["tile_size"][1] != 128 or meta["tile_position"][1] != 0:
            raise MatmulShapeError(f"{api}: MX matmuls support row tiling only (column tile 128 at column 0)")
    _mx.nc_matmul_mx(dst, _tensor(stationary, api, "stationary"), _tensor(moving, api, "moving"),
                     _tensor(stationary_scale, api, "stationary_scale"), _tensor(moving_scale, api, "moving_scale"),
                     accumulate=None if accumulate is None else bool(accumulate), api=api, meta=meta or None)
    return _done(api, name)


def quantize_mx(dst: Tensor, src: Tensor, dst_scale: Tensor, name: str | None = None,
                **kw: object) -> NkiInstruction:
    api = "nisa.quantize_mx"
    _extra(api, None, kw)
    _mx.quantize_mx(_tensor(dst, api, "dst"), _tensor(src, api, "src"), _tensor(dst_scale, api, "dst_scale"), api=api)
    return _done(api, name)


def nc_transpose(dst: Tensor, data: Tensor, engine: engine = engine.unknown, name: str | None = None,
                 **kw: object) -> NkiInstruction:
    api = "nisa.nc_transpose"
    dst, data = _tensor(dst, api, "dst"), _tensor(data, api, "data")
    _extra(api, dst, kw)
    eng = engine_name(engine)
    if eng is None:
        P, F = data.shape[0], data.size // max(data.shape[0], 1)
        small = P <= 32 and F <= 32
        eng = "tensor" if (dst.storage.memory == "psum" and data.storage.memory == "sbuf") or not small else "vector"
    if eng not in ("tensor", "vector"):
        raise EngineOpError(f"{api}: transposes run on the tensor or vector engine, not {eng}")
    if dst.storage.dtype is not data.storage.dtype and not (
            eng == "tensor" and dst.storage.dtype is _dt.float32 and data.storage.dtype.is_float):
        # The nc_transpose docs say 'The output dst tile must have the same data type as that of data', but a
        # TensorE transpose is a matmul with the identity, so an fp32 PSUM dst holds the exact values, and
        # AWS's own nki-library (tp_broadcast) transposes bf16 data into an fp32 PSUM tile on hardware.
        raise EngineDtypeError(f"{api}: dst ({dst.storage.dtype.name}) must have the dtype of data ({data.storage.dtype.name}) "
                               "(nki.isa.nc_transpose docs: 'The output dst tile must have the same data type as that of "
                               "data'; only a TensorE transpose may widen, into a float32 PSUM tile)")
    _eng.nc_transpose(dst, data, engine=eng, api=api)
    return _done(api, name)


# -- ScalarE --------------------------------------------------------------------------------------
def activation(dst: Tensor, op: Op, data: Tensor, bias: Tensor | None = None, scale: Operand = 1.0,
               reduce_op: Op | None = None, reduce_res: Tensor | None = None,
               reduce_cmd: reduce_cmd | str | None = None, name: str | None = None,
               **kw: object) -> NkiInstruction:
    api = "nisa.activation"
    dst, data = _tensor(dst, api, "dst"), _tensor(data, api, "data")
    _extra(api, dst, kw)
    _check_bias(api, bias)
    if reduce_op is not None and current().target.nc_version < 3:

        if alu.resolve_binary(reduce_op, "reduce_op").name != "add":
            raise EngineOpError(f"{api}: reduce_op must be nl.add on NeuronCore-v2")
    _eng.activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                    reduce_cmd=reduce_cmd, api=api)
    return _done(api, name)


def _check_bias(api: str, bias: Tensor | None) -> None:
    if isinstance(bias, Tensor) and bias.storage.dtype.name == "tfloat32":
        raise EngineDtypeError(f"{api}: bias may be any dtype except tfloat32")


def activation_reduce(dst: Tensor, op: Op, data: Tensor, reduce_op: Op, reduce_res: Tensor,
                      bias: Tensor | None = None, scale: Operand = 1.0, name: str | None = None,
                      **kw: object) -> NkiInstruction:
    api = "nisa.activation_reduce"
    dst, data = _tensor(dst, api, "dst"), _tensor(data, api, "data")
    _extra(api, dst, kw)
    _check_bias(api, bias)
    _eng.activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                    reduce_cmd="reset_reduce", api=api)
    return _done(api, name)


def activate2(dst: Tensor, op: Op, data: Tensor, imm0: Operand, imm1: Operand, op0: Op, op1: Op,
              relu_param: float = 0.0, reverse0: bool = False, reverse1: bool = False,
              reduce_op: Op | None = None, reduce_res: Tensor | None = None,
              reduce_cmd: reduce_cmd | str | None = reduce_cmd.idle, name: str | None = None,
              **kw: object) -> NkiInstruction:
    api = "nisa.activate2"
    dst = _dst(dst, api, kw)
    _trn3.activate2(dst, op, _tensor(data, api, "data"), imm0, imm1, op0, op1, relu_param=relu_param,
                    reverse0=reverse0, reverse1=reverse1, reduce_op=reduce_op, reduce_res=reduce_res,
                    reduce_cmd=reduce_cmd, api=api)
    return _done(api, name)


# -- VectorE / GpSimd -----------------------------------------------------------------------------
def tensor_tensor(dst: Tensor, data1: Tensor, data2: Tensor, op: Op, engine: engine = engine.unknown,
                  name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.tensor_tensor"
    dst = _dst(dst, api, kw)
    data1, data2 = _tensor(data1, api, "data1"), _tensor(data2, api, "data2")
    _eng.tensor_tensor_operands(api, data1, data2, per_partition_broadcast=False)
    _eng.tensor_tensor(dst, data1, data2, op, engine=engine_name(engine), api=api)
    return _done(api, name)


def _operand(x: Operand | None, api: str, role: str) -> Operand:
    if isinstance(x, Tensor) and x.storage.dtype.name != "float32":
        raise EngineDtypeError(f"{api}: {role} must be float32 (a (P, 1) fp32 tile or a scalar), got "
                               f"{x.storage.dtype.name}")
    return 0.0 if x is None else x


def tensor_scalar(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, reverse0: bool = False,
                  op1: Op | None = None, operand1: Operand | None = None, reverse1: bool = False,
                  engine: engine = engine.unknown, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.tensor_scalar"
    dst = _dst(dst, api, kw)
    bitvec = alu.resolve_binary(op0, "op0").kind == "bitvec"
    o0 = operand0 if bitvec else _operand(operand0, api, "operand0")
    o1 = operand1 if (bitvec or op1 is None) else _operand(operand1, api, "operand1")
    _eng.tensor_scalar(dst, _tensor(data, api, "data"), op0, o0, bool(reverse0), op1, o1, bool(reverse1),
                       engine=engine_name(engine), api=api)
    return _done(api, name)


def scalar_tensor_tensor(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, op1: Op, operand1: Operand,
                         reverse0: bool = False, reverse1: bool = False, name: str | None = None,
                         **kw: object) -> NkiInstruction:
    api = "nisa.scalar_tensor_tensor"
    dst = _dst(dst, api, kw)
    _eng.scalar_tensor_tensor(dst, _tensor(data, api, "data"), op0, operand0, op1, _tensor(operand1, api, "operand1"),
                              bool(reverse0), bool(reverse1), api=api)
    return _done(api, name)


def tensor_scalar_reduce(dst: Tensor, data: Tensor, op0: Op, operand0: Operand, reduce_op: Op,
                         reduce_res: Tensor, reverse0: bool = False,
                         reduce_cmd: reduce_cmd | str | None = reduce_cmd.reset_reduce,
                         reduce_init: Operand | None = None, name: str | None = None,
                         **kw: object) -> NkiInstruction:
    api = "nisa.tensor_scalar_reduce"
    dst = _dst(dst, api, kw)
    _eng.tensor_scalar_reduce(dst, _tensor(data, api, "data"), op0, _operand(operand0, api, "operand0"), reduce_op,
                              reduce_res, bool(reverse0), reduce_cmd=reduce_cmd, reduce_init=reduce_init, api=api)
    return _done(api, name)


def tensor_scalar_cumulative(dst: Tensor, src: Tensor, op0: Op, op1: Op, imm0: Operand,
                             imm1: Scalar | None = None,
                             reduce_cmd: reduce_cmd | str | None = reduce_cmd.reset_reduce,
                             name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.tensor_scalar_cumulative"
    dst = _dst(dst, api, kw)
    _eng.tensor_scalar_cumulative(dst, _tensor(src, api, "src"), op0, op1, imm0, imm1, reduce_cmd, api=api)
    return _done(api, name)


def tensor_reduce(dst: Tensor, op: Op, data: Tensor, axis: Axis, negate: bool = False,
                  keepdims: bool = False, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.tensor_reduce"
    dst = _dst(dst, api, kw)
    _eng.tensor_reduce(dst, op, _tensor(data, api, "data"), axis, negate=bool(negate), keepdims=bool(keepdims),
                       api=api)
    return _done(api, name)


def tensor_partition_reduce(dst: Tensor, op: Op, data: Tensor, name: str | None = None,
                            **kw: object) -> NkiInstruction:
    api = "nisa.tensor_partition_reduce"
    dst = _dst(dst, api, kw)
    _eng.tensor_partition_reduce(dst, op, _tensor(data, api, "data"), api=api)
    return _done(api, name)


def tensor_tensor_scan(dst: Tensor, data0: Tensor, data1: Tensor, initial: Operand, op0: Op, op1: Op,
                       reverse0: bool = False, reverse1: bool = False, name: str | None = None,
                       **kw: object) -> NkiInstruction:
    api = "nisa.tensor_tensor_scan"
    dst = _dst(dst, api, kw)
    _eng.tensor_tensor_scan(dst, _tensor(data0, api, "data0"), _tensor(data1, api, "data1"), initial, op0, op1,
                            bool(reverse0), bool(reverse1), api=api)
    return _done(api, name)


def reciprocal(dst: Tensor, data: Tensor, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.reciprocal"
    dst = _dst(dst, api, kw)
    _eng.reciprocal(dst, _tensor(data, api, "data"), engine="vector", api=api)
    return _done(api, name)


def exponential(dst: Tensor, src: Tensor, max_value: Operand = 0.0, reduce_res: Tensor | None = None,
                reduce_cmd: reduce_cmd | str | None = reduce_cmd.idle, reduce_init: Operand = 0.0,
                name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.exponential"
    dst = _dst(dst, api, kw)
    _trn3.exponential(dst, _tensor(src, api, "src"), max_value, reduce_res=reduce_res, reduce_cmd=reduce_cmd,
                      reduce_init=reduce_init, api=api)
    return _done(api, name)


def iota(dst: Tensor, pattern: Sequence[Sequence[int]], offset: int = 0, channel_multiplier: int = 0,
         name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.iota"
    dst = _dst(dst, api, kw)
    _eng.iota(dst, _pattern(pattern), int(offset), int(channel_multiplier), api=api)
    return _done(api, name)


def _pattern(pattern: Sequence[Sequence[int]] | None) -> list[tuple[int, int]] | None:
    return [(int(s), int(n)) for s, n in pattern] if pattern else None


def affine_select(dst: Tensor, pattern: Sequence[Sequence[int]], channel_multiplier: int, on_true_tile: Tensor,
                  on_false_value: Scalar, cmp_op: Op | None = None, offset: int = 0, name: str | None = None,
                  **kw: object) -> NkiInstruction:
    api = "nisa.affine_select"
    dst = _dst(dst, api, kw)
    _eng.affine_select(dst, _tensor(on_true_tile, api, "on_true_tile"), on_false_value, pattern=_pattern(pattern),
                       channel_multiplier=int(channel_multiplier), offset=int(offset),
                       cmp_op="equal" if cmp_op is None else cmp_op, api=api)
    return _done(api, name)


_FP32_MIN = float(np.finfo(np.float32).min)


def range_select(dst: Tensor, on_true_tile: Tensor, comp_op0: Op, comp_op1: Op, bound0: Tensor,
                 bound1: Tensor, reduce_cmd: reduce_cmd | str | None = reduce_cmd.reset_reduce,
                 reduce_res: Tensor | None = None, reduce_op: Op | None = None, range_start: float = 0,
                 on_false_value: float = _FP32_MIN, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.range_select"
    dst = _dst(dst, api, kw)
    _eng.range_select(dst, _tensor(on_true_tile, api, "on_true_tile"), comp_op0, comp_op1, bound0, bound1,
                      reduce_res=reduce_res, reduce_op="maximum" if reduce_op is None else reduce_op,
                      range_start=float(range_start), on_false_value=float(on_false_value), api=api)
    return _done(api, name)


def select_reduce(dst: Tensor, predicate: Tensor, on_true: Tensor, on_false: Operand, reduce_res: Tensor | None = None,
                  reduce_cmd: reduce_cmd | str | None = reduce_cmd.idle, reduce_op: Op | None = None,
                  reverse_pred: bool = False, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.select_reduce"
    dst = _dst(dst, api, kw)
    _eng.select_reduce(dst, _tensor(predicate, api, "predicate"), _tensor(on_true, api, "on_true"), on_false,
                       reduce_res=reduce_res, reduce_op="maximum" if reduce_op is None else reduce_op,
                       reverse_pred=bool(reverse_pred), api=api)
    return _done(api, name)


def bn_stats(dst: Tensor, data: Tensor, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.bn_stats"
    dst = _dst(dst, api, kw)
    _eng.bn_stats(dst, _tensor(data, api, "data"), api=api)
    return _done(api, name)


def bn_aggr(dst: Tensor, data: Tensor, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.bn_aggr"
    dst = _dst(dst, api, kw)
    _eng.bn_aggr(dst, _tensor(data, api, "data"), api=api)
    return _done(api, name)


def dropout(dst: Tensor, data: Tensor, prob: Operand, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.dropout"
    dst = _dst(dst, api, kw)
    data = _tensor(data, api, "data")
    if dst.storage.dtype is not data.storage.dtype:
        raise EngineDtypeError(f"{api}: dst ({dst.storage.dtype.name}) must have the dtype of data ({data.storage.dtype.name}) "
                               "(nki.isa.dropout docs: 'The output data type dst.dtype must match the input data "
                               "type data.dtype'; cast afterwards with nisa.tensor_copy)")
    _eng.dropout(dst, data, prob, api=api)
    return _done(api, name)


def max8(dst: Tensor, src: Tensor, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.max8"
    dst = _dst(dst, api, kw)
    _eng.max8(dst, _tensor(src, api, "src"), api=api)
    return _done(api, name)


def nc_find_index8(dst: Tensor, data: Tensor, vals: Tensor, name: str | None = None,
                   **kw: object) -> NkiInstruction:
    api = "nisa.nc_find_index8"
    dst = _dst(dst, api, kw)
    if dst.storage.dtype.name not in ("uint16", "uint32"):
        raise EngineDtypeError(f"{api}: dst must be uint16 or uint32, got {dst.storage.dtype.name}")
    _eng.nc_find_index8(dst, _tensor(data, api, "data"), _tensor(vals, api, "vals"), api=api)
    return _done(api, name)


def nc_match_replace8(dst: Tensor, data: Tensor, vals: Tensor, imm: Scalar, dst_idx: Tensor | None = None,
                      name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.nc_match_replace8"
    dst = _dst(dst, api, kw)
    data, vals = _tensor(data, api, "data"), _tensor(vals, api, "vals")
    if dst_idx is not None:
        _eng.nc_find_index8(_tensor(dst_idx, api, "dst_idx"), data, vals, api=api)
    _eng.nc_match_replace8(dst, data, vals, imm, api=api)
    return _done(api, name)


def nc_stream_shuffle(dst: Tensor, src: Tensor, shuffle_mask: Sequence[int], name: str | None = None,
                      **kw: object) -> NkiInstruction:
    api = "nisa.nc_stream_shuffle"
    dst, src = _tensor(dst, api, "dst"), _tensor(src, api, "src")
    _extra(api, dst, kw)
    if src.storage.dtype is not dst.storage.dtype:
        raise EngineDtypeError(f"{api}: dst ({dst.storage.dtype.name}) must have the dtype of src ({src.storage.dtype.name})")
    _eng.nc_stream_shuffle(dst, src, [int(m) for m in shuffle_mask], api=api)
    return _done(api, name)


def nc_n_gather(dst: Tensor, data: Tensor, indices: Tensor, name: str | None = None,
                **kw: object) -> NkiInstruction:
    api = "nisa.nc_n_gather"
    dst = _dst(dst, api, kw)
    _gather.nc_n_gather(dst, _tensor(data, api, "data"), _tensor(indices, api, "indices"), api=api)
    return _done(api, name)


def nonzero_with_count(dst: Tensor, src: Tensor, index_offset: int = 0, padding_val: int = -1,
                       name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.nonzero_with_count"
    dst = _dst(dst, api, kw)
    _gather.nonzero_with_count(dst, _tensor(src, api, "src"), int(index_offset), int(padding_val), api=api)
    return _done(api, name)


def rng(dst: Tensor, engine: engine = engine.unknown, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.rng"
    dst = _dst(dst, api, kw)
    _prng.rng(dst, engine=engine_name(engine), api=api)
    return _done(api, name)


def rand2(dst: Tensor, min: Operand, max: Operand, name: str | None = None, **kw: object) -> NkiInstruction:  # noqa: A002 (documented parameter names)
    api = "nisa.rand2"
    dst = _dst(dst, api, kw)
    _prng.rand2(dst, min, max, api=api)
    return _done(api, name)


def set_rng_seed(src_seeds: Tensor, name: str | None = None, **kw: object) -> NkiInstruction:
    api = "nisa.set_rng_seed"
    _extra(api, None, kw)
    _prng.set_rng_seed(_tensor(src_seeds, api, "src_seeds"), api=api)
    return _done(api, name)


def rand_set_state(src_seeds: Tensor, engine: engine = engine.unknown, name: str | None = None,
                   **kw: object) -> NkiInstruction:
    api = "nisa.rand_set_state"
    _extra(api, None, kw)
    _prng.rand_set_state(_tensor(src_seeds, api, "src_seeds"), engine=engine_name(engine), api=api)
    return _done(api, name)


def rand_get_state(dst: Tensor, engine: engine = engine.unknown, name: str | None = None,
                   **kw: object) -> NkiInstruction:
    api = "nisa.rand_get_state"
    dst = _dst(dst, api, kw)
    _prng.rand_get_state(dst, engine=engine_name(engine), api=api)
    return _done(api, name)


# -- logical cores --------------------------------------------------------------------------------
def sendrecv(src: Tensor, dst: Tensor, send_to_rank: int, recv_from_rank: int, pipe_id: int,
             dma_engine: dma_engine = dma_engine.dma, name: str | None = None, **kw: object) -> NkiInstruction:
    """Send `src` to core `send_to_rank` and receive core `recv_from_rank`'s data into `dst`."""
    api = "nisa.sendrecv"
    _extra(api, None, kw)
    _coll.sendrecv(_tensor(src, api, "src"), _tensor(dst, api, "dst"), send_to_rank, recv_from_rank, pipe_id,
                   dma_engine=getattr(dma_engine, "name", str(dma_engine)), api=api)
    return _done(api, name)


def core_barrier(data: Tensor | None, cores: Sequence[int], engine: engine = engine.gpsimd,
                 name: str | None = None, **kw: object) -> NkiInstruction:
    """Wait until every core of the logical core reaches this barrier (after writing `data`)."""
    api = "nisa.core_barrier"
    _extra(api, None, kw)
    _coll.core_barrier(data, cores, engine=engine_name(engine) or "gpsimd", api=api)
    return _done(api, name)


# -- registers ------------------------------------------------------------------------------------
def register_alloc(x: IntLike | Tensor | None = None) -> VirtualRegister:
    """A new register, optionally set from an int (or loaded from a one-element tensor)."""
    current()
    reg = VirtualRegister()
    if isinstance(x, Tensor):
        _regs.register_load(reg, x, api="nisa.register_alloc")
    elif x is not None:
        _regs.register_move(reg, scalar_value(x, "register_alloc value"), api="nisa.register_alloc")
    return reg


def register_move(dst: VirtualRegister, src: IntLike | Tensor) -> NkiInstruction:
    api = "nisa.register_move"
    if not isinstance(dst, VirtualRegister):
        raise OperandShapeError(f"{api}: dst must be a register from nisa.register_alloc, got {type(dst).__name__}")
    _regs.register_move(dst, scalar_value(src, "register_move src"), api=api)
    return _done(api, None)


def register_load(dst: VirtualRegister, src: Tensor) -> NkiInstruction:
    api = "nisa.register_load"
    if not isinstance(dst, VirtualRegister):
        raise OperandShapeError(f"{api}: dst must be a register from nisa.register_alloc, got {type(dst).__name__}")
    _regs.register_load(dst, _tensor(src, api, "src"), api=api)
    return _done(api, None)


def register_store(dst: Tensor, src: VirtualRegister) -> NkiInstruction:
    api = "nisa.register_store"
    if not isinstance(src, VirtualRegister):
        raise OperandShapeError(f"{api}: src must be a register from nisa.register_alloc, got {type(src).__name__}")
    _regs.register_store(_tensor(dst, api, "dst"), src, api=api)
    return _done(api, None)


# -- versions and removed APIs ----------------------------------------------------------------------
def get_nc_version() -> nc_version:
    return nc_version(current().target.nc_version)


def get_nc_sub_version() -> int:
    current()
    return 0


def _removed(name: str, instead: str) -> Callable[..., NoReturn]:
    def fn(*args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(f"nisa.{name} was removed in NKI 0.4; {instead}")
    fn.__name__ = name
    return fn


tensor_copy_dynamic_src = _removed("tensor_copy_dynamic_src", "read through src.ap(..., scalar_offset=...) instead")
tensor_copy_dynamic_dst = _removed("tensor_copy_dynamic_dst", "write through dst.ap(..., scalar_offset=...) instead")


def _unmodelled(name: str, why: str) -> Callable[..., NoReturn]:
    def fn(*args: object, **kwargs: object) -> NoReturn:
        raise UnsupportedError(f"nisa.{name} is not emulated: {why}")
    fn.__name__ = name
    return fn


local_gather = _unmodelled("local_gather", "its output layout across the 16-partition GpSimd groups is not documented "
                           "precisely enough to emulate; use nisa.nc_n_gather (per partition) or an indirect dma_copy")
sequence_bounds = _unmodelled("sequence_bounds", "the documentation does not define its end-index convention")
topk = _unmodelled("topk", "its 16-partition 'snake' source layout is not documented precisely enough; use max8 / "
                   "nc_match_replace8 rounds for top-k")
builtin_custom_op = _unmodelled("builtin_custom_op", "it runs vendor microcode")

__all__ = [n for n in dir() if not n.startswith("_")]
