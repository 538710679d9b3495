"""Red team: writes into the emulated device's memory behind the recorded instructions (issue #14).

The wrong kernel (the bundled vector_add with nl.add changed to nl.multiply) computes a * b on the
device and then tries to put a + b into its output without an instruction: through the tensor's
storage (by a computed attribute name, by `object.__getattribute__`), through a numpy array forged
over the output's address (`__array_interface__`), into an SBUF tile that a legitimate DMA then
stores, by replacing the cells with a host array, by calling the emulator's write method, or from a
thread. In the kernel's process the device memory is write-protected outside the instructions'
writes (nkitui/emulator/devmem.py): each attempt ends the kernel process (SIGSEGV) or is refused,
at the kernel's line, and the run is never passed.

Every test runs the real evaluator and its real untrusted children on a copy of the bundled task.
"""

from __future__ import annotations

from pathlib import Path

from tests.security.test_forgery import KERNEL, assert_not_passed, check, evaluate, line_of, wrong_task


def _before_return(code: str, *, module: str = ""):  # noqa: ANN202
    """An edit of the kernel's source: `code` (indented as the kernel's body) just before `return c`,
    `module` after the imports."""
    body = "".join(f"    {line}\n" for line in code.strip("\n").splitlines())

    def edit(source: str) -> str:
        assert "    return c\n" in source
        source = source.replace("    return c\n", body + "    return c\n")
        if module:
            source = source.replace("import nki.language as nl\n", "import nki.language as nl\n" + module.strip() + "\n", 1)
        return source

    return edit


def assert_crashed_at(result, task: Path, needle: str) -> None:  # noqa: ANN001
    """The kernel process died on the write (SIGSEGV), and the report names the kernel's line."""
    assert_not_passed(result)
    assert result.status == "crashed", (result.status, result.error)
    assert result.error.kind == "crash" and "SIGSEGV" in result.error.message, result.error
    assert "write-protected" in result.error.message
    assert (result.error.file, result.error.line) == (KERNEL, line_of(task, needle)), result.error


def assert_refused_at(result, task: Path, needle: str, words: str) -> None:  # noqa: ANN001
    assert_not_passed(result)
    assert check(result, "kernel-runs").passed is False
    err = result.error
    assert err is not None and words in err.message, err
    assert (err.file, err.line) == (KERNEL, line_of(task, needle)), err


# the hole as reported: the output's backing numpy memory written behind the instructions
STORAGE_WRITE = """
getattr(c, _S).data.reshape(-1)[:] = getattr(a, _S).data.reshape(-1) + getattr(b, _S).data.reshape(-1)
"""


def test_writing_the_outputs_storage_by_a_computed_attribute_name_is_not_a_pass(tmp_path):
    task = wrong_task(tmp_path, edit=_before_return(STORAGE_WRITE, module='_S = "stor" + "age"'))
    result, _ = evaluate(task)
    assert_crashed_at(result, task, "getattr(c, _S).data")


def test_writing_the_outputs_storage_through_object_getattribute_is_not_a_pass(tmp_path):
    code = """
_st = object.__getattribute__
_st(c, "storage").data.reshape(-1)[:] = _st(a, "storage").data.reshape(-1) + _st(b, "storage").data.reshape(-1)
"""
    task = wrong_task(tmp_path, edit=_before_return(code))
    result, _ = evaluate(task)
    assert_crashed_at(result, task, '_st(c, "storage").data')
    assert check(result, "integrity").passed is False  # object.__getattribute__ is a high static finding too


FORGED_POINTER = """
class _At:
    def __init__(self, like):
        self.__array_interface__ = dict(like.__array_interface__)
        self.__array_interface__["data"] = (like.__array_interface__["data"][0], False)
"""


def test_a_numpy_array_forged_over_the_outputs_address_is_not_a_pass(tmp_path):
    code = """
_st = object.__getattribute__
_cells = _st(c, "storage").data
_forged = np.asarray(_At(_cells))
_forged.reshape(-1)[:] = _st(a, "storage").data.reshape(-1) + _st(b, "storage").data.reshape(-1)
"""
    task = wrong_task(tmp_path, edit=_before_return(code, module="import numpy as np\n" + FORGED_POINTER))
    result, _ = evaluate(task)
    assert_crashed_at(result, task, "_forged.reshape(-1)[:]")


def test_writing_an_sbuf_tile_then_storing_it_legitimately_is_not_a_pass(tmp_path):
    def edit(source: str) -> str:
        old = "        nisa.dma_copy(dst=c_rows[row0:row0 + P, :], src=c_tile)\n"
        assert old in source
        forged = ("        getattr(c_tile, 'storage').data[...] = "
                  "getattr(a_tile, 'storage').data + getattr(b_tile, 'storage').data  # forged SBUF\n")
        return source.replace(old, forged + old)

    task = wrong_task(tmp_path, edit=edit)
    result, _ = evaluate(task)
    assert_crashed_at(result, task, "# forged SBUF")


def test_cells_replaced_by_a_host_array_are_refused_where_an_instruction_reads_them(tmp_path):
    def edit(source: str) -> str:
        old = "        nisa.dma_copy(dst=c_rows[row0:row0 + P, :], src=c_tile)\n"
        forged = ("        _sb = getattr(c_tile, 'storage')\n"
                  "        _sb.data = getattr(a_tile, 'storage').data + getattr(b_tile, 'storage').data  # host cells\n"
                  "        object.__setattr__(c_tile, '_array_view', _sb.data)\n")
        return source.replace(old, forged + old)

    task = wrong_task(tmp_path, edit=edit)
    result, _ = evaluate(task)
    assert_refused_at(result, task, "object.__setattr__(c_tile", "replaced from the host")


