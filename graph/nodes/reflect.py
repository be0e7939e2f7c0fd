"""reflect: one structured call over the best passages so far -> sufficient?, gaps, follow-ups.

It reads the ranked passages directly (not the extracted findings), so it can run in the same
step as extraction."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from graph.llm import LLMError, Usage, chat_model, elapsed_ms, structured, system_user
from graph.selection import fence, select_passages
from graph.settings import ResearchSettings, settings_from
from graph.state import ResearchState
from prompts import render


class Reflection(BaseModel):
    sufficient: bool = Field(description="True if the passages answer every part of the question.")
    knowledge_gaps: list[str] = Field(description="What is missing or contradictory.")
    follow_up_queries: list[str] = Field(description="New search queries that would close the gaps.")


async def reflect(state: ResearchState, runtime: Runtime[ResearchSettings]) -> dict:
    t0 = time.perf_counter()
    settings = settings_from(runtime.context, state.get("settings"))
    scope = settings.resolved()
    rnd = state.get("round", 1)
    selected = select_passages(state.get("passages", []), state.get("sources", []), settings.reflect_passage_tokens)
    done = "\n".join(f"- {q['query']}" for q in state.get("sub_queries", []))
    system, user = render("reflect", question=state["question"], round=rnd, max_rounds=scope.max_rounds,
                          queries_done=done, passages=fence(selected), breadth=scope.breadth)
    usage = Usage()
    try:
        out = await structured(chat_model(settings, "reflect"), Reflection, system_user(system, user), usage)
    except LLMError as e:
        return {"sufficient": False, "follow_ups": [], "gaps": [],
                "warnings": [f"Reflection failed in round {rnd}; writing from what was found ({e})"],
                "stats": {**usage.stats(), "stage_ms": {"reflect": elapsed_ms(t0)}}}
    return {"sufficient": out.sufficient, "gaps": out.knowledge_gaps,
            "follow_ups": [] if out.sufficient else out.follow_up_queries,
            "stats": {**usage.stats(), "stage_ms": {"reflect": elapsed_ms(t0)}}}
