"""MX (OCP microscaling) on NeuronCore-v4: `nc_matmul_mx` (TensorE) and `quantize_mx` (VectorE).

Data: an x4 element packs four low-precision values that lie next to each other on the
contraction axis: `float8_e4m3fn_x4` / `float8_e5m2_x4` are 32-bit (value j in byte j, little
endian), `float4_e2m1fn_x4` is 16-bit (value j in nibble j, low nibble first). A data tile
[P, F] of x4 elements therefore holds [P, 4F] values, and the contraction of `nc_matmul_mx` runs
over the P partitions and the 4 values of each element:

    dst[m, n] (+)= sum_{k < K, q < 4} S[k, m, q] * 2**(s_S(k, m) - 127) * V[k, n, q] * 2**(s_V(k, n) - 127)

Scales: one uint8 (or float8_e8m0fnu) per group of 8 partitions x 1 x4 element (32 values); the
byte e decodes as 2**(e - 127) (e8m0, 0xFF is NaN). Scale rows follow the hardware layout: for
data on at most 32 partitions, scale row i (partitions 8i..8i+7) is scale partition i; on more
partitions, the scales of quadrant q (data partitions 32q..32q+31) sit in partitions 32q..32q+3 of
a tile with as many partitions as the data. fp4 e2m1 values decode through ml_dtypes
(float4_e2m1fn: 1 sign, 2 exponent, 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6).

`quantize_mx` takes bf16/fp16 [P, 4F] and writes x4 fp8 [P, F] plus scales in the same layout:
per group, the scale exponent is the largest fp32 biased exponent in the group minus the fp8
type's largest exponent (8 for e4m3fn, 15 for e5m2), clamped to [0, 254]; values are divided by
2**(scale - 127), clamped to the type's finite range (448, 57344) and rounded to nearest even.
The products are exact in fp32 and are accumulated in fp32, as in PSUM.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkitui.emulator import dtypes as dt
from nkitui.emulator import mx_dtypes
from nkitui.emulator.mx_dtypes import PackedDType
from nkitui.emulator.engine.common import Run, current, tile, write
from nkitui.emulator.engine.tensor_engine import write_matmul_result
from nkitui.emulator.errors import EngineDtypeError, EngineMemoryError, EngineOpError, MatmulShapeError, OperandShapeError
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "float4_e2m1fn": 6.0}
_EMAX = {"float8_e4m3fn": 8, "float8_e5m2": 15, "float4_e2m1fn": 2}
_SCALE_TYPES = ("uint8", "float8_e8m0fnu")


def _require_v4(run: Run, api: str) -> None:
    if run.target.nc_version < 4:
        raise EngineOpError(f"{api} needs NeuronCore-v4 (trn3); the target is {run.target.name} "
                            "(set NEURON_PLATFORM_TARGET_OVERRIDE=trn3)")


def _packed(t: Tensor, api: str, role: str) -> PackedDType:
    d = t.storage.dtype
    if not mx_dtypes.is_packed(d):
        raise EngineDtypeError(f"{api}: '{role}' must be an MX x4 type (float8_e4m3fn_x4, float8_e5m2_x4, "
                               f"float4_e2m1fn_x4), got {d.name}")
    public = d.public
    assert isinstance(public, PackedDType)  # a packed DType's public object (mx_dtypes._packed)
    return public


def unpack(bits: np.ndarray, packed: PackedDType) -> np.ndarray:
    """x4 cells [..., F] -> fp32 values [..., F, 4] (value j of element f at [..., f, j])."""
    bits = np.ascontiguousarray(bits)
    if packed.element_bits == 8:
        raw = bits.astype(np.uint32).view(np.uint8).reshape(bits.shape + (4,))  # little endian
    else:
        b = bits.astype(np.uint16)
        raw = np.stack([(b >> (4 * j)) & 0xF for j in range(4)], axis=-1).astype(np.uint8)
    decoded: np.ndarray = raw.view(packed.element).astype(_F32)
    return decoded


def pack(values: np.ndarray, packed: PackedDType) -> np.ndarray:
    """fp32 values [..., F, 4] -> x4 cells [..., F] (rounded to nearest even)."""
    q = np.ascontiguousarray(values.astype(packed.element)).view(np.uint8)
    if packed.element_bits == 8:
        return q.reshape(values.shape).view(np.uint32).reshape(values.shape[:-1])
    nib = (q & 0xF).astype(np.uint16)
    return (nib[..., 0] | (nib[..., 1] << 4) | (nib[..., 2] << 8) | (nib[..., 3] << 12)).astype(np.uint16)


def scale_rows(P: int) -> np.ndarray:
    """Scale-tile partition of each group of 8 data partitions (hardware layout)."""
    groups = np.arange(P // 8)
    if P <= 32:
        return groups
    return (groups // 4) * 32 + groups % 4


def _scale_factors(scale: Tensor, P: int, F: int, api: str, role: str) -> np.ndarray:
    """Per data partition and x4 column, the decoded scale 2**(e - 127), shape [P, F]."""
    rows = scale_rows(P)
    if scale.shape[0] <= rows.max(initial=0) or math.prod(scale.shape[1:]) < F:
        need = (int(rows.max(initial=0)) + 1, F)
        raise OperandShapeError(f"{api}: '{role}' of shape {scale.shape} is too small for data on {P} partitions "
                                f"and {F} x4 columns (needs at least {need}: one scale per 8 partitions x 1 column, "
                                "in the partitions of the data's quadrant)")
    e = scale.array().reshape(scale.shape[0], -1)[rows, :F].view(np.uint8).astype(np.int32)
    f = np.ldexp(np.float32(1), e - 127).astype(_F32)
    f[e == 255] = np.nan
    return np.repeat(f, 8, axis=0)


def _check_scale(t: Tensor, api: str, role: str) -> None:
    tile(t, api, role)
    if t.storage.memory != "sbuf":
        raise EngineMemoryError(f"{api}: '{role}' must be in SBUF, got {t.storage.memory}")
    if t.storage.dtype.name not in _SCALE_TYPES:
        raise EngineDtypeError(f"{api}: '{role}' must be uint8 (MX e8m0 scale bytes), got {t.storage.dtype.name}")


def nc_matmul_mx(dst: Tensor, stationary: Tensor, moving: Tensor, stationary_scale: Tensor,
                 moving_scale: Tensor, *, accumulate: bool | None = None, api: str = "nc_matmul_mx",
                 meta: dict[str, Any] | None = None) -> None:
    run = current()
    _require_v4(run, api)
    for t, r in ((dst, "dst"), (stationary, "stationary"), (moving, "moving")):
        tile(t, api, r)
    for t, r in ((stationary, "stationary"), (moving, "moving")):
        if t.storage.memory != "sbuf":
            raise EngineMemoryError(f"{api}: '{r}' must be in SBUF (TensorE reads SBUF only), got {t.storage.memory}")
    _check_scale(stationary_scale, api, "stationary_scale")
    _check_scale(moving_scale, api, "moving_scale")
    if dst.storage.memory != "psum":
        raise EngineMemoryError(f"{api}: the result must be written to PSUM, got a {dst.storage.memory} tile")
    ps = _packed(stationary, api, "stationary")
    pm = _packed(moving, api, "moving")
    K, Km = stationary.shape[0], moving.shape[0]
    M, N = math.prod(stationary.shape[1:]), math.prod(moving.shape[1:])
    if K != Km:
        raise MatmulShapeError(f"{api}: contraction (partition) sizes differ: stationary {K}, moving {Km}")
    if K % 32 or K > 128:
        raise MatmulShapeError(f"{api}: the partition (contraction) size must be a multiple of 32 up to 128, got {K}")
    if M > 128 or M % 2:
        raise MatmulShapeError(f"{api}: the stationary free size must be even and at most 128, got {M}")
    if dst.storage.dtype not in (dt.float32, dt.bfloat16):
        raise EngineDtypeError(f"{api}: the PSUM result must be float32 or bfloat16, got {dst.storage.dtype.name}")
    nmax = 512 if dst.storage.dtype is dt.float32 else 1024
    if N > nmax:
        raise MatmulShapeError(f"{api}: moving free size {N} exceeds {nmax} for a {dst.storage.dtype.name} result")
    if dst.shape[0] != M or math.prod(dst.shape[1:]) != N:
        raise OperandShapeError(f"{api}: result tile shape {dst.shape} does not match [{M}, {N}]")
    m = {"api": api, "K": 4 * K, "M": M, "N": N, "accumulate": accumulate, "mx": f"{ps.name} x {pm.name}"}
    if meta:
        m.update(meta)
    run.record("tensor", "nc_matmul_mx", (stationary, moving, stationary_scale, moving_scale), (dst,),
               partitions=K, free=N, flops=2 * 4 * K * M * N, meta=m)
    if not run.execute:
        return write(run, dst, None, None, accumulate is not False)
    s = unpack(stationary.array().reshape(K, M), ps) * _scale_factors(stationary_scale, K, M, api,
                                                                      "stationary_scale")[:, :, None]
    v = unpack(moving.array().reshape(K, N), pm) * _scale_factors(moving_scale, K, N, api, "moving_scale")[:, :, None]
    res = np.matmul(s.transpose(1, 0, 2).reshape(M, 4 * K), v.transpose(0, 2, 1).reshape(4 * K, N)).astype(_F32)
    write_matmul_result(run, dst, res.reshape(dst.shape), accumulate)


def quantize_mx(dst: Tensor, src: Tensor, dst_scale: Tensor, *, api: str = "quantize_mx") -> None:
    run = current()
    _require_v4(run, api)
    tile(dst, api, "dst")
    tile(src, api, "src")
    _check_scale(dst_scale, api, "dst_scale")
    for t, r in ((dst, "dst"), (src, "src")):
        if t.storage.memory != "sbuf":
            raise EngineMemoryError(f"{api}: '{r}' must be in SBUF, got {t.storage.memory}")
    if src.storage.dtype not in (dt.bfloat16, dt.float16):
        raise EngineDtypeError(f"{api}: src must be bfloat16 or float16, got {src.storage.dtype.name}")
    pd = _packed(dst, api, "dst")
    if pd.element_bits != 8:
        raise EngineDtypeError(f"{api}: dst must be float8_e4m3fn_x4 or float8_e5m2_x4 (quantize_mx has no fp4 output)")
    P = src.shape[0]
    F4 = math.prod(src.shape[1:])
    if P % 32 or P > 128:
        raise OperandShapeError(f"{api}: the partition size must be a multiple of 32 up to 128, got {P}")
    if F4 % 4:
        raise OperandShapeError(f"{api}: the free size of src must be a multiple of 4, got {F4}")
    F = F4 // 4
    if dst.shape[0] != P or math.prod(dst.shape[1:]) != F:
        raise OperandShapeError(f"{api}: dst shape {dst.shape} must be [{P}, {F}] (src free size / 4)")
    rows = scale_rows(P)
    if dst_scale.shape[0] <= int(rows.max()) or math.prod(dst_scale.shape[1:]) < F:
        raise OperandShapeError(f"{api}: dst_scale of shape {dst_scale.shape} is too small: it needs "
                                f"{int(rows.max()) + 1} partitions (one scale row per 8 data partitions, in the "
                                f"data's 32-partition quadrant) and {F} columns")
    run.record("vector", "quantize_mx", (src,), (dst, dst_scale), partitions=P, free=F4,
               meta={"api": api, "mx": pd.name})
    if not run.execute:
        write(run, dst, None)
        write(run, dst_scale, None)
        return
    elem = pd.element.name
    x = src.read_f32().reshape(P // 8, 8, F, 4)
    exp = (np.ascontiguousarray(x).view(np.uint32) >> 23) & 0xFF
    e = np.clip(exp.max(axis=(1, 3)).astype(np.int32) - _EMAX[elem], 0, 254)  # [P/8, F]
    scale = np.ldexp(np.float32(1), e - 127).astype(_F32)
    q = np.clip(x / scale[:, None, :, None], -_MAX[elem], _MAX[elem]).reshape(P, F, 4)
    write(run, dst, pack(q, pd).reshape(dst.shape))
    sc = dst_scale.array().reshape(dst_scale.shape[0], -1).copy()
    sc[rows, :F] = e.astype(np.uint8).view(sc.dtype)
    write(run, dst_scale, sc.reshape(dst_scale.shape))
