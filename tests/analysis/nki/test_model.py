"""The NKI model: namespaces and aliases, tiles, loops, DMA, matmul/PSUM, masks and bounds."""

from __future__ import annotations

import pytest

from nkitui.analysis import build_nki_model
from nkitui.analysis.nki.values import Lin, Mask
from tests.analysis.conftest import kernel_model

# Indented like the kernel bodies below, so that the concatenation dedents as one block.
LEGACY_HEADER = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.isa as nisa
"""

NEW_HEADER = """
        import nki
        import nki.language as nl
        import nki.isa as nisa
"""


@pytest.mark.parametrize(
    ("imports", "namespace"),
    [
        ("import neuronxcc.nki.language as nl\nimport neuronxcc.nki as nki", "legacy"),
        ("from neuronxcc import nki\nfrom neuronxcc.nki import language as nl", "legacy"),
        ("import nki\nimport nki.language as nl", "new"),
        ("from nki import language as nl\nimport nki", "new"),
        ("import nki\nimport neuronxcc.nki.language as nl", "mixed"),
        ("import numpy as np", None),
    ],
)
def test_namespace_detection(imports: str, namespace: str | None) -> None:
    model = build_nki_model(imports + "\n", "k.py")
    assert model.namespace == namespace


def test_aliases_resolve_to_canonical_api_names() -> None:
    km = kernel_model("""
        from nki import language as lang
        import nki.isa as ni
        import nki

        @nki.jit
        def k(x):
            t = lang.ndarray((128, 64), dtype=lang.float32, buffer=lang.sbuf)
            ni.dma_copy(dst=t, src=x[0:128, 0:64])
            o = lang.ndarray((128, 64), dtype=lang.float32, buffer=lang.shared_hbm)
            ni.activation(t, op=lang.exp, data=t)
            nki.isa.dma_copy(o, t)
            return o
    """)
    apis = [op.api for op in km.ops]
    assert apis == ["nisa.dma_copy", "nisa.activation", "nisa.dma_copy"]
    act = km.ops[1]
    assert act.engine == "scalar" and act.fn == "exp"
    # New namespace: the first positional argument of an ISA call is its destination.
    assert [km.root(a.tensor).label() for a in act.writes] == ["t"]
    assert [km.root(a.tensor).label() for a in km.ops[2].writes] == ["o"]


def test_legacy_tiles_loops_and_dma_shapes() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(x):
            N, D = x.shape
            out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in nl.affine_range(N // 128):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
                e = nl.exp(t)
                nl.store(out[i * 128:(i + 1) * 128, :], value=e)
            return out
    """, {"inputs": {"x": {"shape": [512, 256], "dtype": "float32"}}})
    (loop,) = km.loops.values()
    assert (loop.kind, loop.trip, loop.division, loop.div_denominator) == ("affine", 4, "floor", 128)
    load, exp, store = km.ops
    assert (load.kind, load.engine) == ("dma_load", "dma")
    assert (load.reads[0].partitions, load.reads[0].free) == (128, 256)
    tile = km.tensors[load.result]
    assert (tile.buffer, tile.known_shape(), tile.dtype) == ("sbuf", (128, 256), "float32")
    assert exp.engine == "scalar" and exp.inputs == [tile.id]
    assert store.kind == "dma_store" and loop.sym in store.writes[0].deps


def test_new_namespace_min_bounded_partial_tile() -> None:
    km = kernel_model(NEW_HEADER + """
        @nki.jit
        def k(x):
            n, d = x.shape
            P = 128
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            for i in range((n + P - 1) // P):
                rows = min(P, n - i * P)
                t = nl.ndarray((P, d), dtype=x.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=t[0:rows, :], src=x[nl.ds(i * P, rows), :])
                nisa.dma_copy(dst=out[i * P:i * P + rows, :], src=t[0:rows, :])
            return out
    """)
    (loop,) = km.loops.values()
    assert loop.kind == "range" and loop.division == "ceil" and loop.div_denominator == 128
    load, store = km.ops
    src = load.reads[0]
    assert src.dims[0].bounded and src.dims[0].extent_parts  # nl.ds(i*P, min(P, n - i*P))
    assert store.writes[0].dims[0].bounded


