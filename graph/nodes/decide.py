"""Routing between rounds, all pure functions: no LLM, no I/O.

They are `async def` although they never await: LangGraph sends a plain function to a thread pool on
every call, and under load that thread hop (GIL hand-offs, a wake-up of the loop) cost more than the
routing itself.

fan_out sends each pending sub-query of the round into the search pipeline; after the round,
after_search starts extraction and reflection side by side; decide records why the research stops,
or schedules the follow-up queries as the next round.
"""

from __future__ import annotations

import time

from langgraph.runtime import Runtime
from langgraph.types import Send

from graph.nodes.plan import unique_queries
from graph.progress import emit
from graph.settings import ResearchSettings, settings_from
from graph.state import QueryTask, ResearchState, StopReason, SubQuery


def _round_queries(state: ResearchState) -> list[SubQuery]:
    rnd = state.get("round", 1)
    return [q for q in state.get("sub_queries", []) if q.get("round") == rnd]


async def fan_out(state: ResearchState, runtime: Runtime[ResearchSettings]) -> list[Send] | str:
    """One search task per pending sub-query of this round, all started in the same step."""
    settings = settings_from(runtime.context, state.get("settings"))
    pending = [q for q in _round_queries(state) if q.get("status") == "pending"]
    if not pending:
        return "gather"
    sources = state.get("sources", [])
    room = max(0, settings.resolved().max_sources - len(sources))
    # split the room exactly, so parallel tasks together never overshoot max_sources
    shares = [room // len(pending) + (1 if i < room % len(pending) else 0) for i in range(len(pending))]
    keys = [s["key"] for s in sources]
    scope = settings.resolved()
    emit("searching", f"Searching {len(pending)} queries, round {state.get('round', 1)}/{scope.max_rounds}",
         round=state.get("round", 1), max_rounds=scope.max_rounds, queries=[q["query"] for q in pending])
    run_key = f"{state.get('started_at')}:{state['question'][:80]}"
    return [Send("search", QueryTask(sub_query=q, known_keys=keys, room=share, run_key=run_key))
            for q, share in zip(pending, shares)]


async def gather(state: ResearchState) -> dict:
    """The join after a round's parallel searches (a step boundary, so the next routing runs once)."""
    return {}


def budget_stop(state: ResearchState, settings: ResearchSettings) -> StopReason | None:
    stats = state.get("stats", {})
    if stats.get("prompt_tokens", 0) + stats.get("completion_tokens", 0) >= settings.token_budget:
        return "token_budget"
    if state.get("started_at") and time.time() - state["started_at"] >= settings.time_budget_s:
        return "time_budget"
    if len(state.get("sources", [])) >= settings.resolved().max_sources:
        return "source_budget"
    return None


async def after_search(state: ResearchState, runtime: Runtime[ResearchSettings]) -> list[Send | str]:
    """After a round: extraction for each sub-query that read something, beside reflection, when
    another round may follow. The last round (out of rounds, out of budget, nothing new) goes
    straight to the writer, which reads its passages itself: no LLM hop between the last search
    and the report."""
    settings = settings_from(runtime.context, state.get("settings"))
    rnd = state.get("round", 1)
    new_this_round = sum(q.get("new_sources", 0) for q in _round_queries(state))
    if rnd >= settings.resolved().max_rounds or not new_this_round or budget_stop(state, settings):
        return ["decide"]
    targets: list[Send | str] = []
    for q in _round_queries(state):
        passages = [p for p in state.get("passages", []) if p["query_id"] == q["id"]]
        if passages:
            keys = {p["key"] for p in passages}
            targets.append(Send("extract", {"question": state["question"], "sub_query": q, "passages": passages,
                                            "sources": [s for s in state.get("sources", []) if s["key"] in keys]}))
    emit("reflecting", f"Reflecting on round {rnd}/{settings.resolved().max_rounds} and extracting evidence",
         round=rnd)
    return [*targets, "reflect"]


async def decide(state: ResearchState, runtime: Runtime[ResearchSettings]) -> dict:
    settings = settings_from(runtime.context, state.get("settings"))
    scope = settings.resolved()
    rnd = state.get("round", 1)
    reason: StopReason | None = state.get("stop_reason")
    if reason is None:
        if state.get("sufficient"):
            reason = "sufficient"
        elif rnd >= scope.max_rounds:
            reason = "max_rounds"
        else:
            reason = budget_stop(state, settings)
    if reason is None and not sum(q.get("new_sources", 0) for q in _round_queries(state)):
        reason = "no_new_sources"
    follow = unique_queries(state.get("follow_ups", []), [q["query"] for q in state.get("sub_queries", [])],
                            scope.breadth)
    if reason is None and not follow:
        reason = "no_follow_ups"
    if reason is not None:
        return {"stop_reason": reason}
    nxt = rnd + 1
    return {"round": nxt, "follow_ups": [], "sufficient": False,
            "sub_queries": [{"id": f"r{nxt}q{i}", "query": q, "rationale": "Follow-up: closes a knowledge gap.",
                             "round": nxt, "status": "pending"} for i, q in enumerate(follow, 1)]}


async def after_decide(state: ResearchState, runtime: Runtime[ResearchSettings]) -> list[Send] | str:
    if state.get("stop_reason"):
        return "synthesize"
    return await fan_out(state, runtime)
