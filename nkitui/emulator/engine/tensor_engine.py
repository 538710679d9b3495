"""TensorE: matrix multiply into PSUM, transposes, partition broadcast."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkitui.emulator import dtypes as dt
from nkitui.emulator.engine.common import Mask, Run, current, same_partitions, tile, values, write
from nkitui.emulator.errors import (
    EngineDtypeError,
    EngineMemoryError,
    MatmulShapeError,
    OperandShapeError,
    PsumBankError,
)
from nkitui.emulator.targets import GEMM_STATIONARY_FMAX, PMAX
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
_MM_TYPES = ("float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32")


def _check_mm_dtype(run: Run, t: Tensor, role: str, api: str) -> None:
    name = t.storage.dtype.name
    allowed = _MM_TYPES + (("float8_e4m3fn",) if run.target.nc_version >= 4 else ())
    if name not in allowed:
        raise EngineDtypeError(f"{api}: TensorE does not support {name} for '{role}'; use one of "
                               f"{', '.join(allowed)}")


def check_matmul(stationary: Tensor, moving: Tensor, *, perf_mode: object = None,
                 api: str = "nc_matmul") -> tuple[int, int, int, bool]:
    """Validate TensorE operands (memory, shapes, dtypes); returns (K, M, N, double_row)."""
    run = current()
    if not getattr(stationary, "_tile_checked", False):  # (tile()'s own fast path, without its call)
        tile(stationary, api, "stationary")
    if not getattr(moving, "_tile_checked", False):
        tile(moving, api, "moving")
    for t, r in ((stationary, "stationary"), (moving, "moving")):
        if t.storage.memory != "sbuf":
            raise EngineMemoryError(f"{api}: operand '{r}' must be in SBUF (TensorE reads SBUF only), got "
                                    f"{t.storage.memory}")
    double = perf_mode is not None and str(getattr(perf_mode, "value", perf_mode) or "").startswith("double_row")
    K, Km = stationary.shape[0], moving.shape[0]
    if double:
        if run.target.nc_version < 3:
            raise MatmulShapeError(f"{api}: perf_mode=double_row needs NeuronCore-v3 (trn2) or later")
        if stationary.ndim != 3 or stationary.shape[1] != 2 or moving.ndim != 3 or moving.shape[1] != 2:
            raise MatmulShapeError(f"{api}: double_row operands must be [128, 2, F] (pad K to 256); got "
                                   f"{stationary.shape} and {moving.shape}")
        M = stationary.shape[2]
        N = moving.shape[2]
        K, Km = 2 * K, 2 * Km
    else:
        M = math.prod(stationary.shape[1:])
        N = math.prod(moving.shape[1:])
    if K != Km:
        raise MatmulShapeError(f"{api}: contraction (partition) sizes differ: stationary has {K}, moving has {Km}")
    if M > GEMM_STATIONARY_FMAX:
        raise MatmulShapeError(f"{api}: stationary free size {M} exceeds {GEMM_STATIONARY_FMAX} "
                               "(gemm_stationary_fmax); tile the M dimension")
    fmax = run.target.gemm_moving_fmax
    if N > fmax:
        raise MatmulShapeError(f"{api}: moving free size {N} exceeds {fmax} (gemm_moving_fmax on "
                               f"{run.target.name}); tile the N dimension")
    if N * 4 > run.target.psum_tile_max_bytes:
        raise PsumBankError(f"{api}: the result needs {N * 4} B per partition, over one "
                            f"{run.target.psum_tile_max_bytes} B PSUM bank")
    _check_mm_dtype(run, stationary, "stationary", api)
    _check_mm_dtype(run, moving, "moving", api)
    wide = ("float32", "tfloat32")
    sw, mw = stationary.storage.dtype.name in wide, moving.storage.dtype.name in wide
    if sw != mw:
        raise EngineDtypeError(f"{api}: if one operand is fp32/tf32 the other must be too (stationary "
                               f"{stationary.storage.dtype.name}, moving {moving.storage.dtype.name})")
    names = {stationary.storage.dtype.name, moving.storage.dtype.name}
    if "float8_e4m3" in names and "float8_e4m3fn" in names:
        raise EngineDtypeError(f"{api}: float8_e4m3 and float8_e4m3fn cannot be mixed in one matmul")
    return K, M, N, double


def nc_matmul(dst: Tensor, stationary: Tensor, moving: Tensor, *, accumulate: bool | None = False,
              is_transpose: bool = False, perf_mode: object = None, where: Mask = None,
              api: str = "nc_matmul", meta: dict[str, Any] | None = None,
              checked: tuple[int, int, int, bool] | None = None) -> None:
    """dst[M, N] (PSUM) (+)= stationary[K, M].T @ moving[K, N], accumulated in fp32.

    accumulate: False overwrite, True add onto dst, None = first matmul write into a zone
    overwrites and later ones accumulate (new-namespace semantics; zones end at non-matmul writes).
    """
    run = current()
    # `checked`: the result of check_matmul for these operands, when the front end already ran it
    K, M, N, double = checked or check_matmul(stationary, moving, perf_mode=perf_mode, api=api)
    tile(dst, api, "dst")
    if dst.storage.memory != "psum":
        raise EngineMemoryError(f"{api}: the result must be written to PSUM, got a {dst.storage.memory} tile")
    if dst.shape[0] != M or math.prod(dst.shape[1:]) != N:
        raise OperandShapeError(f"{api}: result tile shape {dst.shape} does not match [{M}, {N}] "
                                f"(stationary {stationary.shape}, moving {moving.shape})")
    if not is_transpose and dst.storage.dtype is not dt.float32 and not (
            run.target.nc_version >= 4 and dst.storage.dtype is dt.bfloat16):
        raise EngineDtypeError(f"{api}: the PSUM result must be float32 on {run.target.name}, got "
                               f"{dst.storage.dtype.name}")
    m: dict[str, Any] | None = None  # the trace's metadata: read only while recording (a matmul is never reordered)
    if run.recording:
        m = {"api": api, "K": K, "M": M, "N": N, "accumulate": accumulate}
        if is_transpose:
            m["transpose"] = True
        if double:
            m["perf_mode"] = "double_row"  # also AWS's "double_row_gen3" spelling
        if meta:
            m.update(meta)
    run.record("tensor", "nc_matmul", (stationary, moving), (dst,), partitions=K, free=N,
               flops=0 if is_transpose else 2 * K * M * N, meta=m)
    if not run.execute:
        return write(run, dst, None, where, accumulate is not False)
    s = values(stationary, stationary.shape).reshape(K, M)
    mv = values(moving, moving.shape).reshape(K, N)
    if is_transpose and run.target.nc_version >= 3 and not np.isfinite(s).all():
        # from NC-v3 the transpose mode moves data through the PE array (as nc_transpose does):
        # a NaN/Inf reaches only the outputs its nonzero moving weights select, not the whole row
        with np.errstate(invalid="ignore", over="ignore"):
            res = np.where(mv[None] != 0, s.T[:, :, None] * mv[None], _F32(0)).sum(axis=1, dtype=_F32)
    else:
        res = np.matmul(s.T, mv)  # fp32 products accumulated in fp32
    write_matmul_result(run, dst, res.reshape(dst.shape), accumulate, where)


def write_matmul_result(run: Run, dst: Tensor, res: np.ndarray, accumulate: bool | None,
                        where: Mask = None) -> None:
    """Write a TensorE result into PSUM: overwrite (False), add onto dst (True), or, for None, add
    where dst is inside an accumulation zone that an earlier matmul opened and overwrite elsewhere."""
    if accumulate is None:
        st = dst.storage
        if st.mm_zone is None:
            st.mm_zone = np.zeros(st.shape, dtype=bool)
        inzone = np.broadcast_to(dst._apply(st.mm_zone), dst.shape)
        # the common cases without a select: a whole tile inside its zone (the 2nd..nth matmul of an
        # accumulation) or outside it (the first)
        if inzone.all():
            res = dst.read_f32() + res
        elif inzone.any():
            res = np.where(inzone, dst.read_f32() + res, res)
        write(run, dst, res if res.dtype == _F32 else res.astype(_F32), where, True)
        dst.set_zone(True)
        return
    if accumulate:
        res = dst.read_f32() + res
    write(run, dst, res, where, bool(accumulate))
    if dst.storage.mm_zone is not None:
        dst.set_zone(True)


def nc_transpose(dst: Tensor, data: Tensor, *, engine: str = "tensor", where: Mask = None,
                 api: str = "nc_transpose") -> None:
    """dst[F, P] = data[P, F] on TensorE (<= 128x128, SBUF -> PSUM) or VectorE (<= 32x32)."""
    run = current()
    tile(dst, api, "dst")
    tile(data, api, "data")
    P = data.shape[0]
    F = math.prod(data.shape[1:])
    limit = PMAX if engine == "tensor" else 32
    if P > limit or F > limit:
        raise MatmulShapeError(f"{api}: a {engine}-engine transpose handles at most {limit}x{limit}, got "
                               f"{P}x{F}")
    if dst.shape[0] != F or math.prod(dst.shape[1:]) != P:
        raise OperandShapeError(f"{api}: output shape {dst.shape} is not the transpose [{F}, {P}] of {data.shape}")
    if engine == "tensor":
        if data.storage.memory != "sbuf":
            raise EngineMemoryError(f"{api}: TensorE transpose reads SBUF only; 'data' is in {data.storage.memory}")
        if dst.storage.memory != "psum":
            raise EngineMemoryError(f"{api}: TensorE transpose writes PSUM; the output is in {dst.storage.memory}")
        if data.storage.dtype.is_int and data.storage.dtype.itemsize > 2:
            raise EngineDtypeError(f"{api}: TensorE cannot transpose {data.storage.dtype.name} data")
    run.record(engine, "nc_transpose", (data,), (dst,), partitions=P, free=F,
               meta={"api": api, "engine": engine})
    if not run.execute:
        return write(run, dst, None, where)
    if data.storage.dtype is dst.storage.dtype and engine == "vector":
        x = data.array().reshape(P, F)
        write(run, dst, np.ascontiguousarray(x.T).reshape(dst.shape), where)
        return
    x = values(data, data.shape).reshape(P, F)
    if engine == "tensor" and run.target.nc_version < 3 and not np.isfinite(x).all():
        # NC-v2 transposes by a matmul with the identity: NaN/Inf spread along the output row
        with np.errstate(invalid="ignore"):
            res = np.matmul(x.T, np.eye(P, dtype=_F32))
    else:
        res = x.T
    write(run, dst, np.ascontiguousarray(res).reshape(dst.shape), where)


def partition_broadcast(dst: Tensor, src: Tensor, *, api: str = "broadcast") -> None:
    """dst[P, F] = src[1, F] broadcast over partitions (a TensorE matmul with a ones vector)."""
    run = current()
    tile(dst, api, "dst")
    tile(src, api, "src")
    if src.shape[0] != 1:
        same_partitions(api, (dst, "dst"), (src, "src"))
    F = math.prod(dst.shape[1:])
    run.record("tensor", "nc_matmul", (src,), (dst,), partitions=1, free=F,
               meta={"api": api, "purpose": "partition_broadcast", "K": 1, "M": dst.shape[0], "N": F})
    if not run.execute:
        return write(run, dst, None)
    v = values(src, src.shape)
    if v.shape[1:] != dst.shape[1:]:
        v = np.broadcast_to(v.reshape((1,) + v.shape[1:]), (1,) + dst.shape[1:]) if v.size != F else v.reshape((1,) + dst.shape[1:])
    write(run, dst, np.broadcast_to(v, dst.shape))
