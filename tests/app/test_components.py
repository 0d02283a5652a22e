"""The turn and conversation components' pure parts: step lines, image widths, waterfall
bars, paging, anchors."""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime, timedelta

from PIL import Image

from app.components.conversation import TURNS_PER_PAGE, page_of, step_frame, turn_anchor
from app.components.turn import image_width, step_detail
from lake.records import Step
from tests.app.workbench_lake import PNG_BYTES

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height)).save(out, format="PNG")
    return out.getvalue()


def test_a_step_detail_does_not_repeat_its_name_and_status() -> None:
    step = Step(name="read_file", status="completed", at=T0,
                detail="read_file completed in 89 s")
    assert step_detail(step) == "in 89 s"
    assert step_detail(Step(name="read_file", status="completed", at=T0,
                            detail="read_file")) == ""
    assert step_detail(Step(name="grep", status="failed", at=T0,
                            detail="no such file")) == "no such file"
    assert step_detail(Step(name="grep", status="started", at=T0)) == ""


def test_an_image_is_shown_at_its_own_width_up_to_480() -> None:
    assert image_width(_png(17, 17)) == 17
    assert image_width(_png(2000, 10)) == 480
    assert image_width(PNG_BYTES) == 1
    assert image_width(b"not an image") == 480
    assert base64.b64encode(PNG_BYTES)  # the seeded lake's image is the 1x1 one


def test_steps_become_waterfall_bars_to_the_next_step_and_the_turns_end() -> None:
    steps = [Step(name="plan", status="completed", at=T0),
             Step(name="read_file", status="completed", at=T0 + timedelta(seconds=2)),
             Step(name="read_file", status="failed", at=T0 + timedelta(seconds=5))]
    frame = step_frame(steps, T0 + timedelta(seconds=9))
    assert frame["step"].to_list() == ["1. plan", "2. read_file", "3. read_file"]
    assert frame["start_s"].to_list() == [0.0, 2.0, 5.0]
    assert frame["end_s"].to_list() == [2.0, 5.0, 9.0]
    # a turn that ended before its last step was recorded still draws a visible bar
    late = step_frame(steps, T0)
    assert late["end_s"][-1] > late["start_s"][-1]
    assert step_frame([], T0).height == 0


def test_pages_and_anchors_of_a_long_conversation() -> None:
    ids = [f"t-{i:04d}" for i in range(TURNS_PER_PAGE * 2 + 3)]
    assert page_of(ids, ids[0]) == 0
    assert page_of(ids, ids[TURNS_PER_PAGE]) == 1
    assert page_of(ids, ids[-1]) == 2
    assert page_of(ids, "missing") == page_of(ids, None) == 0
    assert turn_anchor("t-0001") == "turn-t-0001"
    assert turn_anchor("a'b<c>.d") == "turn-a-b-c--d"


def test_text_is_cut_at_a_words_end_and_refs_read_as_file_names() -> None:
    from app.components.events import ref_mentions, refs_as_names
    from app.components.text import shorten
    from tests.app.workbench_lake import FILE_REF

    assert shorten("the quokka spreadsheet shows a timezone drift", 30) == (
        "the quokka spreadsheet shows…")
    assert shorten("short", 30) == "short"
    assert shorten("x" * 40, 10) == "x" * 9 + "…"  # one long word: cut where it must be
    assert refs_as_names(f"The corrected sheet is still {FILE_REF}.") == (
        "The corrected sheet is still quokka.csv.")
    assert refs_as_names("conv:fi:nonsense stays") == "conv:fi:nonsense stays"
    text, found = ref_mentions(f"see {FILE_REF}")
    assert found == [(FILE_REF, "quokka.csv")]
    assert ":material/download:" not in text and "(file below)" in text
