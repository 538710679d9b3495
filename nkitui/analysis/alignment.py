"""Pair CUDA constructs with their NKI counterparts by role, with line ranges on both sides.

The Source area shows CUDA beside NKI; instead of a textual diff it highlights what plays the same
role: global memory and HBM tensors, `__shared__` buffers and SBUF tiles, register accumulators and
PSUM tiles, thread/block indexing and tile loops, bounds checks and partial-tile masks,
`__syncthreads` and the engine-to-engine dependency points the NKI compiler synchronises, warp
reductions and free-axis reductions, math intrinsics and activation functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nkitui.analysis.cuda import CudaKernel, CudaModel
from nkitui.analysis.nki.model import KernelModel, NkiModel, Op, Tensor
from nkitui.analysis.nki.values import Mask

ROLES: dict[str, tuple[str, str]] = {
    # role -> (title, what the pairing means for an auditor)
    "global-memory": ("global memory → HBM",
                      "CUDA global memory is HBM on a NeuronCore; engines never touch it, only DMAs move it."),
    "shared-memory": ("__shared__ → SBUF tiles",
                      "Shared-memory scratch becomes SBUF tiles: 128 partitions by a free axis, filled by DMA."),
    "accumulator": ("register accumulator → PSUM",
                    "Per-thread accumulators of a matrix product become fp32 PSUM tiles TensorE accumulates into."),
    "indexing": ("thread/block indexing → tile loops",
                 "threadIdx/blockIdx arithmetic becomes loops over tiles; a tile's 128 partitions play the threads."),
    "bounds-guard": ("bounds check → partial-tile mask",
                     "`if (i < n)` becomes a mask (legacy) or a min()-bounded slice on the last partial tile."),
    "barrier": ("__syncthreads → dependency points",
                "NKI has no barrier: the compiler synchronises engines where one consumes another's output."),
    "reduction": ("warp/block reduction → free-axis reduction",
                  "Shuffles and shared-memory trees become one free-axis reduction instruction (or a matmul "
                  "with ones across partitions)."),
    "atomic": ("atomics → accumulation",
               "Atomic adds become PSUM accumulation, an SBUF accumulator or a DMA read-modify-write."),
    "math": ("math intrinsic → activation",
             "expf/rsqrtf/tanhf... become ScalarE activation functions (f(x*scale+bias) in one pass)."),
    "matmul": ("inner product → TensorE matmul",
               "Dot-product loops and wmma/mma become nc_matmul on 128x128 stationary / 128x512 moving tiles."),
    "launch": ("kernel launch → NKI kernel",
               "The <<<grid, block>>> launch becomes the @nki.jit kernel (and its SPMD grid, if any)."),
}


@dataclass(frozen=True)
class LineRange:
    start: int
    end: int

    def to_list(self) -> list[int]:
        return [self.start, self.end]


@dataclass
class AlignmentPair:
    role: str
    cuda: list[LineRange]
    nki: list[LineRange]
    cuda_label: str
    nki_label: str
    note: str
    match: str = "role"  # "name" (matched by name), "role" (by role/order), "unmatched" (one side empty)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return ROLES.get(self.role, (self.role, ""))[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role, "title": self.title, "cuda": [r.to_list() for r in self.cuda],
            "nki": [r.to_list() for r in self.nki], "cuda_label": self.cuda_label, "nki_label": self.nki_label,
            "note": self.note, "match": self.match, "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AlignmentPair":
        return cls(role=d["role"], cuda=[LineRange(a, b) for a, b in d.get("cuda", [])],
                   nki=[LineRange(a, b) for a, b in d.get("nki", [])], cuda_label=d.get("cuda_label", ""),
                   nki_label=d.get("nki_label", ""), note=d.get("note", ""), match=d.get("match", "role"),
                   data=dict(d.get("data", {})))


def ranges(lines: Iterable[int], limit: int = 40) -> list[LineRange]:
    """Sorted, merged ranges of 1-based lines (adjacent lines join)."""
    out: list[LineRange] = []
    for line in sorted(set(n for n in lines if n and n > 0)):
        if out and line <= out[-1].end + 1:
            out[-1] = LineRange(out[-1].start, line)
        else:
            out.append(LineRange(line, line))
    return out[:limit]


def _norm(name: str) -> str:
    name = name.lower()
    name = re.sub(r"^(d_|h_|p_|g_|dev_)", "", name)
    name = re.sub(r"(_ptr|_tensor|_t|_hbm|_dram|_d|_in|_out|_data|_buf)$", "", name)
    return name.replace("_", "")


_SYNONYMS = [
    {"x", "input", "inp", "in", "src", "a", "data", "inputtensor"},
    {"y", "out", "output", "dst", "result", "res", "o", "c"},
    {"w", "weight", "weights", "gamma", "g", "scale"},
    {"b", "bias", "beta"},
    {"q", "query"}, {"k", "key"}, {"v", "value"},
]


def _same_name(a: str, b: str) -> bool:
    na, nb = _norm(a), _norm(b)
    if na == nb:
        return True
    return any(na in group and nb in group for group in _SYNONYMS)


def _names_match(cuda_name: str, tile_name: str | None) -> bool:
    """`s` and `s_psum` / `psum_s`, `acc` and `acc`: the port kept the CUDA variable's name."""
    if not tile_name:
        return False
    a, b = cuda_name.lower(), tile_name.lower()
    return a == b or b.startswith(a + "_") or b.endswith("_" + a)


