"""Which passages enter a prompt: the best first, within a token budget, fetched text fenced.

Prompt size is budgeted in tokens (estimated at 4 characters each) because it is what costs
seconds and money; passages come ranked per sub-query, and the rest are dropped.
"""

from __future__ import annotations

from graph.state import Passage, Source


def select_passages(passages: list[Passage], sources: list[Source], budget_tokens: int,
                    query_ids: set[str] | None = None) -> list[tuple[int, str, str]]:
    """(source_id, title, text) of the best passages, taken round-robin across sub-queries so one
    sub-query with long pages cannot crowd out the others, until the budget is spent."""
    by_key = {s["key"]: s for s in sources}
    per_query: dict[str, list[Passage]] = {}
    for p in passages:
        if (query_ids is None or p["query_id"] in query_ids) and p["key"] in by_key:
            per_query.setdefault(p["query_id"], []).append(p)
    for ps in per_query.values():
        ps.sort(key=lambda p: -p["score"])
    out: list[tuple[int, str, str]] = []
    seen: set[tuple[str, str]] = set()
    budget = budget_tokens * 4
    queues = list(per_query.values())
    while budget > 0 and any(queues):
        for q in queues:
            if not q:
                continue
            p = q.pop(0)
            if (p["key"], p["text"][:80]) in seen:
                continue
            if len(p["text"]) > budget and out:
                budget = 0
                break
            seen.add((p["key"], p["text"][:80]))
            src = by_key[p["key"]]
            out.append((src["id"], src.get("title", ""), p["text"][:budget]))
            budget -= len(p["text"])
    return out


def fence(selected: list[tuple[int, str, str]]) -> str:
    """Passages inside <source> tags: data for the model, never instructions."""
    blocks = []
    for sid, title, text in selected:
        safe_title = title.replace('"', "'")[:150]
        body = text.replace("</source", "</ source")  # a page cannot close our fence early
        blocks.append(f'<source id="{sid}" title="{safe_title}">\n{body}\n</source>')
    return "\n\n".join(blocks) or "(no passages)"
