"""SVG snapshots of the queue at 80x24 and 200x50, one task in each state: a passed run two days old
(scale_rows, the recorded run), reviewed by me (vector_add), my draft (flawed_partial_tile), reviewed
by someone else (transpose2d), an outdated review (flawed_bf16_accum: its port changed since), an
invalid manifest (zz_broken).

Deterministic: fixed git dates (stable shas), a pinned "now" for ages, the cursor on a task whose
detail lines hold nothing time-dependent, fresh XDG folders. Regenerate with
`pytest tests/app/test_queue_snapshots.py --snapshot-update` and look at snapshot_report.html first.
"""

from __future__ import annotations

import datetime as dt

import pytest

from nkitui.app.app import NkituiApp
from nkitui.review import Draft, DraftStore, load_builtin_rubric, submit_review
from tests.app.helpers import FIXTURES, SAMPLE_TASKS, make_task_repo, recorded_result, store_run
from tests.app.test_queue import filled
from tests.helpers.review import filled_draft

NOW = dt.datetime(2026, 1, 9, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def states_queue(tmp_path):
    root = tmp_path / "lab-queue"
    rubric = load_builtin_rubric("nki-port-audit")
    make_task_repo(root / "scale_rows", FIXTURES / "scale_rows")
    store_run(recorded_result(), "20260107T090000Z-a1b2c3")
    for name in ("vector_add", "flawed_partial_tile", "transpose2d", "flawed_bf16_accum"):
        make_task_repo(root / name, SAMPLE_TASKS / name)
    submit_review(root / "vector_add", filled_draft(rubric, "vector_add", verdict="accept"))  # as Ada (git)
    submit_review(root / "transpose2d", filled_draft(rubric, "transpose2d", verdict="accept"), auditor="bob")
    submit_review(root / "flawed_bf16_accum", filled_draft(rubric, "flawed_bf16_accum", verdict="revise"), auditor="bob")
    port = root / "flawed_bf16_accum" / "matmul_bf16_f32out_nki.py"
    port.write_text(port.read_text() + "\n# accumulate in PSUM next time\n")
    draft = Draft.new("flawed_partial_tile", rubric)
    draft.set_score("numerical_correctness", 2, "the last tile is read unmasked")
    DraftStore().save(root / "flawed_partial_tile", draft, now=NOW)
    broken = make_task_repo(root / "zz_broken", SAMPLE_TASKS / "vector_add")
    manifest = broken / "task.toml"
    manifest.write_text(manifest.read_text().replace('id = "vector_add"', 'id = "zz_broken"').replace("[kernel]", "[kernal]"))
    return root


async def ready(pilot) -> None:
    qs = await filled(pilot)
    qs.list.now = NOW
    qs.list.move_to("scale_rows")
    qs.list.restyle()
    qs.draw_detail()
    await pilot.pause(0.1)


def test_queue_80x24(snap_compare, states_queue):
    assert snap_compare(NkituiApp(states_queue, mode="queue", backend="emulator"), terminal_size=(80, 24),
                        run_before=ready)


def test_queue_200x50(snap_compare, states_queue):
    assert snap_compare(NkituiApp(states_queue, mode="queue", backend="emulator"), terminal_size=(200, 50),
                        run_before=ready)
