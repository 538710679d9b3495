"""nkitui: a terminal workstation for auditing CUDA-to-NKI kernel ports for AWS Trainium."""

__version__ = "0.1.0"
