"""Research records and checkpointers against a real SQLite file, and Postgres when one is given.

Postgres runs when DEEP_RESEARCH_TEST_POSTGRES_URL points at a database the tests may write to
(they create the `researches` table and LangGraph's checkpoint tables in it).
"""

from __future__ import annotations

import os
import uuid

import pytest

from graph.persistence import open_checkpointer, open_store
from graph.runner import ResearchRun
from graph.testing import offline_settings

PG_URL = os.environ.get("DEEP_RESEARCH_TEST_POSTGRES_URL")
needs_pg = pytest.mark.skipif(not PG_URL, reason="set DEEP_RESEARCH_TEST_POSTGRES_URL=postgresql://user:pw@host/db "
                                                 "to run the Postgres tests")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    from tools.settings import reset_tool_settings

    monkeypatch.setenv("DEEP_RESEARCH_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DEEP_RESEARCH_DATABASE_URL", raising=False)
    reset_tool_settings()
    yield tmp_path
    reset_tool_settings()


def _backends():
    return [pytest.param(None, id="sqlite"), pytest.param(PG_URL, id="postgres", marks=needs_pg)]


@pytest.mark.parametrize("url", _backends())
async def test_records_lifecycle_survives_reopen(data_dir, url):
    rid = uuid.uuid4().hex[:12]
    async with open_store(url) as store:
        rec = await store.create(rid, "How do heat pumps work?", {"depth": "quick"})
        assert rec.status == "queued"
        await store.update_progress(rid, {"stage": "searching", "message": "Searching 3 queries"}, status="running")
        got = await store.get(rid)
        assert got.status == "running" and got.progress["stage"] == "searching"
        assert got.updated_at >= got.created_at
        assert rid in [r.research_id for r in await store.list_unfinished()]
    # a new connection (a restarted server) sees the same record and can flag it interrupted
    async with open_store(url) as store:
        assert rid in await store.mark_interrupted()
        assert (await store.get(rid)).status == "interrupted"
        await store.finish(rid, "complete", result={"question": "q", "status": "complete", "report": "R [1]"})
    async with open_store(url) as store:
        got = await store.get(rid)
        assert got.status == "complete" and got.result["report"] == "R [1]"
        assert got.settings == {"depth": "quick"} and got.finished
        assert rid not in [r.research_id for r in await store.list_unfinished()]
        assert await store.get("no-such-id") is None


async def test_sqlite_file_in_data_dir_and_recent_order(data_dir):
    async with open_store() as store:
        for i in range(3):
            await store.create(f"id{i}", f"question {i}")
        recent = await store.list_recent(limit=2)
    assert [r.research_id for r in recent] == ["id2", "id1"]
    assert (data_dir / "researches.sqlite3").exists()


def test_rejects_a_non_postgres_url(data_dir):
    from graph.persistence import database_url

    with pytest.raises(ValueError, match="postgresql://"):
        database_url("mysql://x")


@pytest.mark.parametrize("url", _backends())
async def test_checkpointer_runs_and_resumes_a_research(data_dir, url):
    rid = "ck" + uuid.uuid4().hex[:10]
    async with open_checkpointer(url) as saver:
        run = ResearchRun("How do heat pumps work?", offline_settings(depth="quick"), research_id=rid,
                          checkpointer=saver)
        result = await run.start()
        assert result.status == "complete" and result.sources
    # reopened: the finished research is read back from the checkpoint without new model calls
    async with open_checkpointer(url) as saver:
        settings = offline_settings(depth="quick")
        again = await ResearchRun("How do heat pumps work?", settings, research_id=rid, checkpointer=saver).resume()
        assert again.report == result.report
        assert settings._chat_model.calls == []
    if url is None:
        assert (data_dir / "checkpoints.sqlite3").exists()
