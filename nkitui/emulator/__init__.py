"""CPU emulator of NKI (Neuron Kernel Interface). See docs/emulator.md."""
