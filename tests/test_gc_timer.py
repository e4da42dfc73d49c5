"""GCTimer: the wall time and count of garbage collections while it is active, per generation."""

from __future__ import annotations

import gc

import pytest

from agent_gym.rollout.gc_timer import GCTimer


def test_counts_each_collection_by_generation(no_automatic_gc):
    before = list(gc.callbacks)
    with GCTimer() as timer:
        gc.collect(0)
        gc.collect(0)
        gc.collect(1)
        gc.collect(2)
    gc.collect(2)  # after the block: not counted
    assert timer.collections == [2, 1, 1]
    assert 0 < timer.longest_s <= timer.seconds
    assert gc.callbacks == before
    assert timer.as_stats() == {
        "gc_s": timer.seconds,
        "gc_longest_s": timer.longest_s,
        "gc_collections": [2, 1, 1],
        "gc_full_collections": 1,
    }


def test_removes_its_callback_when_the_block_raises(no_automatic_gc):
    before = list(gc.callbacks)
    with pytest.raises(RuntimeError, match="boom"):
        with GCTimer():
            gc.collect()
            raise RuntimeError("boom")
    assert gc.callbacks == before


def test_nothing_counted_without_collections(no_automatic_gc):
    with GCTimer() as timer:
        sum(range(1000))
    assert (timer.seconds, timer.longest_s, timer.collections) == (0.0, 0.0, [0, 0, 0])


def test_nested_timers_each_count_and_a_timer_cannot_be_entered_twice(no_automatic_gc):
    outer, inner = GCTimer(), GCTimer()
    with outer:
        gc.collect(0)
        with inner:
            gc.collect(2)
            with pytest.raises(RuntimeError, match="already active"):
                inner.__enter__()
    assert outer.collections == [1, 0, 1] and inner.collections == [0, 0, 1]


def test_an_end_without_a_start_is_ignored():
    timer = GCTimer()
    timer._callback("stop", {"generation": 2})  # a collection that began before the timer was entered
    assert (timer.seconds, timer.collections) == (0.0, [0, 0, 0])


def test_exit_survives_a_cleared_callback_list(no_automatic_gc):
    saved = list(gc.callbacks)
    try:
        with pytest.raises(KeyError):  # the block's own error comes through, not a ValueError from exit
            with GCTimer():
                gc.callbacks.clear()
                raise KeyError("mine")
    finally:
        gc.callbacks[:] = saved