def test_calling_the_emulators_write_method_is_refused(tmp_path):
    code = """
_st = object.__getattribute__
c.write(_st(a, "storage").data + _st(b, "storage").data)
"""
    task = wrong_task(tmp_path, edit=_before_return(code))
    result, _ = evaluate(task)
    assert_refused_at(result, task, "c.write(", "tensor.write() is nkitui's emulator machinery")


def test_reading_device_values_to_the_host_is_refused(tmp_path):
    task = wrong_task(tmp_path, edit=_before_return("_host = a.array() + b.array()"))
    result, _ = evaluate(task)
    assert_refused_at(result, task, "a.array()", "tensor.array() is nkitui's emulator machinery")


def test_a_thread_racing_the_instructions_writes_is_refused(tmp_path):
    code = """
_t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
_t.start()
"""

    def edit(source: str) -> str:
        source = _before_return("pass", module="import threading\nimport time")(source)
        old = "    n = a.shape[0]\n"
        return source.replace(old, old + "".join(f"    {line}\n" for line in code.strip().splitlines()), 1)

    task = wrong_task(tmp_path, edit=edit)
    result, _ = evaluate(task)
    assert_not_passed(result)
    err = result.error
    # refused when it starts (the confinement refuses threads to task code), else when an instruction
    # would open the device memory while it runs (devmem, where threads are not refused)
    assert err is not None and ("starting a thread refused" in err.message
                                or "a thread started by the kernel's code is running" in err.message), err
    assert err.file == KERNEL


# -- inputs the harness never gave ----------------------------------------------------------------
# The wrong kernel multiplies; launched on (a + b, ones) it computes a + b on the device, with every
# instruction recorded. The launch that produced the output must have received the harness's arrays.
MODIFIED_INPUTS = '''
import numpy as _np
class _OnOwnInputs:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        self.grid = grid
        return self
    def __call__(self, a, b):
        return self.kernel[self.grid](a + b, _np.ones_like(b))  # device-computed, on host-made inputs
vector_add_kernel = _OnOwnInputs(vector_add_kernel)
'''


def _assert_not_the_harness_inputs(result, task: Path, needle: str) -> None:  # noqa: ANN001
    assert_not_passed(result)
    assert check(result, "device-outputs").passed is False
    assert result.error.kind == "host-compute", result.error
    assert "did not receive the harness's input arrays" in result.error.message
    dynamic = [f for f in result.findings if f.rule == "HACK-HOST-COMPUTE" and f.source == "executor"]
    assert dynamic and (dynamic[0].file, dynamic[0].line) == (KERNEL, line_of(task, needle))
    assert not result.seed_results[0].outputs  # never compared


def test_the_kernel_launched_on_host_modified_inputs_is_not_device_output(tmp_path):
    task = wrong_task(tmp_path, MODIFIED_INPUTS)
    result, _ = evaluate(task)
    _assert_not_the_harness_inputs(result, task, "vector_add_kernel = _OnOwnInputs(vector_add_kernel)")


def test_changing_the_harness_inputs_in_place_before_the_launch_faults(tmp_path):
    in_place = MODIFIED_INPUTS.replace("return self.kernel[self.grid](a + b, _np.ones_like(b))",
                                       "a[...] = a + b; b[...] = 1  # in place\n        return self.kernel[self.grid](a, b)")
    task = wrong_task(tmp_path, in_place)
    result, _ = evaluate(task)
    assert_crashed_at(result, task, "# in place")


COPY_KERNEL = '''
import numpy as _np

@nki.jit
def _copy_kernel(src):
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    rows = src.reshape((src.shape[0] // 1024, 1024))
    out_rows = out.reshape((src.shape[0] // 1024, 1024))
    for t in range(rows.shape[0] // 128):
        tile = nl.ndarray((128, 1024), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=rows[t * 128:(t + 1) * 128, :])
        nisa.dma_copy(dst=out_rows[t * 128:(t + 1) * 128, :], src=tile)
    return out

class _Copier:
    def __init__(self, kernel):
        self.kernel = kernel
    def __getitem__(self, grid):
        self.grid = grid
        return self
    def __call__(self, a, b):
        self.kernel[self.grid](a, b)  # the real launch, for a normal-looking trace
        return _copy_kernel(a, b, a + b) if False else _copy_kernel(a + b)  # a copy kernel fed a host result
vector_add_kernel = _Copier(vector_add_kernel)
'''


def test_a_copy_kernel_fed_a_host_result_is_not_device_output(tmp_path):
    task = wrong_task(tmp_path, COPY_KERNEL)
    result, _ = evaluate(task)
    _assert_not_the_harness_inputs(result, task, "vector_add_kernel = _Copier(vector_add_kernel)")


def test_the_harness_arrays_plus_a_host_result_are_not_the_harness_inputs(tmp_path):
    extra = COPY_KERNEL.replace("def _copy_kernel(src):", "def _copy_kernel(a, b, src):").replace(
        "_copy_kernel(a, b, a + b) if False else _copy_kernel(a + b)", "_copy_kernel(a, b, a + b)")
    task = wrong_task(tmp_path, extra)
    result, _ = evaluate(task)
    _assert_not_the_harness_inputs(result, task, "vector_add_kernel = _Copier(vector_add_kernel)")


def test_the_write_paths_private_names_fail_the_integrity_check():
    from nkitui.analysis.rules.hacks import tamper_lines

    source = ("def k(a, c):\n    c._cells()[...] = 0\n    c.storage._data = None\n    a._apply(x)\n"
              "    from nkitui.emulator import devmem\n")
    hits = {line for line, _, severity in tamper_lines(source) if severity == "high"}
    assert hits == {2, 3, 4, 5}
