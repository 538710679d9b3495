"""FAKE `neuronxcc` (Neuron compiler package) for nkitui's tests — see tests/fakes/README.md."""

__version__ = "2.26.0+fake"
__nkitui_fake__ = True
