"""The `simulator` backend: the AWS Neuron SDK's CPU simulator runs the kernel, where the SDK is
installed but no device is present.

  new namespace:     nki.simulate(kernel)(*arrays)               (NKI_PRECISE_FP=0|1 for precision)
  legacy namespace:  neuronxcc.nki.simulate_kernel(kernel, *arrays)

The SDK simulator models no timing [SIM], so for the profile phase the kernel's process runs the
kernel once more on nkitui's emulator (`emulator_trace`) and hands the instruction trace to the
evaluator, whose cost model estimates from it (labelled estimated). That needs the emulator to take
over the `nki` modules (install(force=True)), which is why it happens last.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, cast

import numpy as np

from nkitui.executor.backends.base import Backend, get_function, launch_target, load_module
from nkitui.executor.backends.detect import Probe
from nkitui.executor.backends.sdk import env_override, sdk_module, sdk_namespace, target_env
from nkitui.task.model import Task


class SimulatorBackend(Backend):
    name = "simulator"
    allows_subprocess = True  # the SDK may call its compiler front end

    def __init__(self, task: Task, target: str, reason: str = "", probe: Probe | None = None) -> None:
        super().__init__(task, target, reason)
        self.probe = probe or Probe()
        self.namespace = sdk_namespace(task.kernel.namespace if task.kernel else None, self.probe)
        self.supports_precise_switch = self.namespace == "new"  # legacy simulate_kernel has no switch
        self.sdk: Any = None

    def versions(self) -> dict[str, Any]:
        pkg = self.probe.new if self.namespace == "new" else self.probe.legacy
        return {"sdk": {pkg.module: pkg.version, "fake": pkg.fake}}

    def preload(self) -> None:
        self.sdk = sdk_module(self.namespace, self.probe)

    def prepare(self) -> None:
        self.ensure_preloaded()
        with env_override(NEURON_PLATFORM_TARGET_OVERRIDE=target_env(self.target)):
            super().prepare()

    def wrap(self, kernel: Any) -> Callable[..., Any]:
        launch = launch_target(kernel, self.task)
        if self.namespace == "new":
            return cast("Callable[..., Any]", self.sdk.simulate(launch))  # the SDK is untyped
        sdk = self.sdk

        def simulate(*args: Any, **kwargs: Any) -> Any:
            return sdk.simulate_kernel(launch, *args, **kwargs)

        return simulate

    @contextlib.contextmanager
    def context(self, precise: bool, trace: bool) -> Iterator[None]:
        with env_override(NKI_PRECISE_FP="1" if precise else "0",
                          NEURON_PLATFORM_TARGET_OVERRIDE=target_env(self.target)):
            yield None

    def emulator_trace(self, args: list[np.ndarray]) -> Any:
        from nkitui import emulator

        entry = self.task.kernel
        assert entry is not None
        emulator.install(force=True)
        module = load_module(entry.path, f"_nkitui_emulated_{entry.path.stem}")
        kernel = launch_target(get_function(module, entry.name, entry.path.name), self.task)
        with emulator.options(target=self.target), emulator.trace() as tr:
            self._call(kernel, args)
        return tr
