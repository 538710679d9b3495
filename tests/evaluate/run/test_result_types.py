"""RunResult's nested record types are imported while the worker runs (nkitui.evaluate.run.start), not
after it ends: the decode then finds them bound and reads the result the same way."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_warming_binds_the_nested_types_and_a_result_decodes_the_same():
    script = textwrap.dedent("""
        import sys, threading
        from nkitui.evaluate.run import result as r
        from nkitui.evaluate.run.start import warm_result_types
        assert "numpy" not in sys.modules and not r._bound     # importing the parent's modules stays cheap
        threads = [threading.Thread(target=warm_result_types) for _ in range(2)]  # two at once: harmless
        for t in threads: t.start()
        for t in threads: t.join()
        assert r._bound and "nkitui.evaluate.numerics.audit" in sys.modules
        from nkitui.evaluate.numerics.audit import NumericsAudit
        res = r.RunResult(run_id="x", task_id="t", status="passed", numerics=NumericsAudit())
        back = r.RunResult.from_dict(res.to_dict())
        assert isinstance(back.numerics, NumericsAudit) and back.to_dict() == res.to_dict()
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
