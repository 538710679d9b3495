"""FAKE standalone `nki` package (NKI 0.6 launch API) for nkitui's tests — not the AWS Neuron SDK.

See tests/fakes/README.md. `benchmark`, `baremetal`, `profile` and `simulate_kernel` do not exist
in the new namespace, as in the real package.
"""

from _nkitui_fake_sdk import FakeKernel, jit, simulate  # noqa: F401

__version__ = "0.6.0+fake"
__nkitui_fake__ = True
