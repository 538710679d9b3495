"""The NKI package layout that suites import (issue #19 item 5): thin, documented aliases."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from nkitui import emulator


def test_compiler_frontend_layout_imports_and_refuses_to_compile():
    frontend = importlib.import_module("nki.compiler.frontend")
    from nki.compiler.frontend import NKIFrontend, ParserFrontend  # noqa: F401  (nki-library's kernel_tracer)

    fe = ParserFrontend()
    assert isinstance(fe, frontend.NKIFrontend) and isinstance(frontend.TracerFrontend(), NKIFrontend)
    with pytest.raises(emulator.UnsupportedError, match="needs the Neuron compiler"):
        fe.compile(lambda a: a, inputs={}, target="trn2", lnc=1, artifacts_dir="/tmp")


def test_ncc_driver_options_record_and_compiled_kernel_refuses():
    from nki.compiler.ncc_driver import CompiledKernel, CompileOptions

    opts = CompileOptions(target="trn2", lnc=2, output_path="x.neff", artifacts_dir="a", neuronx_cc_args=("-O1",))
    assert opts.disable_backend_optimizations().backend_optimizations is False and opts.lnc == 2
    with pytest.raises(emulator.UnsupportedError, match="NEFF"):
        CompiledKernel.from_frontend(None, opts)
    importlib.import_module("nki.compiler.backends")


def test_starfish_static_cast_is_the_host_cast():
    from neuronxcc.starfish.support.dtype import static_cast

    import neuronxcc.nki.language as nl

    x = np.array([1.0, 1.00390625], dtype=np.float32)
    assert static_cast(x, nl.bfloat16).dtype == nl.static_cast(x, nl.bfloat16).dtype
    np.testing.assert_array_equal(static_cast(x, nl.bfloat16), nl.static_cast(x, nl.bfloat16))


def test_the_aliases_are_emulator_modules():
    for name in ("nki.compiler.frontend", "nki.compiler.ncc_driver", "nki.compiler.backends",
                 "neuronxcc.starfish.support.dtype"):
        assert getattr(importlib.import_module(name), "__nkitui_emulator__", False), name
