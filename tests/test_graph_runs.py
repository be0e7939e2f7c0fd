"""Whole research runs with the scripted model and the local corpus: concurrency, stop reasons,
budgets, citations, fallbacks and bad input."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from graph.builder import compile_graph
from graph.runner import run_research
from graph.settings import SettingsError, make_settings
from graph.state import ResearchResult
from graph.testing import ResearchResponder, ScriptedChatModel, offline_settings, sample_corpus_dir, sequential_calls
from tools.base import ProviderError, SearchRequest, SearchResponse
from tools.providers.local import LocalProvider


class TimedProvider(LocalProvider):
    """The local corpus with a search latency, recording when each search ran."""

    def __init__(self, docs, latency: float, fail_on: str | None = None):
        super().__init__(docs)
        self.latency = latency
        self.fail_on = fail_on
        self.intervals: list[tuple[float, float, str]] = []

    async def _search(self, req: SearchRequest) -> SearchResponse:
        t0 = time.perf_counter()
        await asyncio.sleep(self.latency)
        self.intervals.append((t0, time.perf_counter(), req.query))
        if self.fail_on and self.fail_on in req.query:
            raise ProviderError("the engine answered 502 Bad Gateway: try again later", provider="timed")
        return await super()._search(req)


def timed(latency: float = 0.0, fail_on: str | None = None) -> TimedProvider:
    return TimedProvider(LocalProvider.from_folder(sample_corpus_dir()).documents, latency, fail_on)


def cited_ids(report: str) -> set[int]:
    body = report.split("## Sources")[0]
    return {int(n) for n in re.findall(r"\[(\d+)\]", body)}


async def test_run_produces_cited_report_with_stats(question):
    model = ScriptedChatModel()
    result = await run_research(question, offline_settings(chat_model=model))
    assert isinstance(result, ResearchResult)
    assert result.status == "complete" and result.stop_reason == "max_rounds"
    assert result.stats.rounds == 2 and result.stats.searches == 6
    assert result.stats.llm_calls == len(model.calls) and result.stats.prompt_tokens > 0
    assert result.stats.pages_read >= 6 and {"plan", "search", "read", "extract", "write"} <= set(result.stats.stage_ms)
    ids = cited_ids(result.report)
    assert ids, "the report cites nothing"
    # every marker resolves to a source in the result, numbered 1..k in order of first use
    assert ids == set(range(1, len(ids) + 1))
    by_id = {s.id: s for s in result.sources}
    for n in ids:
        assert by_id[n].url.startswith("local://")
        assert f"{n}. [{by_id[n].title}]({by_id[n].url})" in result.report
    assert result.key_findings and all(1 <= c <= len(ids) for k in result.key_findings for c in k.citations)
    assert [q.round for q in result.sub_queries] == [1, 1, 1, 2, 2, 2]


async def test_a_round_reads_distinct_pages(question):
    result = await run_research(question, offline_settings(depth="quick"))
    # three sub-queries, two pages each, over overlapping results: six different documents
    assert result.stats.pages_read == 6 and len({s.url for s in result.sources}) == 6
    assert all(q.new_sources == 2 for q in result.sub_queries)


async def test_sub_queries_run_concurrently(question):
    provider = timed(latency=0.2)
    settings = offline_settings(depth="quick").with_search_providers([provider])
    await run_research(question, settings)
    assert len(provider.intervals) == 3
    # all three searches were in flight at the same moment: the latest start precedes the earliest end
    latest_start = max(s for s, _, _ in provider.intervals)
    earliest_end = min(e for _, e, _ in provider.intervals)
    assert latest_start < earliest_end


async def test_standard_depth_sequential_llm_calls_within_target(question):
    model = ScriptedChatModel(latency_s=0.03)
    # one page per query: the 8-document sample corpus must not be read up in round 1
    result = await run_research(question, offline_settings(chat_model=model, pages_per_query=1))
    # plan, then one hop per round but the last (extraction runs beside reflection; the writer reads
    # the last round's passages itself), then write
    assert result.stats.rounds == 2 and sequential_calls(model.calls) == 1 + result.stats.rounds
    kinds = [c["kind"] for c in model.calls]
    assert kinds.count("Reflection") == 1 and kinds.count("Extraction") == 3
    # the last round's sources still reach the report: every page read can be cited
    round2 = {q.id for q in result.sub_queries if q.round == 2}
    assert round2 and all(q.pages_read for q in result.sub_queries if q.id in round2)


async def test_quick_depth_is_two_sequential_calls(question):
    model = ScriptedChatModel(latency_s=0.03)
    events = []
    result = await run_research(question, offline_settings(chat_model=model, depth="basic"),
                                on_event=events.append)
    assert result.stats.rounds == 1
    assert sequential_calls(model.calls) == 2  # plan, write
    assert [c["kind"] for c in model.calls] == ["Plan", "text"]
    stages = [e["stage"] for e in events]
    assert stages[:2] == ["planning", "searching"] and stages.count("reading") == 3
    assert stages[-2:] == ["writing", "done"]


@pytest.mark.parametrize("overrides, responder, expected", [
    ({}, ResearchResponder(sufficient=True), "sufficient"),
    ({"max_rounds": 3, "pages_per_query": 1}, ResearchResponder(sufficient=2), "sufficient"),
    ({"max_rounds": 1}, ResearchResponder(), "max_rounds"),
    ({"token_budget": 1_000}, ResearchResponder(), "token_budget"),
    ({"max_sources": 2}, ResearchResponder(), "source_budget"),
])
async def test_stop_reasons(question, overrides, responder, expected):
    model = ScriptedChatModel(responder=responder)
    result = await run_research(question, offline_settings(chat_model=model, **overrides))
    assert result.stop_reason == expected
    if expected == "source_budget":
        assert len(result.sources) <= 2
    if expected == "token_budget":
        assert result.status == "partial" and result.stats.rounds == 1


async def test_stop_when_nothing_new_is_found(question, tmp_path):
    (tmp_path / "only.md").write_text("# Heat pumps\n\nHeat pumps work in cold climates with inverter compressors.")
    result = await run_research(question, offline_settings(corpus=str(tmp_path), max_rounds=4))
    assert result.stop_reason == "no_new_sources" and result.stats.rounds == 2
    assert len(result.sources) == 1


async def test_stop_when_time_budget_is_spent(question):
    graph = compile_graph()
    settings = offline_settings(time_budget_s=5, max_rounds=4)
    out = await graph.ainvoke({"question": question, "started_at": time.time() - 60}, context=settings)
    assert out["stop_reason"] == "time_budget" and out["round"] == 1
    assert out["result"]["status"] == "partial"


async def test_stop_when_reflection_has_no_follow_ups(question):
    class NoFollowUps(ResearchResponder):
        def __call__(self, messages, schema):
            out = super().__call__(messages, schema)
            return {**out, "follow_up_queries": []} if schema == "Reflection" else out

    result = await run_research(question, offline_settings(chat_model=ScriptedChatModel(responder=NoFollowUps())))
    assert result.stop_reason == "no_follow_ups" and result.stats.rounds == 1


async def test_unknown_citation_is_removed_and_reported(question):
    model = ScriptedChatModel(responder=ResearchResponder(cite_unknown=True))
    result = await run_research(question, offline_settings(chat_model=model, depth="quick"))
    assert "[99]" not in result.report
    assert any("[99]" in w and "not read" in w for w in result.warnings)
    assert cited_ids(result.report) <= {s.id for s in result.sources}


@pytest.mark.parametrize("refused, used", [({"json_schema"}, "function_calling"),
                                           ({"json_schema", "function_calling"}, "json_text")])
async def test_structured_output_falls_back(question, refused, used):
    model = ScriptedChatModel(unsupported_methods=refused)
    result = await run_research(question, offline_settings(chat_model=model))
    assert result.status == "complete" and cited_ids(result.report)
    refusals = [c for c in model.calls if c["kind"].startswith("refused")]
    # Plan refuses once per failing method; round 1's three extractions and its reflection run
    # in parallel, so each learns it once; the last round calls neither
    assert len(refusals) == len(refused) * (1 + 3 + 1)
    assert result.stats.llm_calls == len(model.calls) - len(refusals)
    if used == "json_text":
        assert result.stats.llm_calls == 6  # plan, 3 extracts, reflect, write: no repair retries
    # the method that worked is remembered: a second run wastes no call on the failing ones
    before = len(model.calls)
    await run_research(question, offline_settings(chat_model=model))
    assert not [c for c in model.calls[before:] if c["kind"].startswith("refused")]


async def test_reasoning_blocks_are_stripped(question):
    plan = '<think>The user wants costs. Let me plan.</think>{"queries": [{"query": "heat pump running costs", "rationale": "costs"}]}'
    model = ScriptedChatModel(script=[plan], unsupported_methods={"json_schema", "function_calling"})
    result = await run_research(question, offline_settings(chat_model=model, depth="quick"))
    assert [q.query for q in result.sub_queries] == ["heat pump running costs"]


async def test_failing_provider_makes_the_run_partial_not_failed(question):
    provider = timed(fail_on="evidence")  # the scripted planner's second query contains "evidence"
    result = await run_research(question, offline_settings(depth="quick").with_search_providers([provider]))
    assert result.status == "partial"
    failed = [q for q in result.sub_queries if q.status == "failed"]
    assert len(failed) == 1 and "502" in failed[0].error
    assert any("Search failed" in w for w in result.warnings)
    assert cited_ids(result.report)  # the other sub-queries still produced a cited report


async def test_report_length_steers_the_writer(question):
    concise = await run_research(question, offline_settings(depth="quick", report_length="concise"))
    detailed = await run_research(question, offline_settings(depth="quick", report_length="detailed"))
    body = lambda r: r.report.split("## Sources")[0]  # noqa: E731
    assert len(body(detailed)) > len(body(concise))
    assert "## Limitations" in detailed.report and "## Summary" in detailed.report
    assert "## Limitations" not in concise.report
    # the answer comes first: the report opens with a cited paragraph, not a heading
    first = detailed.report.split("\n\n")[0]
    assert not first.startswith("#") and re.search(r"\[\d+\]", first)


@pytest.mark.parametrize("question_text, field", [("", "question"), ("   \n ", "question"), ("x" * 2001, "question")])
async def test_bad_questions_fail_before_any_model_call(question_text, field):
    model = ScriptedChatModel()
    with pytest.raises(SettingsError, match=field):
        await run_research(question_text, offline_settings(chat_model=model))
    assert model.calls == []


@pytest.mark.parametrize("overrides, message", [
    ({"depth": "huge"}, "depth: got 'huge'; allowed: 'quick', 'standard' or 'deep'"),
    ({"token_budget": -5}, "token_budget"),
    ({"time_budget_s": 10**9}, "time_budget_s"),
    ({"max_rounds": 0}, "max_rounds"),
    ({"breadth": 500}, "breadth"),
])
def test_bad_settings_name_the_field_and_range(overrides, message):
    with pytest.raises(SettingsError) as e:
        make_settings(**overrides)
    assert message in str(e.value)
    if "depth" not in overrides:
        assert re.search(r"(greater|less) than", str(e.value))
