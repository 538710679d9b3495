"""The NKI side of the analysis: a port read with Python's `ast` into an `NkiModel` (nothing is executed).

    from nkitui.analysis.nki import build_nki_model
    model = build_nki_model(source, "kernel_nki.py", context)   # NkiModel: imports, namespace, kernels
    km = model.kernels[0]                                       # KernelModel: params, tensors, loops, ops

Modules, each with one job:

* `model`       — the records rules read: tensors, loops, operations, accesses (data only);
* `values`      — the abstract values a walk computes with (affine `Lin`, unknown `Unk`, grids, masks ...);
* `access`      — which region of a tensor an index selects (extents, partitions, shapes);
* `imports`     — import aliases to canonical names (`nl.*`, `nisa.*`, `np.*` ...) and the namespace;
* `api`         — what each NKI API is (kind, engine);
* `module`      — module-level facts and which functions are the kernels;
* `scope`, `recorder`, `expressions`, `calls`, `instructions`, `assignments`, `divisions`, `statements` —
  the parts of one kernel walk, wired by `walker.KernelWalk`;
* `queries`     — questions rules ask of a built model (which side of a DMA is HBM, trip counts ...).
"""

from __future__ import annotations

from nkitui.analysis.nki.model import (
    Access,
    DimAccess,
    HostCall,
    KernelModel,
    Loop,
    NkiModel,
    Op,
    Param,
    StateUse,
    Tensor,
)
from nkitui.analysis.nki.walker import build as build_nki_model

__all__ = [
    "Access", "DimAccess", "HostCall", "KernelModel", "Loop", "NkiModel", "Op", "Param", "StateUse", "Tensor",
    "build_nki_model",
]
