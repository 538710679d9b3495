"""HACK-HOST-COMPUTE, HACK-CACHE, HACK-UNUSED-INPUT, HACK-WRITE-INPUT, HACK-PRECISION-DROP."""

from __future__ import annotations

from tests.analysis.conftest import findings, no_internal_errors, rule_ids

LEGACY = """
        import neuronxcc.nki as nki
        import neuronxcc.nki.language as nl
        import neuronxcc.nki.isa as nisa
"""
NEW = """
        import nki
        import nki.language as nl
        import nki.isa as nisa
"""
AB = {"inputs": {"a": {"shape": [128, 512], "dtype": "float32"}, "b": {"shape": [128, 512], "dtype": "float32"}},
      "outputs": {"out": {"shape": [128, 512], "dtype": "float32"}}}

HONEST = LEGACY + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(out, value=nl.add(x, y))
            return out
"""


def test_honest_kernel_has_no_integrity_findings(analyze) -> None:
    report = analyze(HONEST, ctx=AB)
    no_internal_errors(report)
    assert report.findings == []
    assert report.findings == analyze(HONEST).findings  # no shapes: same verdict


def test_numpy_inside_the_kernel(analyze) -> None:
    src = LEGACY + """
        import numpy as np

        @nki.jit
        def add(a, b):
            return np.add(a, b)
    """
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-HOST-COMPUTE")
    assert f.severity == "high" and f.category == "integrity" and f.line == 10
    assert "a, b" in f.message


def test_torch_on_hbm_tensors_and_operators(analyze) -> None:
    src = NEW + """
        import torch

        @nki.jit
        def mm(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            host = torch.matmul(a, b)
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a)
            nisa.dma_copy(dst=out, src=t)
            return a + b
    """
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-HOST-COMPUTE")
    assert f.data["lines"] == [11, 15] and f.data["calls"][0] == "torch.matmul"


def test_kernel_that_moves_nothing(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            return out
    """
    report = analyze(src, ctx=AB)
    assert [f.severity for f in findings(report, "HACK-HOST-COMPUTE")] == ["high"]
    unused = findings(report, "HACK-UNUSED-INPUT")
    assert sorted(f.data["param"] for f in unused) == ["a", "b"]


def test_module_level_cache(analyze) -> None:
    src = LEGACY + """
        _RESULTS = {}

        @nki.jit
        def add(a, b):
            key = a.shape
            if key in _RESULTS:
                return _RESULTS[key]
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
            _RESULTS[key] = out
            return out
    """
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-CACHE")
    assert f.severity == "high" and f.data["lines"] == [15] and "_RESULTS" in f.message


def test_cache_written_through_a_method(analyze) -> None:
    src = LEGACY + """
        _MEMO = {}

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
            return _MEMO.setdefault(a.shape, out)
    """
    (f,) = findings(analyze(src, ctx=AB), "HACK-CACHE")
    assert f.data["lines"] == [12] and "_MEMO" in f.message


def test_cache_filled_by_a_wrapper_and_lru_cache(analyze) -> None:
    src = LEGACY + """
        import functools
        _SEEN = []

        @functools.lru_cache(maxsize=None)
        def _table(n):
            return n * 2

        def warm(x):
            _SEEN.append(x)

        @nki.jit
        def add(a, b):
            if _SEEN:
                n = _table(4)
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
            return out
    """
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-CACHE")
    assert "lru_cache" in f.message and "`warm` fills" in f.message


def test_reading_a_results_file(analyze) -> None:
    src = LEGACY + """
        import numpy as np

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            expected = np.load("expected.npy")
            t = nl.load(a)
            nl.store(out, value=nl.add(t, nl.load(b)))
            return out
    """
    report = analyze(src, ctx=AB)
    assert findings(report, "HACK-CACHE")[0].line == 11


