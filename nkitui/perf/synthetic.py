"""Build instruction traces by hand, in the emulator's trace format.

For tests, benchmarks and what-if experiments that need a trace without running a kernel
(e.g. a 100k-instruction trace for the speed benchmark, or a kernel shape the emulator would take
long to run). Accesses follow the contract of nkitui.emulator.trace: on-chip regions give a
partition range and a byte range inside each partition; HBM regions a row range (leading dims
flattened) and a byte range inside a row (the last dim), with the contiguous run length in
`meta["contiguous_bytes"]` of DMA instructions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from nkitui.emulator.trace import Access, Instruction, StorageInfo, Trace
from nkitui.perf.hardware import itemsize


@dataclass(frozen=True)
class Tensor:
    storage: int
    name: str
    memory: str  # "hbm" | "sbuf" | "psum"
    shape: tuple[int, ...]
    dtype: str

    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    def region(self, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> "Region":
        """A rectangular region of the tensor viewed as 2-D [shape[0], prod(shape[1:])]."""
        nrows = self.shape[0]
        ncols = math.prod(self.shape[1:]) if len(self.shape) > 1 else 1
        r0, r1 = rows if rows is not None else (0, nrows)
        c0, c1 = cols if cols is not None else (0, ncols)
        if not (0 <= r0 < r1 <= nrows and 0 <= c0 < c1 <= ncols):
            raise ValueError(f"region rows {r0}:{r1}, cols {c0}:{c1} outside {self.name}{list(self.shape)}")
        return Region(self, r0, r1, c0, c1)

    def all(self) -> "Region":
        return self.region()


@dataclass(frozen=True)
class Region:
    tensor: Tensor
    r0: int
    r1: int
    c0: int
    c1: int

    @property
    def rows(self) -> int:
        return self.r1 - self.r0

    @property
    def cols(self) -> int:
        return self.c1 - self.c0

    @property
    def nbytes(self) -> int:
        return self.rows * self.cols * self.tensor.itemsize

    @property
    def memory(self) -> str:
        return self.tensor.memory

    def access(self) -> Access:
        t = self.tensor
        size = t.itemsize
        if t.memory == "hbm":
            return self._hbm_access()
        return Access(t.storage, t.memory, self.r0, self.r1, self.c0 * size, self.c1 * size)

    def _hbm_access(self) -> Access:
        """The trace contract's HBM box: rows = leading dims flattened, bytes within the last dim."""
        t = self.tensor
        size = t.itemsize
        if len(t.shape) <= 1:  # one row: a flat byte range
            return Access(t.storage, "hbm", 0, 1, (self.r0 + self.c0) * size, (self.r1 - 1 + self.c1) * size)
        if len(t.shape) == 2:
            return Access(t.storage, "hbm", self.r0, self.r1, self.c0 * size, self.c1 * size)
        # this region's columns span shape[1:]; re-express its bounding box in rows of the last dim
        row_len = t.shape[-1]
        ncols = math.prod(t.shape[1:])
        first = self.r0 * ncols + self.c0
        last = (self.r1 - 1) * ncols + self.c1 - 1
        if self.c0 // row_len == (self.c1 - 1) // row_len:
            c0, c1 = self.c0 % row_len, (self.c1 - 1) % row_len + 1
        else:
            c0, c1 = 0, row_len
        return Access(t.storage, "hbm", first // row_len, last // row_len + 1, c0 * size, c1 * size)


class TraceBuilder:
    """Appends instructions to a `Trace` with consistent storages, accesses and byte counts."""

    def __init__(self, target: str = "trn2", kernel: str = "synthetic", file: str = "kernel.py") -> None:
        self.trace = Trace(target=target, kernel=kernel)
        self.file = file
        self._next_storage = 1

    # ---- allocation ----
    def tensor(self, name: str, memory: str, shape: tuple[int, ...], dtype: str) -> Tensor:
        if memory not in ("hbm", "sbuf", "psum"):
            raise ValueError(f"memory must be hbm, sbuf or psum, got {memory!r}")
        if memory in ("sbuf", "psum") and shape[0] > 128:
            raise ValueError(f"{name}: partition dimension {shape[0]} exceeds 128")
        t = Tensor(self._next_storage, name, memory, tuple(shape), dtype)
        self.trace.storages[t.storage] = StorageInfo(t.storage, name, memory, tuple(shape), dtype)
        self._next_storage += 1
        return t

    def hbm(self, name: str, shape: tuple[int, ...], dtype: str) -> Tensor:
        return self.tensor(name, "hbm", shape, dtype)

    def sbuf(self, name: str, shape: tuple[int, ...], dtype: str) -> Tensor:
        return self.tensor(name, "sbuf", shape, dtype)

    def psum(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> Tensor:
        return self.tensor(name, "psum", shape, dtype)

    # ---- instructions ----
    def _append(self, **kw: Any) -> Instruction:
        kw.setdefault("file", self.file)
        ins = Instruction(seq=len(self.trace.instructions), **kw)
        self.trace.instructions.append(ins)
        return ins

    def dma(self, dst: Region, src: Region, line: int = 0, opcode: str = "dma_copy", **meta: Any) -> Instruction:
        if dst.rows * dst.cols != src.rows * src.cols:
            raise ValueError(f"dma: element counts differ ({src.rows}x{src.cols} -> {dst.rows}x{dst.cols})")
        on_chip = dst if dst.memory != "hbm" else src
        hbm_side = src if src.memory == "hbm" else (dst if dst.memory == "hbm" else None)
        nbytes = dst.nbytes
        meta.setdefault("contiguous_bytes", (hbm_side.cols if hbm_side is not None else on_chip.cols)
                        * (hbm_side or on_chip).tensor.itemsize)
        return self._append(
            engine="dma", opcode=opcode, partitions=on_chip.rows if on_chip.memory != "hbm" else 1,
            free=on_chip.cols if on_chip.memory != "hbm" else src.rows * src.cols,
            in_dtypes=(src.tensor.dtype,), out_dtype=dst.tensor.dtype,
            in_mems=(src.memory,), out_mem=dst.memory,
            bytes_read=src.nbytes, bytes_written=nbytes,
            hbm_read=src.nbytes if src.memory == "hbm" else 0,
            hbm_write=nbytes if dst.memory == "hbm" else 0,
            reads=(src.access(),), writes=(dst.access(),), line=line, meta=meta)

    def load(self, dst: Region, src: Region, line: int = 0, **meta: Any) -> Instruction:
        return self.dma(dst, src, line, **meta)

    def store(self, dst: Region, src: Region, line: int = 0, **meta: Any) -> Instruction:
        return self.dma(dst, src, line, **meta)

    def matmul(self, dst: Region, stationary: Region, moving: Region, line: int = 0,
               accumulate: bool = True, **meta: Any) -> Instruction:
        k, m, n = stationary.rows, stationary.cols, moving.cols
        if moving.rows != k:
            raise ValueError(f"matmul: contraction sizes differ (stationary K={k}, moving K={moving.rows})")
        reads = (stationary.access(), moving.access()) + ((dst.access(),) if accumulate else ())
        return self._append(
            engine="tensor", opcode="nc_matmul", partitions=k, free=n,
            in_dtypes=(stationary.tensor.dtype, moving.tensor.dtype), out_dtype=dst.tensor.dtype,
            in_mems=(stationary.memory, moving.memory), out_mem=dst.memory,
            bytes_read=stationary.nbytes + moving.nbytes, bytes_written=dst.nbytes,
            flops=2 * k * m * n, reads=reads, writes=(dst.access(),), line=line,
            meta={"K": k, "M": m, "N": n, **meta})

    def compute(self, engine: str, opcode: str, dst: Region, *srcs: Region, line: int = 0,
                **meta: Any) -> Instruction:
        main = srcs[0] if srcs else dst
        return self._append(
            engine=engine, opcode=opcode, partitions=main.rows, free=main.cols,
            in_dtypes=tuple(s.tensor.dtype for s in srcs), out_dtype=dst.tensor.dtype,
            in_mems=tuple(s.memory for s in srcs), out_mem=dst.memory,
            bytes_read=sum(s.nbytes for s in srcs), bytes_written=dst.nbytes,
            reads=tuple(s.access() for s in srcs), writes=(dst.access(),), line=line, meta=meta)

    def build(self) -> Trace:
        return self.trace
