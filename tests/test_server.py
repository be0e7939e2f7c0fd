"""The MCP server through the SDK's own client, in memory: both protocol eras, real SQLite files,
the scripted model and the shipped corpus (no network)."""

from __future__ import annotations

import asyncio

import pytest
from mcp import Client

from graph.jobs import AdmissionError, RateLimiter
from tests.mcp_helpers import QUESTION, OfflineModels, memory_server
from tools.settings import reset_tool_settings

MODES = ["auto", "legacy"]  # 2026-07-28 (discover, stateless) and 2025-11-25 (initialize handshake)


@pytest.fixture(autouse=True)
def _fresh_data_dir():
    reset_tool_settings()  # the autouse env fixture gave this test its own DEEP_RESEARCH_DATA_DIR
    yield
    reset_tool_settings()


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_listed_with_schemas_and_annotations(mode):
    async with memory_server() as srv, Client(srv, mode=mode) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"deep_research", "research_status", "cancel_research", "resume_research",
                          "web_search", "read_page"}
    dr = tools["deep_research"]
    props = dr.input_schema["properties"]
    assert dr.input_schema["required"] == ["question"]
    assert set(props["depth"]["enum"]) == {"quick", "standard", "deep", "basic"}
    assert {"report_length", "max_rounds", "breadth", "max_sources", "providers", "freshness", "region",
            "include_domains", "exclude_domains", "time_budget_s", "wait"} <= set(props)
    assert "report" in dr.output_schema["properties"] and "progress" in dr.output_schema["properties"]
    # the description prices each depth from the presets
    assert "quick: 1 round(s)" in dr.description and "deep: 4 round(s)" in dr.description
    a = dr.annotations
    assert a.read_only_hint and a.open_world_hint and a.idempotent_hint is False
    assert tools["web_search"].input_schema["properties"]["max_results"]["maximum"] == 20
    assert "total_chars" in tools["read_page"].output_schema["properties"]


@pytest.mark.parametrize("mode", MODES)
async def test_deep_research_end_to_end_with_progress_in_order(mode):
    seen: list[tuple[float, str]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, message))

    async with memory_server() as srv, Client(srv, mode=mode) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"},
                              progress_callback=on_progress)
    assert not r.is_error
    out = r.structured_content
    assert out["status"] == "complete" and out["research_id"]
    assert "[1]" in out["report"] and out["sources"] and out["stats"]["llm_calls"] >= 2  # plan, write
    assert r.content[0].text == out["report"]  # the markdown also as text, for clients that show text
    numbers = [p for p, _ in seen]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    messages = [m for _, m in seen]
    order = [next(i for i, m in enumerate(messages) if m.startswith(prefix))
             for prefix in ("Planning", "Searching", "Writing", "Report ready")]
    assert order == sorted(order)


async def test_heartbeats_while_a_stage_runs_and_running_answer_after_the_wait_limit():
    messages: list[str] = []

    async def on_progress(progress, total, message):
        messages.append(message)

    models = OfflineModels(latency_s=0.6)
    async with memory_server(models, heartbeat_s=0.2, wait_timeout_s=1.0) as srv, Client(srv) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"},
                              progress_callback=on_progress)
        out = r.structured_content
        assert out["status"] == "running" and out["report"] == ""
        assert "research_status" in out["next_step"] and out["progress"]["stage"] not in ("queued", "done")
        assert any("still working" in m for m in messages)
        # the research goes on without the call; collect it by id
        r = await c.call_tool("research_status", {"research_id": out["research_id"], "wait_s": 30})
    assert r.structured_content["status"] == "complete" and r.structured_content["report"]


@pytest.mark.parametrize("mode", MODES)
async def test_wait_false_then_poll_then_resources(mode):
    async with memory_server() as srv, Client(srv, mode=mode) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick", "wait": False})
        rid = r.structured_content["research_id"]
        assert r.structured_content["status"] in ("queued", "running")
        for _ in range(100):
            r = await c.call_tool("research_status", {"research_id": rid})
            if r.structured_content["status"] not in ("queued", "running"):
                break
            await asyncio.sleep(0.1)
        assert r.structured_content["status"] == "complete"
        listed = {str(x.uri): x for x in (await c.list_resources()).resources}
        assert f"research://{rid}" in listed and "heat pumps" in listed[f"research://{rid}"].title
        report = (await c.read_resource(f"research://{rid}/report")).contents[0]
        full = (await c.read_resource(f"research://{rid}")).contents[0]
    assert report.text == r.structured_content["report"]
    assert '"status": "complete"' in full.text and full.mime_type == "application/json"


