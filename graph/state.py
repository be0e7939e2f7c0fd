"""ResearchState, the one graph state, and ResearchResult, what every surface returns.

Inside the graph the parts are plain TypedDicts: they checkpoint as JSON-like data, show cleanly in
Studio and cross the LangGraph SDK unchanged. Pydantic lives at the boundary (ResearchResult).
Parallel sub-query tasks write into the same keys in one step, so every list that they touch has a
reducer that merges instead of overwriting.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic (Studio's schemas) rejects typing.TypedDict on 3.11

Status = Literal["complete", "partial", "failed"]
StopReason = Literal["sufficient", "max_rounds", "token_budget", "time_budget", "source_budget", "no_follow_ups",
                     "no_new_sources", "cancelled", "error"]


class SubQuery(TypedDict, total=False):
    id: str  # "r1q2": round 1, query 2; stable, so a resumed run does not repeat finished ones
    query: str
    rationale: str
    round: int
    status: Literal["pending", "done", "failed"]
    hits: int
    new_sources: int
    pages_read: int
    error: str | None


class Source(TypedDict, total=False):
    id: int  # registry id, [n] in the report; assigned by merge_sources in arrival order
    url: str  # canonical
    key: str  # dedup key of the canonical URL
    title: str
    snippet: str
    published_date: str | None
    engine: str
    query_id: str
    read: bool  # its full text was read (fetched, or supplied by the provider)
    chars: int


class Passage(TypedDict):
    key: str  # the source's dedup key; ids are not known until the registry merge
    query_id: str
    text: str
    score: float


class Evidence(TypedDict):
    query_id: str
    source_id: int
    finding: str


class Stats(TypedDict, total=False):
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    searches: int
    pages_read: int
    page_errors: int
    stage_ms: dict[str, float]  # summed wall time per stage (parallel tasks add up)


# -- reducers ---------------------------------------------------------------------------------

def merge_sub_queries(old: list[SubQuery], new: list[SubQuery]) -> list[SubQuery]:
    """Update by id, keep first-seen order."""
    out = {q["id"]: q for q in old}
    for q in new:
        out[q["id"]] = {**out.get(q["id"], {}), **q}
    return list(out.values())


def merge_sources(old: list[Source], new: list[Source]) -> list[Source]:
    """Deduplicate by key and hand out ids in arrival order; a later read of a known URL upgrades it."""
    out = list(old)
    index = {s["key"]: i for i, s in enumerate(out)}
    for s in new:
        i = index.get(s["key"])
        if i is None:
            index[s["key"]] = len(out)
            out.append({**s, "id": len(out) + 1})
        elif s.get("read") and not out[i].get("read"):
            out[i] = {**out[i], **{k: v for k, v in s.items() if k != "id"}, "id": out[i]["id"]}
    return out


def add_stats(old: Stats, new: Stats) -> Stats:
    out: dict[str, Any] = dict(old or {})
    for k, v in (new or {}).items():
        if k == "stage_ms":
            stages = dict(out.get("stage_ms", {}))
            for stage, ms in v.items():
                stages[stage] = round(stages.get(stage, 0.0) + ms, 1)
            out["stage_ms"] = stages
        else:
            out[k] = out.get(k, 0) + v
    return out  # type: ignore[return-value]


def last_value(old: Any, new: Any) -> Any:
    return new


class ResearchState(TypedDict, total=False):
    question: str
    settings: dict[str, Any]  # the call's settings snapshot, so a resumed run uses the same ones
    started_at: float  # epoch seconds of the first step, for the time budget
    round: int
    sub_queries: Annotated[list[SubQuery], merge_sub_queries]
    sources: Annotated[list[Source], merge_sources]
    passages: Annotated[list[Passage], operator.add]
    evidence: Annotated[list[Evidence], operator.add]
    follow_ups: list[str]
    gaps: list[str]
    sufficient: bool
    stop_reason: StopReason | None
    stats: Annotated[Stats, add_stats]
    warnings: Annotated[list[str], operator.add]
    report: str
    key_findings: list[dict[str, Any]]
    result: dict[str, Any]  # ResearchResult.model_dump(), written by synthesize


class QueryTask(TypedDict):
    """What the fan-out sends to one sub-query's pipeline."""

    sub_query: SubQuery
    known_keys: list[str]  # dedup keys already held, so the pipeline reads only new pages
    room: int  # how many new sources this task may add
    run_key: str  # identifies the run, so sibling tasks can claim pages (see nodes/search.py)


# -- the result every surface returns ---------------------------------------------------------

class SourceOut(BaseModel):
    id: int
    url: str
    title: str = ""
    snippet: str = ""
    published_date: str | None = None


class SubQueryOut(BaseModel):
    id: str
    query: str
    rationale: str = ""
    round: int = 1
    status: str = "done"
    hits: int = 0
    new_sources: int = 0
    pages_read: int = 0
    error: str | None = None


class KeyFinding(BaseModel):
    finding: str
    citations: list[int] = Field(default_factory=list, description="Source ids supporting it.")


class RunStats(BaseModel):
    rounds: int = 0
    searches: int = 0
    pages_read: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_ms: float = 0.0
    stage_ms: dict[str, float] = Field(default_factory=dict)
    framework_ms: float | None = Field(None, description=(
        "Time in this process when none of the research's steps was running: LangGraph between steps, "
        "checkpoint writes, waiting for a busy event loop. None where not measured (LangGraph Server)."))


class ResearchResult(BaseModel):
    question: str
    status: Status
    stop_reason: str | None = None
    report: str = Field("", description="Markdown with [n] markers and a numbered source list.")
    key_findings: list[KeyFinding] = Field(default_factory=list)
    sources: list[SourceOut] = Field(default_factory=list, description="Sources cited or read, by id.")
    sub_queries: list[SubQueryOut] = Field(default_factory=list)
    stats: RunStats = Field(default_factory=RunStats)
    warnings: list[str] = Field(default_factory=list)
    research_id: str | None = None
