"""CPU-aware admission: start a queued research only while this process has CPU to spare.

A research spends seconds waiting on models, search engines and pages, and some hundred ms of CPU
in between (page extraction, HTTP and LLM clients, LangGraph, checkpoints), all of it on one event
loop thread. Past the point where that thread is busy, every research admitted on top adds no
throughput: each one's steps just wait longer for the loop. Under the load benchmark (100 calls,
1 s per LLM call) 50 researches running at once finished at the same rate as a dozen would, with
every graph step waiting ~0.6 s for the CPU.

So a research that has a slot (the hard cap, `max_concurrent_researches`) also waits here until
the process's CPU use, smoothed over about a second, leaves room for one more research of the
average size seen so far. Starts are spaced by a tick so the reading can follow each one, and a
floor of running researches always proceeds, so a machine busy with other work still makes
progress. The rest waits in the queue, where a client sees "queued".

The default target is 0.8: keep the loop at most 80 % busy, the usual margin before queueing delay
grows without bound. Under the load benchmark (100 calls, 50 slots, one process on a 2-core machine)
it holds about 18 researches running, and the time between steps drops from 9-25 ms to 3.4-4.1 ms;
throughput falls from about 200 to 146-174 researches a minute, p50 from 16-18 s to 20-25 s. Its
estimate of a research's share counts the server's other work too (clients waiting on queued calls),
so it holds back a little more than it must. 1 turns it off; lower values keep steps quicker still.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager


class CpuGate:
    """Admits one research at a time while `cpu_target` (share of one core) leaves room for it."""

    def __init__(self, cpu_target: float, *, floor: int = 2, tick_s: float = 0.1, window_s: float = 1.0,
                 cpu_clock: Callable[[], float] = time.process_time,
                 wall_clock: Callable[[], float] = time.monotonic):
        self.cpu_target = cpu_target
        self.floor = max(1, floor)
        self.tick_s = tick_s
        self.window_s = window_s
        self._cpu_clock, self._wall_clock = cpu_clock, wall_clock
        self.running = 0
        self.waiting = 0
        self.util = 0.0  # smoothed CPU seconds per second of this process
        # CPU share of one running research, remembered across load waves; it starts from a guess the
        # size of a standard research here (~0.3 s of CPU over ~5 s) so the first wave does not overshoot
        self.per_research = 0.05
        self._starts: list[float] = []  # recent starts: their CPU is not in the reading yet
        self._turn = asyncio.Lock()  # FIFO: queued researches start in arrival order
        self._last_start = -1e9
        self._last: tuple[float, float] | None = None
        self._sampler: asyncio.Task | None = None

    @property
    def enabled(self) -> bool:
        return self.cpu_target < 1.0

    def sample(self) -> float:
        """Fold the CPU used since the last sample into the smoothed utilisation; returns it."""
        cpu, wall = self._cpu_clock(), self._wall_clock()
        if self._last is not None:
            dt = wall - self._last[1]
            if dt > 0:
                now = (cpu - self._last[0]) / dt
                weight = min(1.0, dt / self.window_s)
                self.util += weight * (now - self.util)
                if self.running:
                    # slower: a research's CPU comes in bursts (a round's pages), not evenly
                    self.per_research += min(1.0, dt / (5 * self.window_s)) * (self.util / self.running
                                                                                - self.per_research)
        self._last = (cpu, wall)
        return self.util

    def has_room(self) -> bool:
        """True when one more research may start now."""
        if not self.enabled or self.running < self.floor:
            return True
        now = self._wall_clock()
        if now - self._last_start < self.tick_s:
            return False  # one start per tick: let the reading see it before the next
        # a research uses little CPU until its first model call returns, so the reading lags its
        # start: count the recent ones at full size, and this one too
        self._starts = [t for t in self._starts if now - t < 2 * self.window_s]
        per_research = max(self.util / self.running, self.per_research)
        return self.util + (len(self._starts) + 1) * per_research <= self.cpu_target

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold while a research runs; entering waits for room."""
        self.waiting += 1
        try:
            async with self._turn:
                self._ensure_sampler()
                while not self.has_room():
                    await asyncio.sleep(self.tick_s)
                self.running += 1
                self._last_start = self._wall_clock()
                self._starts.append(self._last_start)
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self.running -= 1

    def _ensure_sampler(self) -> None:
        if self.enabled and (self._sampler is None or self._sampler.done()):
            self._sampler = asyncio.ensure_future(self._sample_loop())

    async def _sample_loop(self) -> None:
        # runs while researches run or wait; idle servers do not tick
        self.sample()
        while self.running or self.waiting:
            await asyncio.sleep(self.tick_s)
            self.sample()
        self._last = None
        self.util = 0.0

    async def aclose(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
