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
            WRITER(fd, line.encode())
        except OSError:
            pass
'''


# os.write by a computed name: the static rule shows it (medium) but does not fail the run, and no audit
# event reports it; the evaluator's reading of replies is what stands
WRITER_BY_NAME = 'import os as _os\nWRITER = getattr(_os, "wri" + "te")\n'
# the plain Python way: refused by the sandbox guard in the kernel's process
WRITER_BY_OPEN = 'def WRITER(fd, data):\n    with open(fd, "wb", closefd=False) as f:\n        f.write(data)\n'


def _call_forge_in_the_kernel(source: str) -> str:
    return source.replace("    return c\n", "    _forge()\n    return c\n")


def test_a_reply_forged_on_the_event_descriptor_is_not_taken_and_fails_the_run(tmp_path):
    task = wrong_task(tmp_path, WRITER_BY_NAME + FORGED_REPLY, edit=_call_forge_in_the_kernel)
    result, _ = evaluate(task)
    assert_not_passed(result)
    # the forger's walk of its scratch folder (os.getcwd, os.listdir) is a HACK-ENV-PROBE (round 10A); nothing
    # else static fails it (os.write by a computed name is shown, not failed): the run-time layer stands
    integrity = check(result, "integrity")
    assert integrity.passed is False and "HACK-ENV-PROBE" in integrity.detail and "HACK-TAMPER" not in integrity.detail
    assert check(result, "output:c").passed is False  # the kernel's own (wrong) outputs were compared
    assert check(result, "sandbox").passed is False
    forged = findings(result, "EXEC-SANDBOX-FORGERY")
    assert forged and "event descriptor" in forged[0].message


def test_wrapping_a_raw_descriptor_to_forge_a_reply_is_refused_by_the_guard(tmp_path):
    task = wrong_task(tmp_path, WRITER_BY_OPEN + FORGED_REPLY, edit=_call_forge_in_the_kernel)
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "output:c").passed is False
    assert check(result, "sandbox").passed is False
    refused = findings(result, "EXEC-SANDBOX-DESCRIPTOR")
    assert refused and refused[0].file == "vector_add_nki.py" and not findings(result, "EXEC-SANDBOX-FORGERY")


# A thread (started through concurrent.futures: no `import threading` for the static rule to see)
# that rewrites each output file with numpy's a + b right after nkitui's server saved it, racing
# the evaluator's read.
RACING_THREAD = '''
def _racer():
    import os, time
    import numpy as np
    io = os.path.join(os.getcwd(), "..", "io")
    done = {}
    while True:
        try:
            for name in os.listdir(io):
                out = os.path.join(io, name, "out", "c.npy")
                try:
                    st = os.stat(out)
                except OSError:
                    continue
                if done.get(name) == (st.st_ino, st.st_mtime_ns) or st.st_size < 4 * 262144:  # all of c (ELEMENTS float32)
                    continue
                ind = os.path.join(io, name, "in")
                a, b = (np.load(os.path.join(ind, n)) for n in sorted(os.listdir(ind)))
                np.save(out + ".t.npy", (a + b).astype(np.float32))
                os.replace(out + ".t.npy", out)
                st = os.stat(out)
                done[name] = (st.st_ino, st.st_mtime_ns)
        except Exception:
            pass
        time.sleep(0)
import sys as _sys
_sys.setswitchinterval(1e-5)  # the racer gets the interpreter within microseconds of the save
import concurrent.futures as _cf
_pool = _cf.ThreadPoolExecutor(1)
_pool.submit(_racer)
'''


def test_a_thread_rewriting_the_saved_outputs_is_caught_by_their_digest(tmp_path):
    result, _ = evaluate(wrong_task(tmp_path, RACING_THREAD), seeds=2)
    assert_not_passed(result)
    output = check(result, "output:c")
    assert output is None or output.passed is False
    # no seed's outputs were taken from the racing thread: since threads are refused to task code
    # (tests/security/test_threads.py) it never starts and importing the kernel fails; where it could
    # start, each seed's outputs are refused by their digest or are the kernel's own (wrong)
    refused = [f for f in result.findings if f.rule == "EXEC-SANDBOX-THREAD"]
    assert refused or (len(result.seed_results) == 2 and all(s.passed is False for s in result.seed_results))


def test_a_kernel_cannot_write_host_results_into_hbm_through_the_emulators_tensor_methods(tmp_path):
    # getattr with computed names: the static rule sees no emulator internals, the run-time refusal stands
    appended = '_W, _A = "wri" + "te", "arr" + "ay"'
    task = wrong_task(tmp_path, appended, edit=lambda s: s.replace(
        "    return c\n", "    getattr(c, _W)(getattr(a, _A)() + getattr(b, _A)())\n    return c\n"))
    result, _ = evaluate(task)
    assert_not_passed(result)
    assert check(result, "kernel-runs").passed is False
    assert "emulator machinery, not part of the nki namespace" in result.error.message
    assert result.error.file == "vector_add_nki.py"


def test_the_emulators_tensor_internals_fail_the_integrity_check():
    from nkitui.analysis.rules.hacks import tamper_lines

    source = "def k(a, c):\n    c.write(a.read_f32())\n    c.storage.data[:] = 0\n    getattr(c, 'storage')\n"
    hits = {line for line, _, severity in tamper_lines(source) if severity == "high"}
    assert hits == {2, 3, 4}


def test_an_output_file_rewritten_after_it_was_saved_is_refused_by_its_digest(tmp_path):
    # The racing thread's effect without the race: the server saved the kernel's outputs (with the
    # digest of the bytes it wrote), then task code replaced the file before the evaluator read it.
    import numpy as np
    import pytest as _pytest

    from nkitui.executor.arrays import ArrayTransferError, load_array, save_array

    meta = save_array(tmp_path / "c.npy", np.arange(8, dtype=np.float32))
    assert load_array(tmp_path, meta, max_elements=8, require_digest=True).sum() == 28
    np.save(tmp_path / "c.npy", np.full(8, 7, dtype=np.float32))
    with _pytest.raises(ArrayTransferError, match="changed after it was written"):
        load_array(tmp_path, meta, max_elements=8, require_digest=True)
    with _pytest.raises(ArrayTransferError, match="without the digest"):
        load_array(tmp_path, {k: v for k, v in meta.items() if k != "sha256"}, max_elements=8, require_digest=True)
    (tmp_path / "c.npy").unlink()
    (tmp_path / "c.npy").symlink_to(tmp_path / "elsewhere.npy")
    with _pytest.raises(ArrayTransferError):
        load_array(tmp_path, meta, max_elements=8, require_digest=True)
