"""The collector settings a started process runs with (`kit.memory.collecting_less`),
used by the API's lifespan and by `headwater worker`."""

from __future__ import annotations

import gc

import pytest

from headwater.kit import memory

# these tests are about the outermost one: the session's freeze thawed (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("thawed")


def test_collecting_less_freezes_and_raises_the_young_threshold_then_restores() -> None:
    before = gc.get_threshold()
    with memory.collecting_less():
        assert gc.get_threshold() == (memory.YOUNG_COLLECTION, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_collecting_less_restores_the_defaults_when_the_process_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), memory.collecting_less():
        raise RuntimeError("the worker stopped")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_cycle_made_while_collecting_less_is_still_collected() -> None:
    class Node:
        other: Node

    with memory.collecting_less():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b  # only the cycle holds them now
        assert gc.collect() >= 2  # the pair found and freed


def test_inside_another_it_changes_nothing_and_collects_nothing() -> None:
    """An app started while another runs (tests start many) leaves the enclosing one's
    settings as they are, and makes no full collection of what is frozen already."""
    collections: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    with memory.collecting_less():
        threshold = gc.get_threshold()
        gc.callbacks.append(note)
        try:
            with memory.collecting_less():
                assert gc.get_freeze_count() > 0
                assert gc.get_threshold() == threshold
            assert 2 not in collections
        finally:
            gc.callbacks.remove(note)
        assert gc.get_freeze_count() > 0  # the enclosing one's freeze still holds
        assert gc.get_threshold() == threshold
    assert gc.get_freeze_count() == 0


def test_inside_another_it_does_not_count_what_is_frozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting the frozen objects walks each of them (50 ms among a test process's
    millions): an app started inside another knows the freeze is there without it."""
    with memory.collecting_less():
        counted: list[int] = []
        monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or 1)
        with memory.collecting_less():
            assert counted == []
        monkeypatch.undo()
