"""Run a peer project's own test suite, unchanged, against the nkitui emulator, and say why tests fail.

    .venv/bin/python -m benchmarks.peer_suites nki_library --checkout /work/peers/nki-library \
        --python /work/peers/venv-nki-library/bin/python [-n 2] [--json out.json] [-- -k rope]

    .venv/bin/python -m benchmarks.peer_suites nki_library --merge full.json rerun.json [--json all.json]

(`--merge` runs nothing: it folds earlier `--json` reports by node id, later ones winning.)

The peer checkout lives OUTSIDE this repository (never vendored); its tests run in a child pytest
with the peer's own interpreter, so the peer's dependencies (torch, ...) never enter our venv.

INTERFACE (stable; adapters such as nki_library.py and nki_samples.py follow it)
================================================================================

An adapter is a module `benchmarks.peer_suites.<name>` that defines

    SUITE = PeerSuite(
        name="nki-library",                      # shown in reports
        repo="aws-neuron/nki-library",           # where the checkout comes from
        marker="src/nkilib_src",                 # a checkout-relative path proving the checkout is this suite
        pytest_args=("test/integration", "--test-mode", "simulation", "-m", "fast",
                     "--output-directory", "{tmp}/out"),   # default selection; {tmp} = a scratch dir
        python_path=("src",),                    # checkout-relative dirs put on PYTHONPATH
        shim="benchmarks.peer_suites.nki_library:install_shims",   # called in the peer's pytest
                                                 # process before its conftests load
        harness_fix="benchmarks.peer_suites.nki_library:fix_harness",  # optional: called once the
                                                 # conftests are loaded (pytest_sessionstart), for
                                                 # upstream harness bugs; each one documented
        known=(KnownCause(NEEDS_HARDWARE, "reads the device's product name", message=r"/sys/"),),
        wrong_numbers=(r"Validation failed",),   # extra regexes meaning "the numbers differ"
        env={"NKI_...": "..."},                  # extra environment for the child
    )

and may define `main()` (the default is `common.main(SUITE)`). The shim function takes no
arguments; it must call `nkitui.emulator.install()` and register the suite's module aliases and
stand-ins in `sys.modules` (stand-ins written by us from the documented behaviour, never copied).

The child pytest loads `benchmarks.peer_suites.plugin` (`-p`), which calls the shim (and later the
harness fix), enforces the
per-test timeout (SIGALRM) and the address-space limit (RLIMIT_AS), and writes one JSON line per test
phase to `$NKITUI_PEER_RESULTS.<worker>`:

    {"nodeid", "when": "collect|setup|call|teardown", "outcome": "passed|failed|skipped",
     "duration", "cpu_s", "emu_cpu_s", "max_rss_mb", "skip_reason", "xfail": bool, "markers": [names of the test's pytest marks],
     "chain": [{"type": "module.Qualname", "mro": [names...], "message", "frames": [[file, line, func]...]}]}

`chain` is the exception and its causes/contexts, outermost first (suites wrap emulator errors in
their own exceptions). The parent folds the phases into one `PeerResult` per test and classifies
each failure with `classify()` into one of CAUSES (below), `KnownCause` overrides first.

    run(suite, checkout, python=..., workers=0|N, timeout_s=..., memory_mb=..., extra_args=[...])
        -> Report   (.counts: passed / failed / skipped / errors, .results, .by_cause(), .format())
    main(suite, argv=None) -> exit code   (0 = ran, whatever the tests did; 2 = bad checkout/usage)
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# --- causes --------------------------------------------------------------------------------------
MISSING_API = "missing API"
WRONG_NUMBERS = "wrong numbers"
REJECTED = "valid code rejected"
ACCEPTED = "invalid code accepted"
HOST_LIMITS = "too slow or too big for the host"
NEEDS_HARDWARE = "needs real hardware or the compiler"
OTHER = "other (suite or harness)"
# most serious first: a silent wrong result is worse than a refusal
CAUSES = (WRONG_NUMBERS, ACCEPTED, REJECTED, MISSING_API, HOST_LIMITS, NEEDS_HARDWARE, OTHER)

# the emulator's own packages and the module names it serves
EMULATOR_MODULE_PREFIXES = ("nkitui.emulator", "nki", "neuronxcc.nki")
_EMULATOR_PATH_MARK = os.sep + os.path.join("nkitui", "emulator") + os.sep

_WRONG_NUMBER_PATTERNS = (
    r"Not equal to tolerance", r"Mismatched elements", r"Tensor-likes are not (close|equal)",
    r"Arrays are not (almost )?equal", r"max abs(olute)? (diff|error)", r"allclose",
)
_HOST_LIMIT_TYPES = ("MemoryError", "_ArrayMemoryError", "PeerTestTimeout")
_MISSING_API_TYPES = ("AttributeError", "ImportError", "ModuleNotFoundError", "NotImplementedError")
_ACCEPTED_PATTERNS = (r"expected to fail, but it hasn't", r"DID NOT RAISE")


@dataclasses.dataclass(frozen=True)
class KnownCause:
    """An override: tests whose node id matches `nodeid` (fnmatch glob), that carry the pytest mark
    `marker`, and/or whose failure text matches `message` (regex, searched in every exception of the
    chain) fail for `cause`. At least one criterion; all given ones must hold."""

    cause: str
    reason: str
    nodeid: str | None = None
    message: str | None = None
    marker: str | None = None

    def matches(self, result: PeerResult) -> bool:
        if self.nodeid is not None and not fnmatch.fnmatchcase(result.nodeid, self.nodeid):
            return False
        if self.marker is not None and self.marker not in result.markers:
            return False
        if self.message is not None and not re.search(self.message, result.failure_text()):
            return False
        return self.nodeid is not None or self.message is not None or self.marker is not None


@dataclasses.dataclass(frozen=True)
class PeerSuite:
    name: str
    repo: str
    marker: str
    pytest_args: tuple[str, ...]
    shim: str
    harness_fix: str = ""
    python_path: tuple[str, ...] = ()
    known: tuple[KnownCause, ...] = ()
    wrong_numbers: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    def check_checkout(self, checkout: Path) -> None:
        if not (checkout / self.marker).exists():
            raise SystemExit(f"{checkout} is not a checkout of {self.repo}: {self.marker} is missing "
                             f"(clone it outside this repository, e.g. git clone <url> {checkout})")
        if REPO_ROOT in checkout.resolve().parents or checkout.resolve() == REPO_ROOT:
            raise SystemExit(f"{checkout} is inside this repository; peer checkouts stay outside it")


@dataclasses.dataclass
class PeerResult:
    nodeid: str
    outcome: str = "passed"  # passed | failed | error | skipped | xfailed | xpassed
    duration: float = 0.0
    skip_reason: str = ""
    chain: list[dict] = dataclasses.field(default_factory=list)
    markers: list[str] = dataclasses.field(default_factory=list)
    cause: str = ""
    detail: str = ""
    cpu_s: float = 0.0  # CPU seconds of the test process over the test's phases (all threads)
    emu_cpu_s: float = 0.0  # the part of cpu_s spent inside the emulator's kernel launches (where the adapter measures it)
    max_rss_mb: int = 0  # the test process's peak resident memory by the end of the test

    def failure_text(self) -> str:
        return "\n".join(f"{e.get('type', '')}: {e.get('message', '')}" for e in self.chain)


# --- classification ------------------------------------------------------------------------------
def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _in_emulator(exc: dict) -> bool:
    """Raised inside emulator code (its innermost frames), or an emulator module named in it."""
    frames = exc.get("frames") or []
    if frames and _EMULATOR_PATH_MARK in str(frames[-1][0]):
        return True
    return any(_EMULATOR_PATH_MARK in str(f[0]) for f in frames[-3:])


def _names_emulator_module(message: str) -> bool:
    return bool(re.search(r"""(module|No module named|cannot import name .* from) '?"?(nki|neuronxcc\.nki|"""
                          r"""nkitui\.emulator|nki_cpu_simulator|neuron_dtypes)\b""", message))


