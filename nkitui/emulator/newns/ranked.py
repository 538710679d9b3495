"""`nki.multi_rank_simulate`: one kernel on several ranks in one process (see nkitui.emulator.ranks).

Each rank runs the ordinary launch (`launch.run_kernel`) in its own thread with its own copy of
the kernel object (its own `last_run`) and, inside `emulator.trace()`, its own trace; the traces
are merged into the active one in rank order afterwards, every instruction's `meta["rank"]` naming
its rank. The kernel's `last_run` is rank 0's; `kernel.rank_runs` holds every rank's RunInfo.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import numpy as np

from nkitui.emulator.config import options
from nkitui.emulator.errors import KernelArgumentError, kernel_location
from nkitui.emulator.launch import run_kernel
from nkitui.emulator.newns.launcher import NkiKernel, target_for
from nkitui.emulator.ranks import run_ranks
from nkitui.emulator.runtime import active_trace, current_or_none
from nkitui.emulator.trace import Trace

# one rank's call: positional and keyword arguments of the kernel
Call: TypeAlias = tuple[tuple[object, ...], dict[str, object]]


def _pairs(world_size: int, per_rank_inputs: object) -> list[Call]:
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise KernelArgumentError(f"multi_rank_simulate: world_size must be a positive int, got {world_size!r}",
                                  location=kernel_location())
    if isinstance(per_rank_inputs, Mapping):
        missing = [r for r in range(world_size) if r not in per_rank_inputs]
        extra = [r for r in per_rank_inputs if not (isinstance(r, int) and 0 <= r < world_size)]
        if missing or extra:
            raise KernelArgumentError(f"multi_rank_simulate: per_rank_inputs needs one key per rank 0..{world_size - 1}"
                                      f" (missing {missing}, unexpected {extra})", location=kernel_location())
        items = [per_rank_inputs[r] for r in range(world_size)]
    elif isinstance(per_rank_inputs, Sequence):
        items = list(per_rank_inputs)
        if len(items) != world_size:
            raise KernelArgumentError(f"multi_rank_simulate: per_rank_inputs has {len(items)} entries for "
                                      f"{world_size} ranks", location=kernel_location())
    else:
        raise KernelArgumentError("multi_rank_simulate: per_rank_inputs must be a sequence or a mapping of "
                                  "(args, kwargs) pairs", location=kernel_location())
    pairs: list[Call] = []
    for r, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], Mapping)):
            raise KernelArgumentError(f"multi_rank_simulate: rank {r}'s input must be an (args, kwargs) pair, got "
                                      f"{type(item).__name__}", location=kernel_location())
        pairs.append((tuple(item[0]), dict(item[1])))
    _same_specialization(pairs)
    return pairs


def _signature(value: object) -> tuple[object, ...]:
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str)
    return ("static", value)


def _same_specialization(pairs: list[Call]) -> None:
    """Every rank runs the same kernel specialization (the nki.multi_rank_simulate docs)."""
    args0, kwargs0 = pairs[0]
    for r, (args, kwargs) in enumerate(pairs[1:], start=1):
        if len(args) != len(args0) or set(kwargs) != set(kwargs0):
            raise KernelArgumentError(f"multi_rank_simulate: rank {r} passes different parameters than rank 0",
                                      location=kernel_location())
        for name, a, b in [(f"argument {i}", x, y) for i, (x, y) in enumerate(zip(args0, args))] + \
                [(f"argument '{k}'", kwargs0[k], kwargs[k]) for k in kwargs0]:
            sa, sb = _signature(a), _signature(b)
            if sa[0] != sb[0] or (sa[0] == "array" and sa != sb):
                raise KernelArgumentError(f"multi_rank_simulate: {name} differs in kind, shape or dtype between rank 0 "
                                          f"and rank {r}", location=kernel_location())
            if sa[0] == "static":
                try:
                    same = bool(a == b)
                except Exception:
                    same = a is b
                if not same:
                    raise KernelArgumentError(f"multi_rank_simulate: {name} is static and must be equal on every rank "
                                              f"(rank 0: {a!r}, rank {r}: {b!r})", location=kernel_location())


def run_multi_rank(kernel: NkiKernel, world_size: int, per_rank_inputs: object) -> list[object]:
    if current_or_none() is not None:
        raise KernelArgumentError("multi_rank_simulate cannot be called from inside a running kernel",
                                  location=kernel_location())
    pairs = _pairs(int(world_size), per_rank_inputs)
    target = target_for(kernel)
    lnc = kernel.grid[0] if kernel.grid else 1
    if lnc > 1 and target == "trn1":
        raise KernelArgumentError(f"kernel[{lnc}]: logical NeuronCores (LNC=2) need trn2 or trn3; the target is trn1",
                                  location=kernel_location())
    main = active_trace()
    kernels = []
    traces: list[Trace | None] = []
    for _ in range(world_size):
        k = type(kernel).__new__(type(kernel))
        k.__dict__.update(kernel.__dict__)
        kernels.append(k)
        traces.append(Trace(target=main.target) if main is not None else None)

    def body(rank: int) -> object:
        args, kwargs = pairs[rank]
        return run_kernel(kernels[rank], args, kwargs, trace=traces[rank])

    with options(target=target):
        results = run_ranks(world_size, body)
    kernel.rank_runs = [k.last_run for k in kernels]
    kernel.last_run = kernels[0].last_run
    if main is not None:
        _merge_traces(main, traces)
    return results


def _merge_traces(main: Trace, traces: list[Trace | None]) -> None:
    for rank, tr in enumerate(traces):
        if tr is None:
            continue
        base = len(main.instructions)
        for ins in tr.instructions:
            ins.seq += base
            ins.meta["rank"] = rank
            main.instructions.append(ins)
        main.storages.update(tr.storages)
        if not main.kernel:
            main.kernel = tr.kernel
        for key, value in tr.meta.items():
            if key == "launches":
                for launch in value:
                    launch = dict(launch, rank=rank, first_seq=launch.get("first_seq", 0) + base)
                    main.meta.setdefault("launches", []).append(launch)
            elif key == "diagnostics":
                main.meta.setdefault("diagnostics", []).extend(value)
            elif key == "files":
                main.meta.setdefault("files", {}).update(value)
            else:
                main.meta.setdefault(key, value)
