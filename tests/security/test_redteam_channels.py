"""Red team, second round: variants that went around the first round's layers (each passed a wrong
kernel before its fix).

  numpy patched in the kernel's process  `np.save` replaced by a function that writes numpy's a + b:
                                         the outputs were checked on the device, then rewritten while
                                         nkitui's own code saved them (static HACK-TAMPER for the
                                         spelled-out form; PatchWatch at run time for any form)
  a forged reply on the event descriptor the kernel writes `{"event": "data", "kind": "reply", ...}`
                                         with numpy's a + b and "device" provenance on the raw event
                                         descriptor, addressed to the request folder it can list
"""

from __future__ import annotations

from tests.security.test_forgery import (
    assert_not_passed,
    check,
    evaluate,
    findings,
    wrong_task,
)

# The assignment goes through a loop variable: no alias of numpy is assigned to by name, so the
# static rule does not see it and only the run-time watch stands.
PATCHED_SAVE_HIDDEN = '''
import numpy as _np
_orig_save, _orig_load = _np.save, _np.load
def _forged_save(path, arr, *args, **kwargs):
    import os
    p = str(path)
    if p.endswith("/out/c.npy"):
        ind = os.path.join(os.path.dirname(os.path.dirname(p)), "in")
        a, b = (_orig_load(os.path.join(ind, n)) for n in sorted(os.listdir(ind)))
        arr = (a + b).astype(_np.float32)
    return _orig_save(path, arr, *args, **kwargs)
for _m in [_np]:
    _m.save = _forged_save
'''


def test_numpy_save_replaced_through_an_alias_is_refused_at_run_time(tmp_path):
    result, _ = evaluate(wrong_task(tmp_path, PATCHED_SAVE_HIDDEN))
    assert_not_passed(result)
    output = check(result, "output:c")
    assert output is None or output.passed is not True  # the forged outputs were never compared
    runs = check(result, "kernel-runs")
    assert runs.passed is False and "numpy.save" in runs.detail and "monkeypatching" in runs.detail


def test_numpy_save_replaced_by_name_fails_the_integrity_check():
    from nkitui.analysis.rules.hacks import tamper_lines

    source = "import numpy as np\nimport numpy.lib.format as fmt\nnp.save = print\nsetattr(np, 'load', print)\n" \
             "del np.asarray\nnp.lib.format.write_array = print\nimport threading\nimport signal\n"
    hits = {line: why for line, why, severity in tamper_lines(source) if severity == "high"}
    assert set(hits) == {3, 4, 5, 6, 7, 8}, hits
    assert "replaces part of the imported `numpy`" in hits[3]
    # a kernel's own objects and attributes are not monkeypatching
    assert not tamper_lines("import numpy as np\nclass T:\n    pass\nt = T()\nt.x = np.zeros(3)\n")


FORGED_REPLY = '''
def _forge():
    import json, os
    import numpy as np
    io = os.path.join(os.getcwd(), "..", "io")
    for name in sorted(os.listdir(io), key=lambda n: os.stat(os.path.join(io, n)).st_mtime, reverse=True):
        inputs = os.path.join(io, name, "in")
        if os.path.isdir(inputs) and len(os.listdir(inputs)) == 2:
            break
    a, b = (np.load(os.path.join(inputs, n)) for n in sorted(os.listdir(inputs)))
    os.makedirs(os.path.join(io, name, "out"), exist_ok=True)
    np.save(os.path.join(io, name, "out", "forged.npy"), (a + b).astype(np.float32))
    line = json.dumps({"event": "data", "kind": "reply", "data": {
        "id": name, "outputs": {"c": {"file": "forged.npy", "dtype": "float32", "shape": [int(a.shape[0])]}},
        "elapsed_s": None, "provenance": {"c": {"device": True}}, "trace": None}}) + "\\n"
    for fd in range(3, 12):
        try:
            with open(fd, "w", closefd=False) as f:
                f.write(line)
        except OSError:
            pass
'''


def _call_forge_in_the_kernel(source: str) -> str:
    return source.replace("    return c\n", "    _forge()\n    return c\n")


def test_a_reply_forged_on_the_event_descriptor_is_not_taken_and_fails_the_run(tmp_path):
    task = wrong_task(tmp_path, FORGED_REPLY, edit=_call_forge_in_the_kernel)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "output:c").passed is False  # the kernel's own (wrong) outputs were compared
    assert check(result, "sandbox").passed is False
    forged = findings(result, "EXEC-SANDBOX-FORGERY")
    assert forged and "event descriptor" in forged[0].message
