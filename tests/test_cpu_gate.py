"""The CPU gate: researches beyond what the process's CPU can serve wait queued, in order."""

from __future__ import annotations

import asyncio

import pytest

from graph.cpu_gate import CpuGate
from graph.jobs import ServerSettings, open_jobs
from tests.mcp_helpers import QUESTION, OfflineModels


class Meter:
    """A CPU clock the test turns: `load` CPU seconds per wall second (the wall clock is real)."""

    def __init__(self) -> None:
        import time

        self.load = 0.0
        self._cpu = 0.0
        self._t = time.monotonic()

    def __call__(self) -> float:
        import time

        now = time.monotonic()
        self._cpu += (now - self._t) * self.load
        self._t = now
        return self._cpu


async def _hold(gate: CpuGate, started: list[int], i: int, release: asyncio.Event) -> None:
    async with gate.slot():
        started.append(i)
        await release.wait()


async def test_the_floor_starts_at_once_then_a_busy_process_holds_the_rest_until_cpu_frees():
    meter = Meter()
    gate = CpuGate(0.5, floor=2, tick_s=0.02, window_s=0.1, cpu_clock=meter)
    started: list[int] = []
    release = asyncio.Event()
    meter.load = gate.util = 0.9  # the process is busy, and the reading knows it
    tasks = [asyncio.create_task(_hold(gate, started, i, release)) for i in range(5)]
    await asyncio.sleep(0.4)
    assert started == [0, 1] and gate.waiting == 3  # the floor ran; nothing else fits under 0.5
    meter.load = 0.05  # the CPU frees up: the waiting ones start, in arrival order
    for _ in range(100):
        if len(started) == 5:
            break
        await asyncio.sleep(0.05)
    assert started == [0, 1, 2, 3, 4]
    release.set()
    await asyncio.gather(*tasks)
    assert gate.running == 0 and gate.waiting == 0
    await gate.aclose()


async def test_room_counts_recent_starts_at_full_size():
    meter = Meter()
    gate = CpuGate(0.5, floor=1, tick_s=0.01, window_s=10.0, cpu_clock=meter)
    gate.per_research = 0.1  # each research is known to use a tenth of a core
    started: list[int] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(gate, started, i, release)) for i in range(10)]
    await asyncio.sleep(0.5)
    # the reading is still ~0 (no CPU used yet), but five starts of 0.1 fill the 0.5 target
    assert len(started) == 5, started
    release.set()
    await asyncio.gather(*tasks)
    await gate.aclose()


async def test_a_target_of_one_turns_the_gate_off():
    meter = Meter()
    meter.load = 5.0
    gate = CpuGate(1.0, floor=1, cpu_clock=meter)
    started: list[int] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(gate, started, i, release)) for i in range(6)]
    await asyncio.sleep(0.05)
    assert len(started) == 6 and gate._sampler is None
    release.set()
    await asyncio.gather(*tasks)


async def test_a_queued_research_can_be_cancelled_while_it_waits_for_cpu():
    meter = Meter()
    gate = CpuGate(0.5, floor=1, tick_s=0.02, window_s=0.1, cpu_clock=meter)
    meter.load = gate.util = 0.9
    started: list[int] = []
    release = asyncio.Event()
    first = asyncio.create_task(_hold(gate, started, 0, release))
    second = asyncio.create_task(_hold(gate, started, 1, release))
    await asyncio.sleep(0.2)
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert gate.waiting == 0 and started == [0]
    release.set()
    await first
    await gate.aclose()


@pytest.mark.parametrize("target", [0.0, 1.5])
def test_the_setting_is_a_share_of_one_core(monkeypatch, target):
    from pydantic import ValidationError

    monkeypatch.setenv("DEEP_RESEARCH_CPU_TARGET", str(target))
    with pytest.raises(ValidationError, match="cpu_target"):
        ServerSettings()


async def test_the_registry_keeps_a_research_queued_while_the_gate_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DEEP_RESEARCH_DATA_DIR", str(tmp_path))
    jobs, stack = await open_jobs(ServerSettings(warm_up=False, max_concurrent_researches=4, cpu_target=0.5),
                                  prepare=OfflineModels(latency_s=0.3))
    meter = Meter()
    jobs.gate = CpuGate(0.5, floor=1, tick_s=0.02, window_s=0.1, cpu_clock=meter)
    meter.load = jobs.gate.util = 0.95
    try:
        first = await jobs.submit(QUESTION, {"depth": "quick"})
        second = await jobs.submit(QUESTION + " (second)", {"depth": "quick"})
        await asyncio.sleep(0.5)
        assert first.status == "running" and second.status == "queued"
        assert (await jobs.store.get(second.research_id)).status == "queued"
        meter.load = 0.0
        assert await jobs.wait(second, 60) and second.status == "complete"
        assert await jobs.wait(first, 60) and first.status == "complete"
    finally:
        await stack.aclose()
