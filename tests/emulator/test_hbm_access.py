"""HBM trace accesses are row x byte boxes (trace contract version 2): rows = the leading dims
flattened, bytes = the last dim, so column tiles of one row band do not overlap."""

from __future__ import annotations

import numpy as np

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl
from nkitui import emulator
from nkitui.emulator import dtypes as dt
from nkitui.emulator.memory import Storage
from nkitui.emulator.tensor import Tensor

F32 = np.float32


def _hbm(shape, dtype=dt.float32) -> Tensor:
    return Tensor.whole(Storage("x", "hbm", tuple(shape), dtype, None))


@nki.jit
def store_two_column_tiles(a, c0, c1):
    out = nl.ndarray((256, 1024), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out[0:128, c0:c0 + 512], value=t)
    nl.store(out[0:128, c1:c1 + 512], value=t)
    return out


def _store_boxes(c0, c1):
    with emulator.trace() as tr:
        store_two_column_tiles(np.ones((128, 512), F32), c0, c1)
    return [i.writes[0] for i in tr if i.engine == "dma" and i.out_mem == "hbm"]


def test_disjoint_column_tiles_of_one_row_band_do_not_overlap():
    w0, w1 = _store_boxes(0, 512)
    assert (w0.p0, w0.p1, w0.b0, w0.b1) == (0, 128, 0, 512 * 4)
    assert (w1.p0, w1.p1, w1.b0, w1.b1) == (0, 128, 512 * 4, 1024 * 4)
    assert not w0.overlaps(w1)


def test_overlapping_column_tiles_overlap():
    w0, w1 = _store_boxes(0, 256)
    assert w0.overlaps(w1) and w1.overlaps(w0)


def test_leading_dims_are_flattened_into_rows():
    x = _hbm((4, 8, 64))
    a = x.basic_index((1, slice(2, 4), slice(16, 32))).access()
    assert (a.memory, a.p0, a.p1, a.b0, a.b1) == ("hbm", 1 * 8 + 2, 1 * 8 + 4, 16 * 4, 32 * 4)
    whole = x.access()
    assert (whole.p0, whole.p1, whole.b0, whole.b1) == (0, 32, 0, 64 * 4)


def test_rank_one_tensor_is_one_row_of_bytes():
    a = _hbm((1024,), dt.bfloat16).basic_index(slice(256, 512)).access()
    assert (a.p0, a.p1, a.b0, a.b1) == (0, 1, 256 * 2, 512 * 2)


def test_gather_view_gets_its_bounding_box():
    x = _hbm((16, 32))
    rows = np.array([[3], [5], [9]])
    cols = np.array([[4, 7]])
    a = x.gather_index((rows, cols), (3, 2)).access()
    assert (a.p0, a.p1, a.b0, a.b1) == (3, 10, 4 * 4, 8 * 4)


def test_round_trip_keeps_the_boxes_and_version_one_traces_still_load():
    with emulator.trace() as tr:
        store_two_column_tiles(np.ones((128, 512), F32), 0, 512)
    doc = tr.to_json()
    assert doc["version"] == 2
    again = emulator.Trace.from_json(doc)
    assert [i.writes for i in again] == [i.writes for i in tr]
    doc["version"] = 1
    assert len(emulator.Trace.from_json(doc)) == len(tr)
