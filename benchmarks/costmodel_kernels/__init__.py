"""NKI kernels used to calibrate the cost model (see docs/costmodel.md)."""