def classify(result: PeerResult, known: Sequence[KnownCause] = (),
             wrong_numbers: Sequence[str] = ()) -> tuple[str, str]:
    """(cause, one-line detail) of a failed test. The rules, first match wins:

    1. a KnownCause override;
    2. our timeout or a MemoryError anywhere in the chain: host limits;
    3. the suite's "expected to fail, but it hasn't" / pytest.raises "DID NOT RAISE": invalid code accepted;
    4. an emulator error (NKIEmulatorError subclass; UnsupportedError is "missing API", and
       `CapacityError` is a rejection like any other rule) anywhere in the chain;
    5. AttributeError / ImportError / NotImplementedError raised in emulator code or naming an
       emulator-served module (nki.*, neuron_dtypes, ...): missing API;
    6. any other exception raised inside emulator code: valid code rejected (the emulator failed on it);
    7. a numeric mismatch (assertion texts of numpy/torch/the suite's validators): wrong numbers;
    8. everything else: other (the suite or its harness).
    """
    chain = result.chain
    if not chain:
        return OTHER, result.outcome
    for k in known:
        if k.matches(result):
            return k.cause, k.reason
    innermost = chain[-1]
    detail = f"{_short(innermost.get('type', ''))}: {_first_line(innermost.get('message', ''))}"
    for exc in chain:
        if _short(exc.get("type", "")) in _HOST_LIMIT_TYPES or "MemoryError" in exc.get("mro", ()):
            return HOST_LIMITS, f"{_short(exc['type'])}: {_first_line(exc.get('message', ''))}"
    text = result.failure_text()
    if any(re.search(p, text) for p in _ACCEPTED_PATTERNS):
        return ACCEPTED, detail
    for exc in reversed(chain):
        mro = exc.get("mro") or ()
        if "NKIEmulatorError" in mro:
            d = f"{_short(exc['type'])}: {_first_line(exc.get('message', ''))}"
            return (MISSING_API if "UnsupportedError" in mro else REJECTED), d
    for exc in reversed(chain):
        mro = exc.get("mro") or ()
        if any(t in mro for t in _MISSING_API_TYPES) and (_in_emulator(exc)
                                                           or _names_emulator_module(exc.get("message", ""))):
            return MISSING_API, f"{_short(exc['type'])}: {_first_line(exc.get('message', ''))}"
    for exc in reversed(chain):
        if _in_emulator(exc):
            return REJECTED, f"{_short(exc['type'])}: {_first_line(exc.get('message', ''))}"
    if any(re.search(p, text) for p in (*_WRONG_NUMBER_PATTERNS, *wrong_numbers)):
        return WRONG_NUMBERS, detail
    return OTHER, detail