async def test_resources_survive_a_server_restart():
    async with memory_server() as srv, Client(srv) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"})
        rid, report = r.structured_content["research_id"], r.structured_content["report"]
    async with memory_server() as srv, Client(srv) as c:
        assert f"research://{rid}" in {str(x.uri) for x in (await c.list_resources()).resources}
        assert (await c.read_resource(f"research://{rid}/report")).contents[0].text == report
        again = await c.call_tool("research_status", {"research_id": rid})
    assert again.structured_content["status"] == "complete" and again.structured_content["report"] == report


async def _wait_for_stage(c: Client, rid: str, stages: set[str], timeout: float = 30) -> dict:
    for _ in range(int(timeout / 0.05)):
        out = (await c.call_tool("research_status", {"research_id": rid})).structured_content
        if out["progress"] and out["progress"]["stage"] in stages or out["status"] not in ("queued", "running"):
            return out
        await asyncio.sleep(0.05)
    raise AssertionError(f"research {rid} never reached {stages}")


async def test_cancel_keeps_what_was_found():
    models = OfflineModels(latency_s=0.25, sufficient=False)  # loops until max_rounds unless cancelled
    async with memory_server(models) as srv, Client(srv) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "deep", "wait": False})
        rid = r.structured_content["research_id"]
        await _wait_for_stage(c, rid, {"reflecting"})
        r = await c.call_tool("cancel_research", {"research_id": rid})
        out = r.structured_content
        assert out["status"] == "partial" and out["stop_reason"] == "cancelled"
        assert out["sources"] and "[" in out["report"]
        # the stored record agrees, and nothing keeps running
        stored = (await c.call_tool("research_status", {"research_id": rid})).structured_content
    assert stored["status"] == "partial" and stored["report"] == out["report"]


async def test_interrupted_research_resumes_from_its_checkpoint():
    slow = OfflineModels(latency_s=0.25, sufficient=2)
    async with memory_server(slow) as srv, Client(srv) as c:
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "standard", "wait": False})
        rid = r.structured_content["research_id"]
        await _wait_for_stage(c, rid, {"reflecting"})
    # leaving memory_server shut the registry down, as SIGTERM does: the research is interrupted
    fresh = OfflineModels(sufficient=2)
    async with memory_server(fresh) as srv, Client(srv) as c:
        status = (await c.call_tool("research_status", {"research_id": rid})).structured_content
        assert status["status"] == "interrupted" and "resume_research" in status["next_step"]
        r = await c.call_tool("resume_research", {"research_id": rid})
    out = r.structured_content
    assert out["status"] == "complete" and out["report"]
    kinds = [call["kind"] for call in fresh.calls()]
    assert "Plan" not in kinds and kinds  # planning was checkpointed: not paid for twice


async def test_auto_resume_at_startup():
    slow = OfflineModels(latency_s=0.5, sufficient=2)
    async with memory_server(slow) as srv, Client(srv) as c:
        rid = (await c.call_tool("deep_research", {"question": QUESTION, "depth": "standard", "wait": False})
               ).structured_content["research_id"]
        out = await _wait_for_stage(c, rid, {"searching", "extracting", "reflecting"})
        assert out["status"] == "running"  # the shutdown below must interrupt it, or nothing is tested
    from graph.jobs import ServerSettings, open_jobs

    jobs, stack = await open_jobs(ServerSettings(warm_up=False), prepare=OfflineModels(), auto_resume=True)
    try:
        for _ in range(200):
            if rid in jobs.jobs and jobs.jobs[rid].finished:
                break
            await asyncio.sleep(0.05)
        assert jobs.jobs[rid].status == "complete"
        assert (await jobs.store.get(rid)).status == "complete"
    finally:
        await stack.aclose()


async def test_admission_cap_and_busy_message():
    models = OfflineModels(latency_s=0.5)
    async with memory_server(models, max_concurrent_researches=1, queue_size=1) as srv, Client(srv) as c:
        for _ in range(2):  # one running, one queued
            r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick", "wait": False})
            assert not r.is_error
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick", "wait": False})
        assert r.is_error and "busy" in r.content[0].text and "retry in" in r.content[0].text
        # status and cancel still work while busy
        listed = [x for x in (await c.list_resources()).resources if str(x.uri).startswith("research://")]
        assert len(listed) == 2


def test_rate_limiter_counts_per_client():
    limiter = RateLimiter(calls=2, window_s=600)
    limiter.check("a")
    limiter.check("a")
    limiter.check("b")
    with pytest.raises(AdmissionError, match=r"rate limit: 2 researches per 600 s.*retry in \d+ s") as e:
        limiter.check("a")
    assert 0 < e.value.retry_after <= 600


