"""Red team, round 3: numpy's `as_strided` builds an array over any address with no bounds check; with
`np.byte_bounds` (an array's address) and `id()` (an object's) task code reads and writes any of its
process's memory — nkitui's objects, code and the request ids included — with numpy's public API alone
and no audit event. Until the device-memory work closes this at run time (docs/executor.md,
Containment round 3), the integrity check fails on every spelling of it."""

from __future__ import annotations

import pytest

from nkitui.analysis.rules.hacks import tamper_lines

from .test_forgery import assert_not_passed, check, evaluate, findings, line_of, wrong_task


@pytest.mark.parametrize("source", [
    "import numpy as np\nv = np.lib.stride_tricks.as_strided(np.zeros(1), shape=(9,), strides=(8,))\n",
    "from numpy.lib.stride_tricks import as_strided\n",
    "from numpy.lib import stride_tricks\nv = stride_tricks.as_strided\n",
    "import numpy as np\nlow, high = np.byte_bounds(np.zeros(1))\n",
    "import numpy as np\nf = getattr(np.lib.stride_tricks, 'as_strided')\n",
    "import numpy.lib.stride_tricks as st\nd = st.DummyArray\n",
])
def test_every_spelling_of_numpys_raw_memory_doors_is_high(source):
    assert [sev for _, _, sev in tamper_lines(source)].count("high") >= 1, tamper_lines(source)


def test_ordinary_numpy_views_are_not_flagged():
    assert tamper_lines("import numpy as np\nb = np.broadcast_to(np.zeros(3), (4, 3))\n"
                        "w = np.lib.stride_tricks.sliding_window_view(np.zeros(8), 3)\n") == []


RAW_READ = '''
def _scrape():
    import numpy as np
    secret = "REQUEST-ID-" + "ab12cd34" * 4
    base = np.zeros(16, np.uint8)
    offset = id(secret) - np.byte_bounds(base)[0]
    print("READ", bytes(np.lib.stride_tricks.as_strided(base, shape=(2, 90), strides=(offset, 1))[1])[-30:])
'''


def test_a_kernel_reading_its_process_memory_through_as_strided_fails_the_integrity_check(tmp_path):
    task = wrong_task(tmp_path, RAW_READ, edit=lambda s: s.replace("    return c\n", "    _scrape()\n    return c\n"))
    result, _ = evaluate(task)
    assert_not_passed(result)
    integrity = check(result, "integrity")
    assert integrity.passed is False
    lines = findings(result, "HACK-TAMPER")[0].data["lines"]
    assert line_of(task, "offset = id(secret)") in lines and line_of(task, "as_strided(base") in lines
