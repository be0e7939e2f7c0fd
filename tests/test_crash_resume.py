"""kill -9 the HTTP MCP server in the middle of a research; after a restart the research finishes
without searching again what it had already searched.

Everything is real and local: the server is `server.py --transport http` in a subprocess with its
SQLite checkpoints in a temporary data directory; the model and the search engine are the
reference instrument's fakellm.py and fakesearch.py on 127.0.0.1, whose request logs are the
evidence (what the search engine saw, not what the agent says it did). The kill comes after the
first round's searches and page reads finished, while the model extracts from them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.common import InstrumentMissing, ServerProcess, start_instrument

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DEEP_RESEARCH_SHARED", ROOT.parent / "shared"))
LLM_LATENCY = 1.0  # the window in which the kill lands (one extraction call): wide enough for a busy CI box
BREADTH = 3  # standard depth: 3 sub-queries a round, 2 rounds
POST_SEARCH_STAGES = {"extracting", "reflecting"}
FINISHED = {"complete", "partial", "failed", "cancelled"}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def instrument() -> Iterator:
    try:
        with start_instrument(SHARED / "bench", llm_latency=LLM_LATENCY, search_latency=0.2,
                              page_latency=0.1, sufficient=False) as inst:
            yield inst
    except InstrumentMissing as e:
        pytest.skip(str(e))


@pytest.fixture
def server(instrument, tmp_path) -> Iterator[ServerProcess]:
    env = {**os.environ, **instrument.agent_env(),
           "DEEP_RESEARCH_DATA_DIR": str(tmp_path / "data"),
           "DEEP_RESEARCH_RATE_LIMIT_CALLS": "0"}
    srv = ServerProcess(env, tmp_path / "server.log")
    instrument.reset_logs()
    yield srv
    srv.stop()


async def call(client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return result.structured_content


async def start_and_kill_after_first_round(server: ServerProcess, instrument, question: str) -> tuple[str, int]:
    """Start a research, wait until round 1's searches and reads are done and the model is
    extracting, then kill -9. Returns the research id and how many search-log lines preceded it."""
    from mcp import Client

    server.start()
    async with Client(server.mcp_url) as client:  # closed before the kill: a crash is not a client error
        out = await call(client, "deep_research", {"question": question, "depth": "standard", "wait": False})
        rid = out["research_id"]
        deadline = time.monotonic() + 30
        while True:
            status = await call(client, "research_status", {"research_id": rid})
            if status["status"] in FINISHED:
                pytest.fail(f"the research finished before the kill: {status['status']}")
            if (status.get("progress") or {}).get("stage") in POST_SEARCH_STAGES:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"round 1 did not finish searching within 30 s:\n{server.tail()}")
            await asyncio.sleep(0.05)
    log_before = instrument.search_requests()
    searches = [r for r in log_before if r["kind"] == "searxng"]
    # the kill must land between round 1's searches and round 2's, or the test proves nothing
    assert len(searches) == BREADTH, [r["query"] for r in searches]
    server.kill9()
    return rid, len(log_before)


async def wait_finished(client, rid: str, limit_s: float = 40) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        out = await call(client, "research_status", {"research_id": rid, "wait_s": 10})
        if out["status"] in FINISHED:
            return out
    pytest.fail(f"research {rid} did not finish within {limit_s} s after the restart")


def assert_nothing_searched_twice(instrument, killed_at: int, result: dict) -> None:
    log = instrument.search_requests()
    before, after = log[:killed_at], log[killed_at:]
    searched_before = {r["query"] for r in before if r["kind"] == "searxng"}
    pages_before = {r["query"] for r in before if r["kind"] == "page"}
    searched_after = [r["query"] for r in after if r["kind"] == "searxng"]
    pages_after = [r["query"] for r in after if r["kind"] == "page"]

    assert searched_after, "the resumed run did no second round: the test did not exercise a resume"
    assert not searched_before & set(searched_after), "finished sub-queries were searched again"
    assert not pages_before & set(pages_after), "pages read before the crash were fetched again"
    # the result accounts for every search the engine saw, each once: stats survived the crash too
    assert result["stats"]["searches"] == len(searched_before) + len(searched_after)
    round1 = {q["query"] for q in result["sub_queries"] if q["round"] == 1}
    assert round1 == searched_before
    assert all(q["status"] == "done" for q in result["sub_queries"])


async def test_kill_9_mid_run_then_auto_resume_at_restart(server, instrument):
    rid, killed_at = await start_and_kill_after_first_round(
        server, instrument, "Do heat pumps work in cold climates, and what do they cost to run?")
    from mcp import Client

    server.start()  # HTTP servers resume interrupted researches at startup by default
    async with Client(server.mcp_url) as client:
        result = await wait_finished(client, rid)

    assert result["status"] == "complete", result.get("warnings")
    assert result["research_id"] == rid
    assert result["stats"]["rounds"] == 2
    assert_nothing_searched_twice(instrument, killed_at, result)


async def test_kill_9_mid_run_then_resume_research_tool(server, instrument):
    rid, killed_at = await start_and_kill_after_first_round(
        server, instrument, "How do batteries for home solar systems age over a decade?")
    from mcp import Client

    server.start("--no-auto-resume")
    async with Client(server.mcp_url) as client:
        status = await call(client, "research_status", {"research_id": rid})
        assert status["status"] == "interrupted"
        assert "resume_research" in status["next_step"]

        out = await call(client, "resume_research", {"research_id": rid, "wait": False})
        assert out["research_id"] == rid
        result = await wait_finished(client, rid)

    assert result["status"] == "complete", result.get("warnings")
    assert_nothing_searched_twice(instrument, killed_at, result)
