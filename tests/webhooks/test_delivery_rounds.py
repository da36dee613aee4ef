"""The delivery loop's rounds (webhooks/sender.py): events committed while a round runs
start another at once, and a stream of commits starts at most one every `WAKE_GAP`,
spaced further while rounds find nothing (up to `MAX_WAKE_GAP`)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from headwater.config import Settings
from headwater.webhooks import dispatch, sender
from headwater.webhooks.sender import MAX_WAKE_GAP, WAKE_GAP, Deliverer


def rounds(
    settings: Settings,
    count: int,
    *,
    wake_while_idle: bool = False,
    free: bool = False,
    heard: bool = False,
    finds: frozenset[int] = frozenset(),
    attempting: bool = False,
) -> list[float]:
    """When each of `count` rounds of a delivery loop began (its poll far beyond the
    test); the rounds numbered in `finds` (from 0) find work short of a full round, the
    others none: each round announces events committed while it runs (or, with `free`,
    an attempt ending: a slot freed); with `wake_while_idle`, events are announced every
    millisecond besides; with `heard`, the poll is stretched as where wake-ups are
    heard; with `attempting`, an attempt is running (a long one) all the while."""
    # no database: the rounds are the test's own
    deliverer = Deliverer(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        settings.model_copy(update={"webhook_poll_seconds": 300}),
        poll=(lambda polling: polling * 2) if heard else None,
    )
    began: list[float] = []

    async def run() -> None:
        stop = asyncio.Event()

        async def step() -> tuple[bool, bool]:
            began.append(time.monotonic())
            (deliverer.freed if free else deliverer.ready).set()  # after this round's look
            if len(began) == count:
                stop.set()
                deliverer.tasks.clear()  # the attempt's end is the test's, not a hand-back
            return False, len(began) - 1 in finds

        async def commit_forever() -> None:
            while True:
                await asyncio.sleep(0.001)
                deliverer.ready.set()

        deliverer._step = step  # type: ignore[method-assign]
        attempt = asyncio.create_task(asyncio.sleep(300)) if attempting else None
        if attempt is not None:
            deliverer.tasks[attempt] = None  # type: ignore[assignment]
        stream = asyncio.create_task(commit_forever()) if wake_while_idle else None
        try:
            await asyncio.wait_for(deliverer.run(stop), timeout=60)
        finally:
            if stream is not None:
                stream.cancel()
            if attempt is not None:
                attempt.cancel()

    asyncio.run(run())
    return began


def gaps_used(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The gap each idle wait of the rounds to come uses, in order (a `WAKE_GAP` of
    10 ms and a `MAX_WAKE_GAP` of 80 ms)."""
    monkeypatch.setattr(sender, "WAKE_GAP", 0.01)
    monkeypatch.setattr(sender, "MAX_WAKE_GAP", 0.08)
    used: list[float] = []
    idle = Deliverer._idle

    async def recorded(deliverer: Deliverer, stop: asyncio.Event, began: float) -> None:
        used.append(deliverer.gap)
        await idle(deliverer, stop, began)

    monkeypatch.setattr(Deliverer, "_idle", recorded)
    return used


def test_events_committed_during_a_round_start_the_next_one(settings: Settings) -> None:
    # (before, a round's wake-up was cleared as the loop went idle: the next round came
    # at the poll, and the test's 60 s ran out)
    began = rounds(settings, 3, wake_while_idle=False)
    assert len(began) == 3


def test_a_stream_of_commits_starts_a_round_at_most_every_wake_gap(settings: Settings) -> None:
    began = rounds(settings, 5, wake_while_idle=True)
    assert all(b - a >= WAKE_GAP for a, b in itertools.pairwise(began))


def test_rounds_that_find_nothing_space_the_next_ones_out_until_one_finds_work(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a stream of pushes of companies without endpoints (each commit a wake-up),
    every round finds nothing: the gap doubles up to `MAX_WAKE_GAP`; a round that finds
    work brings it back to `WAKE_GAP`, and the empty round after it (its work drained)
    keeps it there."""
    used = gaps_used(monkeypatch)
    began = rounds(settings, 9, wake_while_idle=True, finds=frozenset({5}))
    # the gap after each round (the last one's too, cut short by the stop)
    assert used == [0.01, 0.02, 0.04, 0.08, 0.08, 0.01, 0.01, 0.01, 0.02]
    assert all(b - a >= gap for (a, b), gap in zip(itertools.pairwise(began), used, strict=False))


def test_rounds_with_an_attempt_in_hand_keep_the_shortest_gap(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While deliveries are attempted, a round may lease nothing (no room) and sequence
    nothing, yet events committed then must be sequenced as soon as ever: doubling the
    gap there took the healthy endpoints' commit-to-arrival p50 from 50 to 115 ms
    (`bench.webhooks` part (2))."""
    used = gaps_used(monkeypatch)
    rounds(settings, 5, wake_while_idle=True, attempting=True)
    assert used[:4] == [0.01] * 4


def test_a_companys_pushes_each_followed_by_an_empty_round_keep_the_shortest_gap(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pushes of a company with endpoints a few tenths of a second apart: each wakes a
    round that finds its events, then a round finds them drained. Were the drained round
    a miss, the gap would double before each push (commit to arrival p50 100-120 ms in
    `bench.webhooks` part (2), against 50 ms)."""
    used = gaps_used(monkeypatch)
    rounds(settings, 8, wake_while_idle=True, finds=frozenset({0, 2, 4, 6}))
    assert used == [0.01] * 8


def test_the_longest_gap_is_a_fraction_of_a_second() -> None:
    assert WAKE_GAP < MAX_WAKE_GAP <= 0.5  # a delivery's p99 after its commit: 1 s


def test_a_freed_slot_starts_the_next_round_without_waiting_for_the_gap(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a load of deliveries the rounds follow the attempts' ends, not the gap."""
    monkeypatch.setattr(sender, "WAKE_GAP", 300.0)
    assert len(rounds(settings, 3, free=True)) == 3


def test_events_committed_during_a_round_need_no_due_time_looked_up(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where wake-ups are heard, an idle loop looks up when the next retry falls due; a
    loop with events already committed starts its next round without that query."""
    looked: list[object] = []
    monkeypatch.setattr(dispatch, "next_due_seconds", lambda db: looked.append(db) or 300.0)
    assert len(rounds(settings, 3, heard=True)) == 3
    assert looked == []
