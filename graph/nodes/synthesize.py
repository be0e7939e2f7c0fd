"""synthesize: one call writes the report, citing registry ids only; code then checks every
marker, renders the source list and assembles the ResearchResult.

The writer reads findings extracted in earlier rounds and, for the sub-queries of the last round
(which nothing extracted, so that no LLM hop stands between the last search and the report), their
best passages directly.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import date

from langgraph.runtime import Runtime

from graph.citations import check_citations, render_source_list, split_key_findings
from graph.llm import LLMError, Usage, chat_model, complete, elapsed_ms, system_user
from graph.progress import emit
from graph.selection import fence, select_passages
from graph.settings import ResearchSettings, settings_from
from graph.state import (Evidence, KeyFinding, ResearchResult, ResearchState, RunStats, Source,
                         SourceOut, SubQueryOut, add_stats)
from prompts import render, sections

WRITER_MAX_TOKENS = {"concise": 900, "standard": 2_500, "detailed": 6_000}
EVIDENCE_CHAR_BUDGET = 24_000  # about 6k tokens of findings; the writer needs findings, not pages
PARTIAL_STOPS = {"time_budget", "token_budget", "cancelled", "error"}


@dataclass
class WriterInput:
    findings: str  # "[id] finding" lines from earlier rounds
    passages: list[tuple[int, str, str]]  # (id, title, text) for sub-queries nothing extracted

    @property
    def allowed_ids(self) -> set[int]:
        ids = {int(m) for m in re.findall(r"^\[(\d+)\]", self.findings, re.M)}
        return ids | {sid for sid, _, _ in self.passages}

    def as_lines(self) -> str:
        """Everything as '[id] text' lines: what a report without a writer lists."""
        extra = [f"[{sid}] {' '.join(text.split())[:300]}" for sid, _, text in self.passages]
        return "\n".join([*filter(None, self.findings.splitlines()), *extra])


def evidence_lines(evidence: list[Evidence], sources: dict[int, Source]) -> str:
    lines: list[str] = []
    seen: set[tuple[int, str]] = set()
    budget = EVIDENCE_CHAR_BUDGET
    for e in evidence:
        key = (e["source_id"], e["finding"][:120])
        if e["source_id"] not in sources or key in seen:
            continue
        seen.add(key)
        line = f"[{e['source_id']}] {' '.join(e['finding'].split())}"
        if len(line) > budget:
            break
        budget -= len(line)
        lines.append(line)
    return "\n".join(lines)


def writer_input(state: ResearchState, passage_tokens_per_query: int) -> WriterInput:
    read = {s["id"]: s for s in state.get("sources", []) if s.get("read")}
    evidence = state.get("evidence", [])
    covered = {e["query_id"] for e in evidence}
    open_queries = {q["id"] for q in state.get("sub_queries", []) if q["id"] not in covered}
    passages = select_passages(state.get("passages", []), list(read.values()),
                               passage_tokens_per_query * max(1, len(open_queries)), open_queries) \
        if open_queries else []
    return WriterInput(findings=evidence_lines(evidence, read), passages=passages)


def fallback_report(question: str, lines: str) -> str:
    """Without a working writer, the evidence itself, cited, is still worth returning."""
    bullets = "\n".join(f"- {line[line.index(']') + 1:].strip()} {line[:line.index(']') + 1]}"
                        for line in lines.splitlines())
    return (f"The report could not be written by the model; these are the findings gathered for: "
            f"{question}\n\n{bullets}")


def _status(state: ResearchState, stop_reason: str | None, wrote: bool, has_evidence: bool) -> str:
    if not has_evidence:
        return "failed"
    failed_queries = any(q.get("status") == "failed" for q in state.get("sub_queries", []))
    if not wrote or failed_queries or stop_reason in PARTIAL_STOPS:
        return "partial"
    return "complete"


async def synthesize(state: ResearchState, runtime: Runtime[ResearchSettings]) -> dict:
    t0 = time.perf_counter()
    settings = settings_from(runtime.context, state.get("settings"))
    inputs = writer_input(state, settings.extract_passage_tokens)
    usage = Usage()
    warnings: list[str] = []
    wrote = False
    if not inputs.allowed_ids:
        text = ("No source could be read for this question, so there is no report. "
                "Try other search providers or a broader question.")
    else:
        emit("writing", "Writing the report", sources=len(inputs.allowed_ids))
        guide = sections("report_lengths").get(settings.report_length, "")
        system, user = render("write", question=state["question"], findings=inputs.findings or "(none)",
                              passages=fence(inputs.passages) if inputs.passages else "(none)",
                              length_guide=guide, today=date.today().isoformat())
        try:
            text = await complete(chat_model(settings, "write"), system_user(system, user), usage,
                                  max_tokens=WRITER_MAX_TOKENS[settings.report_length])
            wrote = bool(text.strip())
        except LLMError as e:
            warnings.append(f"The writer failed ({e}); the report lists the findings instead.")
            text = ""
        if not wrote:
            text = fallback_report(state["question"], inputs.as_lines())
    result = build_result(state, text, inputs.allowed_ids, wrote=wrote, usage=usage, warnings=warnings,
                          t0=t0, stop_reason=state.get("stop_reason"))
    emit("done", f"Report ready ({result.status})", status=result.status)
    return {"report": result.report, "key_findings": [k.model_dump() for k in result.key_findings],
            "warnings": result.warnings[len(state.get("warnings", [])):], "result": result.model_dump(),
            "stats": {**usage.stats(), "stage_ms": {"write": elapsed_ms(t0)}}}


def partial_result(state: ResearchState, reason: str, note: str,
                   passage_tokens_per_query: int = 1_200) -> ResearchResult:
    """A result from whatever a stopped run holds (cancelled, out of time), without another LLM call."""
    inputs = writer_input(state, passage_tokens_per_query)
    lines = inputs.as_lines()
    text = (fallback_report(state.get("question", ""), lines).replace(
        "could not be written by the model", "was not written: " + note)
        if lines else "The research stopped before any source was read.")
    return build_result(state, text, inputs.allowed_ids, wrote=False, usage=Usage(), warnings=[note],
                        t0=time.perf_counter(), stop_reason=reason)


def build_result(state: ResearchState, text: str, allowed: set[int], *, wrote: bool, usage: Usage,
                 warnings: list[str], t0: float, stop_reason: str | None) -> ResearchResult:
    """Check citations, render the source list and assemble the ResearchResult."""
    read = {s["id"]: s for s in state.get("sources", []) if s.get("read")}
    checked = check_citations(text, allowed)
    if checked.removed:
        warnings.append(f"Removed {len(checked.removed)} citation(s) to sources that were not read: "
                        + ", ".join(f"[{i}]" for i in sorted(set(checked.removed))))
    cited = [read[i] for i in checked.order]
    _, findings = split_key_findings(checked.text)
    report = checked.text + ("\n\n" + render_source_list(cited) if cited else "")

    # sources out: cited ones numbered as in the report, then the other pages read
    numbering = {sid: n for n, sid in enumerate(checked.order, 1)}
    for sid in read:
        numbering.setdefault(sid, len(numbering) + 1)
    sources_out = sorted((SourceOut(id=n, url=read[sid]["url"], title=read[sid].get("title", ""),
                                    snippet=read[sid].get("snippet", ""),
                                    published_date=read[sid].get("published_date"))
                          for sid, n in numbering.items()), key=lambda s: s.id)

    stats = add_stats(state.get("stats", {}), {**usage.stats(), "stage_ms": {"write": elapsed_ms(t0)}})
    started = state.get("started_at") or time.time()
    return ResearchResult(
        question=state.get("question", ""),
        status=_status(state, stop_reason, wrote, bool(allowed)),  # type: ignore[arg-type]
        stop_reason=stop_reason,
        report=report,
        key_findings=[KeyFinding(finding=f, citations=[i for i in ids if 1 <= i <= len(cited)])
                      for f, ids in findings],
        sources=sources_out,
        sub_queries=[SubQueryOut(**{k: v for k, v in q.items() if k in SubQueryOut.model_fields})
                     for q in state.get("sub_queries", [])],
        stats=RunStats(rounds=state.get("round", 0), searches=stats.get("searches", 0),
                       pages_read=len(read), llm_calls=stats.get("llm_calls", 0),
                       prompt_tokens=stats.get("prompt_tokens", 0),
                       completion_tokens=stats.get("completion_tokens", 0),
                       duration_ms=round((time.time() - started) * 1000, 1),
                       stage_ms=stats.get("stage_ms", {})),
        warnings=[*state.get("warnings", []), *warnings],
    )
