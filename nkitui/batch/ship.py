"""Task folders travel to Ray nodes as git bundles (or, when git cannot say what the task is, as
snapshots), never through a shared path.

Why bundles: a bundle of the task repository at the commit the driver read is exactly the version
the verdict is recorded for; the commit id checks the content on arrival, so a result can never
belong to a different version than the one the ledger and the aggregate table tie it to, whatever
happens to the driver's working tree while 5,000 tasks run. Nothing has to be mounted on the
nodes, and one bundle serves every task of a repository (a monorepo of tasks ships once; each
node unpacks it once, for all of its tasks).

Snapshots: a task outside git, or with uncommitted changes in its folder, is shipped as a tar of
its regular files (links and special files are left out, as the executor's own task copy does),
so that Ray judges what the local pool would judge, and the record says the commit is unknown or
dirty.

The driver calls `pack(task)`; a node calls `unpack(shipment, payload)` and gets a folder to
evaluate. Unpacked trees are cached per payload digest under the node's temporary folder (tasks
from one bundle share it); entries unused for a day are pruned.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nkitui.batch.gitstate import GitState, git, read_git_state

MAX_SNAPSHOT_BYTES = 256 << 20
CACHE_TTL_S = 24 * 3600
_SKIP = {".git", "__pycache__", ".pytest_cache", ".venv", "venv", "node_modules"}


class ShipError(RuntimeError):
    """The task could not be packed (or unpacked): the message says why and what to do."""


@dataclass(frozen=True)
class Shipment:
    kind: str  # "bundle" | "snapshot"
    digest: str  # sha256 of the payload: the node-side cache key
    rel_path: str  # the task folder inside the unpacked tree
    commit: str | None  # bundles: the commit to check out
    size: int


def pack_bundle(state: GitState) -> tuple[Shipment, bytes]:
    assert state.repo_root is not None and state.commit is not None
    with tempfile.TemporaryDirectory(prefix="nkitui-bundle-") as tmp:
        path = Path(tmp) / "task.bundle"
        created = git(["bundle", "create", str(path), "HEAD"], state.repo_root, timeout=600)
        if created.returncode != 0 or not path.is_file():
            raise ShipError(f"git bundle failed in {state.repo_root}: {created.stderr.strip()}")
        heads = git(["bundle", "list-heads", str(path)], state.repo_root, timeout=60)
        if state.commit not in heads.stdout.split():
            # HEAD moved between reading the state and bundling: the bundle is not the version recorded
            raise ShipError(f"{state.repo_root}: HEAD moved while the task was being packed; run the batch again")
        data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    return Shipment("bundle", digest, state.rel_path, state.commit, len(data)), data


def pack_snapshot(root: Path) -> tuple[Shipment, bytes]:
    buffer = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP and not os.path.islink(os.path.join(dirpath, d)))
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if path.is_symlink() or not path.is_file():
                    continue  # links and special files stay home
                total += path.stat().st_size
                if total > MAX_SNAPSHOT_BYTES:
                    raise ShipError(f"{root}: more than {MAX_SNAPSHOT_BYTES >> 20} MB of files; commit the task to git "
                                    "(bundles only carry its history) or remove large files from its folder")
                info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0  # the digest depends on the content only
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
    data = buffer.getvalue()
    return Shipment("snapshot", hashlib.sha256(data).hexdigest(), ".", None, len(data)), data


def pack(task_root: Path, state: GitState | None = None) -> tuple[Shipment, bytes, GitState]:
    """What to send for the task at `task_root`: a bundle when its folder is committed and clean,
    else a snapshot. Also returns the git state the decision was made on."""
    state = state or read_git_state(task_root)
    if state.commit is not None and state.dirty is False:
        shipment, data = pack_bundle(state)
    else:
        shipment, data = pack_snapshot(Path(task_root))
    return shipment, data, state


# -- on the node ---------------------------------------------------------------------------------

def cache_root() -> Path:
    return Path(tempfile.gettempdir()) / f"nkitui-ray-{os.getuid()}"


def _prune(root: Path, keep: Path) -> None:
    now = time.time()
    try:
        entries = list(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry == keep or entry.suffix == ".lock":
            continue
        try:
            if now - entry.stat().st_mtime > CACHE_TTL_S:
                shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


def unpack(shipment: Shipment, data: bytes) -> Path:
    """The task folder on this node (unpacked once per payload; later calls reuse it)."""
    if hashlib.sha256(data).hexdigest() != shipment.digest:
        raise ShipError("the shipped task arrived damaged (its digest does not match)")
    root = cache_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    tree = root / shipment.digest
    with open(root / f"{shipment.digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tree.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=f".{shipment.digest[:12]}-", dir=root))
            try:
                if shipment.kind == "bundle":
                    _unpack_bundle(shipment, data, staging)
                else:
                    _unpack_snapshot(data, staging)
                staging.rename(tree)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        os.utime(tree)
    _prune(root, tree)
    task_dir = (tree / shipment.rel_path).resolve()
    if not task_dir.is_relative_to(tree.resolve()) or not task_dir.is_dir():
        raise ShipError(f"the shipped tree has no folder {shipment.rel_path}")
    return task_dir


def _unpack_bundle(shipment: Shipment, data: bytes, dest: Path) -> None:
    bundle = dest.with_suffix(".bundle")
    bundle.write_bytes(data)
    try:
        # the clone keeps its .git: the evaluation reads the task's commit from it, as it does at home
        steps = [
            ["clone", "-q", "--no-checkout", str(bundle), str(dest)],
            ["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", str(shipment.commit)],
        ]
        for args in steps:
            done = git(args, dest if args[0] != "clone" else dest.parent, timeout=600)
            if done.returncode != 0:
                raise ShipError(f"git {args[0] if args[0] != '-c' else 'checkout'} of the shipped bundle failed: "
                                f"{done.stderr.strip()}")
    finally:
        bundle.unlink(missing_ok=True)


def _unpack_snapshot(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
