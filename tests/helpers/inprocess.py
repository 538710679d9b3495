"""Task code run in the test process, for numerics tests on our own sample tasks.

nkitui itself never does this: it runs task code only in untrusted child processes. The bundled
sample tasks are our own code, so the numerics tests call their kernel and reference directly.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from nkitui.evaluate.numerics.callables import KernelRunner, ReferenceFn, RunOptions
from nkitui.evaluate.numerics.inputs import from_kernel_layout, to_kernel_layout
from nkitui.executor.backends.base import Backend, get_function, load_module
from nkitui.executor.untrusted.reference import collect_reference_outputs


def kernel_runner(backend: Backend, task: Any) -> KernelRunner:
    def run(inputs: dict[str, np.ndarray], options: RunOptions) -> Mapping[str, np.ndarray]:
        precise = options.precise if backend.supports_precise_switch else True
        args = [np.array(to_kernel_layout(spec, np.asarray(inputs[spec.name])), copy=True) for spec in task.inputs]
        result = backend.run(args, precise=precise)
        return {spec.name: from_kernel_layout(spec, np.asarray(result.outputs[spec.name])) for spec in task.outputs}

    return run


def load_reference(task: Any) -> ReferenceFn:
    ref = task.sources.reference
    module = load_module(ref.path, f"_nkitui_reference_{ref.path.stem}")
    fn = get_function(module, ref.name, ref.path.name)
    kwargs = dict(task.kernel.kwargs) if task.kernel else {}

    def reference(inputs: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        copies = {k: np.array(v, copy=True) for k, v in inputs.items()}
        with np.errstate(all="ignore"):
            returned = fn(**copies, **kwargs)
        return collect_reference_outputs(returned, task, ref.spec)

    return reference
