"""ScalarE: `activation` (op(data * scale + bias) with an optional free-axis reduction)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator.engine.common import (
    Mask,
    Op,
    Operand,
    accumulators,
    current,
    elementwise_operands,
    reduce_outputs,
    row_reduction,
    tile,
    values,
    write,
)
from nkitui.emulator.errors import ActivationOperandError, EngineOpError
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce", "load_reduce")


def reduce_cmd_name(cmd: object) -> str | None:
    if cmd is None:
        return None
    name = getattr(cmd, "name", cmd)
    if isinstance(name, (int, np.integer)):
        name = REDUCE_CMDS[int(name)] if 0 <= int(name) < len(REDUCE_CMDS) else str(name)
    if name not in REDUCE_CMDS:
        raise EngineOpError(f"reduce_cmd must be one of {', '.join(REDUCE_CMDS)}, got {cmd!r}")
    return str(name)  # one of REDUCE_CMDS


def _vector_operand(x: object, api: str, role: str, P: int, allowed: tuple[str, ...]) -> Tensor | None:
    if isinstance(x, Tensor):
        tile(x, api, role)
        if x.shape[0] != P or math.prod(x.shape[1:]) != 1:
            raise ActivationOperandError(f"{api}: {role} must be a scalar or a ({P}, 1) vector, got a tile of "
                                         f"shape {x.shape}")
        if x.storage.dtype.name not in allowed:
            raise ActivationOperandError(f"{api}: {role} vector must be {' / '.join(allowed)}, got "
                                         f"{x.storage.dtype.name}")
        return x
    if isinstance(x, (bool, int, float, np.integer, np.floating)) or (isinstance(x, np.ndarray) and x.size == 1):
        return None
    raise ActivationOperandError(f"{api}: {role} must be a compile-time scalar or a ({P}, 1) vector, got "
                                 f"{type(x).__name__}")


def activation(dst: Tensor, op: Op, data: Tensor, *, bias: Operand | None = None, scale: Operand = 1.0,
               reduce_op: Op | None = None, reduce_res: Tensor | None = None, reduce_cmd: object = None,
               where: Mask = None, api: str = "activation") -> None:
    run = current()
    elementwise_operands(api, dst, data, "data")
    act = alu.resolve_activation(op)
    P = data.shape[0]
    t_scale = _vector_operand(scale, api, "scale", P, ("float32",))
    t_bias = None
    if bias is not None:
        t_bias = _vector_operand(bias, api, "bias", P, ("float32", "float16", "bfloat16"))
        if t_bias is None and run.target.nc_version < 3:
            raise ActivationOperandError(f"{api}: bias must be a ({P}, 1) vector on NeuronCore-v2 ({run.target.name}); "
                                         "scalar bias needs trn2 or later")
    ro = alu.resolve_binary(reduce_op, "reduce_op") if reduce_op is not None else None
    cmd = reduce_cmd_name(reduce_cmd)
    if cmd is None:
        cmd = "reset_reduce" if (ro is not None or reduce_res is not None) else "idle"
    if ro is None and cmd != "idle":
        ro = alu.BINARY["add"]
    if ro is not None:
        if ro.reduce is None or ro.kind == "bitvec":
            raise EngineOpError(f"{api}: reduce_op {ro.name} is not an arithmetic reduction")
        if run.target.nc_version < 3 and ro.name != "add":
            raise EngineOpError(f"{api}: the activation reduction supports only add on NeuronCore-v2 "
                                f"({run.target.name}), got {ro.name}")
    outs = reduce_outputs(api, dst, reduce_res, P)
    ins = tuple(t for t in (data, t_scale, t_bias) if t is not None)
    meta: dict[str, Any] = {"api": api, "op": act.name}
    if t_bias is not None or bias is not None:
        meta["bias"] = "vector" if t_bias is not None else "scalar"
    if t_scale is not None:
        meta["scale"] = "vector"
    if cmd != "idle":
        assert ro is not None  # every command but idle reduces (add by default)
        meta["reduce"] = ro.name
        meta["reduce_cmd"] = cmd
        if reduce_res is not None:
            meta["reduce_res"] = True
    run.record("scalar", "activation", ins, outs, partitions=P, free=math.prod(data.shape[1:]), meta=meta)
    if not run.execute:
        for o in outs:
            write(run, o, None, where if o is dst else None)
        return
    shape = dst.shape
    x = values(data, shape)
    if t_scale is not None:
        x = x * t_scale.read_f32().reshape((P,) + (1,) * (len(shape) - 1))
    elif float(np.asarray(scale)) != 1.0:
        x = x * np.float32(np.asarray(scale))
    if t_bias is not None:
        x = x + t_bias.read_f32().reshape((P,) + (1,) * (len(shape) - 1))
    elif bias is not None:
        x = x + np.float32(np.asarray(bias))
    y = act.fn(np.asarray(x, dtype=_F32))
    if y.shape != shape:
        y = np.broadcast_to(y, shape)
    write(run, dst, y, where)
    if cmd == "idle":
        return
    assert ro is not None  # as above
    acc = accumulators(run, "scalar")
    if cmd == "reset":
        acc[:P] = ro.identity if ro.identity is not None else 0
    else:
        part = row_reduction(ro, y, P, where)
        if cmd == "reset_reduce":
            acc[:P] = part
        else:  # reduce / load_reduce keep accumulating into the registers
            acc[:P] = ro.fn(acc[:P], part)
    if reduce_res is not None:
        write(run, reduce_res, acc[:P].reshape(reduce_res.shape).copy())
