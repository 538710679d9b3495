"""`nkitui perf ...` (nkitui/cli/perf.py) and the text rendering."""

import json
import subprocess
import sys
from pathlib import Path

from nkitui.cli import main as nkitui_main
from nkitui.perf import estimate
from nkitui.perf.report import bar, fmt_bytes, fmt_time, render_record
from tests.perf.test_estimate import matmul_trace

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    return nkitui_main(["perf", *argv])


def test_estimate_command_on_a_saved_trace(tmp_path, capsys):
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(matmul_trace().to_json()))
    assert main(["estimate", str(p), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["source"] == "estimated" and rec["target"] == "trn1"
    assert main(["estimate", str(p), "--target", "trn2"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("mm on trn2:") and "(estimated, nkitui cost model v2)" in text
    assert "on calibrated kernel families; outside them the error is unknown" in text  # the band, always
    assert "dma     " in text and "hot lines:" in text and "mm.py:11" in text


def test_profile_and_compare_commands(tmp_path, capsys):
    assert main(["profile", str(DATA / "explorer_view.json")]) == 0
    assert "(measured, neuron-explorer json)" in capsys.readouterr().out
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(matmul_trace().to_json()))
    assert main(["compare", str(DATA / "explorer_view.json"), str(trace), "--json"]) == 0
    c = json.loads(capsys.readouterr().out)
    assert c["a"].startswith("A explorer_view (measured") and c["b"].startswith("B mm (estimated")
    assert c["warnings"][0].startswith("A is measured and B is estimated")


def test_sol_command_and_bad_input(capsys):
    assert main(["sol", "--kind", "matmul", "--in", "8192x4096:bfloat16", "--in", "8192x8192:bfloat16",
                 "--out", "4096x8192:bfloat16", "--lhs-transposed", "--target", "trn1"]) == 0
    assert "speed of light on trn1: 5.99 ms (compute-bound" in capsys.readouterr().out
    assert main(["sol", "--kind", "matmul", "--in", "8192xfoo"]) == 2
    assert "--in '8192xfoo': write shapes as DIMxDIM" in capsys.readouterr().err


def test_invalid_files_exit_2_with_the_file_named(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "instructions": [[1]], "storages": []}')
    assert main(["estimate", str(bad)]) == 2
    assert f"{bad}: " in capsys.readouterr().err
    assert main(["estimate", str(tmp_path / "none.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_module_runs_as_a_child_process():
    out = subprocess.run([sys.executable, "-m", "nkitui", "perf", "profile", str(DATA / "neuron_profile_legacy.json"),
                          "--target", "trn1"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "neuron_profile_legacy on trn1: 20.0 µs (measured" in out.stdout
    assert "MFU n/a" in out.stdout  # the legacy summary has no FLOP counts


def test_formatting_helpers():
    # the one formatter of quantities (nkitui.common.units): three significant digits, µs not us
    assert (fmt_time(2.5), fmt_time(0.0123)) == ("2.50 s", "12.3 ms")
    assert (fmt_time(4.2e-6), fmt_time(3e-8)) == ("4.20 µs", "30.0 ns")
    assert (fmt_bytes(512), fmt_bytes(2048), fmt_bytes(3 * 2**30)) == ("512 B", "2.0 KiB", "3.0 GiB")
    assert bar(0.5, 10) == "#####....." and bar(2.0, 4) == "####"
    text = render_record(estimate(matmul_trace()), hot=2)
    assert text.count("mm.py:") == 2 and "roofline:" in text and "memory-bound" in text


def _saved_trace(tmp_path, **changes) -> Path:
    data = matmul_trace().to_json()
    data.update(changes)
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(data))
    return p


def test_a_trace_of_another_version_names_the_file_and_the_field(tmp_path, capsys):
    p = _saved_trace(tmp_path, version=9)
    for argv in (["estimate", str(p)], ["compare", str(p), str(p)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{p}: field 'version' is 9" in err and "record the trace again" in err


def test_a_file_that_is_no_trace_says_what_to_do(tmp_path, capsys):
    p = tmp_path / "summary.json"
    p.write_text('{"summary": {"foo": 1}}')
    assert main(["estimate", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}: not an emulator trace (an object without 'instructions')" in err and "perf profile" in err
    short = _saved_trace(tmp_path, instructions=[[0, "dma"]])
    assert main(["estimate", str(short)]) == 2
    assert f"{short}: instructions[0] has 2 fields, expected a row of 21" in capsys.readouterr().err


def test_a_trace_given_as_a_profile_points_to_estimate(tmp_path, capsys):
    p = _saved_trace(tmp_path)
    assert main(["profile", str(p)]) == 2
    assert f"{p}: an nkitui emulator trace, not a profiler export; estimate it" in capsys.readouterr().err
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"summary": {"foo": 1}}')
    assert main(["profile", str(unknown)]) == 2
    assert "--output-format summary-json" in capsys.readouterr().err


def test_a_reader_that_closes_the_pipe_gets_no_traceback(tmp_path):
    p = _saved_trace(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "nkitui", "perf", "estimate", str(p), "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head -c0` would: every write to stdout fails
    try:
        err = proc.communicate(timeout=60)[1].decode()
    finally:
        proc.kill()
    assert proc.wait(timeout=10) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_compare_text_shows_each_metric_in_its_unit(tmp_path, capsys):
    p = _saved_trace(tmp_path)
    assert main(["compare", str(p), str(p)]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:] if line.startswith("  ")}
    rec = estimate(matmul_trace())
    assert f"{fmt_time(rec.total_time)} -> {fmt_time(rec.total_time)}" in rows["total_time"]
    assert "e-0" not in rows["total_time"]  # not raw seconds
    assert " KiB -> " in rows["hbm_read_bytes"] or " MiB -> " in rows["hbm_read_bytes"]
    assert "% -> " in rows["hfu_estimated_percent"]


def test_sol_names_the_flag_of_an_unknown_dtype(capsys):
    assert main(["sol", "--kind", "matmul", "--in", "8x8:float99", "--in", "8x8"]) == 2
    assert "--in '8x8:float99': unknown dtype 'float99'" in capsys.readouterr().err


def test_nkitui_perf_usage_names_the_nkitui_command():
    out = subprocess.run([sys.executable, "-m", "nkitui", "perf", "estimate"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert out.returncode == 2
    assert "usage: nkitui perf estimate" in out.stderr and "Traceback" not in out.stderr


def test_a_saved_record_of_another_version_is_named_in_compare(tmp_path, capsys):
    data = estimate(matmul_trace()).to_json()
    good = tmp_path / "a.json"
    good.write_text(json.dumps(data))
    data["version"] = 7
    newer = tmp_path / "b.json"
    newer.write_text(json.dumps(data))
    assert main(["compare", str(good), str(newer)]) == 2
    err = capsys.readouterr().err
    assert f"{newer}: not a valid saved record (unsupported PerfRecord version 7" in err and "save it again" in err
    assert main(["compare", str(good), str(good)]) == 0