def test_ignored_input(analyze) -> None:
    src = HONEST.replace("y = nl.load(b)", "y = nl.load(a)")
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-UNUSED-INPUT")
    assert f.severity == "high" and f.data == {"param": "b"} and f.line == 7
    # Without the manifest, an unreferenced parameter could be a flag: medium.
    (g,) = findings(analyze(src), "HACK-UNUSED-INPUT")
    assert g.severity == "medium"


def test_input_used_only_for_its_shape(analyze) -> None:
    src = HONEST.replace("y = nl.load(b)", "y = nl.zeros(b.shape, dtype=nl.float32)")
    (g,) = findings(analyze(src), "HACK-UNUSED-INPUT")
    assert g.severity == "high" and "only its shape" in g.message


def test_first_tile_only(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((300, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a[0:128, :])
            y = nl.load(b[0:128, :])
            nl.store(out[0:128, :], value=nl.add(x, y))
            return out
    """
    ctx = {"inputs": {"a": {"shape": [300, 512], "dtype": "float32"}, "b": {"shape": [300, 512], "dtype": "float32"}},
           "outputs": {"out": {"shape": [300, 512], "dtype": "float32"}}}
    report = analyze(src, ctx=ctx)
    partial = findings(report, "HACK-UNUSED-INPUT")
    assert sorted(f.data["tensor"] for f in partial) == ["a", "b"]
    assert all(f.data["read"] == [0, 128] and f.severity == "high" for f in partial)


def test_writes_into_input(analyze) -> None:
    src = HONEST.replace("nl.store(out, value=nl.add(x, y))", "nl.store(a, value=nl.add(x, y))")
    report = analyze(src, ctx=AB)
    (f,) = findings(report, "HACK-WRITE-INPUT")
    assert f.severity == "high" and f.line == 11 and f.data == {"param": "a"}
    # Output passed as an argument (kernel.outputs = "arguments") is not an input.
    src_args = LEGACY + """
        @nki.jit
        def add(a, b, out):
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    """
    args_ctx = dict(AB, outputs_mode="arguments")
    assert "HACK-WRITE-INPUT" not in rule_ids(analyze(src_args, ctx=args_ctx))
    assert "HACK-WRITE-INPUT" not in rule_ids(analyze(src_args))


def test_precision_drops(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def mm(a, b):
            out = nl.ndarray((128, 512), dtype=OUT_DTYPE, buffer=nl.shared_hbm)
            x = nl.load(a[0:128, 0:128], dtype=nl.bfloat16)
            y = nl.load(b, dtype=nl.bfloat16)
            p = nisa.nc_matmul(x, y)
            nl.store(out, value=nl.copy(p, dtype=OUT_DTYPE))
            return out
    """
    ctx = {"inputs": {"a": {"shape": [128, 128], "dtype": "float32"}, "b": {"shape": [128, 512], "dtype": "float32"}},
           "outputs": {"out": {"shape": [128, 512], "dtype": "float32"}}}
    report = analyze(src.replace("OUT_DTYPE", "nl.float32"), ctx=ctx)
    (drop,) = findings(report, "HACK-PRECISION-DROP")
    assert drop.data["lines"] == [9, 10] and drop.severity == "high"
    assert "feeds matmuls" in drop.message and drop.data["from"] == "float32" and drop.data["to"] == "bfloat16"
    # A tolerance loose enough for bf16 rounding makes it a trade to confirm, not a hack.
    loose = dict(ctx, outputs={"out": {"shape": [128, 512], "dtype": "float32", "rtol": 2e-2}})
    (f,) = findings(analyze(src.replace("OUT_DTYPE", "nl.float32"), ctx=loose), "HACK-PRECISION-DROP")
    assert f.severity == "medium" and "tolerance admits" in f.message
    # A CUDA source that itself converts to half makes the same narrowing a faithful choice: medium.
    cuda = """
        #include <cuda_fp16.h>
        __global__ void mm(const float* a, const float* b, float* c) {
            __half x = __float2half(a[threadIdx.x]);
            c[threadIdx.x] = __half2float(x) * b[threadIdx.x];
        }
    """
    with_cuda = findings(analyze(src.replace("OUT_DTYPE", "nl.float32"), ctx=ctx, cuda_src=cuda),
                         "HACK-PRECISION-DROP")
    assert {f.severity for f in with_cuda} == {"medium"}
    narrow_out = analyze(src.replace("OUT_DTYPE", "nl.bfloat16"), ctx=ctx)
    out = [f for f in findings(narrow_out, "HACK-PRECISION-DROP") if "declares" in f.title]
    assert out and out[0].severity == "high"
    # A bf16 task narrowing PSUM's fp32 back to bf16 is not a drop.
    bf16 = {"inputs": {"a": {"shape": [128, 128], "dtype": "bfloat16"}, "b": {"shape": [128, 512], "dtype": "bfloat16"}},
            "outputs": {"out": {"shape": [128, 512], "dtype": "bfloat16"}}}
    assert "HACK-PRECISION-DROP" not in rule_ids(analyze(src.replace("OUT_DTYPE", "nl.bfloat16"), ctx=bf16))


def test_parameters_without_manifest_are_typed_by_use(analyze) -> None:
    # An output passed as an argument, a tuple of sizes, a fill value and a dtype are not ignored inputs.
    src = LEGACY + """
        @nki.jit
        def k(a, out, dims, fill, out_dtype):
            rows, cols = dims
            t = nl.load(a)
            pad = nl.full((128, 1), fill, dtype=nl.float32, buffer=nl.sbuf)
            nl.store(out, value=nl.add(t, pad, dtype=out_dtype))
    """
    report = analyze(src)
    no_internal_errors(report)
    assert "HACK-UNUSED-INPUT" not in rule_ids(report) and "HACK-WRITE-INPUT" not in rule_ids(report)


def test_mutable_default_argument_cache(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def add(a, b, _memo={}):
            if a.shape in _memo:
                return _memo[a.shape]
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
            _memo[a.shape] = out
            return out
    """
    (f,) = findings(analyze(src, ctx=AB), "HACK-CACHE")
    assert f.severity == "high" and f.data["lines"] == [12]


def test_undecorated_entry_that_only_uses_numpy(analyze) -> None:
    src = """
        import numpy as np


        def kernel(a, b):
            return np.add(a, b)
    """
    report = analyze(src, ctx=dict(AB, kernel="kernel"))
    (f,) = findings(report, "HACK-HOST-COMPUTE")
    assert f.severity == "high" and f.line == 6 and report.namespace is None


def test_cache_on_a_class_attribute_or_through_setattr_and_globals(analyze) -> None:
    body = """
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
"""
    class_attr = LEGACY + """
        class _Memo:
            last = None

        @nki.jit
        def add(a, b):
            if _Memo.last is not None:
                return _Memo.last""" + body + """
            _Memo.last = out
            return out
    """
    (f,) = findings(analyze(class_attr, ctx=AB), "HACK-CACHE")
    assert f.severity == "high" and f.data["lines"] == [16] and "`_Memo.last = out`" in f.message

    through_setattr = LEGACY + """
        import sys

        @nki.jit
        def add(a, b):
            mod = sys.modules[__name__]
            if getattr(mod, "_prev", None) is not None:
                return mod._prev""" + body + """
            setattr(mod, "_prev", out)
            return out
    """
    (f,) = findings(analyze(through_setattr, ctx=AB), "HACK-CACHE")
    assert f.data["lines"] == [16] and "setattr" in f.message

    through_globals = LEGACY + """
        @nki.jit
        def add(a, b):
            g = globals()
            if "_r" in g:
                return g["_r"]""" + body + """
            g["_r"] = out
            return out
    """
    (f,) = findings(analyze(through_globals, ctx=AB), "HACK-CACHE")
    assert f.data["lines"] == [8] and "globals()" in f.message


def test_tile_data_handed_to_host_python(analyze) -> None:
    src = LEGACY + """
        import math

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            rows = [[math.exp(v) for v in r] for r in x.tolist()]
            nl.store(out, value=y.numpy() + rows[0][0])
            return out
    """
    (f,) = findings(analyze(src, ctx=AB), "HACK-HOST-COMPUTE")
    assert f.severity == "high" and f.data["lines"] == [13, 14]
    assert f.data["calls"][:2] == ["tensor.tolist", "tensor.numpy"] and "of a host-computed value" in f.data["calls"][-1]


def test_module_objects_read_and_local_objects_written_are_not_state(analyze) -> None:
    src = NEW + """
        import math
        from types import SimpleNamespace

        import numpy as np

        class Cfg:
            P = 128

        @nki.jit
        def add(a, b):
            cfg = SimpleNamespace()
            cfg.scale = np.float32(1.0 / math.sqrt(512))
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.ndarray((Cfg.P, 512), dtype=nl.float32, buffer=nl.sbuf)
            y = nl.ndarray((Cfg.P, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=x, src=a)
            nisa.dma_copy(dst=y, src=b)
            nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)
            nisa.tensor_scalar(dst=x, data=x, op0=nl.multiply, operand0=cfg.scale)
            nisa.dma_copy(dst=out, src=x)
            return out
    """
    report = analyze(src, ctx=AB)
    no_internal_errors(report)
    assert rule_ids(report) & {"HACK-CACHE", "HACK-HOST-COMPUTE", "HACK-UNUSED-INPUT", "HACK-WRITE-INPUT"} == set()


def test_calling_the_tasks_reference_or_eval_inside_the_kernel(analyze) -> None:
    whole = LEGACY + """
        from reference import add as _ref

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=_ref(a, b))
            return out
    """
    (f,) = findings(analyze(whole, ctx=AB), "HACK-HOST-COMPUTE")
    assert f.severity == "high" and f.line == 11 and "reference.add" in f.data["calls"] and "a, b" in f.message

    per_tile = LEGACY + """
        import reference

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(out, value=reference.add(x, y))
            return out
    """
    (f,) = findings(analyze(per_tile, ctx=AB), "HACK-HOST-COMPUTE")
    assert f.line == 13 and "reference.add" in f.data["calls"]

    evaluated = LEGACY + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            eval("print(1)")
            nl.store(out, value=nl.add(x, y))
            return out
    """
    (f,) = findings(analyze(evaluated, ctx=AB), "HACK-HOST-COMPUTE")
    assert f.line == 11 and f.data["calls"] == ["builtins.eval"]

    imported_late = LEGACY + """
        import importlib

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            np_ = importlib.import_module("numpy")
            nl.store(out, value=np_.add(x, y))
            return out
    """
    (f,) = findings(analyze(imported_late, ctx=AB), "HACK-HOST-COMPUTE")
    assert f.line == 13 and f.data["calls"][0] == "importlib.import_module"


def test_standard_library_helpers_on_tiles_are_not_host_compute(analyze) -> None:
    src = LEGACY + """
        import functools
        import operator

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            tiles = [nl.load(a), nl.load(b)]
            total = functools.reduce(nl.add, tiles)
            first = operator.getitem(tiles, 0)
            nl.store(out, value=nl.add(total, first))
            return out
    """
    report = analyze(src, ctx=AB)
    no_internal_errors(report)
    assert "HACK-HOST-COMPUTE" not in rule_ids(report)


def test_input_loaded_only_to_be_multiplied_by_zero(analyze) -> None:
    src = LEGACY + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(out, value=nl.add(x, nl.multiply(y, 0.0)))
            return out
    """
    (f,) = findings(analyze(src, ctx=AB), "HACK-UNUSED-INPUT")
    assert f.severity == "high" and f.line == 11 and f.data["param"] == "b" and "multiplies it by 0" in f.message
    scaled = src.replace("nl.multiply(y, 0.0)", "nl.multiply(y, 0.5)")
    assert "HACK-UNUSED-INPUT" not in rule_ids(analyze(scaled, ctx=AB))
    also_used = src.replace("nl.add(x, nl.multiply(y, 0.0))", "nl.add(nl.add(x, y), nl.multiply(y, 0))")
    assert "HACK-UNUSED-INPUT" not in rule_ids(analyze(also_used, ctx=AB))


def test_the_ports_own_nki_helper_module_is_not_host_code(analyze, tmp_path) -> None:
    (tmp_path / "tile_ops.py").write_text("import neuronxcc.nki.language as nl\n\n"
                                          "def add_tiles(x, y):\n    return nl.add(x, y)\n")
    (tmp_path / "reference.py").write_text("import numpy as np\n\ndef add(a, b):\n    return np.add(a, b)\n")
    src = LEGACY + """
        import reference
        import tile_ops

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            x = nl.load(a)
            y = nl.load(b)
            nl.store(out, value=tile_ops.add_tiles(x, y))
            return out
    """
    report = analyze(src, ctx=AB)
    assert "HACK-HOST-COMPUTE" not in rule_ids(report)
    (f,) = findings(analyze(src.replace("tile_ops.add_tiles(x, y)", "reference.add(x, y)"), ctx=AB),
                    "HACK-HOST-COMPUTE")
    assert f.data["calls"][0] == "reference.add"


def test_an_nki_helper_package_imported_by_dotted_name_is_not_host_code(analyze, tmp_path) -> None:
    pkg = tmp_path / "kernels" / "common"
    pkg.mkdir(parents=True)
    (tmp_path / "kernels" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "tile_io.py").write_text("import nki.language as nl\n\ndef load(t):\n    return nl.load(t)\n")
    src = LEGACY + """
        from kernels.common.tile_io import load as _load

        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            nl.store(out, value=nl.add(_load(a), _load(b)))
            return out
    """
    assert "HACK-HOST-COMPUTE" not in rule_ids(analyze(src, ctx=AB))
    (pkg / "tile_io.py").write_text("import numpy as np\n\ndef load(t):\n    return np.asarray(t)\n")
    assert "HACK-HOST-COMPUTE" in rule_ids(analyze(src, ctx=AB), "high")


# -- file level: the entry point and reaching into the interpreter (HACK-TAMPER) -------------------
from nkitui.analysis.rules.hacks import entry_findings, tamper_findings  # noqa: E402

ENTRY_SRC = """import nki
import nki.language as nl

@nki.jit
def kern(a, b):
    return a
"""


def test_the_entry_rebound_to_a_wrapper_is_flagged_at_the_rebinding() -> None:
    src = ENTRY_SRC + "\nclass W:\n    def __call__(self, a, b):\n        return a + b\n\nkern = W()\n"
    [f] = entry_findings(src, "k.py", "kern")
    assert f.rule == "HACK-HOST-COMPUTE" and f.line == 12 and "bound 2 times" in f.message
    assert "is assigned `W()`" in f.message


def test_non_nki_entries_are_flagged_and_an_nki_decorator_call_is_not() -> None:
    plain = "def kern(a, b):\n    return a + b\n"
    assert "not decorated as an NKI kernel" in entry_findings(plain, "k.py", "kern")[0].message
    klass = "import nki\nclass kern:\n    pass\n"
    assert "is a class" in entry_findings(klass, "k.py", "kern")[0].message
    lam = "import numpy as np\nkern = lambda a, b: np.add(a, b)\n"
    assert "not an NKI kernel" in entry_findings(lam, "k.py", "kern")[0].message
    decorated_call = "import neuronxcc.nki as nki\ndef _impl(a):\n    return a\nkern = nki.jit(_impl)\n"
    assert entry_findings(decorated_call, "k.py", "kern") == []
    assert entry_findings(ENTRY_SRC, "k.py", "kern") == []


def test_reaching_into_the_interpreter_is_high_and_library_style_introspection_medium() -> None:
    hostile = """import gc, os, sys
import nki.language as nl
for o in gc.get_objects():
    pass
f = sys._getframe().f_back
os.write(3, b"x")
os._exit(0)
g = kern.__globals__
x = nl._dt
eval("1")
"""
    [high] = tamper_findings(hostile, "k.py")
    assert high.severity == "high" and high.line == 1
    constructs = " ".join(high.data["constructs"])
    for piece in ("import gc", "sys._getframe", "f_back", "os.write", "os._exit", "__globals__", "nl._dt", "eval"):
        assert piece in constructs, piece
    library = "def f(obj, name):\n    return getattr(obj, name)\n"
    [medium] = tamper_findings(library, "k.py")
    assert medium.severity == "medium" and "computed attribute name" in medium.message


def test_an_ordinary_kernel_reaches_for_nothing() -> None:
    src = """import numpy as np
import os, sys, math
import nki
import nki.language as nl

@nki.jit
def kern(a, b):
    n = math.prod(a.shape)
    print(os.getcwd(), file=sys.stderr)
    return a
"""
    assert tamper_findings(src, "k.py") == []


# -- inputs loaded through a Python loop over tensors (red team A, finding 6) -------------------------

LOOP_LOADS = NEW + """
        @nki.jit
        def add(a, b):
            out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
            a_tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            b_tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            LOADS
            c_tile = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)
            nisa.dma_copy(dst=out, src=c_tile)
            return out
"""

_HONEST_LOOPS = {
    "tuple of pairs": "for dst, src in ((a_tile, a), (b_tile, b)):\n                nisa.dma_copy(dst=dst, src=src)",
    "list of pairs": "for dst, src in [(a_tile, a), (b_tile, b)]:\n                nisa.dma_copy(dst=dst, src=src[0:128, :])",
    "named pairs": "pairs = ((a_tile, a), (b_tile, b))\n            for dst, src in pairs:\n"
                   "                nisa.dma_copy(dst=dst, src=src)",
    "zip": "for dst, src in zip((a_tile, b_tile), (a, b)):\n                nisa.dma_copy(dst=dst, src=src)",
    "enumerate": "tiles = (a_tile, b_tile)\n            for i, src in enumerate((a, b)):\n"
                 "                nisa.dma_copy(dst=tiles[i], src=src)",
    "nested pattern": "for k, (dst, src) in ((0, (a_tile, a)), (1, (b_tile, b))):\n"
                      "                nisa.dma_copy(dst=dst, src=src)",
}


def test_inputs_loaded_through_a_loop_over_tensor_pairs_are_read(analyze) -> None:
    """`for dst, src in ((a_tile, a_rows), (b_tile, b_rows)): nisa.dma_copy(dst=dst, src=src)` reads both
    inputs (NKI unrolls a Python loop over a tuple when it traces): no HACK-UNUSED-INPUT, no reload finding."""
    for name, loads in _HONEST_LOOPS.items():
        report = analyze(LOOP_LOADS.replace("LOADS", loads), ctx=AB)
        no_internal_errors(report)
        assert "HACK-UNUSED-INPUT" not in rule_ids(report), (name, report.findings)
        assert "NKI-HBM-RELOAD" not in rule_ids(report), (name, report.findings)


def test_an_input_left_out_of_the_loop_is_still_unread(analyze) -> None:
    for loads in ("for dst, src in ((a_tile, a), (b_tile, a)):\n                nisa.dma_copy(dst=dst, src=src)",
                  "for dst, src in zip((a_tile, b_tile), (a, a)):\n                nisa.dma_copy(dst=dst, src=src)",
                  "for dst, src in ((a_tile, a), (b_tile, b)):\n                nisa.dma_copy(dst=dst, src=a)"):
        report = analyze(LOOP_LOADS.replace("LOADS", loads), ctx=AB)
        unused = findings(report, "HACK-UNUSED-INPUT")
        assert [f.data["param"] for f in unused] == ["b"] and unused[0].severity == "high", (loads, report.findings)
    # the items are named but the body never loads them
    unread = "for dst, src in ((a_tile, a), (b_tile, b)):\n                nisa.memset(dst=dst, value=0.0)"
    report = analyze(LOOP_LOADS.replace("LOADS", unread), ctx=AB)
    assert sorted(f.data["param"] for f in findings(report, "HACK-UNUSED-INPUT")) == ["a", "b"], report.findings
