"""Red team, round 8 (closed by guard14): deterministic inputs voided replay stage 2.

Stage 2 replays the first seed's instruction log on an input set drawn from a seed the evaluator picks at
random, and compares with the reference there. With `init = { dist = "arange" }`, `"constant"`, `"ones"` or
`"zeros"` for every input, that "fresh" set was the seeds' own set, so a kernel whose output is the right
answer computed on the host and baked in as `nl.shared_constant` passed (on 17f31ce: `passed`, exit 0, the
report saying the log met the reference "on a fresh input set the kernel's process never saw"). Now inputs
the policy draws the same for every seed are varied for stage 2 (arange's values permuted, constants
jittered: nkitui.evaluate.numerics.inputs.input_variant), a mismatch there is "not proven" (internal-error,
never a pass, never a finding: a variant may break what the inputs promise), a match passes and says how the
set was made, and a set that cannot tell the seed's answer from the right one makes the stage void.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nkitui.evaluate.numerics.inputs import input_variant, make_inputs, predictable_inputs, same_bits
from nkitui.evaluate.options import EvaluationRequest
from nkitui.evaluate.run import start_evaluation
from nkitui.evaluate.run.evidence import REPLAY_FRESH_PASSED
from nkitui.task import load_task
from tests.helpers.add_task import ADD_KERNEL, ADD_REFERENCE, add_manifest, write_files

HOST_CONSTANT = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

_A = {a}
_B = {b}
_ANSWER = (_A + _B).astype(np.float32)  # the right answer, computed on the host from the task's policy


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(nl.shared_constant(_ANSWER)))
    return out
'''

HONEST = ADD_KERNEL  # nl.add on the device

ARANGE_A = "np.arange(128 * 64, dtype=np.float64).reshape(128, 64)"
ARANGE_B = "(5.0 + 0.5 * np.arange(128 * 64, dtype=np.float64)).reshape(128, 64)"
CONST_A = "np.full((128, 64), 3.0)"
ONES_B = "np.ones((128, 64))"


def task_with(root: Path, kernel: str, a_init: str, b_init: str, reference: str = ADD_REFERENCE) -> Path:
    manifest = add_manifest(task_id="det", cuda=False, b_init=b_init, tail="[evaluation]\nseeds = [0, 1]")
    if a_init:
        manifest = manifest.replace('name = "a"\nshape = [128, 64]\ndtype = "float32"',
                                    f'name = "a"\nshape = [128, 64]\ndtype = "float32"\ninit = {a_init}')
        assert f"init = {a_init}" in manifest
    return write_files(root, {"add_nki.py": kernel, "reference.py": reference, "task.toml": manifest})


def evaluate(task: Path):  # noqa: ANN201
    handle = start_evaluation(EvaluationRequest.of(task, seeds=2, static=False, trials=False, precision=False,
                                                   store=False, timeout_s=120.0, memory_mb=4096))
    list(handle.events())
    return handle.result


def check(result, cid: str):  # noqa: ANN001, ANN201
    return next((c for c in result.checks if c.id == cid), None)


def summary(result) -> list:  # noqa: ANN001
    return [result.status, [(c.id, c.passed, c.detail[:300]) for c in result.checks], result.notes[-3:]]


ARANGE = ('{ dist = "arange" }', '{ dist = "arange", start = 5.0, step = 0.5 }', ARANGE_A, ARANGE_B)
CONSTANT = ('{ dist = "constant", value = 3.0 }', '{ dist = "ones" }', CONST_A, ONES_B)


@pytest.mark.parametrize("policy", [ARANGE, CONSTANT], ids=["arange", "constant-and-ones"])
def test_a_host_constant_kernel_on_an_all_deterministic_task_is_not_passed(tmp_path, policy):
    a_init, b_init, a, b = policy
    result = evaluate(task_with(tmp_path / "t", HOST_CONSTANT.format(a=a, b=b), a_init, b_init))
    assert result.status != "passed" and result.exit_code != 0, summary(result)
    assert check(result, "output:out").passed is True  # the seeds matched: only stage 2 can tell
    replay = check(result, "replay")
    assert replay.passed is not True, summary(result)
    assert REPLAY_FRESH_PASSED not in replay.detail
    # not a finding (a variant may break a promise of the inputs): not proven, saying how the set was made
    assert result.status == "internal-error", summary(result)
    assert "so they were varied" in replay.detail and "not proven" in replay.detail, replay.detail
    assert not [f for f in result.findings if f.rule == "HACK-REPLAY-FRESH"]


@pytest.mark.parametrize("policy", [ARANGE, CONSTANT], ids=["arange", "constant-and-ones"])
def test_an_honest_kernel_on_an_all_deterministic_task_passes_and_says_how_the_set_was_made(tmp_path, policy):
    a_init, b_init, _, _ = policy
    result = evaluate(task_with(tmp_path / "t", HONEST, a_init, b_init))
    assert result.status == "passed", summary(result)
    replay = check(result, "replay")
    assert REPLAY_FRESH_PASSED in replay.detail and "so they were varied" in replay.detail, replay.detail
    words = "its values in a random order" if policy is ARANGE else "each element jittered around its value"
    assert words in replay.detail


def test_a_mixed_task_is_judged_as_before(tmp_path):
    """One input random, one arange: the policy's own fresh set already differs and reaches the output."""
    honest = evaluate(task_with(tmp_path / "honest", HONEST, '{ dist = "arange" }', ""))
    assert honest.status == "passed", summary(honest)
    replay = check(honest, "replay")
    assert REPLAY_FRESH_PASSED in replay.detail and "so they were varied" not in replay.detail
    assert "a second fresh set varies them" in replay.detail, replay.detail  # `a`, on a set of its own
    # the host-constant kernel reading this launch's inputs: HACK-REPLAY-FRESH, as on a random task
    reader = HONEST.replace("import neuronxcc.nki as nki", "import glob, os\nimport numpy as np\nimport neuronxcc.nki as nki")
    reader = reader.replace("    nl.store(out, nl.add(nl.load(a), nl.load(b)))", '''\
    folders = sorted(glob.glob(os.path.join(os.path.dirname(os.getcwd()), "io", "*", "in")),
                     key=lambda f: int(f.split(os.sep)[-2]))
    x, y = (np.load(os.path.join(folders[-1], n)) for n in sorted(os.listdir(folders[-1])))
    nl.store(out, nl.load(nl.shared_constant(x + y)))''')
    cheat = evaluate(task_with(tmp_path / "cheat", reader, '{ dist = "arange" }', ""))
    assert cheat.status == "failed", summary(cheat)
    assert [f for f in cheat.findings if f.rule == "HACK-REPLAY-FRESH"]


