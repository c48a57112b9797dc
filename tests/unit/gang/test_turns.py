"""Turns: at most `per_turn` tasks pass in one turn of the event loop, first come first out,
and an idle loop is left idle."""

from __future__ import annotations

import asyncio

import pytest

from extender.gang.turns import Turns


class TurnCounter:
    """Counts the event loop's turns: a callback that schedules itself again runs once a turn."""

    def __init__(self) -> None:
        self.turn = 0
        self._stopped = False

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        if not self._stopped:
            self.turn += 1
            asyncio.get_running_loop().call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


async def passes(
    turns: Turns, tasks: int, cancel: frozenset[int] = frozenset()
) -> list[tuple[int, int]]:
    """Start `tasks` tasks in one turn, each taking a pass; (task, turn it passed in) in the
    order they passed. Those in `cancel` are cancelled while they wait."""
    counter = TurnCounter()
    counter.start()
    passed: list[tuple[int, int]] = []

    async def one(i: int) -> None:
        await turns.take()
        passed.append((i, counter.turn))

    running = [asyncio.create_task(one(i)) for i in range(tasks)]
    await asyncio.sleep(0)  # every task has run to its take()
    for i in cancel:
        running[i].cancel()
    await asyncio.gather(*running, return_exceptions=True)
    counter.stop()
    return passed


@pytest.mark.parametrize(
    ("per_turn", "tasks"),
    [(1, 5), (4, 4), (4, 17), (16, 100), (64, 1024)],
)
def test_at_most_per_turn_pass_in_a_turn_in_the_order_they_came(per_turn: int, tasks: int) -> None:
    passed = asyncio.run(passes(Turns(per_turn), tasks))
    assert [i for i, _ in passed] == list(range(tasks))
    per = [sum(1 for _, t in passed if t == turn) for turn in {t for _, t in passed}]
    assert max(per) <= per_turn
    # Not slower than it must be: every turn but the last passes a whole turn's room.
    assert len(per) == -(-tasks // per_turn)


def test_a_cancelled_waiter_is_skipped_and_takes_no_room() -> None:
    passed = asyncio.run(passes(Turns(2), 7, cancel=frozenset({2, 3})))
    assert [i for i, _ in passed] == [0, 1, 4, 5, 6]
    turns = [t for _, t in passed]
    assert turns[2] == turns[3]  # 4 and 5 share the turn 2 and 3 would have had


def test_an_idle_loop_is_left_idle() -> None:
    """Nothing stays scheduled once everybody has passed and a turn went by with no pass."""

    async def scenario() -> tuple[bool, bool]:
        turns = Turns(2)
        await asyncio.gather(*(turns.take() for _ in range(5)))
        for _ in range(4):
            await asyncio.sleep(0)
        return turns._armed, turns.waiting == 0

    assert asyncio.run(scenario()) == (False, True)


def test_room_comes_back_in_the_next_turn() -> None:
    async def scenario() -> list[int]:
        turns = Turns(3)
        counter = TurnCounter()
        counter.start()
        seen = []
        for _ in range(7):  # one task taking passes one after another
            await turns.take()
            seen.append(counter.turn)
        counter.stop()
        return seen

    seen = asyncio.run(scenario())
    assert max(seen.count(t) for t in set(seen)) <= 3
    assert len(seen) == 7


@pytest.mark.parametrize("per_turn", [0, -1])
def test_per_turn_must_be_positive(per_turn: int) -> None:
    with pytest.raises(ValueError, match="per_turn"):
        Turns(per_turn)
