"""extract: one LLM call per sub-query turns its ranked passages into findings with source ids.

It runs beside reflect, not before it, so a round costs one LLM hop on the critical path. If the
model fails, the best passages themselves become the evidence: the run loses detail, not sources.
"""

from __future__ import annotations

import time
from typing_extensions import TypedDict

from langgraph.runtime import Runtime
from pydantic import BaseModel, Field

from graph.llm import LLMError, Usage, chat_model, elapsed_ms, structured, system_user
from graph.selection import fence, select_passages
from graph.settings import ResearchSettings, settings_from
from graph.state import Evidence, Passage, Source, SubQuery
from prompts import render


class Finding(BaseModel):
    source_id: int = Field(description="id of the <source> the finding comes from")
    finding: str = Field(description="One or two sentences, facts kept exact.")


class Extraction(BaseModel):
    findings: list[Finding]


class ExtractTask(TypedDict):
    question: str
    sub_query: SubQuery
    passages: list[Passage]
    sources: list[Source]


async def extract(task: ExtractTask, runtime: Runtime[ResearchSettings]) -> dict:
    t0 = time.perf_counter()
    settings = settings_from(runtime.context)
    sq = task["sub_query"]
    selected = select_passages(task["passages"], task["sources"], settings.extract_passage_tokens, {sq["id"]})
    if not selected:
        return {}
    usage = Usage()
    system, user = render("extract", question=task["question"], query=sq["query"], passages=fence(selected))
    allowed = {sid for sid, _, _ in selected}
    warnings: list[str] = []
    try:
        out = await structured(chat_model(settings, "extract"), Extraction, system_user(system, user), usage)
        evidence: list[Evidence] = [{"query_id": sq["id"], "source_id": f.source_id, "finding": f.finding.strip()}
                                    for f in out.findings if f.source_id in allowed and f.finding.strip()]
    except LLMError as e:
        warnings.append(f"Evidence extraction failed for '{sq['query']}'; using its best passages instead ({e})")
        evidence = []
    if not evidence:  # keep what was read usable by the writer
        evidence = [{"query_id": sq["id"], "source_id": sid, "finding": " ".join(text.split())[:400]}
                    for sid, _, text in selected[:3]]
    return {"evidence": evidence, "warnings": warnings,
            "stats": {**usage.stats(), "stage_ms": {"extract": elapsed_ms(t0)}}}
