"""framework_ms: the time between a research's steps, when none of its nodes runs."""

from __future__ import annotations

import asyncio

from graph.builder import compile_graph
from graph.runner import ResearchRun
from graph.step_clock import StepClock, timed
from graph.testing import offline_settings


def test_idle_time_is_the_time_no_interval_covers():
    clock = StepClock()
    s = clock.start
    # two overlapping nodes, a gap of 0.2 s, one more node, then 0.1 s to the end
    clock.intervals = [(s + 0.1, s + 0.5), (s + 0.3, s + 0.6), (s + 0.8, s + 0.9)]
    clock.end = s + 1.0
    assert clock.idle_ms() == 100 + 200 + 100


async def test_timed_keeps_the_node_signature_and_records_only_under_a_clock():
    calls = []

    async def node(state, runtime=None):
        calls.append(runtime)
        await asyncio.sleep(0.01)
        return {"x": 1}

    wrapped = timed(node)
    assert await wrapped({}, runtime="r") == {"x": 1}  # no clock: just the node
    clock = StepClock()
    token = clock.bind()
    try:
        assert await wrapped({}) == {"x": 1}
        assert timed(lambda state: {"y": 2})({}) == {"y": 2}
    finally:
        StepClock.unbind(token)
    assert calls == ["r", None] and len(clock.intervals) == 2
    import inspect

    assert list(inspect.signature(wrapped).parameters) == ["state", "runtime"]


async def test_a_run_reports_framework_time_below_its_duration():
    result = await ResearchRun("Do heat pumps work in cold climates?", offline_settings(depth="standard")).start()
    stats = result.stats
    assert result.status == "complete"
    assert stats.framework_ms is not None and 0 < stats.framework_ms < stats.duration_ms


async def test_the_graph_runs_without_a_runner_as_studio_runs_it():
    graph = compile_graph()
    settings = offline_settings(depth="quick")
    state = await graph.ainvoke({"question": "Do heat pumps work in cold climates?",
                                 "settings": settings.overrides()}, context=settings)
    assert state["result"]["status"] == "complete" and state["result"]["stats"]["framework_ms"] is None
