"""The `emulator` backend: nkitui's own numpy emulator of NKI runs the kernel; the cost model gives
timing and utilisation (labelled estimated)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from nkitui.executor.backends.base import Backend, launch_target


class EmulatorBackend(Backend):
    name = "emulator"
    supports_precise_switch = True

    def versions(self) -> dict[str, Any]:
        from nkitui import __version__

        return {"emulator": f"nkitui {__version__}"}

    def prepare(self) -> None:
        from nkitui import emulator

        # force: the user chose the emulator even where the real Neuron packages are importable.
        emulator.install(force=True)
        super().prepare()

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
