"""Property: a malformed manifest is always reported as TaskError problems, never a traceback."""

import tomllib
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nkitui.task import Task, TaskError, load_task

from .conftest import MANIFEST, write_task

BASE = tomllib.loads(MANIFEST)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["float32", "bf16", "transpose", "allclose", "../x", "a.py::f", "trn1"]),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)),
    max_leaves=8,
)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


ALL_PATHS = [p for p in _paths(BASE) if p]


def _set(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _strip_none(x):
    if isinstance(x, dict):
        return {str(k): _strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_strip_none(v) for v in x if v is not None]
    return x


def _check(root: Path) -> None:
    try:
        result = load_task(root)
    except TaskError as exc:
        assert exc.problems, "a TaskError must carry at least one problem"
        for p in exc.problems:
            assert p.file and p.message and p.fix
        str(exc)
        return
    assert isinstance(result, Task)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(ALL_PATHS), values), min_size=1, max_size=4),
       deletions=st.lists(st.sampled_from(ALL_PATHS), max_size=2))
def test_mutated_manifests_never_crash(tmp_path_factory, edits, deletions):
    import copy

    doc = copy.deepcopy(BASE)
    for path, value in edits:
        try:
            _set(doc, path, value)
        except (KeyError, IndexError, TypeError):
            continue
    for path in deletions:
        try:
            node = doc
            for key in path[:-1]:
                node = node[key]
            del node[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
    try:
        text = tomli_w.dumps(_strip_none(doc))
    except (TypeError, ValueError):
        return
    _check(write_task(tmp_path_factory.mktemp("fuzz"), text))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes(tmp_path_factory, text):
    _check(write_task(tmp_path_factory.mktemp("text"), text))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash(tmp_path_factory, data):
    root = write_task(tmp_path_factory.mktemp("bytes"))
    (root / "task.toml").write_bytes(data)
    _check(root)
