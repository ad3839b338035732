"""Redraw while dragging, without a backlog: at most one redraw per interval, and the last
value always drawn.

With ``continuous_update=True`` a slider sends a value for every pixel of a drag. Drawing
each one (50-100 ms apiece) queues seconds of stale redraws behind the pointer. A
`Throttle` draws at once when the last draw is older than ``interval`` seconds; otherwise it
schedules one trailing draw on the kernel's event loop, which then draws the newest state.
Only changes that come from the browser (a ``comm_msg``) are ever deferred: a change made by
code in a cell draws at once, so the next line of that cell reads fresh data. Without a
running event loop (plain Python, tests) every call draws at once.

Example:
    >>> calls = []
    >>> t = Throttle(lambda: calls.append(1), interval=0.05)
    >>> t(); t()  # no event loop here: both draw at once
    >>> len(calls)
    2
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable


def from_browser() -> bool:
    """True while the kernel handles a message from the browser (a widget's comm), not a cell."""
    try:
        from ipykernel.kernelbase import Kernel

        if not Kernel.initialized():
            return False
        return Kernel.instance().get_parent().get("header", {}).get("msg_type") == "comm_msg"
    except Exception:  # no kernel, or another kernel: treat as code, draw at once
        return False


class Throttle:
    """Call ``draw`` now, or once at the end of the current interval (see the module doc)."""

    def __init__(self, draw: Callable[[], None], interval: float = 0.08, may_defer: Callable[[], bool] = from_browser):
        if not callable(draw):
            raise TypeError(f"draw must be callable, got {type(draw).__name__}")
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval) \
                or interval < 0:  # fmt: skip
            raise ValueError(f"interval must be a finite number of seconds >= 0, got {interval!r}")
        self.draw, self.interval, self.may_defer = draw, float(interval), may_defer
        self._last = -math.inf
        self._pending: asyncio.TimerHandle | None = None

    def _run(self) -> None:
        self._pending = None
        self._last = time.perf_counter()
        self.draw()

    def __call__(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        wait = self._last + self.interval - time.perf_counter()
        if loop is None or wait <= 0 or not self.may_defer():
            if self._pending is not None:
                self._pending.cancel()
            self._run()
        elif self._pending is None:
            self._pending = loop.call_later(wait, self._run)