def _first_line(text: str, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:limit]


# --- folding the plugin's records ----------------------------------------------------------------
def fold_records(records: Iterable[dict]) -> list[PeerResult]:
    """One PeerResult per node id from the per-phase records (collection errors included)."""
    by_id: dict[str, PeerResult] = {}
    called: set[str] = set()
    for rec in records:
        nodeid = rec["nodeid"]
        r = by_id.setdefault(nodeid, PeerResult(nodeid))
        if rec.get("when") in ("call", "collect"):
            called.add(nodeid)
        r.duration += float(rec.get("duration") or 0.0)
        r.cpu_s += float(rec.get("cpu_s") or 0.0)
        r.emu_cpu_s += float(rec.get("emu_cpu_s") or 0.0)
        r.max_rss_mb = max(r.max_rss_mb, int(rec.get("max_rss_mb") or 0))
        if rec.get("markers"):
            r.markers = list(rec["markers"])
        when, outcome = rec.get("when"), rec.get("outcome")
        if outcome == "skipped":
            if rec.get("xfail"):
                r.outcome = "xfailed"
            elif r.outcome == "passed":
                r.outcome, r.skip_reason = "skipped", rec.get("skip_reason", "")
        elif outcome == "failed":
            if r.outcome in ("passed", "skipped", "xfailed"):
                r.outcome = "failed" if when == "call" else "error"
                r.chain = rec.get("chain") or []
        elif outcome == "passed" and when == "call" and rec.get("xfail"):
            r.outcome = "xpassed"
    for nodeid, r in by_id.items():
        # set up, never called: the test process ended inside the test (the OOM killer, a signal, a hard
        # crash; pytest-xdist then starts a new worker), so no phase of it could say so
        if r.outcome == "passed" and nodeid not in called:
            r.outcome = "error"
            r.chain = [{"type": "TestProcessDied", "mro": ["TestProcessDied"], "frames": [],
                        "message": "the test process ended during the test, before its result was recorded "
                                   "(killed by the OOM killer or a signal, or crashed)"}]
    return list(by_id.values())


