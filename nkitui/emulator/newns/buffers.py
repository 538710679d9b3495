"""Memory buffers of the `nki` namespace: `nl.sbuf`, `nl.psum`, `nl.hbm` (= `nl.private_hbm`),
`nl.shared_hbm`. In NKI 0.3+ buffers are objects only (no strings)."""

from __future__ import annotations

from nkitui.emulator.errors import KernelArgumentError
from nkitui.emulator.memory import Storage


class MemoryRegion:
    """A buffer a tensor lives in. `nl.hbm` and `nl.private_hbm` are the same region."""

    __slots__ = ("name", "memory", "kind")

    def __init__(self, name: str, memory: str, kind: str = "") -> None:
        self.name = name
        self.memory = memory  # "sbuf" | "psum" | "hbm"
        self.kind = kind  # hbm: "private" | "shared"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MemoryRegion) and (self.memory, self.kind) == (other.memory, other.kind)

    def __hash__(self) -> int:
        return hash((self.memory, self.kind))

    def __repr__(self) -> str:
        return f"nl.{self.name}"

    __str__ = __repr__


sbuf = MemoryRegion("sbuf", "sbuf")
psum = MemoryRegion("psum", "psum")
private_hbm = MemoryRegion("private_hbm", "hbm", "private")
hbm = private_hbm
shared_hbm = MemoryRegion("shared_hbm", "hbm", "shared")


def resolve(buffer: object) -> MemoryRegion:
    if buffer is None:
        return sbuf
    if isinstance(buffer, MemoryRegion):
        return buffer
    raise KernelArgumentError(f"unknown buffer {buffer!r}: NKI 0.3+ takes buffer objects only: nl.sbuf, nl.psum, "
                              "nl.hbm, nl.private_hbm or nl.shared_hbm")


def of_storage(st: Storage) -> MemoryRegion:
    """The buffer a storage lives in (kernel inputs and outputs are shared HBM)."""
    if st.memory == "sbuf":
        return sbuf
    if st.memory == "psum":
        return psum
    return private_hbm if st.kind == "private" else shared_hbm
