"""A second kernel process that runs, beside the first, the launches the later phases will ask for.

The judging phases (trials on the adversarial cases, precision isolation's fp32 launch) each ask the
kernel to run on inputs known once the reference has answered. A slow kernel (seconds a launch)
spends most of a check in those launches, one after another in one process, while the machine's
other core waits. When the first seed's launch was slow, the pipeline starts a spare: a fresh
confined kernel process (the same spawn as the first, its own scratch folder), which works through
the planned launches from the last one back while the first process runs the seeds and the earlier
launches; each launch is taken by whichever process gets to it first.

    spare = SpareLaunches(spawn, prepare, jobs)   # spawn() -> UntrustedChild; prepare(child) -> KernelProcess, loaded
                                                  # (None: unusable); jobs: [(key, inputs, precise)]
    run = spare.take(key)                         # its KernelRun (waits while it runs), or None: run it yourself
    spare.claim(key)                              # True: the caller runs it (never waits); False: the spare has it
    spare.stop()                                  # ends the process (a launch in flight is killed)

Nothing of the verdict changes: a launch the spare ran is used only when it succeeded (outputs
back, checked and turned into the natural layout by the same KernelProcess code, provenance
reported); a failed or missing one is run again by the first process, so every error, crash and
message is the one the sequential run gives. The spare's sandbox record counts like the first's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

Job = tuple[Hashable, dict[str, Any], bool]  # (key, inputs in the natural layout, precise)
STOP_TIMEOUT_S = 30.0  # a killed child's pipes close at once; the spawn itself gives up after 60 s


class SpareLaunches:
    def __init__(self, spawn: Callable[[], Any], prepare: Callable[[Any], Any], jobs: list[Job],
                 what: str = "a launch run ahead") -> None:
        self._jobs = {key: (inputs, precise) for key, inputs, precise in jobs}
        self._order = [key for key, _inputs, _precise in jobs]
        self._claimed: dict[Hashable, str] = {}  # key -> "spare" | "caller"
        self._done: dict[Hashable, Any] = {}  # key -> KernelRun (or None: the spare could not run it)
        self._cond = threading.Condition()
        self._stopping = False
        self._dead = False
        self._child: Any = None
        self._what = what
        self.ran = 0  # launches the spare finished (for the log)
        self._thread = threading.Thread(target=self._work, args=(spawn, prepare), name="nkitui-spare-kernel",
                                        daemon=True)
        self._thread.start()

    # -- the spare's thread ---------------------------------------------------------------------------
    def _work(self, spawn: Callable[[], Any], prepare: Callable[[Any], Any]) -> None:
        try:
            with self._cond:
                if self._stopping:
                    return
            # spawned without the lock held: stop() and take() never wait for a fork to finish
            child = spawn()
            with self._cond:
                self._child = child
                if self._stopping:  # stop() came while it was being spawned: _close ends it below
                    return
            process = prepare(child)
            if process is None:
                return
            while True:
                with self._cond:
                    key = next((k for k in reversed(self._order) if k not in self._claimed), None)
                    if key is None or self._stopping:
                        break
                    self._claimed[key] = "spare"
                inputs, precise = self._jobs[key]
                run = None
                try:
                    run = process.run(inputs, precise=precise, what=self._what)
                finally:
                    with self._cond:
                        self._done[key] = run
                        if run is not None:
                            self.ran += 1
                        self._cond.notify_all()
        except BaseException:  # noqa: BLE001 - a dead or failed spare only means the caller runs it itself
            pass
        finally:
            with self._cond:
                self._dead = True
                self._cond.notify_all()
            self._close()

    def _close(self) -> None:
        child = self._child
        if child is not None:
            try:
                child.close()
            except BaseException:  # noqa: BLE001 - it is being ended either way
                child.kill()

    # -- the caller's side ----------------------------------------------------------------------------
    def take(self, key: Hashable) -> Any:
        """The spare's KernelRun for `key` (waiting while the spare runs it), or None: the caller runs
        it (the spare has not started it, was not asked to, or could not run it)."""
        with self._cond:
            if key not in self._jobs:
                return None
            owner = self._claimed.get(key)
            if owner is None:
                self._claimed[key] = "caller"
                return None
            if owner == "caller":
                return None
            while key not in self._done and not self._dead:
                self._cond.wait()
            return self._done.get(key)

    def claim(self, key: Hashable) -> bool:
        """Claim `key` for the caller without waiting: True when the caller is to run it (the spare will
        not), False when the spare has it (take() then waits for its run)."""
        with self._cond:
            owner = self._claimed.get(key)
            if key in self._jobs and owner is None:
                self._claimed[key] = "caller"
                return True
            return owner != "spare"

    def stop(self) -> None:
        """End the spare: no further launch starts; one in flight is ended with its process. Waits
        STOP_TIMEOUT_S at most for the spare's thread (a spawn still in progress ends the child it
        makes by itself); past that the daemon thread is left, and its child dies with the evaluator."""
        with self._cond:
            self._stopping = True
            child = self._child
        if self._thread.is_alive() and child is not None:
            child.kill()
        self._thread.join(timeout=STOP_TIMEOUT_S)
