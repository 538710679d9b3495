"""Which arrays a launch produced on the emulated device, for the executor's host-compute check.

    with provenance.collect() as seen:          # around a call of the task's entry point
        out = entry(a, b)                        # a kernel, or anything that wraps one
    seen.origin(out)                             # DeviceOrigin, or None: not the device's output

While a collector is active every launch notes the arrays it hands back: each HBM tensor the kernel
returned (allocated by the kernel, not an input or a constant, and written by at least one recorded
instruction), and each argument array the kernel wrote through a store/DMA (outputs passed as
arguments). A note holds a digest of the bytes as the launch left them, so an array that the host
changed afterwards (`out[...] = a + b` in a wrapper) no longer counts; an array the emulator never
handed out (`numpy.add(a, b)`) never did.

This is evidence for the honest cases and the naive cheats (wrappers, rebinding the entry name,
numpy on the inputs). Code running in the same process can forge it; docs/executor.md says what
stops that instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from nkitui.emulator.memory import Storage


@dataclass(frozen=True, slots=True)
class DeviceOrigin:
    kernel: str  # the kernel whose launch produced the array
    tensor: str  # the HBM tensor's name, or its shape when unnamed
    kind: str  # "returned" (an HBM tensor the kernel allocated) | "argument" (an output written in place)
    writes: int  # recorded instruction writes into the tensor
    digest: bytes  # of the bytes as the launch left them
    harness_inputs: bool = True  # the launch received exactly the arrays the harness gave (Collector.expect)

    def to_dict(self) -> dict[str, object]:
        return {"kernel": self.kernel, "tensor": self.tensor, "kind": self.kind, "writes": self.writes,
                "harness_inputs": self.harness_inputs}


def digest(array: np.ndarray) -> bytes:
    a = np.ascontiguousarray(array)
    data = a.view(np.uint8).reshape(-1).data if a.size else b""  # .data: the same bytes, as a Buffer
    return hashlib.blake2b(data, digest_size=16).digest()


class Collector:
    def __init__(self) -> None:
        self._notes: list[tuple[weakref.ref[np.ndarray], DeviceOrigin]] = []
        self._inputs: list[object] | None = None

    def expect(self, arrays: Sequence[object]) -> None:
        """The arrays the harness calls the entry point with (its inputs, then any preallocated
        outputs): a launch counts as the harness's only when it received exactly these objects, in
        order, as its array arguments. A wrapper that launches the kernel on arrays of its own
        (`kernel(a + b, ones)`, a copy kernel fed a host result) makes outputs without that origin.
        The harness's inputs sit in write-protected device memory in the kernel's process (nkitui.
        emulator.devmem), so changing them in place is no way around it."""
        self._inputs = list(arrays)

    def received_harness_inputs(self, received: Sequence[object]) -> bool:
        expected = self._inputs
        if expected is None:  # nobody said which (library use): any launch counts
            return True
        return len(received) == len(expected) and all(r is e for r, e in zip(received, expected))

    def note(self, array: np.ndarray, origin: DeviceOrigin) -> None:
        self._notes.append((weakref.ref(array), origin))

    def origin(self, array: object) -> DeviceOrigin | None:
        """Where `array` came from, when a launch handed out this very object and its bytes are
        still the ones the launch left."""
        if not isinstance(array, np.ndarray):
            return None
        for ref, origin in reversed(self._notes):
            if ref() is array:
                return origin if digest(array) == origin.digest else None
        return None

    def changed(self, array: object) -> DeviceOrigin | None:
        """The origin of an array a launch handed out whose bytes changed afterwards (else None)."""
        if not isinstance(array, np.ndarray):
            return None
        for ref, origin in reversed(self._notes):
            if ref() is array:
                return origin if digest(array) != origin.digest else None
        return None


_active: list[Collector] = []


@contextlib.contextmanager
def collect() -> Iterator[Collector]:
    collector = Collector()
    _active.append(collector)
    try:
        yield collector
    finally:
        _active.remove(collector)


def collecting() -> bool:
    return bool(_active)


def active() -> list[Collector]:
    return list(_active)


def note(array: np.ndarray, storage: Storage, kernel: str, kind: str, received: list[object] | None = None) -> None:
    """Called by launches for each array they hand out (only while a collector is active);
    `received`: the launch's array arguments, in order."""
    if not _active or not isinstance(array, np.ndarray):
        return
    root = getattr(storage, "root", None) or storage  # a view's writes may be counted on its root
    writes = max(int(getattr(storage, "version", 0)), int(getattr(root, "version", 0)))
    if writes <= 0 or getattr(root, "kind", "") in ("constant", "input") and kind == "returned":
        return  # never written by an instruction, or not the kernel's own tensor: not device output
    name = storage.name or f"hbm tensor {tuple(storage.shape)}"
    dig = digest(array)
    for collector in _active:
        harness = collector.received_harness_inputs(received if received is not None else [])
        collector.note(array, DeviceOrigin(kernel, name, kind, writes, dig, harness))
