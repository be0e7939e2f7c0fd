"""How long a research spent in the framework between its steps.

Every node is wrapped by `timed`, which notes when it ran on the run's StepClock (a context
variable the runner sets; tasks LangGraph starts for the run inherit it). Time when no node of the
research was running is the orchestration's own: LangGraph applying writes and choosing the next
tasks, the checkpoint saved before the next step starts, and waiting for a busy event loop to get to
either. Work done inside nodes (page extraction, model calls, waiting for engines) is not in it.
Outside a ResearchRun (LangGraph Studio) the wrapper only calls the node.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

_clock: ContextVar["StepClock | None"] = ContextVar("deep_research_step_clock", default=None)


class StepClock:
    """Intervals during which a node of one research ran, and the time between them."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.end: float | None = None
        self.intervals: list[tuple[float, float]] = []

    def stop(self) -> None:
        self.end = time.perf_counter()

    def idle_ms(self) -> float:
        """Milliseconds from start to stop (or now) during which no node ran."""
        end = time.perf_counter() if self.end is None else self.end
        idle, reached = 0.0, self.start
        for a, b in sorted(self.intervals):
            if a > reached:
                idle += a - reached
            reached = max(reached, b)
        return round((idle + max(0.0, end - reached)) * 1000, 1)

    def bind(self) -> Any:
        """Make this the clock of the current context; returns the token to `unbind` with."""
        return _clock.set(self)

    @staticmethod
    def unbind(token: Any) -> None:
        _clock.reset(token)


def timed(node: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a node (async or plain) so its runs show on the research's StepClock; the signature is
    kept, so LangGraph still passes `runtime` to the nodes that ask for it."""
    if inspect.iscoroutinefunction(node):
        @functools.wraps(node)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            clock = _clock.get()
            t0 = time.perf_counter()
            try:
                return await node(*args, **kwargs)
            finally:
                if clock is not None:
                    clock.intervals.append((t0, time.perf_counter()))

        return run_async

    @functools.wraps(node)
    def run(*args: Any, **kwargs: Any) -> Any:
        clock = _clock.get()
        t0 = time.perf_counter()
        try:
            return node(*args, **kwargs)
        finally:
            if clock is not None:
                clock.intervals.append((t0, time.perf_counter()))

    return run