def _tensor_lines(km: KernelModel, t: Tensor) -> list[int]:
    lines = [t.line]
    for op in km.ops:
        touched = [a.tensor for a in op.reads + op.writes] + list(op.inputs)
        if any(km.root(x).id == t.id for x in touched) or op.result == t.id:
            lines.append(op.line)
    return lines


def _hbm_tensors(km: KernelModel) -> tuple[list[Tensor], list[Tensor]]:
    """(inputs, outputs) HBM tensors of the NKI kernel, in declaration order."""
    returned = {tid for _, tids in km.returns for tid in tids}
    written = {km.root(a.tensor).id for op in km.ops for a in op.writes}
    inputs: list[Tensor] = []
    outputs: list[Tensor] = []
    for p in km.params:
        if p.tid is None or p.name in km.scalar_params:
            continue
        t = km.tensors[p.tid]
        (outputs if p.role == "output" or (p.role is None and t.id in written and t.id not in returned
                                           and not km.returns) else inputs).append(t)
    for t in km.tensors.values():
        if t.origin == "alloc" and t.is_hbm and (t.id in returned or t.id in written):
            outputs.append(t)
    return inputs, outputs


def _pair_memory(ck: CudaKernel, km: KernelModel) -> tuple[list[AlignmentPair], dict[str, Tensor]]:
    pairs: list[AlignmentPair] = []
    mapping: dict[str, Tensor] = {}
    nki_in, nki_out = _hbm_tensors(km)
    written = {a.array for a in ck.accesses if a.write}
    cuda_in = [p for p in ck.pointer_params if p.name not in written]
    cuda_out = [p for p in ck.pointer_params if p.name in written]
    used: set[int] = set()
    for group_c, group_n in ((cuda_in, nki_in), (cuda_out, nki_out)):
        for p in group_c:
            match = next((t for t in group_n if t.id not in used and _same_name(p.name, t.label())), None)
            how = "name"
            if match is None:
                rest = [t for t in group_n if t.id not in used]
                remaining_c = [q for q in group_c if q.name not in mapping]
                if rest and len(rest) == len(remaining_c):
                    match = rest[remaining_c.index(p)]
                    how = "role"
            if match is not None:
                used.add(match.id)
                mapping[p.name] = match
            cuda_lines = [p.line] + [a.line for a in ck.accesses if a.array == p.name]
            nki_lines = _tensor_lines(km, match) if match is not None else []
            pairs.append(AlignmentPair(
                role="global-memory", cuda=ranges(cuda_lines), nki=ranges(nki_lines),
                cuda_label=f"{p.name} ({'written' if p.name in written else 'read'})",
                nki_label=f"{match.label()} (HBM)" if match is not None else "no HBM tensor found",
                note=ROLES["global-memory"][1], match=how if match is not None else "unmatched",
            ))
    for t in nki_in + nki_out:
        if t.id not in used:
            pairs.append(AlignmentPair(role="global-memory", cuda=[], nki=ranges(_tensor_lines(km, t)),
                                       cuda_label="no CUDA pointer matched", nki_label=f"{t.label()} (HBM)",
                                       note=ROLES["global-memory"][1], match="unmatched"))
    return pairs, mapping


def _sbuf_tiles(km: KernelModel) -> list[Tensor]:
    return [t for t in km.tensors.values() if t.buffer == "sbuf" and t.origin in ("alloc", "load")]


