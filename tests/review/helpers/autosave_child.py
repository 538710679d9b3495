"""A stand-in for the workstation's rubric editor: types into a draft's summary on a schedule, with
the real Autosaver, until it is killed. Prints "<characters typed> <monotonic time>" after each key."""

import sys
import time
from pathlib import Path

from nkitui.review import Autosaver, Draft, DraftStore, load_builtin_rubric

TEXT = "the quick brown fox jumps over the lazy dog; " * 40


def main() -> None:
    task_root, store_root, interval = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    draft = Draft.new("add", load_builtin_rubric("nki-port-audit"))
    saver = Autosaver(DraftStore(store_root), task_root)
    print("ready", time.monotonic(), flush=True)
    for n, ch in enumerate(TEXT, start=1):
        draft.summary += ch
        saver.changed(draft)
        print(n, time.monotonic(), flush=True)
        time.sleep(interval)
    time.sleep(3600)  # never exits on its own: the test kills it


if __name__ == "__main__":
    main()
