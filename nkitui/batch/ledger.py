"""The batch ledger: which result each task got, for which commit, files, nkitui version and options.

`--resume` asks it whether a task already has a finished result (passed, failed or invalid) for
its current commit and judged files under this nkitui version and these options; the scheduler asks
it how long each task took last time (longest first keeps the pool busy to the end). SQLite (one
small file beside the run store), written only by the process that drives the batch.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from nkitui.batch.record import TaskRecord

RESUMABLE = ("passed", "failed", "invalid")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    path TEXT NOT NULL,
    options_key TEXT NOT NULL,
    nkitui_version TEXT NOT NULL,
    commit_id TEXT,
    dirty INTEGER,
    hashes TEXT NOT NULL,
    status TEXT NOT NULL,
    duration_s REAL,
    record TEXT NOT NULL,
    PRIMARY KEY (path, options_key)
);
"""


def hashes_digest(file_hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(file_hashes, sort_keys=True).encode()).hexdigest()


def default_ledger_path(store_root: Path | None) -> Path:
    if store_root is None:
        from nkitui.common.paths import data_dir

        return data_dir() / "batch" / "ledger.sqlite3"
    return Path(store_root).parent / "batch-ledger.sqlite3"


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def remember(self, record: TaskRecord) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.path, record.options_key, record.nkitui_version, record.commit,
                 None if record.dirty is None else int(record.dirty), hashes_digest(record.file_hashes),
                 record.status, record.duration_s, record.to_json()),
            )

    def find(self, path: str, options_key: str, version: str, commit: str | None, dirty: bool | None,
             file_hashes: dict[str, str], same_commit: Callable[[str], bool] | None = None) -> TaskRecord | None:
        """The remembered record when it still stands for the task as it is now, else None.

        A task with a known commit matches on the commit (or one whose task folder is the same,
        `same_commit`: commits that only added reviews), clean working trees then and now, and
        its judged files; a task outside git matches on its judged files alone."""
        with self._lock:
            row = self._db.execute(
                "SELECT nkitui_version, commit_id, dirty, hashes, status, record FROM results WHERE path=? AND options_key=?",
                (path, options_key)).fetchone()
        if row is None:
            return None
        r_version, r_commit, r_dirty, r_hashes, r_status, r_record = row
        if r_version != version or r_status not in RESUMABLE or r_hashes != hashes_digest(file_hashes):
            return None
        if commit is not None and (r_commit is None or dirty or r_dirty):
            return None
        if commit is not None and r_commit != commit and not (same_commit is not None and same_commit(r_commit)):
            return None
        if commit is None and r_commit is not None:
            return None
        try:
            return TaskRecord.from_dict(json.loads(r_record))
        except (ValueError, TypeError):
            return None

    def durations(self, paths: list[str]) -> dict[str, float]:
        """The last known duration of each task (any options), for scheduling."""
        out: dict[str, float] = {}
        with self._lock:
            for path, duration in self._db.execute("SELECT path, duration_s FROM results WHERE duration_s IS NOT NULL"):
                out[path] = max(out.get(path, 0.0), float(duration))
        wanted = set(paths)
        return {p: d for p, d in out.items() if p in wanted}
