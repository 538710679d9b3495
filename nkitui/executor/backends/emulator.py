"""The `emulator` backend: nkitui's own numpy emulator of NKI runs the kernel; the cost model gives
timing and utilisation (labelled estimated).

Every launch is watched for device provenance (nkitui.emulator.provenance): an output counts only
when it is an HBM tensor the kernel's launch produced and recorded instructions wrote, with its
bytes as the launch left them. A wrapper that runs the kernel and returns numpy's answer, an entry
name rebound to such a wrapper, or `numpy.add` on the inputs produce arrays without that origin.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import numpy as np

from nkitui.executor.backends.base import Backend, BackendRun, launch_target


class EmulatorBackend(Backend):
    name = "emulator"
    supports_precise_switch = True

    def versions(self) -> dict[str, Any]:
        from nkitui import __version__

        return {"emulator": f"nkitui {__version__}"}

    def preload(self) -> None:
        from nkitui import emulator

        # force: the user chose the emulator even where the real Neuron packages are importable.
        emulator.install(force=True)

    def wrap(self, kernel: Any) -> Callable[..., Any]:
        return launch_target(kernel, self.task)

    @contextlib.contextmanager
    def context(self, precise: bool, trace: bool) -> Iterator[Any]:
        from nkitui import emulator

        with emulator.options(target=self.target, precise=precise):
            if trace:
                with emulator.trace() as recorder:
                    yield recorder
            else:
                yield None

    def run(self, args: list[np.ndarray], *, precise: bool = True, trace: bool = False) -> BackendRun:
        from nkitui.emulator import provenance

        with provenance.collect() as seen, self.context(precise, trace) as recorder:
            outputs, elapsed = self._call(self._launch, args)
        return BackendRun(outputs=outputs, elapsed_s=elapsed, trace=recorder if trace else None,
                          provenance={name: _origin(seen, arr) for name, arr in outputs.items()})


    def expect_inputs(self, arrays: list[np.ndarray]) -> None:
        from nkitui.emulator import provenance

        for collector in provenance.active():
            collector.expect(arrays)


def _origin(seen: Any, array: np.ndarray) -> dict[str, Any]:
    origin = seen.origin(array)
    if origin is not None and not origin.harness_inputs:
        return {"device": False, "why": f"the emulated kernel {origin.kernel} wrote it, but that launch did not receive "
                                        "the harness's input arrays (host code launched it on arrays of its own, "
                                        "e.g. inputs it computed or changed)"}
    if origin is not None:
        return {"device": True, **origin.to_dict()}
    changed = seen.changed(array)
    if changed is not None:
        return {"device": False, "why": f"the emulated kernel {changed.kernel} wrote it, then host code changed it"}
    return {"device": False, "why": "no emulated launch produced it: it was made by host code (e.g. numpy) and returned"}
