"""The clock seam: every stored time and every age reads one clock a test can freeze."""

from __future__ import annotations

import threading

from sessiontree import clock, deadlines, ids


def test_a_frozen_clock_holds_now_still_until_it_is_advanced():
    with clock.frozen(1_800_000_000.25) as frozen:
        assert ids.now() == ids.now() == "2027-01-15T08:00:00.250Z"
        frozen.advance(59.75)
        assert ids.now() == "2027-01-15T08:01:00.000Z"
        assert deadlines.clock() == 1_800_000_060.0 == frozen.seconds()
    assert ids.now() != "2027-01-15T08:01:00.000Z"  # the wall clock again


def test_freezing_nests_and_every_thread_reads_the_frozen_clock():
    seen: list[str] = []
    with clock.frozen(0) as outer:
        with clock.frozen(86_400):
            thread = threading.Thread(target=lambda: seen.append(ids.now()))
            thread.start()
            thread.join()
        outer.advance(1)
        assert seen == ["1970-01-02T00:00:00.000Z"] and ids.now() == "1970-01-01T00:00:01.000Z"


def test_ids_keep_the_wall_clock_while_the_clock_is_frozen():
    before = ids.new_id()
    with clock.frozen(0):
        during = ids.new_id()
    assert before < during and not during.startswith("00000000")
