"""NeuronCore-v4 (trn3) additions: ScalarE `activate2` and VectorE `exponential`.

Both keep a running reduction in their engine's per-partition accumulator registers (the same
registers `activation` / the VectorE accumulation instructions use), controlled by `reduce_cmd`:
reset_reduce starts from the reduction's identity, reduce continues, load_reduce starts from
`reduce_init`, reset only resets, idle leaves the registers alone.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import numpy as np

from nkitui.emulator import alu
from nkitui.emulator.engine.common import (
    Op,
    Operand,
    Run,
    Scalar,
    accumulators,
    current,
    elementwise_operands,
    operand_values,
    reduce_outputs,
    scalar_or_vector,
    values,
    write,
)
from nkitui.emulator.engine.scalar import reduce_cmd_name
from nkitui.emulator.errors import EngineOpError
from nkitui.emulator.tensor import Tensor

_F32 = np.float32
_PAIRS = {("multiply", "add"), ("multiply", "subtract"), ("multiply", None), ("add", None), ("subtract", None),
          (None, None)}


def _v4(run: Run, api: str) -> None:
    if run.target.nc_version < 4:
        raise EngineOpError(f"{api} needs NeuronCore-v4 (trn3); the target is {run.target.name}")


def _reduce(name: str, x: np.ndarray) -> np.ndarray:
    """Reduce [P, F] -> [P] with add / maximum / minimum / abs_max / abs_min."""
    r: np.ndarray  # (numpy's stubs type these reductions as Any)
    if name == "add":
        r = x.sum(axis=1, dtype=_F32)
    elif name == "maximum":
        r = x.max(axis=1)
    elif name == "minimum":
        r = x.min(axis=1)
    else:
        pick = np.argmax(np.abs(x), axis=1) if name == "abs_max" else np.argmin(np.abs(x), axis=1)
        r = x[np.arange(x.shape[0]), pick]
    return r


def _combine(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _reduce(name, np.stack([a, b], axis=1))


_IDENTITY = {"add": 0.0, "maximum": -np.inf, "minimum": np.inf, "abs_max": 0.0, "abs_min": np.inf}


def _accumulate(regs: np.ndarray, P: int, cmd: str, op: str, part: np.ndarray | None,
                init: float | np.ndarray) -> None:
    if cmd in ("reset", "reset_reduce"):
        regs[:P] = _IDENTITY[op]
    elif cmd == "load_reduce":
        regs[:P] = init
    if cmd in ("reduce", "reset_reduce", "load_reduce") and part is not None:
        regs[:P] = _combine(op, regs[:P], part)


def activate2(dst: Tensor, op: Op, data: Tensor, imm0: Operand, imm1: Operand, op0: Op, op1: Op, *,
              relu_param: SupportsFloat = 0.0, reverse0: bool = False, reverse1: bool = False,
              reduce_op: Op | None = None, reduce_res: Tensor | None = None, reduce_cmd: object = None,
              api: str = "activate2") -> None:
    """dst = op((data op0 imm0) op1 imm1) on ScalarE, with an optional accumulated reduction."""
    run = current()
    _v4(run, api)
    elementwise_operands(api, dst, data, "data")
    act = alu.resolve_activation(op)
    names = []
    for o, r in ((op0, "op0"), (op1, "op1")):
        n = alu.op_name(o) if o is not None else None
        names.append(None if n == "bypass" else alu.resolve_binary(o, r).name if o is not None else None)
    if (names[0], names[1]) not in _PAIRS:
        raise EngineOpError(f"{api}: (op0, op1) = {tuple(names)} is not one of the supported pairs (multiply, add), "
                            "(multiply, subtract), (multiply, bypass), (add, bypass), (subtract, bypass), "
                            "(bypass, bypass)")
    P = data.shape[0]
    x0: Tensor | Scalar = 0.0  # (read only with op0)
    x1: Tensor | Scalar = 0.0  # (read only with op1)
    t0: Tensor | None = None
    t1: Tensor | None = None
    if names[0]:
        x0, t0 = scalar_or_vector(imm0, api, "imm0", P, dst.ndim)
    if names[1]:
        x1, t1 = scalar_or_vector(imm1, api, "imm1", P, dst.ndim)
    cmd = reduce_cmd_name(reduce_cmd) or ("reset_reduce" if (reduce_op is not None or reduce_res is not None)
                                          else "idle")
    ro = str(alu.op_name(reduce_op)) if reduce_op is not None else "add"  # ("None": not an operator, below)
    ro = {"max": "maximum", "min": "minimum", "amax": "maximum", "amin": "minimum"}.get(ro, ro)
    if ro not in _IDENTITY:
        raise EngineOpError(f"{api}: reduce_op must be add, maximum, minimum, abs_max or abs_min, got {ro}")
    outs = reduce_outputs(api, dst, reduce_res, P)
    ins = tuple(t for t in (data, t0, t1) if t is not None)
    meta: dict[str, Any] = {"api": api, "op": act.name, "op0": names[0], "op1": names[1]}
    if cmd != "idle":
        meta.update(reduce=ro, reduce_cmd=cmd)
    run.record("scalar", "activate2", ins, outs, partitions=P, free=math.prod(data.shape[1:]), meta=meta)
    if not run.execute:
        for o in outs:
            write(run, o, None)
        return
    shape = dst.shape
    x = values(data, shape)
    if names[0]:
        a = operand_values(x0, t0, len(shape))
        x = alu.BINARY[names[0]].fn(a, x) if reverse0 else alu.BINARY[names[0]].fn(x, a)
    if names[1]:
        b = operand_values(x1, t1, len(shape))
        x = alu.BINARY[names[1]].fn(b, x) if reverse1 else alu.BINARY[names[1]].fn(x, b)
    if act.name == "relu" and float(relu_param) != 0.0:  # parameterised (leaky) relu
        y = np.where(x >= 0, x, x * np.float32(relu_param)).astype(_F32)
    else:
        y = act.fn(np.asarray(x, dtype=_F32))
    y = np.broadcast_to(y, shape)
    write(run, dst, y)
    acc = accumulators(run, "scalar")
    _accumulate(acc, P, cmd, ro, _reduce(ro, y.reshape(P, -1).astype(_F32)), 0.0)
    if reduce_res is not None:
        write(run, reduce_res, acc[:P].reshape(reduce_res.shape).copy())


def exponential(dst: Tensor, src: Tensor, max_value: Operand = 0.0, *, reduce_res: Tensor | None = None,
                reduce_cmd: object = None, reduce_init: SupportsFloat | Tensor = 0.0,
                api: str = "exponential") -> None:
    """dst = exp(src - max_value) on VectorE, with a running sum in the shared VectorE accumulators."""
    run = current()
    _v4(run, api)
    elementwise_operands(api, dst, src, "src")
    P = src.shape[0]
    xm, tm = scalar_or_vector(max_value, api, "max_value", P, dst.ndim)
    cmd = reduce_cmd_name(reduce_cmd) or "idle"
    outs = reduce_outputs(api, dst, reduce_res, P)
    ins = (src,) + ((tm,) if tm is not None else ())
    meta: dict[str, Any] = {"api": api, "op": "exp"}
    if cmd != "idle":
        meta.update(reduce="add", reduce_cmd=cmd)
    run.record("vector", "exponential", ins, outs, partitions=P, free=math.prod(src.shape[1:]), meta=meta)
    if not run.execute:
        for o in outs:
            write(run, o, None)
        return
    shape = dst.shape
    y = np.exp(values(src, shape) - operand_values(xm, tm, len(shape))).astype(_F32)
    write(run, dst, y)
    acc = accumulators(run, "vector")
    init = float(reduce_init) if not isinstance(reduce_init, Tensor) else reduce_init.read_f32().reshape(P)
    _accumulate(acc, P, cmd, "add", y.reshape(P, -1).sum(axis=1, dtype=_F32), init)
    if reduce_res is not None:
        write(run, reduce_res, acc[:P].reshape(reduce_res.shape).copy())