def _pair_shared(ck: CudaKernel, km: KernelModel, mapping: dict[str, Tensor]) -> list[AlignmentPair]:
    pairs: list[AlignmentPair] = []
    tiles = _sbuf_tiles(km)
    loaded_from: dict[int, set[int]] = {}
    for op in km.ops:
        src = [km.root(a.tensor) for a in op.reads if km.root(a.tensor).is_hbm]
        for w in op.writes:
            dst = km.root(w.tensor)
            if dst.on_chip:
                loaded_from.setdefault(dst.id, set()).update(s.id for s in src)
        if op.result is not None and op.result in km.tensors:
            loaded_from.setdefault(op.result, set()).update(s.id for s in src)
    used: set[int] = set()
    staging: list[Any] = []  # buffers that hold data from global memory, matched or not
    unmatched: list[Any] = []
    for buf in ck.shared:
        dims = "x".join(str(d) if d is not None else "?" for d in buf.dims)
        label = f"__shared__ {buf.type} {buf.name}[{dims}]"
        same_name = [t for t in tiles if t.name == buf.name]
        if not buf.filled_from and same_name:  # e.g. a scan's carry, kept in an SBUF tile of the same name
            used.update(t.id for t in same_name)
            pairs.append(AlignmentPair(
                role="shared-memory", cuda=ranges([buf.line] + buf.lines),
                nki=ranges(n for t in same_name for n in _tensor_lines(km, t)), cuda_label=label,
                nki_label=", ".join(f"{t.label()} {list(t.known_shape() or [])}" for t in same_name),
                note=ROLES["shared-memory"][1], match="name",
            ))
            continue
        if not buf.filled_from:
            # Filled from registers (warp partials of a block reduction, flags): a workspace, not staged
            # input data, so no SBUF tile of the port stands for it.
            pairs.append(AlignmentPair(
                role="shared-memory", cuda=ranges([buf.line] + buf.lines), nki=[], cuda_label=label,
                nki_label="none needed (scratch space, not data from global memory)",
                note=("A workspace filled from registers, e.g. warp partial results of a block reduction. NKI "
                      "engines reduce a whole free axis in one instruction, so the port needs no counterpart."),
                match="unmatched",
            ))
            continue
        staging.append(buf)
        sources = {mapping[p].id for p in buf.filled_from if p in mapping}
        matched = [t for t in tiles if loaded_from.get(t.id, set()) & sources]
        used.update(t.id for t in matched)
        if not matched:
            unmatched.append(buf)
            continue
        nki_lines = [n for t in matched for n in _tensor_lines(km, t)]
        pairs.append(AlignmentPair(
            role="shared-memory", cuda=ranges([buf.line] + buf.lines), nki=ranges(nki_lines), cuda_label=label,
            nki_label=", ".join(f"{t.label()} {list(t.known_shape() or [])}" for t in matched),
            note=ROLES["shared-memory"][1], match="name",
        ))
    rest = [t for t in tiles if t.id not in used and loaded_from.get(t.id)]
    if rest and unmatched:
        pairs.append(AlignmentPair(
            role="shared-memory", cuda=ranges(line for b in unmatched for line in [b.line] + b.lines),
            nki=ranges(n for t in rest for n in _tensor_lines(km, t)),
            cuda_label=", ".join(b.name for b in unmatched),
            nki_label=", ".join(t.label() for t in rest), note=ROLES["shared-memory"][1], match="role",
        ))
    elif unmatched:
        for buf in unmatched:
            dims = "x".join(str(d) if d is not None else "?" for d in buf.dims)
            pairs.append(AlignmentPair(
                role="shared-memory", cuda=ranges([buf.line] + buf.lines), nki=[],
                cuda_label=f"__shared__ {buf.type} {buf.name}[{dims}]", nki_label="no SBUF tile matched",
                note=ROLES["shared-memory"][1], match="unmatched",
            ))
    elif rest and not staging:
        pairs.append(AlignmentPair(
            role="shared-memory", cuda=[], nki=ranges(n for t in rest for n in _tensor_lines(km, t)),
            cuda_label="registers (no __shared__ staging)", nki_label=", ".join(t.label() for t in rest),
            note="The CUDA kernel stages data in registers; the port stages it in SBUF tiles.", match="unmatched",
        ))
    return pairs


