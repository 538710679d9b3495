"""`neuronxcc.nki.typing` (nt): kernel signature annotations, checked against the arguments."""

from __future__ import annotations

from collections.abc import Iterable

from nkitui.emulator import dtypes as _dt


class _TensorType:
    """`nt.tensor[shape, dtype]` / `nt.tensor[[shape], dtype]` (and `nt.mutable_tensor[...]`)."""

    def __init__(self, shape: Iterable[int] | None = None, dtype: object = None, mutable: bool = False) -> None:
        self.shape = tuple(shape) if shape is not None else None
        self.dtype = _dt.dtype_of(dtype) if dtype is not None else None
        self.mutable = mutable

    def nki_check(self, shape: Iterable[int], dtype: _dt.DType) -> str | None:
        if self.shape is not None and tuple(shape) != self.shape:
            return f"annotated shape {list(self.shape)} but the argument has shape {list(shape)}"
        if self.dtype is not None and dtype is not self.dtype:
            return f"annotated dtype {self.dtype.name} but the argument is {dtype.name}"
        return None

    def __repr__(self) -> str:
        kind = "mutable_tensor" if self.mutable else "tensor"
        return f"nt.{kind}[{list(self.shape) if self.shape else '...'}, {self.dtype.name if self.dtype else '...'}]"


class _TensorFactory:
    def __init__(self, mutable: bool) -> None:
        self.mutable = mutable

    def __getitem__(self, key: object) -> _TensorType:
        if not isinstance(key, tuple):
            return _TensorType(None, key, self.mutable)
        if len(key) == 2 and isinstance(key[0], (list, tuple)):
            return _TensorType(key[0], key[1], self.mutable)
        if key and not isinstance(key[-1], int):
            return _TensorType(key[:-1], key[-1], self.mutable)
        return _TensorType(key, None, self.mutable)

    def __call__(self, shape: Iterable[int] | None = None, dtype: object = None) -> _TensorType:
        return _TensorType(shape, dtype, self.mutable)


tensor = _TensorFactory(False)
mutable_tensor = _TensorFactory(True)


def scalar(dtype: object = None) -> object:
    """`nt.scalar(dtype)`: a scalar kernel argument annotation (not checked)."""
    return dtype


tile = tensor
