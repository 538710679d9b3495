"""FAKE legacy `neuronxcc.nki` launch API for nkitui's tests — see tests/fakes/README.md."""

from _nkitui_fake_sdk import FakeKernel, baremetal, benchmark, jit, simulate_kernel  # noqa: F401

__nkitui_fake__ = True
