"""The replay builds a view of a whole storage (a fresh tile, most of a log's views) as the emulator's launch
does, with Tensor.whole: its cells, bounds and bounds check known at once instead of worked out by slicing
on first use (a quarter of the replay's time on flawed_transliteration's 26.6k instructions). The outputs
stay bit for bit the launch's."""

from __future__ import annotations

import numpy as np

from nkitui import emulator
from nkitui.emulator import replay, replaylog
from nkitui.emulator import tensor as tensor_module
from tests.helpers.emulator_session import install_for_session

install_for_session()
import neuronxcc.nki as nki  # noqa: E402
import neuronxcc.nki.language as nl  # noqa: E402


@nki.jit
def gelu_rows(x):
    y = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for row in nl.sequential_range(x.shape[0]):
        v = nl.load(x[nl.ds(row, 1), 0:32])
        t = nl.multiply(nl.add(nl.multiply(v, v), 1.0), 0.5)
        nl.store(y[nl.ds(row, 1), 0:32], value=nl.tanh(t))
    return y


def test_whole_storage_views_are_made_as_the_launch_makes_them(monkeypatch):
    x = np.random.default_rng(5).standard_normal((16, 32)).astype(np.float32)
    with replaylog.recording([x]) as rec, emulator.options(target="trn2", precise=True):
        y = gelu_rows(x)
    log = replay.unpack(replaylog.pack(rec, {"y": rec.output_view(y)}))
    made = []
    whole = tensor_module.Tensor.whole.__func__

    def counted(cls, st):
        made.append(st.shape)
        return whole(cls, st)

    monkeypatch.setattr(tensor_module.Tensor, "whole", classmethod(counted))
    out = replay.replay(log, [x], target="trn2", precise=True)
    assert replay.first_difference({"y": y}, out) is None
    tiles = sum(1 for s in log.storages if s.memory != "hbm")
    assert tiles >= 16 * 4 and len(made) >= tiles  # every fresh tile's view (the HBM rows are not whole views)
    assert made.count((1, 32)) >= 16 * 4  # the rows' tiles