def test_legacy_grid_mask_records_its_bound() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(x):
            n, d = x.shape
            out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
            i_p = nl.arange(128)[:, None]
            i_f = nl.arange(d)[None, :]
            for t in nl.affine_range((n + 127) // 128):
                tile = nl.load(x[t * 128 + i_p, i_f], mask=(t * 128 + i_p < n))
                nl.store(out[t * 128 + i_p, i_f], value=tile, mask=(t * 128 + i_p < n))
            return out
    """)
    load = km.ops[0]
    assert isinstance(load.mask, Mask) and load.mask.cmps == ("<",)
    ((grids, cmp, bound),) = load.mask.bounds
    assert cmp == "<" and bound == Lin(0, (("x.shape[0]", 1),))
    dim = load.reads[0].dims[0]
    assert dim.kind == "grid" and dim.grid in grids and dim.extent == 128
    assert load.reads[0].partitions == 128


def test_psum_accumulation_legacy_and_new() -> None:
    legacy = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(a_t, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            psum = nl.zeros((128, 512), dtype=nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(4):
                a = nl.load(a_t[kk * 128:(kk + 1) * 128, 0:128])
                bb = nl.load(b[kk * 128:(kk + 1) * 128, 0:512])
                psum += nisa.nc_matmul(a, bb)
            nl.store(out, value=nl.copy(psum))
            return out
    """)
    mm = next(op for op in legacy.ops if op.kind == "matmul")
    assert mm.accumulate and legacy.root(mm.writes[0].tensor).label() == "psum"
    assert not any(op.kind == "accumulate" for op in legacy.ops)  # folded into the matmul

    new = kernel_model(NEW_HEADER + """
        @nki.jit
        def k(a_t, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            psum = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for kk in range(4):
                a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
                bb = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(a, a_t[kk * 128:(kk + 1) * 128, 0:128])
                nisa.dma_copy(bb, b[kk * 128:(kk + 1) * 128, :])
                nisa.nc_matmul(psum, a, bb)
            return out
    """)
    mm = next(op for op in new.ops if op.kind == "matmul")
    # accumulate=None into a PSUM tile that outlives the K loop: later writes accumulate.
    assert mm.accumulate and new.root(mm.writes[0].tensor).buffer == "psum"
    assert [new.root(t).label() for t in mm.inputs] == ["a", "bb"]


def test_par_dim_helpers_and_module_constants() -> None:
    km = kernel_model(LEGACY_HEADER + """
        TILE = 128
        BLOCKS = 2 * 2


        def load_block(src, b):
            return nl.load(src[b * TILE:(b + 1) * TILE, :])

        @nki.jit
        def k(x):
            buf = nl.ndarray((BLOCKS, nl.par_dim(TILE), 64), dtype=nl.float32, buffer=nl.sbuf)
            for b in nl.affine_range(BLOCKS):
                buf[b, :, :] = load_block(x, b)
            return x
    """)
    buf = next(t for t in km.tensors.values() if t.label() == "buf")
    assert buf.pdim == 1 and buf.partitions == 128 and buf.known_shape() == (4, 128, 64)
    (loop,) = km.loops.values()
    assert loop.trip == 4
    (load,) = km.ops
    assert load.func == "load_block" and km.helpers == ["load_block"]
    assert km.root(load.writes[0].tensor).label() == "buf"


def test_context_binds_shapes_roles_and_kwargs() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(x, w, out, eps=1e-5, tile=64):
            n, d = x.shape
            for i in nl.affine_range(n // tile):
                t = nl.load(x[i * tile:(i + 1) * tile, :])
                nl.store(out[i * tile:(i + 1) * tile, :], value=t)
    """, {"inputs": {"x": {"shape": [256, 32], "dtype": "bfloat16"}, "w": {"shape": [32], "dtype": "float32"}},
          "outputs": {"out": {"shape": [256, 32], "dtype": "bfloat16"}}, "outputs_mode": "arguments",
          "kwargs": {"tile": 128}})
    roles = {p.name: p.role for p in km.params}
    assert roles == {"x": "input", "w": "input", "out": "output", "eps": "kwarg", "tile": "kwarg"}
    (loop,) = km.loops.values()
    assert loop.trip == 2  # 256 // 128 with the kwarg, not the default 64
    x = km.tensors[km.params[0].tid]
    assert x.known_shape() == (256, 32) and x.dtype == "bfloat16"


def test_untyped_parameter_used_as_number_is_a_scalar() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(x, n_tiles):
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in nl.affine_range(n_tiles):
                t = nl.load(x[i * 128:(i + 1) * 128, :])
                nl.store(out, value=nl.multiply(t, n_tiles))
            return out
    """)
    assert km.scalar_params == {"n_tiles"}
    assert "x" in km.tensor_params
    assert not km.host_calls


