"""The event-loop meter (``node.runtime._stalls.LoopStalls``) finds a step that holds the loop, names its task, and
reports it in a node's status."""

from __future__ import annotations

import time

import trio

from node.runtime._stalls import LoopStalls


def test_a_step_that_holds_the_loop_is_the_longest_and_named() -> None:
    meter = LoopStalls()

    async def blocking_step() -> None:
        await trio.sleep(0)
        time.sleep(0.15)  # holds the loop: no await for 150 ms
        await trio.sleep(0)

    async def short_steps() -> None:
        for _ in range(50):
            await trio.sleep(0)

    async def main() -> None:
        trio.lowlevel.add_instrument(meter)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(short_steps)
                nursery.start_soon(blocking_step, name="the-blocker")
        finally:
            trio.lowlevel.remove_instrument(meter)

    trio.run(main)
    f = meter.figures()
    assert f["longest_step_ms"] >= 150 and f["longest_task"] == "the-blocker", f
    assert f["steps_over_100ms"] == 1 and f["steps_over_1s"] == 0 and f["steps"] > 50, f
