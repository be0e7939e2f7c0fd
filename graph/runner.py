"""Running a research: start, stream progress, resume, stop with what was found.

One helper for every surface (MCP server, CLI, notebooks, benchmarks), so they all validate the
same way, stream the same events and return the same ResearchResult.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from graph.builder import compile_graph
from graph.llm import LLMError
from graph.nodes.synthesize import partial_result
from graph.settings import MAX_QUESTION_CHARS, ResearchSettings, SettingsError, make_settings
from graph.state import ResearchResult
from graph.step_clock import StepClock
from tools.base import ToolError

log = logging.getLogger("deep_research.runner")
EventHandler = Callable[[dict[str, Any]], Awaitable[None] | None]
_compiled: dict[int, Any] = {}


def validate_question(question: Any) -> str:
    """A clean question or a SettingsError naming the problem and the fix."""
    if not isinstance(question, str):
        raise SettingsError(f"question: expected text, got {type(question).__name__}")
    q = " ".join(question.split())
    if not q:
        raise SettingsError("question: it is empty; ask a question in words")
    if len(q) > MAX_QUESTION_CHARS:
        raise SettingsError(f"question: {len(q)} characters; the limit is {MAX_QUESTION_CHARS}. "
                            f"Shorten it, or split it into several researches")
    return q


def graph_for(checkpointer: Any = None):
    key = id(checkpointer)
    if key not in _compiled:
        _compiled[key] = (checkpointer, compile_graph(checkpointer=checkpointer))
    return _compiled[key][1]


def new_research_id() -> str:
    return uuid.uuid4().hex[:12]


class ResearchRun:
    """One research: `await run.start()` or `await run.resume()`; `run.state` and `run.progress`
    are readable at any time, and `run.partial(reason)` turns whatever was found into a result."""

    def __init__(self, question: str, settings: ResearchSettings | None = None, *,
                 research_id: str | None = None, checkpointer: Any = None,
                 on_event: EventHandler | None = None, durability: str | None = None):
        self.question = validate_question(question)
        self.settings = settings or make_settings()
        self.research_id = research_id or new_research_id()
        self.checkpointer = checkpointer
        self.on_event = on_event
        # with a checkpointer, save each finished step before the next starts: a crash re-runs only
        # the step that was running
        self.durability = durability or "sync"
        self.state: dict[str, Any] = {"question": self.question}
        self.progress: dict[str, Any] = {"stage": "queued", "message": "Queued", "ts": time.time()}
        self.events: list[dict[str, Any]] = []
        self.started = time.time()
        self.clock: StepClock | None = None  # set while this process drives the graph

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.research_id},
                "max_concurrency": max(4, self.settings.max_concurrency * 2),
                "recursion_limit": 500}

    @classmethod
    async def saved(cls, research_id: str, checkpointer: Any, settings: ResearchSettings | None = None,
                    **kwargs: Any) -> "ResearchRun":
        """A run rebuilt from its checkpoint (question and settings as they were), ready to resume."""
        snap = await graph_for(checkpointer).aget_state({"configurable": {"thread_id": research_id}})
        if not snap.values:
            raise SettingsError(f"research_id: no saved research {research_id!r}; "
                                f"check the id (it is printed when a research starts)")
        values = dict(snap.values)
        run = cls(values["question"], settings or make_settings(**values.get("settings", {})),
                  research_id=research_id, checkpointer=checkpointer, **kwargs)
        run.state = values
        return run

    async def start(self) -> ResearchResult:
        """Run from the question to the report."""
        inp = {"question": self.question, "settings": self.settings.overrides(), "started_at": time.time()}
        return await self._drive(inp)

    async def resume(self) -> ResearchResult:
        """Continue a checkpointed run; steps that finished are not run again."""
        graph = graph_for(self.checkpointer)
        snap = await graph.aget_state(self.config)
        if not snap.values:
            raise SettingsError(f"research_id: no saved research {self.research_id!r} to resume")
        self.state = dict(snap.values)
        if not snap.next and self.state.get("result"):
            return self._result(self.state["result"])
        return await self._drive(None)

    async def _drive(self, inp: dict[str, Any] | None) -> ResearchResult:
        graph = graph_for(self.checkpointer)
        deadline = self.settings.time_budget_s * 1.5 + 60  # backstop for a hung provider or model
        self.clock = StepClock()
        token = self.clock.bind()
        try:
            async with asyncio.timeout(deadline):
                async for mode, chunk in graph.astream(inp, self.config, context=self.settings,
                                                       stream_mode=["values", "custom"], **self._durability()):
                    if mode == "custom":
                        await self._event(chunk)
                    else:
                        self.state = chunk
        except TimeoutError:
            return self.partial("time_budget", f"stopped after {deadline:.0f} s without finishing")
        except (LLMError, ToolError, SettingsError) as e:
            if not self.state.get("sources"):
                raise  # nothing spent on searching yet: the caller reports a clear error
            return self.partial("error", f"stopped by an error: {getattr(e, 'message', str(e))}")
        finally:
            self.clock.stop()
            StepClock.unbind(token)
        if not self.state.get("result"):
            return self.partial("error", "the graph ended without a result")
        return self._result(self.state["result"])

    def _durability(self) -> dict[str, Any]:
        # LangGraph warns when durability is given without a checkpointer
        return {"durability": self.durability} if self.checkpointer is not None else {}

    async def _event(self, event: dict[str, Any]) -> None:
        self.progress = event
        self.events.append(event)
        if self.on_event is not None:
            out = self.on_event(event)
            if inspect.isawaitable(out):
                await out

    def partial(self, reason: str, note: str) -> ResearchResult:
        """What was found so far, marked partial (or failed when nothing was read)."""
        result = partial_result({"question": self.question, **self.state}, reason, note)
        result.research_id = self.research_id
        if self.clock is not None:
            result.stats.framework_ms = self.clock.idle_ms()
        return result

    def _result(self, data: dict[str, Any]) -> ResearchResult:
        result = ResearchResult.model_validate(data)
        result.research_id = self.research_id
        if self.clock is not None:
            result.stats.framework_ms = self.clock.idle_ms()
        return result


async def run_research(question: str, settings: ResearchSettings | None = None, **kwargs: Any) -> ResearchResult:
    """Run one research to the end and return its result (see ResearchRun for the options)."""
    return await ResearchRun(question, settings, **kwargs).start()