async def test_rate_limit_through_the_tool():
    async with memory_server(rate_limit_calls=1) as srv, Client(srv) as c:
        assert not (await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"})).is_error
        r = await c.call_tool("deep_research", {"question": QUESTION, "depth": "quick"})
    assert r.is_error and "rate limit" in r.content[0].text


HOSTILE = [
    ("deep_research", {"question": ""}, "question: it is empty"),
    ("deep_research", {"question": "x " * 50_000}, "the limit is 2000"),
    ("deep_research", {"question": 42}, "question"),
    ("deep_research", {"question": ["a"]}, "question"),
    ("deep_research", {"question": "q?", "depth": "extreme"}, "depth: got 'extreme'; allowed: 'quick', 'standard'"),
    ("deep_research", {"question": "q?", "max_rounds": -1}, "max_rounds"),
    ("deep_research", {"question": "q?", "time_budget_s": 0}, "time_budget_s"),
    ("deep_research", {"question": "q?", "providers": ["nope"]}, "nope"),
    ("deep_research", {}, "question"),
    ("research_status", {"research_id": "does-not-exist"}, "no research 'does-not-exist'"),
    ("cancel_research", {"research_id": ""}, "research_id"),
    ("resume_research", {"research_id": "zzz"}, "no research 'zzz'"),
    ("web_search", {"query": ""}, "query is empty"),
    ("web_search", {"query": "heat", "max_results": 0}, "max_results"),
    ("web_search", {"query": "heat", "max_results": "many"}, "max_results"),
    ("web_search", {"query": "q" * 100_000}, "the limit is 400"),
    ("read_page", {"url": "http://127.0.0.1:9/admin"}, "loopback"),
    ("read_page", {"url": "file:///etc/passwd"}, "http"),
    ("read_page", {"url": "https://example.com", "max_chars": -5}, "max_chars"),
    ("read_page", {"url": "https://example.com", "start_char": -1}, "start_char"),
    ("no_such_tool", {}, "Unknown tool"),
]


async def test_hostile_inputs_are_clear_errors_and_the_server_keeps_serving(monkeypatch):
    from graph.testing import sample_corpus_dir

    monkeypatch.setenv("DEEP_RESEARCH_PROVIDERS", "local")
    monkeypatch.setenv("DEEP_RESEARCH_CORPUS", str(sample_corpus_dir()))
    async with memory_server() as srv, Client(srv) as c:
        for name, args, expected in HOSTILE:
            r = await c.call_tool(name, args)
            text = r.content[0].text
            assert r.is_error, (name, args)
            assert expected.lower() in text.lower(), (name, expected, text)
            assert "Traceback" not in text and len(text) < 1000
        # still healthy: a real search answers from the local corpus
        r = await c.call_tool("web_search", {"query": "heat pump running costs", "max_results": 3})
    assert not r.is_error
    out = r.structured_content
    assert len(out["results"]) == 3 and out["metadata"]["provider"] == "local"
    assert {"title", "url", "content", "score", "category", "engine", "published_date"} <= set(out["results"][0])


async def test_unknown_resource_is_a_clear_error():
    from mcp.shared.exceptions import MCPError

    async with memory_server() as srv, Client(srv) as c:
        with pytest.raises(MCPError, match="no research 'nope'"):
            await c.read_resource("research://nope")


def test_event_loop_choice(monkeypatch):
    import sys

    import uvloop

    from graph.settings import SettingsError
    from server import event_loop_factory

    assert event_loop_factory("asyncio") is None
    assert event_loop_factory("auto") is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed, as on Windows where it has no build
    assert event_loop_factory("auto") is None
    with pytest.raises(SettingsError, match="DEEP_RESEARCH_EVENT_LOOP=asyncio"):
        event_loop_factory("uvloop")


def test_an_unknown_event_loop_is_refused_with_the_choices(monkeypatch, capsys):
    from server import main

    monkeypatch.setenv("DEEP_RESEARCH_EVENT_LOOP", "trio")
    assert main(["--transport", "http"]) == 2
    err = capsys.readouterr().err
    assert "event_loop" in err and "'uvloop'" in err and "'asyncio'" in err, err


async def test_warm_up_freezes_the_heap_once_the_research_code_is_imported():
    import gc

    from graph.jobs import ServerSettings, open_jobs

    jobs, stack = await open_jobs(ServerSettings(warm_up=False), prepare=OfflineModels())
    try:
        gc.unfreeze()
        jobs.warm_up()
        await jobs._imported
        await asyncio.sleep(0)
        assert gc.get_freeze_count() > 10_000  # the modules and the server, not a handful of objects
    finally:
        gc.unfreeze()
        await stack.aclose()