def _reduction_ops(km: KernelModel) -> list[Op]:
    kinds = {"reduce", "activation_reduce", "tensor_scalar_reduce", "bn_stats", "bn_aggr", "partition_reduce",
             "composite"}
    return [op for op in km.ops if op.kind in kinds or (op.kind == "activation" and "reduce_res" in op.kwargs)]


def _dependency_points(km: KernelModel) -> list[int]:
    producer_engine: dict[int, str] = {}
    points: list[int] = []
    for op in km.ops:
        if op.engine is None:
            continue
        for tid in op.inputs:
            root = km.root(tid).id
            eng = producer_engine.get(root)
            if eng is not None and eng != op.engine:
                points.append(op.line)
        for a in op.writes:
            producer_engine[km.root(a.tensor).id] = op.engine
        if op.result is not None:
            producer_engine[op.result] = op.engine
    return points


def _guard_lines(km: KernelModel) -> list[int]:
    lines = []
    for op in km.ops:
        if isinstance(op.mask, Mask):
            lines.append(op.line)
        elif any(d.bounded for a in op.reads + op.writes for d in a.dims):
            lines.append(op.line)
    return lines


def align_kernel(ck: CudaKernel, km: KernelModel) -> list[AlignmentPair]:
    pairs, mapping = _pair_memory(ck, km)
    pairs += _pair_shared(ck, km, mapping)

    matmuls = [op for op in km.ops if op.kind == "matmul" and "is_transpose" not in op.kwargs]
    psum = [t for t in km.tensors.values() if t.buffer == "psum" and t.origin == "alloc"]
    # PSUM tiles a matmul returns (`s_psum = nisa.nc_matmul(...)`) hold a product too.
    psum += [km.tensors[op.result] for op in matmuls if op.result in km.tensors
             and km.tensors[op.result].buffer == "psum" and km.tensors[op.result] not in psum]
    dot_lines = {c.line for c in ck.matmuls}
    dot_accs = [acc for acc in ck.accumulators if set(acc.updates) & dot_lines]
    by_name = {acc.name: [t for t in psum if _names_match(acc.name, t.name)] for acc in dot_accs}
    claimed = {t.id for ts in by_name.values() for t in ts}
    for acc in dot_accs:
        tiles = by_name[acc.name] or [t for t in psum if t.id not in claimed]
        writers = [op.line for op in matmuls if op.result in {t.id for t in tiles}
                   or {km.root(a.tensor).id for a in op.writes} & {t.id for t in tiles}]
        nki_lines = [n for t in tiles for n in _tensor_lines(km, t)] + (writers if tiles else
                                                                        [op.line for op in matmuls])
        label = ", ".join(t.label() for t in tiles) or "matmul results"
        pairs.append(AlignmentPair(role="accumulator", cuda=ranges([acc.line] + acc.updates),
                                   nki=ranges(nki_lines), cuda_label=f"{acc.type} {acc.name}",
                                   nki_label=f"PSUM {label}", note=ROLES["accumulator"][1],
                                   match="name" if by_name[acc.name] else "role" if nki_lines else "unmatched"))
    reductions = _reduction_ops(km)
    cuda_red_lines = [s.line for s in ck.shuffles] + [
        n for acc in ck.accumulators if not set(acc.updates) & dot_lines for n in [acc.line] + acc.updates] + [
        lp.line for lp in ck.loops if lp.stride == "halving"]
    if cuda_red_lines or reductions:
        pairs.append(AlignmentPair(
            role="reduction", cuda=ranges(cuda_red_lines), nki=ranges(op.line for op in reductions),
            cuda_label=", ".join(sorted({s.name for s in ck.shuffles} | {a.name for a in ck.accumulators
                                                                        if not set(a.updates) & dot_lines}))
            or "reduction", nki_label=", ".join(sorted({op.api for op in reductions})) or "no reduction instruction",
            note=ROLES["reduction"][1], match="role" if cuda_red_lines and reductions else "unmatched"))
    if ck.matmuls or matmuls:
        pairs.append(AlignmentPair(
            role="matmul", cuda=ranges(c.line for c in ck.matmuls), nki=ranges(op.line for op in matmuls),
            cuda_label=", ".join(sorted({c.name for c in ck.matmuls})) or "none",
            nki_label=", ".join(sorted({op.api for op in matmuls})) or "none", note=ROLES["matmul"][1],
            match="role" if ck.matmuls and matmuls else "unmatched"))

    tile_loops = sorted({lid for op in km.ops for a in op.reads + op.writes for lid in km.loops_of(a.deps)})
    idx_lines = [u.line for u in ck.index_uses] + list(ck.index_vars.values())
    idx_lines += [lp.line for lp in ck.loops if lp.stride in ("grid-stride", "block-stride")]
    nki_idx = [km.loops[lid].line for lid in tile_loops] + km.spmd_lines
    if idx_lines or nki_idx:
        pairs.append(AlignmentPair(
            role="indexing", cuda=ranges(idx_lines), nki=ranges(nki_idx),
            cuda_label=", ".join(sorted({u.builtin for u in ck.index_uses})) or "thread indexing",
            nki_label=", ".join(f"{km.loops[lid].var} ({km.loops[lid].kind})" for lid in tile_loops) or "no tile loop",
            note=ROLES["indexing"][1], match="role" if idx_lines and nki_idx else "unmatched"))
    guards = _guard_lines(km)
    if ck.guards or guards:
        pairs.append(AlignmentPair(
            role="bounds-guard", cuda=ranges(g.line for g in ck.guards), nki=ranges(guards),
            cuda_label="; ".join(g.text for g in ck.guards[:3]) or "no bounds check",
            nki_label="masks / min()-bounded slices" if guards else "no partial-tile guard in the port",
            note=ROLES["bounds-guard"][1], match="role" if ck.guards and guards else "unmatched"))
    deps = _dependency_points(km)
    if ck.syncs:
        pairs.append(AlignmentPair(
            role="barrier", cuda=ranges(s.line for s in ck.syncs), nki=ranges(deps, limit=20),
            cuda_label=f"{len(ck.syncs)} barrier(s)", nki_label=f"{len(set(deps))} cross-engine dependency point(s)",
            note=ROLES["barrier"][1], match="role" if deps else "unmatched"))
    if ck.atomics:
        accs = [op.line for op in km.ops if op.accumulate or op.kind == "dma_rmw"]
        pairs.append(AlignmentPair(
            role="atomic", cuda=ranges(a.line for a in ck.atomics), nki=ranges(accs),
            cuda_label=", ".join(sorted({a.name for a in ck.atomics})), nki_label="accumulation" if accs else "none",
            note=ROLES["atomic"][1], match="role" if accs else "unmatched"))
    by_fn: dict[str, list[int]] = {}
    for m in ck.math:
        if m.name in ("cast", "max", "min", "fma", "abs"):
            continue
        by_fn.setdefault(m.name, []).append(m.line)
    for fn, lines in sorted(by_fn.items()):
        nki_ops = [op for op in km.ops if op.fn == fn or (fn in ("divide", "reciprocal") and op.kind == "reciprocal")
                   or (fn == "divide" and op.alu == "divide")]
        pairs.append(AlignmentPair(
            role="math", cuda=ranges(lines), nki=ranges(op.line for op in nki_ops), cuda_label=fn,
            nki_label=", ".join(sorted({op.api for op in nki_ops})) or f"no {fn} in the port",
            note=ROLES["math"][1], match="name" if nki_ops else "unmatched"))
    pairs.append(AlignmentPair(
        role="launch", cuda=ranges([ck.line]), nki=ranges([km.line] + km.spmd_lines),
        cuda_label=f"__global__ {ck.name}" + (f" __launch_bounds__({', '.join(str(b) for b in ck.launch_bounds)})"
                                               if ck.launch_bounds else ""),
        nki_label=f"{km.name}", note=ROLES["launch"][1], match="role"))
    return pairs


def align(cuda: CudaModel | None, nki: NkiModel) -> list[AlignmentPair]:
    """Role pairs between the CUDA kernels and the NKI kernels (first CUDA kernel with each NKI kernel)."""
    if cuda is None or not cuda.kernels or not nki.kernels:
        return []
    out: list[AlignmentPair] = []
    for i, km in enumerate(nki.kernels):
        ck = _best_cuda_kernel(cuda, km, i)
        merged = ck.merged(cuda.device_functions)
        for pair in align_kernel(merged, km):
            pair.data.setdefault("cuda_kernel", ck.name)
            pair.data.setdefault("nki_kernel", km.name)
            out.append(pair)
    return out


def _best_cuda_kernel(cuda: CudaModel, km: KernelModel, index: int) -> CudaKernel:
    for ck in cuda.kernels:
        if _norm(ck.name).replace("kernel", "") == _norm(km.name).replace("kernel", "").replace("nki", ""):
            return ck
    return cuda.kernels[min(index, len(cuda.kernels) - 1)]