def read_records(results_base: Path) -> list[dict]:
    records = []
    for path in sorted(results_base.parent.glob(results_base.name + ".*")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


# --- the report ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Report:
    suite: str
    results: list[PeerResult]
    wall_s: float = 0.0
    returncode: int = 0
    command: list[str] = dataclasses.field(default_factory=list)
    log_tail: str = ""

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(r.outcome for r in self.results)
        return {"passed": c["passed"] + c["xpassed"], "failed": c["failed"], "errors": c["error"],
                "skipped": c["skipped"] + c["xfailed"]}

    def failures(self) -> list[PeerResult]:
        return [r for r in self.results if r.outcome in ("failed", "error")]

    def by_cause(self) -> dict[str, list[PeerResult]]:
        groups: dict[str, list[PeerResult]] = defaultdict(list)
        for r in self.failures():
            groups[r.cause].append(r)
        return {c: groups[c] for c in CAUSES if groups.get(c)}

    def format(self, examples: int = 3, details: int = 12) -> str:
        c = self.counts
        reached = c["passed"] + c["failed"] + c["errors"]
        lines = [f"{self.suite}: {c['passed']} passed, {c['failed'] + c['errors']} failed "
                 f"({c['errors']} of them errors), {c['skipped']} skipped  [{self.wall_s:.0f} s]"]
        if reached:
            lines.append(f"of the tests that reached the emulator, {100.0 * c['passed'] / reached:.0f}% pass")
        groups = self.by_cause()
        if groups:
            lines += ["", f"{'cause':<40} {'tests':>5}", f"{'-' * 40} {'-' * 5}"]
            lines += [f"{cause:<40} {len(rs):>5}" for cause, rs in groups.items()]
            for cause, rs in groups.items():
                lines += ["", f"## {cause} ({len(rs)})"]
                detail_counts = Counter(_normalise(r.detail) for r in rs)
                for text, n in detail_counts.most_common(details):
                    ids = [r.nodeid for r in rs if _normalise(r.detail) == text][:examples]
                    lines.append(f"  {n:>4}  {text}")
                    lines += [f"          e.g. {i}" for i in ids]
        skip_reasons = Counter(_normalise(r.skip_reason) for r in self.results if r.outcome == "skipped")
        if skip_reasons:
            lines += ["", "## skipped (the suite's own policy)"]
            lines += [f"  {n:>4}  {text}" for text, n in skip_reasons.most_common(8)]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"suite": self.suite, "counts": self.counts, "wall_s": self.wall_s,
                "returncode": self.returncode, "command": self.command,
                "by_cause": {c: len(rs) for c, rs in self.by_cause().items()},
                "results": [dataclasses.asdict(r) | {"chain": None} for r in self.results]}


SETUP_ONLY_S = 0.1  # a setup phase alone: at most 0.06 s in nki-library's MoE runs (136 of them)
_UNVERIFIED_PASS = {
    "type": "UnverifiedPass", "mro": ["UnverifiedPass"], "frames": [],
    "message": f"a pass of under {SETUP_ONLY_S} s in a report written before the runner checked that each test "
               "was called: possibly only its setup, the process ending inside the test; run it again"}


