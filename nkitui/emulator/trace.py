"""The emulator's instruction trace: the contract between emulator/ and perf/.

Every instruction the emulator executes is recorded as one `Instruction` (engine, opcode, shapes,
dtypes, bytes moved, buffers touched, kernel source line). perf/ turns a `Trace` into estimated
engine busy time; the UI shows hot source lines from it. Records are plain slotted dataclasses so
a 100k-instruction trace stays cheap to build and to walk.

Conventions
-----------
* engine: one of ENGINES. DMA transfers use engine "dma"; `meta["queue"]` may name the issuing
  queue/engine (e.g. "sync", "scalar", "gpsimd").
* partitions / free: P active partitions and N elements per partition of the *main* input (the
  quantity the NKI cost formulas call N). For a matmul, `free` is the moving free size and
  `meta` carries K, M, N.
* reads / writes: `Access` boxes used for dependency tracking (read-after-write, write-after-read,
  write-after-write). `storage` identifies one allocation (stable within a trace). A box bounds
  the elements touched (strided or gathered accesses give their bounding box), so two boxes that
  do not overlap never share an element; boxes that overlap may still be disjoint.
  - On-chip (sbuf / psum): p0/p1 the partition range, b0/b1 the byte range inside each partition.
  - HBM: the tensor seen as a 2-D matrix of rows = its leading dimensions flattened (row-major)
    and columns = its last dimension; p0/p1 the row range, b0/b1 the byte range inside a row
    (last-dim index x itemsize). A rank-1 tensor is one row (p0, p1 = 0, 1; flat bytes), so
    disjoint column tiles of one row band of a matrix do not overlap. (Trace version 2; version-1
    traces used (0, 1) and a flat byte range for every HBM tensor.)
* hbm_read / hbm_write: bytes that crossed the HBM interface for this instruction (DMA only).
* flops: model FLOPs (2*M*K*N for a matmul, 0 for a transpose) so MFU/HFU can be derived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma", "sync")
MEMORIES = ("hbm", "sbuf", "psum", "register", "none")
# 2: HBM accesses are row x byte boxes (see Conventions). Version-1 traces (flat HBM byte ranges)
# still load; their boxes are consistent among themselves, only coarser.
TRACE_VERSION = 2


class Access(NamedTuple):
    """One rectangular region an instruction reads or writes (immutable, hashable; a NamedTuple
    because the emulator creates two or three per instruction and tuples build fastest)."""

    storage: int  # allocation id, unique within the trace
    memory: str  # one of MEMORIES
    p0: int  # first partition (on-chip) or row (HBM: leading dims flattened), inclusive
    p1: int  # last partition / row, exclusive
    b0: int  # first byte (inclusive) inside a partition (on-chip) or inside a row (HBM)
    b1: int  # last byte (exclusive)

    def overlaps(self, other: "Access") -> bool:
        return (
            self.storage == other.storage
            and self.p0 < other.p1
            and other.p0 < self.p1
            and self.b0 < other.b1
            and other.b0 < self.b1
        )


@dataclass(slots=True)
class Instruction:
    seq: int  # program order, 0-based, unique within a trace
    engine: str  # one of ENGINES
    opcode: str  # ISA-level name: "nc_matmul", "activation", "tensor_tensor", "dma_copy", ...
    partitions: int  # P
    free: int  # N, elements per partition of the main input
    in_dtypes: tuple[str, ...]  # numpy-style names: "float32", "bfloat16", "float8_e4m3", ...
    out_dtype: str
    in_mems: tuple[str, ...]  # memory of each input: "hbm" | "sbuf" | "psum"
    out_mem: str
    bytes_read: int = 0
    bytes_written: int = 0
    hbm_read: int = 0
    hbm_write: int = 0
    flops: int = 0
    reads: tuple[Access, ...] = ()
    writes: tuple[Access, ...] = ()
    file: str = ""  # kernel source file (basename or task-relative path)
    line: int = 0  # 1-based line in `file`
    core: int = 0  # logical core (LNC) index
    program: tuple[int, ...] = ()  # SPMD program id for grid launches
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "?"

    def to_row(self) -> list[Any]:
        """Compact JSON-able row (see Trace.to_json)."""
        return [
            self.seq, self.engine, self.opcode, self.partitions, self.free, list(self.in_dtypes),
            self.out_dtype, list(self.in_mems), self.out_mem, self.bytes_read, self.bytes_written,
            self.hbm_read, self.hbm_write, self.flops,
            [[a.storage, a.memory, a.p0, a.p1, a.b0, a.b1] for a in self.reads],
            [[a.storage, a.memory, a.p0, a.p1, a.b0, a.b1] for a in self.writes],
            self.file, self.line, self.core, list(self.program), self.meta,
        ]

    @classmethod
    def from_row(cls, r: list[Any]) -> "Instruction":
        return cls(
            seq=r[0], engine=r[1], opcode=r[2], partitions=r[3], free=r[4], in_dtypes=tuple(r[5]),
            out_dtype=r[6], in_mems=tuple(r[7]), out_mem=r[8], bytes_read=r[9], bytes_written=r[10],
            hbm_read=r[11], hbm_write=r[12], flops=r[13],
            reads=tuple(Access(*a) for a in r[14]), writes=tuple(Access(*a) for a in r[15]),
            file=r[16], line=r[17], core=r[18], program=tuple(r[19]), meta=dict(r[20]),
        )


class StorageRange(NamedTuple):
    """Where a trace uses one storage: the first and last instruction that access it (indices into
    `Trace.instructions`) and how far its accesses reach (`rows`: the largest p1, partitions on chip or rows of
    HBM; `extent`: the largest b1, bytes per partition or within a row). The cost model's SBUF allocator frees
    a tile after its last access and sizes it by its extent."""

    memory: str
    first: int
    last: int
    rows: int
    extent: int


@dataclass(slots=True)
class StorageInfo:
    storage: int
    name: str
    memory: str
    shape: tuple[int, ...]
    dtype: str


@dataclass
class Trace:
    """Instructions of one or more kernel runs, in program order."""

    target: str = "trn2"  # "trn1" | "trn2" | "trn3"
    kernel: str = ""
    instructions: list[Instruction] = field(default_factory=list)
    storages: dict[int, StorageInfo] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # storage_ranges() of the instructions as they were: (list, count, last instruction, ranges)
    _ranges: tuple[list[Instruction], int, Instruction | None, dict[int, StorageRange]] | None = field(
        default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def append(self, ins: Instruction) -> None:
        self.instructions.append(ins)

    def storage_ranges(self) -> dict[int, StorageRange]:
        """Storage id -> its `StorageRange`, computed in one pass on first use and kept, so that a trace costed
        more than once (on several targets, or by the calibration's fits) is walked once; computed again when
        instructions were added or replaced since."""
        instrs = self.instructions
        cached = self._ranges
        if (cached is not None and cached[0] is instrs and cached[1] == len(instrs)
                and (not instrs or cached[2] is instrs[-1])):
            return cached[3]
        ranges = storage_ranges(instrs)
        self._ranges = (instrs, len(instrs), instrs[-1] if instrs else None, ranges)
        return ranges

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TRACE_VERSION,
            "target": self.target,
            "kernel": self.kernel,
            "meta": self.meta,
            "storages": [[s.storage, s.name, s.memory, list(s.shape), s.dtype] for s in self.storages.values()],
            "instructions": [i.to_row() for i in self.instructions],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Trace":
        if d.get("version") not in (1, TRACE_VERSION):
            raise ValueError(f"unsupported trace version {d.get('version')!r} (expected 1 or {TRACE_VERSION})")
        t = cls(target=d["target"], kernel=d.get("kernel", ""), meta=dict(d.get("meta", {})))
        for s in d.get("storages", []):
            t.storages[s[0]] = StorageInfo(s[0], s[1], s[2], tuple(s[3]), s[4])
        t.instructions = [Instruction.from_row(r) for r in d["instructions"]]
        return t


def storage_ranges(instructions: list[Instruction]) -> dict[int, StorageRange]:
    """`StorageRange` of every storage the instructions access, in one pass."""
    acc: dict[int, list[Any]] = {}  # [memory, first, last, rows, extent], a StorageRange once complete
    get = acc.get
    for i, ins in enumerate(instructions):
        for accesses in (ins.reads, ins.writes):
            for a in accesses:
                r = get(a[0])
                if r is None:
                    acc[a[0]] = [a[1], i, i, a[3], a[5]]
                else:
                    r[2] = i
                    if a[3] > r[3]:
                        r[3] = a[3]
                    if a[5] > r[4]:
                        r[4] = a[5]
    make = StorageRange._make
    return {sid: make(r) for sid, r in acc.items()}
