"""How long the event loop was held: the longest task steps of a node's trio loop (a trio ``Instrument``).

Everything a node does on its event loop runs in task steps: a step holds the loop until the task awaits again, and
no other task (a vote arriving, a frame being read, a deadline firing) runs meanwhile. Re-executing a round, decoding a
large frame inline or an fsync inside a step therefore stalls consensus for as long as it takes. The meter times every
step and keeps the longest one with its task's name, and counts the steps above 0.1 s and 1 s; the node reports them
in its status (``loop``). Reading the clock twice per step costs well under a microsecond next to the step itself.
"""

from __future__ import annotations

import time
from typing import Any

import trio

__all__ = ["LoopStalls"]


class LoopStalls(trio.abc.Instrument):
    """Install with ``trio.lowlevel.add_instrument``; :meth:`figures` reads what it measured so far."""

    def __init__(self) -> None:
        self._began: float | None = None  # None: no step timed now (the meter was added inside a step)
        self.longest_s = 0.0
        self.longest_task = ""
        self.over_100ms = 0
        self.over_1s = 0
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._began is None:
            return
        took = time.perf_counter() - self._began
        self._began = None
        self.steps += 1
        if took > 0.1:
            self.over_100ms += 1
            if took > 1.0:
                self.over_1s += 1
        if took > self.longest_s:
            self.longest_s = took
            self.longest_task = task.name

    def figures(self) -> dict[str, Any]:
        return {"longest_step_ms": round(self.longest_s * 1e3, 1), "longest_task": self.longest_task[-80:],
                "steps_over_100ms": self.over_100ms, "steps_over_1s": self.over_1s, "steps": self.steps}