def test_host_calls_and_module_state_are_recorded() -> None:
    model = build_nki_model("""
import neuronxcc.nki as nki
import numpy as np
_CACHE = {}

@nki.jit
def k(a, b):
    key = a.shape
    if key in _CACHE:
        return _CACHE[key]
    out = np.matmul(a, b)
    _CACHE[key] = out
    return out
""", "k.py")
    (km,) = model.kernels
    assert [c.api for c in km.host_calls] == ["np.matmul", "return of a host-computed value"]
    assert {u.kind for u in km.state} >= {"container-read", "container-write"}
    assert model.module_containers == {"_CACHE": 4}


def test_syntax_error_is_reported_not_raised() -> None:
    model = build_nki_model("def k(:\n  pass\n", "k.py")
    assert model.syntax_error is not None and model.syntax_error[1] == 1
    assert model.kernels == []


def test_fixture_kernels_parse_into_models() -> None:
    from tests.analysis.conftest import FIXTURES

    for path in sorted((FIXTURES / "nki").glob("*.py")):
        model = build_nki_model(path.read_text(), path.name)
        assert model.syntax_error is None, path
        assert model.kernels, path
        assert all(km.ops for km in model.kernels), path


def test_lists_of_tiles_keep_their_tiles() -> None:
    km = kernel_model(NEW_HEADER + """
        @nki.jit
        def k(a_t, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            tiles = []
            for kk in range(4):
                t = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=a_t[kk * 128:(kk + 1) * 128, :])
                tiles.append(t)
            psum = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            for kk in range(4):
                bb = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
                nisa.dma_copy(dst=bb, src=b[kk * 128:(kk + 1) * 128, :])
                nisa.nc_matmul(dst=psum, stationary=tiles[kk], moving=bb)
            return out
    """)
    mm = next(op for op in km.ops if op.kind == "matmul")
    assert [km.root(t).label() for t in mm.inputs] == ["t", "bb"]
    assert not km.escaped


def test_transposing_load_and_broadcast_views() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(q, bias):
            out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
            qt = nl.load_transpose2d(q[0:128, 0:64])
            row = nl.load(bias.reshape((1, 128)))
            rows = row.broadcast_to((64, 128))
            nl.store(out, value=nl.add(qt, rows))
            return out
    """)
    qt = next(t for t in km.tensors.values() if t.label() == "qt")
    assert qt.known_shape() == (64, 128)
    bcast = next(t for t in km.tensors.values() if t.api == "view.broadcast_to")
    assert km.root(bcast.alias_of).label() == "row" and bcast.known_shape() == (64, 128)


def test_views_of_unknown_rank_compose() -> None:
    km = kernel_model(LEGACY_HEADER + """
        @nki.jit
        def k(q):
            b = nl.program_id(axis=0)
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            head = q[b, 0]
            t = nl.load(head[0:128, :])
            nl.store(out, value=t)
            return out
    """)
    load = km.ops[0]
    dims = load.reads[0].dims
    assert [d.kind for d in dims] == ["int", "int", "slice", "full"]
    assert load.reads[0].partitions == 128 and "program_id(0)" in dims[0].deps


def test_sub_kernels_are_analysed_inside_their_callers() -> None:
    model = build_nki_model("""
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def core(t, out_tile):
    out_tile[...] = nl.exp(t)

@nki.jit
def outer(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    o = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    core(t, o)
    nl.store(out, value=o)
    return out
""", "k.py")
    assert [k.name for k in model.kernels] == ["outer"]
    (km,) = model.kernels
    assert km.helpers == ["core"] and [op.api for op in km.ops] == ["nl.load", "nl.exp", "nl.store"]


def test_relative_ceil_helper_is_recognised() -> None:
    km = kernel_model(NEW_HEADER + """
        from ..utils import div_ceil

        @nki.jit
        def k(x):
            n = x.shape[0]
            out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
            for i in range(div_ceil(n, 128)):
                t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
            return out
    """)
    (loop,) = km.loops.values()
    assert loop.division == "ceil" and loop.div_denominator == 128


def test_fori_loop_body_is_walked_as_a_loop() -> None:
    km = kernel_model(NEW_HEADER + """
        @nki.jit
        def k(x):
            out = nl.ndarray((512, 64), dtype=nl.float32, buffer=nl.shared_hbm)

            def body(i):
                t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
                nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
                nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)

            nl.fori_loop(0, 4, body)
            return out
    """)
    (loop,) = km.loops.values()
    assert (loop.kind, loop.api, loop.trip) == ("dynamic", "nl.fori_loop", 4)
    assert [op.loops for op in km.ops] == [(loop.id,), (loop.id,)]
    assert loop.sym in km.ops[0].reads[0].deps
