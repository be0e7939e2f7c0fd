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


async def test_a_checkpoint_file_written_by_aiosqlite_resumes(data_dir):
    """Files from before the inline saver (AsyncSqliteSaver wrote them) keep working."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    rid = "old" + uuid.uuid4().hex[:9]
    async with AsyncSqliteSaver.from_conn_string(str(data_dir / "checkpoints.sqlite3")) as old:
        result = await ResearchRun("How do heat pumps work?", offline_settings(depth="quick"), research_id=rid,
                                   checkpointer=old).start()
    async with open_checkpointer() as saver:
        assert type(saver).__name__ == "InlineSqliteSaver"
        again = await ResearchRun.saved(rid, saver, offline_settings(depth="quick"))
        assert (await again.resume()).report == result.report
        assert [c async for c in saver.alist({"configurable": {"thread_id": rid}}, limit=2)]


@pytest.fixture
def pg_schema():
    """A fresh Postgres schema per test (records and checkpoints both land in it), dropped after."""
    import psycopg

    schema = "t_" + uuid.uuid4().hex[:10]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    yield PG_URL + ("&" if "?" in PG_URL else "?") + f"options=-csearch_path%3D{schema}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def store_url(request, backend: str) -> str | None:
    """None for SQLite (the data dir), else a URL into a fresh Postgres schema."""
    return request.getfixturevalue("pg_schema") if backend == "postgres" else None


BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=needs_pg)]

OLD_SCHEMA = """CREATE TABLE researches (research_id TEXT PRIMARY KEY, question TEXT NOT NULL,
    status TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
    settings TEXT, progress TEXT, result TEXT, error TEXT)"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_table_from_before_leases_is_migrated(data_dir, request, backend):
    url = store_url(request, backend)
    row = ("old1", "q", "running", 1.0, 1.0, "{}", None, None, None)
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(OLD_SCHEMA)
            conn.execute("INSERT INTO researches VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)", row)
    else:
        import sqlite3

        with sqlite3.connect(data_dir / "researches.sqlite3") as conn:
            conn.execute(OLD_SCHEMA)
            conn.execute("INSERT INTO researches VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    async with open_store(url) as store:
        old = await store.get("old1")
        assert old.owner is None and not old.leased
        # a row written by a server without leases has no live owner: it counts as interrupted
        assert await store.mark_interrupted() == ["old1"]
        assert await store.claim("old1", "me", lease_s=30)
        got = await store.get("old1")
        assert (got.status, got.owner, got.leased) == ("queued", "me", True)
    async with open_store(url) as store:  # opening again migrates nothing twice
        assert (await store.get("old1")).owner == "me"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_leases_one_claim_wins_and_writes_are_fenced(data_dir, request, backend):
    import asyncio

    url = store_url(request, backend)
    async with open_store(url) as a, open_store(url) as b, open_store(url) as c:
        await a.create("r1", "q", owner="A", lease_s=0.6)
        assert (await b.get("r1")).leased
        assert not await b.claim("r1", "B", lease_s=30)  # A's lease is live
        assert await b.mark_interrupted() == []  # and a starting server leaves it alone
        assert await a.renew("r1", "A", lease_s=0.6, progress={"stage": "searching"})
        assert not await b.renew("r1", "B", lease_s=30)  # only the owner renews
        await asyncio.sleep(0.8)  # A stops renewing: its lease runs out
        assert not (await b.get("r1")).leased
        won = await asyncio.gather(b.claim("r1", "B", lease_s=30), c.claim("r1", "C", lease_s=30))
        assert sorted(won) == [False, True]
        winner = "B" if won[0] else "C"
        rec = await a.get("r1")
        assert rec.owner == winner and rec.progress == {"stage": "searching"}
        # the old owner comes back: it cannot overwrite the new owner's record
        assert not await a.finish("r1", "failed", error="late", owner="A")
        assert not await a.renew("r1", "A", lease_s=0.6)
        assert await a.request_cancel("r1")
        assert await a.cancel_requests(winner) == ["r1"]
        assert await a.finish("r1", "partial", result={"report": "R"}, owner=winner)
        done = await a.get("r1")
        assert done.status == "partial" and not done.leased and await a.cancel_requests(winner) == []


@pytest.mark.parametrize("backend", BACKENDS)
async def test_release_hands_researches_over_at_once(data_dir, request, backend):
    url = store_url(request, backend)
    async with open_store(url) as a, open_store(url) as b:
        await a.create("r2", "q", owner="A", lease_s=60)
        await a.set_status("r2", "running", owner="A")
        assert await a.release("A") == ["r2"]
        rec = await b.get("r2")
        assert rec.status == "interrupted" and not rec.leased
        assert [r.research_id for r in await b.list_orphaned()] == ["r2"]
        assert await b.claim("r2", "B", lease_s=60)
        assert await b.list_orphaned() == []