def merge_reports(suite: PeerSuite, paths: Sequence[Path]) -> Report:
    """One report from several `--json` reports of the same suite, by node id, later files replacing
    earlier ones (a re-run of some tests after a fix, or a slice run on its own). Failures are
    classified again with the suite's current known causes; the JSON keeps no exception chain, so
    a cause is matched on the stored one-line detail."""
    fields = {f.name for f in dataclasses.fields(PeerResult)}
    merged: dict[str, PeerResult] = {}
    wall = 0.0
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            rows = data["results"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{path}: not a report written by --json ({e})") from None
        wall += float(data.get("wall_s") or 0.0)
        # written before results kept their CPU time, when the folding did not yet check that a test
        # was called: a pass there may be a test whose process died inside it (only its setup recorded)
        unchecked = bool(rows) and not any("cpu_s" in row for row in rows)
        for row in rows:
            kept = {k: v for k, v in row.items() if k in fields}
            kept["chain"] = kept.get("chain") or []
            kept["markers"] = kept.get("markers") or []
            r = PeerResult(**kept)
            if unchecked and r.outcome == "passed" and r.duration < SETUP_ONLY_S:
                r.outcome, r.chain = "error", [_UNVERIFIED_PASS]
            merged[row["nodeid"]] = r
    for r in merged.values():
        if r.outcome not in ("failed", "error"):
            continue
        if r.chain:
            r.cause, r.detail = classify(r, suite.known, suite.wrong_numbers)
            continue
        stored = PeerResult(r.nodeid, r.outcome, chain=[{"type": "", "message": r.detail}], markers=r.markers)
        for k in suite.known:
            if k.matches(stored):
                r.cause, r.detail = k.cause, k.reason
                break
    name = f"{suite.name} (merged from {len(paths)} report{'s' if len(paths) != 1 else ''})"
    return Report(name, sorted(merged.values(), key=lambda r: r.nodeid), wall)


def _normalise(text: str) -> str:
    """Group similar messages: numbers and quoted names vary between parametrisations."""
    text = re.sub(r" at [\w./-]+\.py:\d+", " at <file>:<line>", text or "")
    text = re.sub(r"0x[0-9a-f]+", "0x…", text)
    text = re.sub(r"\d+", "N", text)
    return text[:160]


# --- running -------------------------------------------------------------------------------------
def run(suite: PeerSuite, checkout: Path, *, python: str | None = None, workers: int = 0,
        timeout_s: float = 600.0, memory_mb: int = 0, extra_args: Sequence[str] = (),
        replace_selection: bool = False, stream=None) -> Report:
    """Run the suite's tests in a child pytest and classify every failure.

    `extra_args` are appended to the suite's pytest arguments (e.g. ["-k", "rope"]); with
    `replace_selection` they replace the suite's leading test paths (a slice by file).
    """
    checkout = Path(checkout).resolve()
    suite.check_checkout(checkout)
    scratch = Path(tempfile.mkdtemp(prefix=f"peer-{suite.name}-"))
    results_base = scratch / "results.jsonl"
    args = [a.replace("{tmp}", str(scratch)) for a in suite.pytest_args]
    if replace_selection:
        args = [a for a in args if not _looks_like_path(a, checkout)]
    command = [python or sys.executable, "-m", "pytest", *args, *extra_args,
               "-p", "benchmarks.peer_suites.plugin", "-p", "no:cacheprovider", "-q", "--no-header", "--continue-on-collection-errors",
               "-o", "console_output_style=classic"]
    if workers:
        command += ["-n", str(workers)]
    env = dict(os.environ)
    env.update(suite.env)
    path = [str(REPO_ROOT), *(str(checkout / p) for p in suite.python_path)]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env.update({
        "PYTHONPATH": os.pathsep.join(path),
        "NKITUI_PEER_SHIM": suite.shim,
        "NKITUI_PEER_HARNESS_FIX": suite.harness_fix,
        "NKITUI_PEER_RESULTS": str(results_base),
        "NKITUI_PEER_TIMEOUT": str(timeout_s),
        "NKITUI_PEER_MEMORY_MB": str(memory_mb),
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    t0 = time.monotonic()
    proc = subprocess.Popen(command, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace")
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if stream is not None:
            stream.write(line)
            stream.flush()
        tail.append(line)
        del tail[:-200]
    proc.wait()
    try:
        results = fold_records(read_records(results_base))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for r in results:
        if r.outcome in ("failed", "error"):
            r.cause, r.detail = classify(r, suite.known, suite.wrong_numbers)
    return Report(suite.name, sorted(results, key=lambda r: r.nodeid), time.monotonic() - t0,
                  proc.returncode, command, "".join(tail))


def _looks_like_path(arg: str, checkout: Path) -> bool:
    return not arg.startswith("-") and (checkout / arg.split("::")[0]).exists()


def main(suite: PeerSuite, argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.peer_suites {suite.name}",
                                description=f"Run {suite.repo}'s tests on the nkitui emulator and classify failures.")
    p.add_argument("--checkout", type=Path, default=Path(os.environ.get("NKITUI_PEER_CHECKOUT", "")
                                                          or f"/work/peers/{suite.repo.split('/')[-1]}"),
                   help="the peer repository's checkout (outside this repository)")
    p.add_argument("--python", default=None,
                   help="interpreter with the peer's test dependencies (default: this one)")
    p.add_argument("-n", "--workers", type=int, default=0, help="pytest-xdist workers (0: in one process)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per test before it counts as too slow")
    p.add_argument("--memory-mb", type=int, default=0, help="address-space limit per test process (0: none)")
    p.add_argument("--json", type=Path, default=None, help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="do not stream pytest's output")
    p.add_argument("--only", action="store_true",
                   help="the pytest arguments after -- replace the suite's default test paths")
    p.add_argument("--merge", type=Path, nargs="+", metavar="REPORT.json", default=None,
                   help="run nothing: merge earlier --json reports by node id (later ones win) and report")
    p.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments (-k, paths, -m ...)")
    a = p.parse_args(argv)
    if a.merge:
        try:
            report = merge_reports(suite, a.merge)
        except SystemExit as e:
            print(e, file=sys.stderr)
            return 2
        print(report.format())
        if a.json:
            a.json.write_text(json.dumps(report.to_json(), indent=1))
        return 0
    try:
        report = run(suite, a.checkout, python=a.python, workers=a.workers, timeout_s=a.timeout,
                     memory_mb=a.memory_mb, extra_args=a.pytest_args, replace_selection=a.only,
                     stream=None if a.quiet else sys.stderr)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    print(report.format())
    if not report.results:
        print("\nno test results were recorded; pytest said:\n" + report.log_tail[-4000:], file=sys.stderr)
    if a.json:
        a.json.write_text(json.dumps(report.to_json(), indent=1))
    return 0
