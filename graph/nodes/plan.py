"""plan: one structured LLM call turns the question into the first round's sub-queries."""

from __future__ import annotations

import time
from datetime import date

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from graph.llm import Usage, chat_model, elapsed_ms, structured, system_user
from graph.progress import emit
from graph.settings import ResearchSettings, settings_from
from graph.state import ResearchState, SubQuery
from prompts import render


class PlannedQuery(BaseModel):
    query: str = Field(description="A concise search-engine query.")
    rationale: str = Field(description="One sentence: what this query is for.")


class Plan(BaseModel):
    queries: list[PlannedQuery]


def unique_queries(candidates: list[str], exclude: list[str], limit: int) -> list[str]:
    """Trimmed, non-empty, case-insensitively new queries, at most `limit`, each <= 400 chars."""
    seen = {" ".join(q.lower().split()) for q in exclude}
    out = []
    for q in candidates:
        q = " ".join(q.split())[:400]
        if q and q.lower() not in seen:
            seen.add(q.lower())
            out.append(q)
    return out[:limit]


async def plan(state: ResearchState, runtime: Runtime[ResearchSettings]) -> dict:
    t0 = time.perf_counter()
    settings = settings_from(runtime.context, state.get("settings"))
    breadth = settings.resolved().breadth
    emit("planning", "Planning the research", round=0)
    usage = Usage()
    system, user = render("plan", question=state["question"], breadth=breadth,
                          today=date.today().isoformat())
    result = await structured(chat_model(settings, "plan"), Plan, system_user(system, user), usage)
    by_query = {" ".join(p.query.split()): p.rationale for p in result.queries}
    queries = unique_queries(list(by_query), [], breadth) or [state["question"][:400]]
    sub_queries: list[SubQuery] = [
        {"id": f"r1q{i}", "query": q, "rationale": by_query.get(q, "The question as asked."),
         "round": 1, "status": "pending"} for i, q in enumerate(queries, 1)]
    return {"sub_queries": sub_queries, "round": 1, "started_at": state.get("started_at") or time.time(),
            "stats": {**usage.stats(), "stage_ms": {"plan": elapsed_ms(t0)}}}
