"""The legacy `neuronxcc.nki` front end (return-style ISA, masks, arange/mgrid, par_dim).

After `nkitui.emulator.install()` these modules are importable under their real names:
`neuronxcc.nki` (nki.py), `neuronxcc.nki.language`, `.isa`, `.typing`, `.compiler`.
"""