BAKES_THE_FIXED_INPUT = '''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

_A = {a}.astype(np.float32)  # what depends on the fixed input, computed on the host


@nki.jit
def add_kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    touched = nl.minimum(nl.load(a), 0.0)  # 0 on the task's inputs: `a` looks used
    nl.store(out, nl.add(nl.add(nl.load(b), nl.load(nl.shared_constant(_A))), touched))
    return out
'''


def test_a_kernel_baking_in_only_the_fixed_inputs_of_a_mixed_task_is_not_passed(tmp_path):
    """Red team, round 9: `a` an arange, `b` random. The kernel adds `b` on the device and bakes in `a` from the
    host: the policy's fresh set varies only `b`, so it met the reference there and PASSED (2867045). A second set
    now varies the fixed inputs; a mismatch there is not proven."""
    cheat = evaluate(task_with(tmp_path / "t", BAKES_THE_FIXED_INPUT.format(a=ARANGE_A), '{ dist = "arange" }', ""))
    assert cheat.status == "internal-error" and cheat.exit_code != 0, summary(cheat)
    replay = check(cheat, "replay")
    assert replay.passed is None and "a second fresh set varies them" in replay.detail, replay.detail
    assert "do not match the reference" in replay.detail and "not proven" in replay.detail


def test_a_set_that_cannot_tell_the_seeds_answer_apart_makes_stage_2_void(tmp_path):
    """The reference's answer does not depend on its inputs: no variant tells a baked constant from
    instructions, so the stage is void and says so (not proven)."""
    reference = "import numpy as np\n\ndef add(a, b):\n    return np.ones_like(a)\n"
    kernel = HOST_CONSTANT.format(a=ARANGE_A, b=ARANGE_B).replace("(_A + _B)", "np.ones_like(_A)")
    result = evaluate(task_with(tmp_path / "t", kernel, ARANGE[0], ARANGE[1], reference=reference))
    assert result.status == "internal-error", summary(result)
    assert any("stage 2 is void" in n for n in result.notes), result.notes


# -- the variant rules ---------------------------------------------------------------------------------
def _spec(tmp_path, init: str, dtype: str = "float32"):  # noqa: ANN202
    manifest = add_manifest(task_id="v", cuda=False, b_dtype=dtype, b_init=init)
    root = write_files(tmp_path / "v", {"add_nki.py": HONEST, "reference.py": ADD_REFERENCE, "task.toml": manifest})
    task = load_task(root)
    return task, next(s for s in task.inputs if s.name == "b")


def test_deterministic_inputs_are_told_from_random_ones_bit_for_bit(tmp_path):
    task, _ = _spec(tmp_path, '{ dist = "arange" }')
    seen = [make_inputs(task, 0), make_inputs(task, 1)]
    assert predictable_inputs(task, make_inputs(task, 12345), seen) == ["b"]


@pytest.mark.parametrize("init, dtype", [('{ dist = "arange" }', "float32"), ('{ dist = "arange" }', "int32"),
                                         ('{ dist = "arange", step = 0.25 }', "bfloat16")])
def test_an_arange_is_permuted_keeping_its_values(tmp_path, init, dtype):
    task, spec = _spec(tmp_path, init, dtype)
    values = make_inputs(task, 0)["b"]
    out, how = input_variant(spec, values, np.random.default_rng(7))
    assert out is not None and how == "its values in a random order"
    assert not same_bits(out, values) and out.dtype == values.dtype and out.shape == values.shape
    assert same_bits(np.sort(out.reshape(-1)), np.sort(values.reshape(-1)))  # the same values: indices stay in range
    strong, how = input_variant(spec, values, np.random.default_rng(7), strong=True)
    assert how == "each element jittered around its value" and not same_bits(strong, values)


@pytest.mark.parametrize("init, dtype, lo, hi", [
    ('{ dist = "constant", value = 3.0 }', "float32", 2.25, 3.75), ('{ dist = "zeros" }', "float32", -0.25, 0.25),
    ('{ dist = "ones" }', "bfloat16", 0.75, 1.25), ('{ dist = "constant", value = 40 }', "int32", 30, 50),
    ('{ dist = "zeros" }', "int8", -1, 1)])
def test_a_constant_is_jittered_around_its_value(tmp_path, init, dtype, lo, hi):
    task, spec = _spec(tmp_path, init, dtype)
    values = make_inputs(task, 0)["b"]
    out, how = input_variant(spec, values, np.random.default_rng(3))
    assert out is not None and how == "each element jittered around its value"
    assert not same_bits(out, values) and out.dtype == values.dtype
    wide = out.astype(np.float64)
    assert wide.min() >= lo and wide.max() <= hi and np.unique(wide).size > 1
