"""`nki.compiler`: compiler decorators and options. None of them changes what the emulator computes;
they are accepted (with or without arguments) and recorded on the kernel (`kernel.compiler_options`)."""

from __future__ import annotations

from nkitui.emulator.legacy.compiler import (  # noqa: F401  (same decorators in both namespaces)
    enable_stack_allocator,
    force_auto_alloc,
    multi_buffer,
    no_reorder,
    skip_middle_end_transformations,
)
